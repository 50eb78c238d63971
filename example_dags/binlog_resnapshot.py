"""Re-snapshot tables of a running CDC pipeline, on demand, while its windows keep merging.

The pipeline, its selection, keys, staging and target are constants of this file, read when it is parsed
from the environment variables of ``binlog_cdc`` (``BINLOG_CDC_PIPELINE``, ``BINLOG_CDC_TABLES``,
``BINLOG_CDC_KEYS``, ``BINLOG_CDC_STAGING``, ``BINLOG_CDC_TARGET``): a run's configuration cannot change them
(``docs/adr/0034-trusted-pipeline-configuration.md``). Trigger it with a config (Airflow UI "Trigger DAG w/
config", or ``airflow dags trigger binlog_resnapshot --conf '{"tables": "shop.orders"}'``) naming:

* ``tables`` the ``db.table`` names or patterns to read again (``!db.table`` excludes); each must be a table
  the pipeline selects (``BINLOG_CDC_TABLES``), else the snapshot reads nothing and fails; a table without a
  primary key or named key is left out with a warning;
* ``keyless_tables`` ``skip`` (default ``BINLOG_CDC_KEYLESS_TABLES`` or ``skip``) or ``fail``;
* ``mode`` ``requested`` (default: after a DDL the pipeline could not follow, to repair a table, or after a
  statement-based write stopped ``binlog_cdc`` with ``UnsupportedEventError``: once this snapshot has started,
  clear the failed extract, which re-reads the same window and skips the statement) or
  ``purged`` (the binlogs the pipeline still needed were purged, as ``BinlogPurgedError`` and the purge-risk
  sensor report: name every table of the pipeline; its checkpoint moves to the snapshot's start).

The snapshot's rows rank below every change logged after it started, so ``binlog_cdc`` runs beside it.
"""

from __future__ import annotations

import json
import os

import pendulum
from airflow.sdk import DAG, Param

from airflow_provider_binlog.operators import BinlogSnapshotOperator

PIPELINE = os.environ.get("BINLOG_CDC_PIPELINE", "binlog_cdc")
SELECTION = os.environ.get("BINLOG_CDC_TABLES", "shop.*")
STAGING = os.environ.get("BINLOG_CDC_STAGING", "/tmp/binlog_cdc/staging")
TARGET = os.environ.get("BINLOG_CDC_TARGET", "/tmp/binlog_cdc/target")
KEYS: dict[str, list[str]] = json.loads(os.environ.get("BINLOG_CDC_KEYS") or "{}")

# [START howto_binlog_resnapshot]
with DAG(
    dag_id="binlog_resnapshot",
    description="Re-snapshot tables of a binlog CDC pipeline without stopping it",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    tags=["cdc", "binlog", "snapshot"],
    params={
        "tables": Param(
            "", type="string", description="db.table names or patterns of the pipeline to read again"
        ),
        "mode": Param("requested", enum=["requested", "purged"]),
        "keyless_tables": Param(os.environ.get("BINLOG_CDC_KEYLESS_TABLES", "skip"), enum=["skip", "fail"]),
    },
) as dag:
    BinlogSnapshotOperator(
        task_id="snapshot",
        pipeline=PIPELINE,
        selection=SELECTION,
        tables="{{ params.tables }}",
        mode="{{ params.mode }}",
        staging_uri=STAGING,
        target_path=TARGET,
        keys=KEYS,
        keyless_tables="{{ params.keyless_tables }}",
        binlog_conn_id="binlog_default",
        conn_id="spark_default",
        retries=2,
    )
# [END howto_binlog_resnapshot]
