"""Example validation DAG: compare a pipeline's target tables with the source, row by row.

The pipeline and its target are constants of this file, from the environment variables of ``binlog_cdc``
(``BINLOG_CDC_PIPELINE``, ``BINLOG_CDC_TARGET``), never from a run's configuration
(``docs/adr/0034-trusted-pipeline-configuration.md``). What to compare is a DAG param a triggered run may set:

* ``tables`` tables or patterns to compare (default ``BINLOG_VALIDATE_TABLES``, empty: every table of the
  pipeline; a comparison only reads)
* ``on_mismatch`` ``fail`` (default ``BINLOG_VALIDATE_ON_MISMATCH`` or ``fail``) or ``warn``

and further settings are environment variables read at parse time:

* ``BINLOG_VALIDATE_RECHECK_TIMEOUT_SECONDS`` how long a re-check waits for ``binlog_cdc`` to commit past
  the source rows it read (default 1800; more than ``binlog_cdc``'s schedule interval plus its run time),
  and ``BINLOG_VALIDATE_POLL_SECONDS`` (default 10)
* ``BINLOG_VALIDATE_SCHEDULE`` cron expression, default ``0 4 * * *``; ``none`` for manual runs only

Rows that differ in a first pass are read again once ``binlog_cdc`` has committed past them; only rows
that still differ while their source row did not change are reported as mismatches (docs/validation.md).
"""

from __future__ import annotations

import os

import pendulum
from airflow.sdk import DAG, Param

from airflow_provider_binlog.operators import BinlogValidateOperator

PIPELINE = os.environ.get("BINLOG_CDC_PIPELINE", "binlog_cdc")
TARGET = os.environ.get("BINLOG_CDC_TARGET", "/tmp/binlog_cdc/target")
_SCHEDULE = os.environ.get("BINLOG_VALIDATE_SCHEDULE", "0 4 * * *")

# [START howto_binlog_validate]
with DAG(
    dag_id="binlog_validate",
    description="Compare a binlog pipeline's target tables with the source",
    schedule=None if _SCHEDULE.lower() in ("", "none", "manual") else _SCHEDULE,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    tags=["cdc", "binlog", "validation"],
    params={
        "tables": Param(os.environ.get("BINLOG_VALIDATE_TABLES", ""), type="string"),
        "on_mismatch": Param(os.environ.get("BINLOG_VALIDATE_ON_MISMATCH", "fail"), enum=["fail", "warn"]),
    },
) as dag:
    BinlogValidateOperator(
        task_id="validate",
        pipeline=PIPELINE,
        target_path=TARGET,
        tables="{{ params.tables }}",
        on_mismatch="{{ params.on_mismatch }}",
        recheck_timeout_seconds=float(os.environ.get("BINLOG_VALIDATE_RECHECK_TIMEOUT_SECONDS", "1800")),
        poll_seconds=float(os.environ.get("BINLOG_VALIDATE_POLL_SECONDS", "10")),
        binlog_conn_id="binlog_default",
    )
# [END howto_binlog_validate]
