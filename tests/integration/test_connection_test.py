"""The connection Test tells the truth: its report reaches the user on success and failure (CLI and API),
with MariaDB-correct advice, the id the connection is saved under and the server_id of the user's pipelines."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_binlog.hooks.binlog import BinlogHook
from airflow_provider_binlog.source.server import derive_server_id
from airflow_provider_binlog.testing.mariadb import LocalMariaDB

pytestmark = pytest.mark.integration


def lines_of(message: str) -> list[str]:
    return message.split(";\n")


@pytest.fixture
def binlog_format_mixed(mariadb: LocalMariaDB) -> Iterator[None]:
    (saved,) = mariadb.execute("SELECT @@GLOBAL.binlog_format")[0]
    mariadb.execute("SET GLOBAL binlog_format = 'MIXED'")
    try:
        yield
    finally:
        mariadb.execute(f"SET GLOBAL binlog_format = '{saved}'")


def test_mariadb_gets_mariadb_advice_and_the_derivation_of_its_pipelines_ids(
    connections: LocalMariaDB, binlog_format_mixed: None
) -> None:
    ok, message = BinlogHook().test_connection()
    assert not ok
    lines = lines_of(message)
    assert lines[0].startswith("mariadb ")
    assert "(connection 'binlog_default')" in lines[0]
    assert (
        "binlog_format=MIXED: WRONG: binlog_format is MIXED: row changes are only in ROW format; run SET GLOBAL "
        "binlog_format = ROW and add binlog_format=ROW under [mariadb] in the server's option file (MariaDB has "
        "no SET PERSIST)"
    ) in lines
    assert "SET PERSIST " not in message
    (server_id,) = [line for line in lines if line.startswith("server_id=")]
    assert server_id.startswith(
        "server_id=derived per pipeline: 1073741824 + crc32(pipeline name) % 1073741823, e.g. "
        f"{derive_server_id('binlog_cdc')} for pipeline 'binlog_cdc'"
    )
    assert ": ok, no registered replica uses an id in the derived range" in server_id
    assert str(derive_server_id("default")) not in message


def airflow_cli(mariadb: LocalMariaDB, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """Run the Airflow CLI with Test enabled and ``binlog_default`` a ``mysqlbinlog`` connection to ``mariadb``."""
    env = {
        "AIRFLOW__CORE__TEST_CONNECTION": "Enabled",
        "AIRFLOW_CONN_BINLOG_DEFAULT": mariadb.uri().replace("mysql://", "mysqlbinlog://", 1),
        **env,
    }
    return subprocess.run(
        [str(Path(sys.executable).parent / "airflow"), *args],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=300,
    )


def test_the_cli_prints_the_report_on_success(connections: LocalMariaDB, airflow_db: Path) -> None:
    run = airflow_cli(connections, "connections", "test", "binlog_default")
    output = run.stdout + run.stderr
    assert run.returncode == 0, output
    assert "Connection success!" in output
    assert "usable as a CDC source" in output
    for line in (
        "binlog_format=ROW: ok",
        "privilege=REPLICATION SLAVE ON *.*: ok",
        "gtid_strict_mode=ON: ok",
    ):
        assert line in output
    assert connections.root_password not in output


def test_the_cli_prints_the_report_on_failure(
    connections: LocalMariaDB, airflow_db: Path, binlog_format_mixed: None
) -> None:
    run = airflow_cli(connections, "connections", "test", "binlog_default")
    output = run.stdout + run.stderr
    assert run.returncode == 1, output
    assert "Connection failed!" in output
    assert "binlog_format=MIXED: WRONG" in output


class _NoStoredConnection:
    """An auth manager that lets the test read no stored connection, so the request body alone is tested."""

    def is_authorized_connection(self, **_: Any) -> bool:
        return False


def test_the_api_names_the_connection_id_not_airflows_temporary_one(
    connections: LocalMariaDB, airflow_db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow.api_fastapi.core_api.datamodels.connections import ConnectionBody
    from airflow.api_fastapi.core_api.routes.public.connections import test_connection as api_test
    from airflow.models.connection import Connection

    monkeypatch.setenv("AIRFLOW__CORE__TEST_CONNECTION", "Enabled")
    (source_id,) = connections.execute("SELECT @@GLOBAL.server_id")[0]
    saved = Connection(uri=connections.uri())
    body = ConnectionBody(
        connection_id="shop_source",
        conn_type="mysqlbinlog",
        host=saved.host,
        port=saved.port,
        login=saved.login,
        password=saved.password,
        extra=json.dumps({"server_id": int(source_id)}),
    )
    result = api_test(body, user=None, auth_manager=_NoStoredConnection())  # type: ignore[arg-type]
    assert not result.status
    lines = lines_of(result.message)
    assert "(connection 'shop_source')" in lines[0]
    (server_id,) = [line for line in lines if line.startswith("server_id=")]
    assert (
        f"server_id={source_id}: WRONG: server_id {source_id} (set by the extra of connection 'shop_source')"
        in (server_id)
    )
    assert "Set the extra server_id of connection 'shop_source' to a value" in server_id
    assert saved.password not in result.message


def test_a_temporary_id_is_called_so_when_the_saved_one_cannot_be_known(
    connections: LocalMariaDB, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_H7JD8UFR", connections.uri())
    hook = BinlogHook("h7Jd8UfR")
    assert hook.connection_label() == "'h7Jd8UfR'"  # outside a test the id is what the user gave
    ok, message = hook.test_connection()
    assert ok, message
    assert (
        "(connection being tested (Airflow's temporary id 'h7Jd8UfR'; use the id you save it under))"
        in (lines_of(message)[0])
    )
