"""The contract with pymysql's private API (``source/connect.py``) holds for the installed pymysql, and only
that module relies on it.

A routine upgrade of pymysql or mysql-replication that renames one of the private names the provider uses
must fail here, before any window is read with it.
"""

from __future__ import annotations

import ast
import importlib
import importlib.metadata
import inspect
import pkgutil
import re
from pathlib import Path

import pymysql
import pytest
from packaging.requirements import Requirement
from packaging.version import Version

import airflow_provider_binlog
from airflow_provider_binlog.source import connect
from airflow_provider_binlog.testing.mariadb import LocalMariaDB

PACKAGE = Path(airflow_provider_binlog.__file__).parent
CONTRACT_MODULE = PACKAGE / "source" / "connect.py"
SET_AT_CONNECT = ("_next_seq_id", "_rfile")
"""Private names of ``PRIVATE_API`` that a connection only has once it is connected."""


def _pymysql_private_names() -> set[str]:
    """Every private name of a pymysql connection: its class's, a new one's, and those set at connect."""
    names = {n for n in dir(pymysql.connections.Connection) if n.startswith("_") and not n.startswith("__")}
    deferred = pymysql.connections.Connection(defer_connect=True)
    names |= {n for n in vars(deferred) if n.startswith("_")}
    return names | set(SET_AT_CONNECT) | {"_current_timeout"}


def _is_mysql_replication_private(name: str) -> bool:
    return name.startswith("_BinLogStreamReader__") or name in {"_stream_connection", "_ctl_connection"}


def test_the_installed_pymysql_is_in_the_pinned_range() -> None:
    (pin,) = [
        Requirement(r)
        for r in importlib.metadata.requires("airflow-provider-binlog") or []
        if Requirement(r).name.lower() == "pymysql"
    ]
    assert pin.specifier.filter([Version(pymysql.__version__)]), (
        f"pymysql {pymysql.__version__} is outside the pinned range {pin.specifier}: run this test module "
        "against it, then widen the pin in pyproject.toml"
    )
    assert re.fullmatch(r"<\d+\.\d+", min(str(s) for s in pin.specifier if s.operator == "<")), pin


def test_pymysql_offers_every_private_method_the_contract_names_with_its_signature() -> None:
    cls = pymysql.connections.Connection
    assert list(inspect.signature(cls._create_ssl_ctx).parameters) == ["self", "sslp"]
    assert list(inspect.signature(cls._read_packet).parameters) == ["self", "packet_type"]
    assert list(inspect.signature(cls._force_close).parameters) == ["self"]
    assert list(inspect.signature(cls.write_packet).parameters) == ["self", "payload"]
    deferred = cls(defer_connect=True, read_timeout=7, write_timeout=8)
    assert (deferred._read_timeout, deferred._write_timeout) == (7, 8)
    missing = [n for n in connect.PRIVATE_API if n not in SET_AT_CONNECT and not hasattr(deferred, n)]
    assert not missing, f"pymysql {pymysql.__version__} no longer has {missing}"


@pytest.mark.integration
def test_a_connected_pymysql_connection_has_the_packet_layer_the_channel_uses(mariadb: LocalMariaDB) -> None:
    conn = connect.LoginTimeoutConnection(**mariadb.connection_kwargs())
    try:
        for name in SET_AT_CONNECT:
            assert hasattr(conn, name), f"pymysql {pymysql.__version__} no longer sets {name} at connect"
        channel = connect.PacketChannel(conn)
        assert callable(channel.socket_file.read1)
        channel.send_command(b"\x0e")  # COM_PING: one OK packet, sequence id 1
        assert channel.sequence_id == 1
        assert channel.read_packet()[0] == 0x00
        assert channel.sequence_id == 2
        channel.force_close()
        assert not conn.open
    finally:
        if conn.open:
            conn.close()


def test_only_the_contract_module_touches_private_names_of_pymysql_or_mysql_replication() -> None:
    private = _pymysql_private_names()
    assert set(connect.PRIVATE_API) <= private
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == CONTRACT_MODULE:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.Attribute):
                continue
            on_self = isinstance(node.value, ast.Name) and node.value.id == "self"
            if (node.attr in private and not on_self) or _is_mysql_replication_private(node.attr):
                found.append(f"{path.relative_to(PACKAGE)}:{node.lineno} .{node.attr}")
    assert not found, f"private names of pymysql or mysql-replication outside source/connect.py: {found}"


def test_no_class_outside_the_contract_module_extends_a_pymysql_connection() -> None:
    extending = []
    for module_info in pkgutil.walk_packages([str(PACKAGE)], "airflow_provider_binlog."):
        if module_info.name in {"airflow_provider_binlog.source.connect"} or ".testing." in module_info.name:
            continue
        module = importlib.import_module(module_info.name)
        for name, value in vars(module).items():
            if (
                inspect.isclass(value)
                and value.__module__ == module.__name__
                and issubclass(value, pymysql.connections.Connection)
            ):
                extending.append(f"{module.__name__}.{name}")
    assert not extending, (
        f"classes that override pymysql's private methods outside source/connect.py: {extending}"
    )
