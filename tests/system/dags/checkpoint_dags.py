"""DAGs of the checkpoint-safety system tests (parsed from the test session's dags folder).

The pipeline's settings come from the environment, as in the example DAGs (ADR 0034); the tests' DagRunner sets
them on the tasks before each run.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import pendulum
from airflow.sdk import DAG

from airflow_provider_binlog.operators import BinlogCommitOperator, BinlogExtractOperator, BinlogMergeOperator

ON_MERGE_RETRY: list[Callable[[Any], None]] = []
"""Functions the tests register; called when the merge task fails and is retried."""


def _on_merge_retry(context: Any) -> None:
    for callback in ON_MERGE_RETRY:
        callback(context)


_PIPELINE = os.environ.get("BINLOG_CDC_PIPELINE", "checkpoint")
_TARGET = os.environ.get("BINLOG_CDC_TARGET", "/tmp/checkpoint/target")


def _extract() -> BinlogExtractOperator:
    return BinlogExtractOperator(
        task_id="extract",
        pipeline=_PIPELINE,
        tables=os.environ.get("BINLOG_CDC_TABLES", "db.*"),
        staging_uri=os.environ.get("BINLOG_CDC_STAGING", "/tmp/checkpoint/staging"),
    )


def _commit() -> BinlogCommitOperator:
    return BinlogCommitOperator(task_id="commit", pipeline=_PIPELINE, target_path=_TARGET)


_ARGS: dict[str, Any] = {
    "schedule": None,
    "start_date": pendulum.datetime(2026, 1, 1, tz="UTC"),
    "max_active_runs": 1,
}
with DAG("checkpoint_without_merge", **_ARGS) as without_merge:
    _extract() >> _commit()

with DAG("checkpoint_flaky_merge", **_ARGS) as flaky_merge:
    (
        _extract()
        >> BinlogMergeOperator(
            task_id="merge",
            pipeline=_PIPELINE,
            window_uri="{{ ti.xcom_pull(task_ids='extract')['window_uri'] }}",
            target_path=_TARGET,
            conn_id="spark_flaky",
            retries=1,
            retry_delay=pendulum.duration(seconds=0),
            on_retry_callback=_on_merge_retry,
        )
        >> _commit()
    )
