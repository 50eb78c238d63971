"""BinlogPurgeRiskSensor: fails before the binlogs a pipeline still needs can be purged unread."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow_provider_binlog.operators.trusted import check_trusted_arguments
from airflow_provider_binlog.pipeline.tables import parse_tables
from airflow_provider_binlog.sensors.base import PipelineSensor
from airflow_provider_binlog.triggers.binlog import BinlogPurgeRiskTrigger

DEFAULT_MIN_HEADROOM_SECONDS = 6 * 3600


class BinlogPurgeRiskSensor(PipelineSensor):
    """Check that the binlogs ``pipeline`` still needs are retained with ``min_headroom_seconds`` to spare.

    One measurement decides (:func:`~airflow_provider_binlog.monitoring.retention.assess_retention`):

    * retained with at least ``min_headroom_seconds`` left (or retention unlimited): success; the
      retention report is the XCom value;
    * headroom below ``min_headroom_seconds``: fails with :class:`PurgeRiskError` naming the file, the
      earliest purge time and the remedy (or, with ``soft_fail=True``, skips), so alerting fires while
      the binlogs are still there;
    * already purged: fails with :class:`BinlogPurgedError` without retries, even with ``soft_fail``,
      and the message names the re-snapshot remedy.

    A pipeline that has not run yet passes when the binlogs from the source head on (where its first
    snapshot starts) are retained long enough: while a snapshot runs the checkpoint cannot move, so the
    time the pending snapshots still need (running ones, and one of the ``tables`` no snapshot has read:
    :mod:`~airflow_provider_binlog.monitoring.snapshot_estimate`) is taken off the headroom before it is compared
    with ``min_headroom_seconds``.

    Use it as a guard before the first task of the CDC DAG (from the first run on) and in a monitoring
    DAG. Emits ``binlog.purge_risk.*`` metrics.

    :param pipeline: pipeline name (templated).
    :param min_headroom_seconds: least acceptable time before the oldest needed binlog may be purged
        (seconds; default 6 h). Recommended: the time to notice and fix an outage.
    :param tables: the pipeline's table selection (templated; list or comma-separated, patterns and
        ``!`` exclusions as for the extract), whose snapshot time is estimated; None: only running
        snapshots are.
    :param snapshot_rows_per_second: snapshot rate to assume while the pipeline has no measured snapshot
        (rows/s; default :data:`~airflow_provider_binlog.monitoring.snapshot_estimate.DEFAULT_SNAPSHOT_ROWS_PER_SECOND`).
    :param binlog_conn_id: source connection.
    :param deferrable: measure in the triggerer instead of the worker.
    :param archive: the source's binlog archive (``docs/archive.md``; a local path or URI, store credentials from
        the environment): the files it has finished count as retained, so the sensor fails only when a needed file
        is in neither, and the headroom is that of the first needed file the archive has not finished.
    """

    template_fields: Sequence[str] = ("pipeline", "min_headroom_seconds", "tables")

    def __init__(
        self,
        *,
        min_headroom_seconds: float = DEFAULT_MIN_HEADROOM_SECONDS,
        tables: str | Sequence[str] | None = None,
        snapshot_rows_per_second: float | None = None,
        archive: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        check_trusted_arguments(self, archive=archive)
        self.archive = archive
        if snapshot_rows_per_second is not None and snapshot_rows_per_second <= 0:
            raise ValueError(f"{self.task_id}: snapshot_rows_per_second must be positive")
        self.min_headroom_seconds = min_headroom_seconds
        self.tables = tables
        self.snapshot_rows_per_second = snapshot_rows_per_second

    def trigger(self) -> BinlogPurgeRiskTrigger:
        """Return the trigger that assesses the retention once."""
        return BinlogPurgeRiskTrigger(
            binlog_conn_id=self.binlog_conn_id,
            pipeline=self.pipeline,
            min_headroom_seconds=float(self.min_headroom_seconds),
            tables=parse_tables(self.tables) if self.tables else [],
            snapshot_rows_per_second=self.snapshot_rows_per_second,
            poke_interval=float(self.poke_interval),
            archive=self.archive,
        )
