"""BinlogConsumerLagSensor: wait until a pipeline's target is close enough behind its source."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow_provider_binlog.sensors.base import PipelineSensor
from airflow_provider_binlog.triggers.binlog import BinlogLagTrigger


class BinlogConsumerLagSensor(PipelineSensor):
    """Wait until the lag of ``pipeline``'s target behind the source is within every given limit.

    The freshness gate a reporting DAG puts before reading the target. Lag (see
    :mod:`airflow_provider_binlog.monitoring.lag`) is measured as seconds (age of the oldest transaction the
    target lacks), bytes of binlog and transactions (GTID count) between the checkpoint and the head.
    ``fresh_until`` waits until the target holds every transaction committed before that time, e.g.
    ``"{{ data_interval_end }}"``. Each poke emits ``binlog.lag.*`` metrics; the final lag report is
    the XCom value. Purged binlogs fail the task (the lag can no longer be closed).

    :param pipeline: pipeline name (templated).
    :param max_lag_seconds: seconds; None to not check.
    :param max_lag_bytes: bytes; None to not check.
    :param max_lag_transactions: transactions; None to not check (never met when GTIDs are off).
    :param fresh_until: ISO-8601 time (templated); None to not check.
    :param binlog_conn_id: source connection.
    :param deferrable: wait in the triggerer instead of a worker slot.
    :raises ValueError: when no limit is given.
    """

    template_fields: Sequence[str] = ("pipeline", "fresh_until")

    def __init__(
        self,
        *,
        max_lag_seconds: float | None = None,
        max_lag_bytes: int | None = None,
        max_lag_transactions: int | None = None,
        fresh_until: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if (
            max_lag_seconds is None
            and max_lag_bytes is None
            and max_lag_transactions is None
            and not fresh_until
        ):
            raise ValueError(
                f"{self.task_id}: give at least one of max_lag_seconds, max_lag_bytes, max_lag_transactions "
                f"or fresh_until"
            )
        self.max_lag_seconds = max_lag_seconds
        self.max_lag_bytes = max_lag_bytes
        self.max_lag_transactions = max_lag_transactions
        self.fresh_until = fresh_until

    def trigger(self) -> BinlogLagTrigger:
        """Return the trigger that polls the lag until it is within the limits."""
        return BinlogLagTrigger(
            binlog_conn_id=self.binlog_conn_id,
            pipeline=self.pipeline,
            max_lag_seconds=self.max_lag_seconds,
            max_lag_bytes=self.max_lag_bytes,
            max_lag_transactions=self.max_lag_transactions,
            fresh_until=None if self.fresh_until is None else str(self.fresh_until),
            poke_interval=float(self.poke_interval),
        )
