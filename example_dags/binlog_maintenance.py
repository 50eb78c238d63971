"""Example clean-up DAG: daily, remove staging the pipeline no longer needs and vacuum its target tables.

Settings are constants of this file, read when it is parsed from the same environment variables as
``binlog_cdc`` (``BINLOG_CDC_PIPELINE``, ``BINLOG_CDC_STAGING``, ``BINLOG_CDC_TARGET``; never from a run's
configuration, ``docs/adr/0034-trusted-pipeline-configuration.md``), plus:

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
from airflow.sdk import DAG

from airflow_provider_binlog.operators import BinlogMaintenanceOperator

PIPELINE = os.environ.get("BINLOG_CDC_PIPELINE", "binlog_cdc")
STAGING = os.environ.get("BINLOG_CDC_STAGING", "/tmp/binlog_cdc/staging")
TARGET = os.environ.get("BINLOG_CDC_TARGET", "/tmp/binlog_cdc/target")
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
) as dag:
    BinlogMaintenanceOperator(
        task_id="maintenance",
        pipeline=PIPELINE,
        staging_uri=STAGING,
        target_path=TARGET,
        staging_retention_hours=float(os.environ.get("BINLOG_MAINTENANCE_STAGING_RETENTION_HOURS", "168")),
        target_retention_hours=int(os.environ.get("BINLOG_MAINTENANCE_TARGET_RETENTION_HOURS", "168")),
    )
# [END howto_binlog_maintenance]
