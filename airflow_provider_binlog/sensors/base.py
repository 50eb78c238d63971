"""Shared behaviour of the pipeline sensors: poke through the trigger's measurement, defer, finish."""

from __future__ import annotations

import abc
import datetime as dt
from collections.abc import Callable, Sequence
from typing import Any

from airflow.sdk import BaseSensorOperator, PokeReturnValue, conf
from airflow.sdk.exceptions import AirflowSensorTimeout, AirflowSkipException

from airflow_provider_binlog import exceptions
from airflow_provider_binlog.hooks.binlog import BinlogHook
from airflow_provider_binlog.triggers.binlog import PipelinePollTrigger

_ERRORS: dict[str, type[exceptions.BinlogError]] = {
    cls.__name__: cls
    for cls in (
        exceptions.BinlogConfigError,
        exceptions.SourcePrivilegeError,
        exceptions.SourceUnreachableError,
        exceptions.BinlogPurgedError,
        exceptions.StateError,
        exceptions.PurgeRiskError,
    )
}


class PipelineSensor(BaseSensorOperator):
    """Base of the binlog sensors: one measurement per poke, deferrable to the triggerer.

    Subclasses build the trigger (:meth:`trigger`); its blocking ``evaluate()`` is also the poke, so
    poke, reschedule and deferrable modes decide the same way. Purged binlogs fail the task even with
    ``soft_fail=True``: a skip would hide data loss.

    :param pipeline: pipeline name (templated).
    :param binlog_conn_id: source connection (``mysql`` or ``mysqlbinlog``).
    :param deferrable: wait in the triggerer instead of a worker slot; default from
        ``[operators] default_deferrable``.
    """

    template_fields: Sequence[str] = ("pipeline",)

    def __init__(
        self,
        *,
        pipeline: str,
        binlog_conn_id: str = BinlogHook.default_conn_name,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.pipeline = pipeline
        self.binlog_conn_id = binlog_conn_id
        self.deferrable = deferrable
        self._last_measurement = "no measurement yet"

    @abc.abstractmethod
    def trigger(self) -> PipelinePollTrigger:
        """Return the trigger that measures this sensor's condition (each subclass builds its own)."""

    def poke(self, context: Any) -> PokeReturnValue:
        """Measure once; done, with the report as XCom, when the condition holds."""
        payload = self.trigger().evaluate()
        self._last_measurement = str(payload.get("message"))
        if payload["status"] == "waiting":
            self.log.info("%s", self._last_measurement)
            return PokeReturnValue(is_done=False)
        return PokeReturnValue(is_done=True, xcom_value=self.finish(payload))

    def execute(self, context: Any) -> Any:
        """Poke (or reschedule) in the worker, or defer to the trigger when ``deferrable``."""
        if self.deferrable:
            self.defer(
                trigger=self.trigger(),
                method_name="execute_complete",
                timeout=dt.timedelta(seconds=self.timeout),
            )
        try:
            return _unskip_purged(super().execute, context)
        except AirflowSensorTimeout as timeout:
            raise AirflowSensorTimeout(
                f"{self.task_id}: the condition still did not hold when timeout={self.timeout:g} s ran out. "
                f"Last measurement: {self._last_measurement}"
            ) from timeout

    def resume_execution(self, next_method: str, next_kwargs: dict[str, Any] | None, context: Any) -> Any:
        """Resume after the trigger fired (purged binlogs stay a failure under ``soft_fail``)."""
        parent = super().resume_execution
        return _unskip_purged(lambda ctx: parent(next_method, next_kwargs, ctx), context)

    def execute_complete(self, context: Any, event: dict[str, Any]) -> dict[str, Any]:
        """Turn the trigger's event into the report (XCom) or the matching exception."""
        return self.finish(event)

    def finish(self, payload: dict[str, Any]) -> dict[str, Any]:
        """Return the payload's report on ``success``; raise the error its status names otherwise.

        :raises BinlogPurgedError: status ``purged``.
        :raises PurgeRiskError: status ``low``.
        :raises BinlogError: status ``error`` (the subclass named by ``error_class``).
        """
        status, message = payload.get("status"), str(payload.get("message", ""))
        if status == "success":
            self.log.info("%s", message)
            return dict(payload.get("report") or {})
        if status == "purged":
            raise exceptions.BinlogPurgedError(message)
        if status == "low":
            raise exceptions.PurgeRiskError(message)
        raise _ERRORS.get(str(payload.get("error_class")), exceptions.BinlogError)(message)


def _unskip_purged(call: Callable[[Any], Any], context: Any) -> Any:
    """Run ``call(context)``; a soft-fail skip caused by purged binlogs is raised as the purge error."""
    try:
        return call(context)
    except AirflowSkipException as skip:
        if isinstance(skip.__cause__, exceptions.BinlogPurgedError):
            raise skip.__cause__ from None
        raise
