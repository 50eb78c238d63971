"""DAGs of the checkpoint-safety system tests (parsed from the test session's dags folder)."""

from __future__ import annotations

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


def _extract() -> BinlogExtractOperator:
    return BinlogExtractOperator(
        task_id="extract",
        pipeline="{{ params.pipeline }}",
        tables="{{ params.tables }}",
        staging_uri="{{ params.staging }}",
    )


def _commit() -> BinlogCommitOperator:
    return BinlogCommitOperator(
        task_id="commit", pipeline="{{ params.pipeline }}", target_path="{{ params.target }}"
    )


_ARGS: dict[str, Any] = {
    "schedule": None,
    "start_date": pendulum.datetime(2026, 1, 1, tz="UTC"),
    "max_active_runs": 1,
}
_PARAMS = {"pipeline": "", "tables": "", "staging": "", "target": ""}

with DAG("checkpoint_without_merge", params=_PARAMS, **_ARGS) as without_merge:
    _extract() >> _commit()

with DAG("checkpoint_flaky_merge", params=_PARAMS, **_ARGS) as flaky_merge:
    (
        _extract()
        >> BinlogMergeOperator(
            task_id="merge",
            pipeline="{{ params.pipeline }}",
            window_uri="{{ ti.xcom_pull(task_ids='extract')['window_uri'] }}",
            target_path="{{ params.target }}",
            conn_id="spark_flaky",
            retries=1,
            retry_delay=pendulum.duration(seconds=0),
            on_retry_callback=_on_merge_retry,
        )
        >> _commit()
    )
