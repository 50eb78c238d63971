"""BinlogPurgeRiskSensor: fails before the binlogs a pipeline still needs can be purged unread."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow_provider_binlog.sensors.base import PipelineSensor
from airflow_provider_binlog.triggers.binlog import BinlogPurgeRiskTrigger

DEFAULT_MIN_HEADROOM_SECONDS = 6 * 3600


class BinlogPurgeRiskSensor(PipelineSensor):
    """Check that the binlogs ``pipeline`` still needs are retained with ``min_headroom_seconds`` to spare.

    One measurement decides (:func:`~airflow_provider_binlog.retention.assess_retention`):

    * retained with at least ``min_headroom_seconds`` left (or retention unlimited): success; the
      retention report is the XCom value;
    * headroom below ``min_headroom_seconds``: fails with :class:`PurgeRiskError` naming the file, the
      earliest purge time and the remedy (or, with ``soft_fail=True``, skips), so alerting fires while
      the binlogs are still there;
    * already purged: fails with :class:`BinlogPurgedError` without retries, even with ``soft_fail``,
      and the message names the re-snapshot remedy.

    Use it as a guard before ``extract`` and in a monitoring DAG. Emits ``binlog.purge_risk.*`` metrics.

    :param pipeline: pipeline name (templated).
    :param min_headroom_seconds: least acceptable time before the oldest needed binlog may be purged
        (seconds; default 6 h). Recommended: the time to notice and fix an outage.
    :param binlog_conn_id: source connection.
    :param deferrable: measure in the triggerer instead of the worker.
    """

    template_fields: Sequence[str] = ("pipeline", "min_headroom_seconds")

    def __init__(self, *, min_headroom_seconds: float = DEFAULT_MIN_HEADROOM_SECONDS, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.min_headroom_seconds = min_headroom_seconds

    def trigger(self) -> BinlogPurgeRiskTrigger:
        """Return the trigger that assesses the retention once."""
        return BinlogPurgeRiskTrigger(
            binlog_conn_id=self.binlog_conn_id,
            pipeline=self.pipeline,
            min_headroom_seconds=float(self.min_headroom_seconds),
            poke_interval=float(self.poke_interval),
        )
