"""Example CDC pipeline: binlog window -> Parquet staging -> PySpark merge -> Delta Lake -> checkpoint.

Settings are constants of this file, read from environment variables when the file is parsed (no connection
or Variable is touched at parse time). None is a DAG param: a run's configuration (``dag_run.conf``) cannot
choose the pipeline, its tables, keys, staging or target, so whoever may trigger the DAG cannot copy other
tables or write elsewhere (``docs/adr/0034-trusted-pipeline-configuration.md``; the operators refuse such
templates):

* ``BINLOG_CDC_PIPELINE`` pipeline name (state Variable ``binlog_state__<name>``), default ``binlog_cdc``
* ``BINLOG_CDC_TABLES`` comma-separated ``db.table`` names or patterns, default ``shop.*``; an entry
  ``!db.table`` (or ``!db.tmp_*``) excludes what it matches, after the includes
* ``BINLOG_CDC_KEYS`` JSON ``{"db.table": ["col", ...]}`` naming the key of tables without a primary key,
  default ``{}``; given once, used by the snapshot, extract and merge tasks
* ``BINLOG_CDC_KEYLESS_TABLES`` ``skip`` (default: a table with no primary key and no named key is left
  out of the run with a warning naming it and the remedy, the other tables keep flowing) or ``fail``
* ``BINLOG_CDC_STAGING`` staging root (path or object-store URI), default ``/tmp/binlog_cdc/staging``
* ``BINLOG_CDC_TARGET`` target root of the Delta tables, default ``/tmp/binlog_cdc/target``
* ``BINLOG_CDC_SCHEDULE`` cron expression or ISO-8601 duration (``PT10M``), default every 15 minutes;
  ``none`` for manual runs only
* ``BINLOG_CDC_CUT_BY`` ``head`` (default: each run takes everything up to the source head) or
  ``interval`` (each run takes the transactions committed in its data interval; runs and backfills such
  as ``airflow backfill create --dag-id binlog_cdc --from-date ... --to-date ...`` may go in any order)
* ``BINLOG_CDC_WRITE_MODE`` how windows are merged: ``auto`` (default: deletion vectors for a window that
  changes few of the rows its keys can be in), ``merge_on_read`` (new rows plus deletion vectors, local and S3
  targets; ``docs/adr/0037-deletion-vectors.md``) or ``copy_on_write``
* ``BINLOG_CDC_HISTORY`` history kept beside every table: ``off`` (default), ``changelog`` (an append-only
  change log per table with before and after images), ``scd2`` (a version table) or ``changelog,scd2``
  (``docs/history.md``)
* ``BINLOG_CDC_ARCHIVE`` the source's binlog archive that the example DAG ``binlog_archive`` keeps (default:
  none; docs/archive.md): windows read what the source purged from there, and ``purge_risk`` counts the files it
  holds as retained
* ``BINLOG_CDC_SNAPSHOT_CHUNK_ROWS`` rows per snapshot chunk (default 50000) and
  ``BINLOG_CDC_SNAPSHOT_CONNECTIONS`` most source connections reading chunks at once (default 2)
* ``BINLOG_CDC_MIN_HEADROOM_SECONDS`` least binlog retention headroom the first task, ``purge_risk``,
  accepts (default 21600, 6 h) and ``BINLOG_CDC_SNAPSHOT_ROWS_PER_SECOND`` the snapshot rate it assumes
  until a snapshot of the pipeline was measured (default 5000)

The whole pipeline is one ``BinlogPipeline`` task group (``airflow_provider_binlog.task_group``): its tasks
``purge_risk >> snapshot >> extract >> merge >> commit >> quarantine`` are created from the settings, which are
checked when this file is parsed. A new pipeline starts with a snapshot of the selected tables (``BinlogSnapshotOperator``: chunked,
lock-free, read by Spark) and continues with binlog windows from the snapshot's start; a table added to
the selection later is snapshotted by the next run. Every run starts with ``BinlogPurgeRiskSensor``
(one check, a few queries): it fails the run before anything is read when the binlogs the pipeline
needs, from the source head for a new pipeline, may be purged before they are read, counting the time
the pending snapshot of the selected tables will take. (Pipelines cutting by interval start at their first
window instead: snapshots need head windows.) To re-snapshot tables while this DAG keeps running, trigger
``binlog_resnapshot``.

Connections: ``binlog_default`` (a ``mysql`` or ``mysqlbinlog`` connection) and ``spark_default``.
"""

