"""Triggers behind the deferrable sensors: poll a pipeline's lag or purge risk from the triggerer.

Each poll runs the blocking measurement (:mod:`airflow_provider_binlog.monitoring.measure`) in a worker
thread via ``sync_to_async``, so the triggerer's event loop never blocks on the source. A trigger fires
one :class:`TriggerEvent` with a JSON payload ``{"status", "message", "report"}``: ``status`` is
``success``, ``purged``, ``low`` (purge risk) or ``error`` (with ``error_class``); the sensor's
``execute_complete`` turns it into success or the matching exception. A ``waiting`` measurement is
logged and polled again after ``poke_interval`` seconds.
"""

from __future__ import annotations

import abc
import asyncio
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent
from asgiref.sync import sync_to_async

from airflow_provider_binlog.exceptions import BinlogError


class PipelinePollTrigger(BaseTrigger):
    """Poll one pipeline every ``poke_interval`` seconds until :meth:`evaluate` is no longer ``waiting``."""

    def __init__(self, *, binlog_conn_id: str, pipeline: str, poke_interval: float = 60.0) -> None:
        super().__init__()
        self.binlog_conn_id = binlog_conn_id
        self.pipeline = pipeline
        self.poke_interval = poke_interval

    def _common_kwargs(self) -> dict[str, Any]:
        return {
            "binlog_conn_id": self.binlog_conn_id,
            "pipeline": self.pipeline,
            "poke_interval": self.poke_interval,
        }

    @abc.abstractmethod
    def evaluate(self) -> dict[str, Any]:
        """Measure once (blocking) and return the payload; status ``waiting`` means poll again."""

    async def run(self) -> AsyncIterator[TriggerEvent]:
        """Poll until :meth:`evaluate` decides; an error ends the trigger with an ``error`` event."""
        while True:
            try:
                payload = await sync_to_async(self.evaluate)()
            except BinlogError as err:
                payload = {"status": "error", "error_class": type(err).__name__, "message": str(err)}
            if payload["status"] != "waiting":
                yield TriggerEvent(payload)
                return
            self.log.info("%s", payload["message"])
            await asyncio.sleep(self.poke_interval)


class BinlogLagTrigger(PipelinePollTrigger):
    """Fire once the pipeline's lag is within every given limit (see :func:`~..lag.lag_verdict`).

    :param binlog_conn_id: source connection.
    :param pipeline: pipeline name.
    :param max_lag_seconds: limit on the age of the oldest pending transaction (seconds), or None.
    :param max_lag_bytes: limit on binlog bytes between checkpoint and head, or None.
    :param max_lag_transactions: limit on pending transactions (GTID count), or None.
    :param fresh_until: ISO-8601 time the target must cover (every commit before it merged), or None.
    :param poke_interval: seconds between polls.
    """

    def __init__(
        self,
        *,
        binlog_conn_id: str,
        pipeline: str,
        max_lag_seconds: float | None = None,
        max_lag_bytes: int | None = None,
        max_lag_transactions: int | None = None,
        fresh_until: str | None = None,
        poke_interval: float = 60.0,
    ) -> None:
        super().__init__(binlog_conn_id=binlog_conn_id, pipeline=pipeline, poke_interval=poke_interval)
        self.max_lag_seconds = max_lag_seconds
        self.max_lag_bytes = max_lag_bytes
        self.max_lag_transactions = max_lag_transactions
        self.fresh_until = fresh_until

    def serialize(self) -> tuple[str, dict[str, Any]]:
        """Return the classpath and JSON-safe keyword arguments."""
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                **self._common_kwargs(),
                "max_lag_seconds": self.max_lag_seconds,
                "max_lag_bytes": self.max_lag_bytes,
                "max_lag_transactions": self.max_lag_transactions,
                "fresh_until": self.fresh_until,
            },
        )

    def evaluate(self) -> dict[str, Any]:
        """Measure the lag: ``success`` once within the limits, else ``waiting``."""
        from airflow_provider_binlog.monitoring.lag import lag_verdict, parse_moment
        from airflow_provider_binlog.monitoring.measure import pipeline_lag
        from airflow_provider_binlog.monitoring.metrics import emit_lag

        report = pipeline_lag(self.binlog_conn_id, self.pipeline)
        emit_lag(report)
        done, message = lag_verdict(
            report,
            max_seconds=self.max_lag_seconds,
            max_bytes=self.max_lag_bytes,
            max_transactions=self.max_lag_transactions,
            fresh_until=None if self.fresh_until is None else parse_moment(self.fresh_until),
        )
        return {"status": "success" if done else "waiting", "message": message, "report": report.to_dict()}


class BinlogPurgeRiskTrigger(PipelinePollTrigger):
    """Judge the pipeline's purge risk once, off the worker (see :func:`~..retention.purge_risk_verdict`).

    :param binlog_conn_id: source connection.
    :param pipeline: pipeline name.
    :param min_headroom_seconds: the least headroom that counts as safe (seconds).
    :param tables: the pipeline's table selection, whose pending snapshot is estimated (empty: none).
    :param snapshot_rows_per_second: snapshot rate to assume when none was measured (None: the default).
    :param poke_interval: seconds between polls (the first poll always decides).
    :param archive: the source's binlog archive, whose finished files count as retained (None: none).
    """

    def __init__(
        self,
        *,
        binlog_conn_id: str,
        pipeline: str,
        min_headroom_seconds: float,
        tables: list[str] | None = None,
        snapshot_rows_per_second: float | None = None,
        poke_interval: float = 60.0,
        archive: str | None = None,
    ) -> None:
        super().__init__(binlog_conn_id=binlog_conn_id, pipeline=pipeline, poke_interval=poke_interval)
        self.min_headroom_seconds = min_headroom_seconds
        self.tables = list(tables or [])
        self.snapshot_rows_per_second = snapshot_rows_per_second
        self.archive = archive

    def serialize(self) -> tuple[str, dict[str, Any]]:
        """Return the classpath and JSON-safe keyword arguments."""
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                **self._common_kwargs(),
                "min_headroom_seconds": self.min_headroom_seconds,
                "tables": self.tables,
                "snapshot_rows_per_second": self.snapshot_rows_per_second,
                "archive": self.archive,
            },
        )

    def evaluate(self) -> dict[str, Any]:
        """Measure retention and return ``success``, ``low`` or ``purged``."""
        from airflow_provider_binlog.monitoring.measure import pipeline_retention
        from airflow_provider_binlog.monitoring.metrics import emit_retention
        from airflow_provider_binlog.monitoring.retention import purge_risk_verdict

        report = pipeline_retention(
            self.binlog_conn_id,
            self.pipeline,
            tables=self.tables,
            snapshot_rows_per_second=self.snapshot_rows_per_second,
            archive=self.archive,
        )
        emit_retention(report)
        status, message = purge_risk_verdict(report, self.min_headroom_seconds)
        return {
            "status": "success" if status == "safe" else status,
            "message": message,
            "report": report.to_dict(),
        }
