"""The trigger behind deferrable merges and snapshots: watch a detached Spark Connect operation from the triggerer.

No Spark session runs in the triggerer: the trigger speaks the Spark Connect protocol over grpc.aio
(:func:`~airflow_provider_binlog.jobs.connect_operations.watch_operation`), attaching to the operation the task
submitted until the server reports it complete or failed, then releases it and its session.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent
from asgiref.sync import sync_to_async

from airflow_provider_binlog.jobs.connect_operations import DetachedOperation, watch_operation


class SparkConnectOperationTrigger(BaseTrigger):
    """Fire once a detached Spark Connect operation has ended.

    The event's payload is ``{"status": "success" | "error", "message", "lost", "operation_id"}``: ``lost``
    says the server no longer knew the operation (abandoned after its detached timeout, server restarted),
    so part of its output may exist; the resumed task never takes output without Spark's completion marker.

    :param conn_id: the ``spark_connect`` connection the operation runs on (read in the triggerer, so no
        token is stored with the trigger).
    :param operation: the operation's handle
        (:meth:`~airflow_provider_binlog.jobs.connect_operations.DetachedOperation.to_dict`).
    :raises ValueError: if ``operation`` lacks a session or operation id.
    """

    def __init__(self, *, conn_id: str, operation: Mapping[str, Any]) -> None:
        super().__init__()
        self.conn_id = conn_id
        self.operation = DetachedOperation.from_dict(operation)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        """Return the classpath and the keyword arguments that rebuild this trigger."""
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {"conn_id": self.conn_id, "operation": self.operation.to_dict()},
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        """Attach to the operation until it ends; yield one event saying how."""
        from airflow.providers.apache.spark.hooks.spark_connect import SparkConnectHook

        url = await sync_to_async(SparkConnectHook(self.conn_id).get_connection_url)()
        self.log.info(
            "Watching Spark Connect operation %s (%s)",
            self.operation.operation_id,
            self.operation.description,
        )

        async def heartbeat(responses: int) -> None:
            self.log.info(
                "Operation %s still running (%d responses so far)", self.operation.operation_id, responses
            )

        outcome = await watch_operation(url, self.operation, heartbeat=heartbeat)
        yield TriggerEvent(outcome.event(self.operation))
