"""Provider metadata read by Airflow's ProvidersManager (entry point ``apache_airflow_provider``)."""

from __future__ import annotations

from typing import Any


def get_provider_info() -> dict[str, Any]:
    """Return the provider's package name, version, hooks, operators, sensors and connection type."""
    from airflow_provider_binlog import __version__

    return {
        "package-name": "airflow-provider-binlog",
        "name": "MySQL/MariaDB binlog CDC",
        "description": "Bounded binlog windows -> Parquet staging -> PySpark merge -> Delta Lake tables.",
        "versions": [__version__],
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
                ],
            }
        ],
        "connection-types": [
            {
                "connection-type": "mysql_binlog",
                "hook-class-name": "airflow_provider_binlog.hooks.binlog.BinlogHook",
            }
        ],
    }
