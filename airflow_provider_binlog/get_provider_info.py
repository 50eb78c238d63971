"""Provider metadata read by Airflow's ProvidersManager (entry point ``apache_airflow_provider``).

It also declares the ``mysqlbinlog`` connection form, once, like an official provider's
``provider.yaml``: Airflow 3.2+ renders the form from the provider info (``connection-types[].conn-fields``,
a JSON schema per extra field, and ``ui-field-behaviour`` for the standard fields; read by
``ProvidersManager._load_ui_metadata``), older Airflow 3 versions ask
``BinlogHook.get_ui_field_behaviour``, and both are built from the definitions below.

The extra fields come from the one model of the connection's extras,
:class:`~airflow_provider_binlog.source.config.SourceExtras`. Airflow may call :func:`get_provider_info`
while the provider's own modules are half imported (reading its configuration discovers providers), so
this module imports nothing from the provider but ``__version__`` and that model's module (pydantic only).
"""

from __future__ import annotations

import copy
from typing import Any

from airflow_provider_binlog.source.config import conn_fields

CONN_TYPE = "mysqlbinlog"
"""The connection type (URI scheme). No ``_`` or ``-``: Airflow caches every connection a task fetches by its
URI and warns ``Connection schemes (type: ...) shall not contain '_' according to RFC3986`` for a type with
``_`` (``airflow/models/connection.py``, ``get_uri``), and reads a ``-`` back as ``_``. Connections made with
the earlier type ``mysql_binlog`` keep working: the hook reads any connection type (ADR 0023)."""
HOOK_NAME = "MySQL/MariaDB binlog"
HOOK_CLASS_NAME = "airflow_provider_binlog.hooks.binlog.BinlogHook"

UI_FIELD_BEHAVIOUR: dict[str, Any] = {
    "hidden-fields": ["schema"],
    "relabeling": {"login": "Replication user"},
    "placeholders": {"host": "mysql.example.com", "port": "3306", "login": "repl"},
}
"""Standard fields: hidden (``schema``: the stream reads every database), relabelled and placeholders,
in the provider info ``ui-field-behaviour`` format."""


def connection_type_info() -> dict[str, Any]:
    """Return the ``connection-types`` entry of the provider info for ``mysqlbinlog``, with its form."""
    return {
        "connection-type": CONN_TYPE,
        "hook-class-name": HOOK_CLASS_NAME,
        "hook-name": HOOK_NAME,
        "ui-field-behaviour": copy.deepcopy(UI_FIELD_BEHAVIOUR),
        "conn-fields": conn_fields(),
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
    """Return the provider's package name, version, hooks, operators, sensors, triggers, connection type and config.

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
                    "airflow_provider_binlog.operators.archive",
                    "airflow_provider_binlog.operators.extract",
                    "airflow_provider_binlog.operators.merge",
                    "airflow_provider_binlog.operators.commit",
                    "airflow_provider_binlog.operators.quarantine",
                    "airflow_provider_binlog.operators.snapshot",
                    "airflow_provider_binlog.operators.maintenance",
                    "airflow_provider_binlog.operators.validate",
                ],
            }
        ],
        "sensors": [
            {
                "integration-name": "MySQL/MariaDB binlog",
                "python-modules": [
                    "airflow_provider_binlog.sensors.lag",
                    "airflow_provider_binlog.sensors.purge_risk",
                ],
            }
        ],
        "triggers": [
            {
                "integration-name": "MySQL/MariaDB binlog",
                "python-modules": [
                    "airflow_provider_binlog.triggers.binlog",
                    "airflow_provider_binlog.triggers.spark_connect",
                ],
            }
        ],
        "connection-types": [connection_type_info()],
        "config": {
            "binlog": {
                "description": "Settings of the MySQL/MariaDB binlog CDC provider's operators.",
                "options": {
                    "defer_after_seconds": {
                        "description": (
                            "Seconds a deferrable merge or snapshot task watches a detached Spark Connect "
                            "action from its worker before it defers (0: defer at once). An action that ends "
                            "within this time is finished without a deferral (docs/adr/0024)."
                        ),
                        "version_added": None,
                        "type": "float",
                        "example": "30",
                        "default": "10",
                    },
                    "merge_driver_max_rows": {
                        "description": (
                            "Most change rows of one table's window that the merge job rewrites in its driver "
                            "with Arrow instead of Spark jobs (0: every table on Spark); the default of "
                            "BinlogMergeOperator(driver_max_rows=...) (docs/adr/0040)."
                        ),
                        "version_added": None,
                        "type": "integer",
                        "example": "0",
                        "default": "10000",
                    },
                    "parallel_read_min_bytes": {
                        "description": (
                            "Binlog bytes a window must span (besides two binlog files) before the extract reads "
                            "its files in parallel worker processes (max_extract_workers); smaller windows are "
                            "read serially, where starting the workers would cost more than they save."
                        ),
                        "version_added": None,
                        "type": "integer",
                        "example": "16777216",
                        "default": "67108864",
                    },
                    "ship_provider": {
                        "description": (
                            "Ship the provider's code to Spark with each merge and snapshot task (a zip added to "
                            "the Spark Connect session with addArtifacts, or to spark-submit's --py-files), for "
                            "Spark servers whose Python does not have the provider installed (docs/adr/0014)."
                        ),
                        "version_added": None,
                        "type": "boolean",
                        "example": "True",
                        "default": "False",
                    },
                },
            }
        },
    }