from __future__ import annotations

import json
import os
from typing import Any

import pendulum
from airflow.sdk import DAG
from airflow.sdk.definitions.timetables.interval import CronDataIntervalTimetable, DeltaDataIntervalTimetable

from airflow_provider_binlog.sensors.purge_risk import DEFAULT_MIN_HEADROOM_SECONDS
from airflow_provider_binlog.task_group import BinlogPipeline

PIPELINE = os.environ.get("BINLOG_CDC_PIPELINE", "binlog_cdc")
TABLES = os.environ.get("BINLOG_CDC_TABLES", "shop.*")
STAGING = os.environ.get("BINLOG_CDC_STAGING", "/tmp/binlog_cdc/staging")
TARGET = os.environ.get("BINLOG_CDC_TARGET", "/tmp/binlog_cdc/target")
KEYS: dict[str, list[str]] = json.loads(os.environ.get("BINLOG_CDC_KEYS") or "{}")
KEYLESS_TABLES = os.environ.get("BINLOG_CDC_KEYLESS_TABLES", "skip")
_SCHEDULE = os.environ.get("BINLOG_CDC_SCHEDULE", "*/15 * * * *")
# BinlogPipeline checks every setting when the DAG is parsed (a wrong value fails the import, naming it)
_WRITE_MODE = os.environ.get("BINLOG_CDC_WRITE_MODE", "auto")
_CUT_BY = os.environ.get("BINLOG_CDC_CUT_BY", "head")
_HISTORY = os.environ.get("BINLOG_CDC_HISTORY", "off")
_ARCHIVE = os.environ.get("BINLOG_CDC_ARCHIVE") or None
_SNAPSHOT_CHUNK_ROWS = int(os.environ.get("BINLOG_CDC_SNAPSHOT_CHUNK_ROWS", "50000"))
_SNAPSHOT_CONNECTIONS = int(os.environ.get("BINLOG_CDC_SNAPSHOT_CONNECTIONS", "2"))
_MIN_HEADROOM_SECONDS = float(os.environ.get("BINLOG_CDC_MIN_HEADROOM_SECONDS", DEFAULT_MIN_HEADROOM_SECONDS))
_SNAPSHOT_RATE = os.environ.get("BINLOG_CDC_SNAPSHOT_ROWS_PER_SECOND")


def _snapshot_settings() -> dict[str, Any]:
    """Return the snapshot settings; a pipeline cutting by interval takes no snapshots and refuses them."""
    if _CUT_BY != "head":
        return {}
    rate = {} if _SNAPSHOT_RATE is None else {"snapshot_rows_per_second": float(_SNAPSHOT_RATE)}
    return {
        "snapshot_chunk_rows": _SNAPSHOT_CHUNK_ROWS,
        "snapshot_connections": _SNAPSHOT_CONNECTIONS,
        **rate,
    }


def _schedule() -> Any:
    """Return the DAG's schedule; interval windows need a timetable with data intervals."""
    if _SCHEDULE.lower() in ("", "none", "manual"):
        return None
    if _SCHEDULE.upper().startswith("P"):
        every = pendulum.parse(_SCHEDULE)
        return DeltaDataIntervalTimetable(every) if _CUT_BY == "interval" else every
    return CronDataIntervalTimetable(_SCHEDULE, timezone="UTC") if _CUT_BY == "interval" else _SCHEDULE


# [START howto_binlog_cdc]
with DAG(
    dag_id="binlog_cdc",
    description="MySQL/MariaDB binlog -> Delta Lake, one bounded window per run",
    schedule=_schedule(),
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    tags=["cdc", "binlog"],
) as dag:
    BinlogPipeline(
        pipeline=PIPELINE,
        tables=TABLES,
        staging=STAGING,
        target=TARGET,
        keys=KEYS,
        keyless_tables=KEYLESS_TABLES,
        cut_by=_CUT_BY,
        write_mode=_WRITE_MODE,
        history=_HISTORY,
        archive=_ARCHIVE,
        min_headroom_seconds=_MIN_HEADROOM_SECONDS,
        **_snapshot_settings(),
        prefix_group_id=False,  # one pipeline in this DAG: its task ids stay purge_risk, snapshot, extract, ...
    )
# [END howto_binlog_cdc]
