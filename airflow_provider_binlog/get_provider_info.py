"""Provider metadata read by Airflow's ProvidersManager (entry point ``apache_airflow_provider``).

It also declares the ``mysql_binlog`` connection form, once, like an official provider's
``provider.yaml``: Airflow 3.2+ renders the form from the provider info (``connection-types[].conn-fields``,
a JSON schema per extra field, and ``ui-field-behaviour`` for the standard fields; read by
``ProvidersManager._load_ui_metadata``), older Airflow 3 versions ask
``BinlogHook.get_ui_field_behaviour``, and both are built from the definitions below.

Airflow may call :func:`get_provider_info` while the provider's own modules are half imported (reading
its configuration discovers providers), so this module imports nothing from the provider but
``__version__``.
"""

from __future__ import annotations

import copy
from typing import Any

CONN_TYPE = "mysql_binlog"
HOOK_NAME = "MySQL/MariaDB binlog"
HOOK_CLASS_NAME = "airflow_provider_binlog.hooks.binlog.BinlogHook"

SERVER_ID_MIN = 1
SERVER_ID_MAX = 0xFFFFFFFF
"""A replica ``server_id`` is an unsigned 32-bit integer, 0 excluded (MySQL manual, "Replication and
Binary Logging Options and Variables": ``server_id``)."""

SERVER_ID_BASE = 1 << 30
SERVER_ID_SPAN = (1 << 30) - 1
"""Derived server ids fall in ``[SERVER_ID_BASE, SERVER_ID_BASE + SERVER_ID_SPAN)``, i.e. 2^30 .. 2^31 - 2,
above the small ids DBAs usually give real servers."""

CONNECT_TIMEOUT_MAX_SECONDS = 31_536_000
"""pymysql accepts ``connect_timeout`` in ``(0, 31536000]`` seconds (the provider uses the same bound for
``read_timeout``)."""
DEFAULT_CONNECT_TIMEOUT_SECONDS = 10
"""Seconds the TCP connect and, separately, the login may take (pymysql's own default for the connect)."""
DEFAULT_READ_TIMEOUT_SECONDS = 60
"""Seconds a read or write of an SQL connection may wait after the login (the replication stream's reads
are bounded by :data:`STREAM_TIMEOUT_HEARTBEATS` heartbeat periods instead)."""
DEFAULT_HEARTBEAT_PERIOD_SECONDS = 15
"""Seconds between the heartbeat events a source sends on an idle binlog stream (``MASTER_HEARTBEAT_PERIOD``)."""
HEARTBEAT_PERIOD_MAX_SECONDS = 600
"""The largest ``heartbeat_period`` accepted (the server takes up to 4294967 s, MySQL manual, "CHANGE
REPLICATION SOURCE TO": ``SOURCE_HEARTBEAT_PERIOD``; a stream then would wait 30 minutes to notice a dead
network)."""
STREAM_TIMEOUT_HEARTBEATS = 3
"""A binlog stream's reads and writes wait at most this many heartbeat periods: a live source sends
something at least once a period, so three silent periods mean the connection is dead."""

CONN_FIELDS: dict[str, dict[str, Any]] = {
    "server_id": {
        "label": "Replica server_id",
        "description": (
            f"server_id the binlog stream presents to the source, {SERVER_ID_MIN}..{SERVER_ID_MAX}. It must "
            "differ from the source's own server_id and from every replica's. Leave empty to derive a stable "
            f"id from the pipeline name in [{SERVER_ID_BASE}, {SERVER_ID_BASE + SERVER_ID_SPAN}), i.e. "
            "[2^30, 2^31 - 1). A value set here applies to every pipeline using this connection."
        ),
        "schema": {"type": ["integer", "null"], "minimum": SERVER_ID_MIN, "maximum": SERVER_ID_MAX},
    },
    "flavor": {
        "label": "Server flavor",
        "description": "mysql or mariadb; leave empty to detect it from SELECT VERSION().",
        "schema": {"type": ["string", "null"], "enum": [None, "mysql", "mariadb"]},
    },
    "ssl_ca": {
        "label": "TLS CA certificate file",
        "description": "Path on the worker of the PEM CA certificate; enables TLS and verifies the server.",
        "schema": {"type": ["string", "null"]},
    },
    "ssl_cert": {
        "label": "TLS client certificate file",
        "description": "Path on the worker of the PEM client certificate (for X509 / REQUIRE SUBJECT users).",
        "schema": {"type": ["string", "null"]},
    },
    "ssl_key": {
        "label": "TLS client key file",
        "description": "Path on the worker of the PEM private key of the client certificate.",
        "schema": {"type": ["string", "null"]},
    },
    "ssl_key_password": {
        "label": "TLS client key password",
        "description": "Password of an encrypted client key file.",
        "schema": {"type": ["string", "null"], "format": "password"},
    },
    "charset": {
        "label": "Character set",
        "description": "Connection character set.",
        "schema": {"type": ["string", "null"], "default": "utf8mb4"},
    },
    "connect_timeout": {
        "label": "Connect timeout (seconds)",
        "description": (
            "Seconds to wait for the TCP connection, and again for the login (the server's handshake and "
            "the authentication), before giving up. Applies to SQL and replication connections."
        ),
        "schema": {
            "type": ["integer", "null"],
            "minimum": 1,
            "maximum": CONNECT_TIMEOUT_MAX_SECONDS,
            "default": DEFAULT_CONNECT_TIMEOUT_SECONDS,
        },
    },
    "read_timeout": {
        "label": "Read timeout (seconds)",
        "description": (
            "Seconds an SQL query may wait for the server's answer (each read and write of the socket) "
            "before the task fails and retries. The binlog stream is bounded by the heartbeat period instead."
        ),
        "schema": {
            "type": ["integer", "null"],
            "minimum": 1,
            "maximum": CONNECT_TIMEOUT_MAX_SECONDS,
            "default": DEFAULT_READ_TIMEOUT_SECONDS,
        },
    },
    "heartbeat_period": {
        "label": "Binlog heartbeat period (seconds)",
        "description": (
            "Seconds between the heartbeats the source sends on an idle binlog stream "
            "(MASTER_HEARTBEAT_PERIOD). A stream that receives nothing for "
            f"{STREAM_TIMEOUT_HEARTBEATS} periods counts as lost: the task fails and retries. Default "
            f"{DEFAULT_HEARTBEAT_PERIOD_SECONDS}, so a dead network is noticed within "
            f"{STREAM_TIMEOUT_HEARTBEATS * DEFAULT_HEARTBEAT_PERIOD_SECONDS} s."
        ),
        "schema": {
            "type": ["integer", "null"],
            "minimum": 1,
            "maximum": HEARTBEAT_PERIOD_MAX_SECONDS,
            "default": DEFAULT_HEARTBEAT_PERIOD_SECONDS,
        },
    },
}
"""Extra fields of the form, in the provider info ``conn-fields`` format (label, description, JSON
schema; ``format: password`` marks a field sensitive). Values are stored under these names in the
connection extra."""

