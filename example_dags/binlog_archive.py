"""Example archive DAG: copies the source's binlog files, byte for byte, into a binlog archive every five minutes.

The archive keeps the binlog beyond the source's retention (docs/archive.md): each run copies what the archive
lacks, over a replication connection of its own (``BinlogArchiveOperator``), finishing and verifying the files
the source has finished and continuing the one it is writing. Run it more often than the source's retention
can purge a file; two runs at once are safe (``max_active_runs=1`` only saves the second the work).

Settings (environment variables read when the file is parsed):

* ``BINLOG_CDC_ARCHIVE`` the archive folder of the source (a local path or ``s3://``, ``gs://`` ... URI; store
  credentials from the environment), default ``/tmp/binlog_cdc/archive``; one folder per source server. Give
  ``binlog_cdc`` the same setting: its windows then read what the source purged from the archive.

Connection: ``binlog_default``, as ``binlog_cdc``'s (replication grants suffice).
"""

from __future__ import annotations

import os

import pendulum
from airflow.sdk import DAG

from airflow_provider_binlog.operators.archive import BinlogArchiveOperator

_ARCHIVE = os.environ.get("BINLOG_CDC_ARCHIVE") or "/tmp/binlog_cdc/archive"

# [START howto_binlog_archive]
with DAG(
    dag_id="binlog_archive",
    description="Copies the source's binlog files into the binlog archive",
    schedule=pendulum.duration(minutes=5),
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    tags=["cdc", "binlog", "archive"],
) as dag:
    BinlogArchiveOperator(task_id="archive", archive=_ARCHIVE)
# [END howto_binlog_archive]
