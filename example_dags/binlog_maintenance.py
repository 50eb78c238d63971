"""Example clean-up DAG: daily, remove staging the pipeline no longer needs and vacuum its target tables.

Settings are DAG params whose defaults come from the same environment variables as ``binlog_cdc``
(``BINLOG_CDC_PIPELINE``, ``BINLOG_CDC_STAGING``, ``BINLOG_CDC_TARGET``), plus:

* ``BINLOG_MAINTENANCE_STAGING_RETENTION_HOURS`` staged windows and snapshots stay this long after their
  last write, even when merged (default 168, a week)
* ``BINLOG_MAINTENANCE_TARGET_RETENTION_HOURS`` files merges removed from a Delta table stay this long, for
  readers still reading older versions and time travel (default 168)
* ``BINLOG_MAINTENANCE_SCHEDULE`` cron expression, default ``30 3 * * *``; ``none`` for manual runs only

Windows the ledger still needs (cut or extracted: open, or waiting for adoption) and running snapshots are
never removed, whatever the retention (docs/maintenance.md).
"""

from __future__ import annotations

import os

import pendulum
from airflow.sdk import DAG, Param

from airflow_provider_binlog.operators import BinlogMaintenanceOperator

_SCHEDULE = os.environ.get("BINLOG_MAINTENANCE_SCHEDULE", "30 3 * * *")

# [START howto_binlog_maintenance]
with DAG(
    dag_id="binlog_maintenance",
    description="Free staged windows and removed target files of a binlog pipeline",
    schedule=None if _SCHEDULE.lower() in ("", "none", "manual") else _SCHEDULE,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    tags=["cdc", "binlog", "maintenance"],
    params={
        "pipeline": Param(os.environ.get("BINLOG_CDC_PIPELINE", "binlog_cdc"), type="string"),
        "staging": Param(os.environ.get("BINLOG_CDC_STAGING", "/tmp/binlog_cdc/staging"), type="string"),
        "target": Param(os.environ.get("BINLOG_CDC_TARGET", "/tmp/binlog_cdc/target"), type="string"),
    },
) as dag:
    BinlogMaintenanceOperator(
        task_id="maintenance",
        pipeline="{{ params.pipeline }}",
        staging_uri="{{ params.staging }}",
        target_path="{{ params.target }}",
        staging_retention_hours=float(os.environ.get("BINLOG_MAINTENANCE_STAGING_RETENTION_HOURS", "168")),
        target_retention_hours=int(os.environ.get("BINLOG_MAINTENANCE_TARGET_RETENTION_HOURS", "168")),
    )
# [END howto_binlog_maintenance]
