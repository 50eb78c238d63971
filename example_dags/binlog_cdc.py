"""Example CDC pipeline: binlog window -> Parquet staging -> PySpark merge -> Delta Lake -> checkpoint.

Settings are DAG params whose defaults come from environment variables (read when the file is
parsed; no connection or Variable is touched at parse time):

* ``BINLOG_CDC_PIPELINE`` pipeline name (state Variable ``binlog_state__<name>``), default ``binlog_cdc``
* ``BINLOG_CDC_TABLES`` comma-separated ``db.table`` names or patterns, default ``shop.*``
* ``BINLOG_CDC_STAGING`` staging root (path or object-store URI), default ``/tmp/binlog_cdc/staging``
* ``BINLOG_CDC_TARGET`` target root of the Delta tables, default ``/tmp/binlog_cdc/target``
* ``BINLOG_CDC_SCHEDULE`` cron schedule, default every 15 minutes; ``none`` for manual runs only

Connections: ``binlog_default`` (a ``mysql`` or ``mysql_binlog`` connection) and ``spark_default``.
"""

from __future__ import annotations

import os

import pendulum
from airflow.sdk import DAG, Param

from airflow_provider_binlog.operators import BinlogCommitOperator, BinlogExtractOperator, BinlogMergeOperator

_SCHEDULE = os.environ.get("BINLOG_CDC_SCHEDULE", "*/15 * * * *")

# [START howto_binlog_cdc]
with DAG(
    dag_id="binlog_cdc",
    description="MySQL/MariaDB binlog -> Delta Lake, one bounded window per run",
    schedule=None if _SCHEDULE.lower() in ("", "none", "manual") else _SCHEDULE,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    tags=["cdc", "binlog"],
    params={
        "pipeline": Param(os.environ.get("BINLOG_CDC_PIPELINE", "binlog_cdc"), type="string"),
        "tables": Param(os.environ.get("BINLOG_CDC_TABLES", "shop.*"), type="string"),
        "staging": Param(os.environ.get("BINLOG_CDC_STAGING", "/tmp/binlog_cdc/staging"), type="string"),
        "target": Param(os.environ.get("BINLOG_CDC_TARGET", "/tmp/binlog_cdc/target"), type="string"),
    },
) as dag:
    extract = BinlogExtractOperator(
        task_id="extract",
        pipeline="{{ params.pipeline }}",
        tables="{{ params.tables }}",
        staging_uri="{{ params.staging }}",
        binlog_conn_id="binlog_default",
        retries=2,
    )
    merge = BinlogMergeOperator(
        task_id="merge",
        pipeline="{{ params.pipeline }}",
        window_uri="{{ ti.xcom_pull(task_ids='extract')['window_uri'] }}",
        target_path="{{ params.target }}",
        conn_id="spark_default",
        retries=2,
    )
    commit = BinlogCommitOperator(
        task_id="commit",
        pipeline="{{ params.pipeline }}",
        target_path="{{ params.target }}",
    )
    extract >> merge >> commit
# [END howto_binlog_cdc]
