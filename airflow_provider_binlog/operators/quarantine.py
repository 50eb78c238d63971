"""BinlogQuarantineCheckOperator: a run ends visibly failed while a table of its pipeline is quarantined."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseOperator

from airflow_provider_binlog.exceptions import TablesQuarantinedError
from airflow_provider_binlog.operators.trusted import check_trusted_arguments
from airflow_provider_binlog.pipeline.quarantine import quarantine_report, quarantined
from airflow_provider_binlog.pipeline.state import StateManager


class BinlogQuarantineCheckOperator(BaseOperator):
    """Fail (without retry) while any table of the pipeline is quarantined; succeed otherwise.

    Put it last in the pipeline's DAG, after the commit: the run's healthy tables are merged and committed
    by then, and this task fails the run for the quarantined ones, so alerting (``on_failure_callback``, the
    UI's failed runs) sees them, while the next scheduled run carries on. It reads the pipeline's state only
    (:func:`~airflow_provider_binlog.pipeline.quarantine.quarantined`); it opens no connection to the source.
    Returns (XCom) ``{"pipeline": name, "quarantined": []}`` when none is.

    :param pipeline: pipeline name (templated).
    :raises TablesQuarantinedError: naming each quarantined table, its column, binlog coordinates and GTID, the
        reason and the remedy (:func:`~airflow_provider_binlog.pipeline.quarantine.quarantine_report`).
    """

    template_fields: Sequence[str] = ("pipeline",)

    def __init__(self, *, pipeline: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        check_trusted_arguments(self, pipeline=pipeline)
        self.pipeline = pipeline

    def execute(self, context: Any) -> dict[str, Any]:
        """Read the pipeline's state; fail when a table is quarantined."""
        found = quarantined(StateManager(self.pipeline).load())
        if found:
            raise TablesQuarantinedError(quarantine_report(self.pipeline, found.values()))
        self.log.info("no table of pipeline %s is quarantined", self.pipeline)
        return {"pipeline": self.pipeline, "quarantined": []}