SSL_FIELDS = {"ssl_ca": "ca", "ssl_cert": "cert", "ssl_key": "key", "ssl_key_password": "password"}
"""Flat extra fields and the key each one sets in the pymysql ``ssl`` dict (also accepted as extra ``ssl``)."""

UI_FIELD_BEHAVIOUR: dict[str, Any] = {
    "hidden-fields": ["schema"],
    "relabeling": {"login": "Replication user"},
    "placeholders": {"host": "mysql.example.com", "port": "3306", "login": "repl"},
}
"""Standard fields: hidden (``schema``: the stream reads every database), relabelled and placeholders,
in the provider info ``ui-field-behaviour`` format."""


def connection_type_info() -> dict[str, Any]:
    """Return the ``connection-types`` entry of the provider info for ``mysql_binlog``, with its form."""
    return {
        "connection-type": CONN_TYPE,
        "hook-class-name": HOOK_CLASS_NAME,
        "hook-name": HOOK_NAME,
        "ui-field-behaviour": copy.deepcopy(UI_FIELD_BEHAVIOUR),
        "conn-fields": copy.deepcopy(CONN_FIELDS),
    }


def ui_field_behaviour() -> dict[str, Any]:
    """Return :data:`UI_FIELD_BEHAVIOUR` in the form ``BaseHook.get_ui_field_behaviour`` returns it."""
    behaviour = copy.deepcopy(UI_FIELD_BEHAVIOUR)
    return {key.replace("-", "_"): value for key, value in behaviour.items()}


def documentation_url() -> str | None:
    """Return the ``Documentation`` project URL of the installed distribution (pyproject's ``[project.urls]``).

    :returns: the URL, or None when the provider runs from a source tree that was never installed.
    """
    from importlib.metadata import PackageNotFoundError, metadata

    try:
        urls = metadata("airflow-provider-binlog").get_all("Project-URL") or []
    except PackageNotFoundError:
        return None
    for entry in urls:
        label, _, url = entry.partition(",")
        if label.strip().lower() == "documentation":
            return url.strip()
    return None


def get_provider_info() -> dict[str, Any]:
    """Return the provider's package name, version, hooks, operators, sensors and connection type.

    The connection type carries its form (:func:`connection_type_info`), which Airflow 3.2+ reads from
    here instead of calling the hook's form methods.
    """
    from airflow_provider_binlog import __version__

    return {
        "package-name": "airflow-provider-binlog",
        "name": "MySQL/MariaDB binlog CDC",
        "description": "Bounded binlog windows -> Parquet staging -> PySpark merge -> Delta Lake tables.",
        "versions": [__version__],
        "documentation-url": documentation_url(),
        "integrations": [
            {
                "integration-name": "MySQL/MariaDB binlog",
                "external-doc-url": "https://dev.mysql.com/doc/refman/8.4/en/binary-log.html",
                "tags": ["software"],
            }
        ],
        "hooks": [
            {
                "integration-name": "MySQL/MariaDB binlog",
                "python-modules": ["airflow_provider_binlog.hooks.binlog"],
            }
        ],
        "operators": [
            {
                "integration-name": "MySQL/MariaDB binlog",
                "python-modules": [
                    "airflow_provider_binlog.operators.extract",
                    "airflow_provider_binlog.operators.merge",
                    "airflow_provider_binlog.operators.commit",
                    "airflow_provider_binlog.operators.maintenance",
                    "airflow_provider_binlog.operators.validate",
                ],
            }
        ],
        "connection-types": [connection_type_info()],
    }
