"""Deferrable merges over a real Spark Connect server: the task submits, leaves, the trigger watches, the task ends.

The trigger runs for real (grpc.aio against the server); only the events of a lost operation are handed to the
operator by hand, after the operation's output was damaged on purpose (the one forced failure).
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import json
import re
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")
deltalake = pytest.importorskip("deltalake")

from test_merge import PIPELINE, keyless_spec, order, orders, rows, stage_window  # noqa: E402

from airflow_provider_binlog.jobs.actions import SUCCESS_MARKER  # noqa: E402
from airflow_provider_binlog.jobs.connect_operations import (  # noqa: E402
    DetachedOperation,
    submit_command,
    watch_operation,
    writer_command,
)
from airflow_provider_binlog.jobs.merge.files import STAGING_DIR  # noqa: E402
from airflow_provider_binlog.target import read_table, table_uri  # noqa: E402

pytestmark = pytest.mark.integration


def run_trigger(trigger: Any) -> dict[str, Any]:
    """Rebuild the trigger from its serialized form (as the triggerer does) and return its one event's payload."""
    classpath, kwargs = trigger.serialize()
    module, name = classpath.rsplit(".", 1)
    rebuilt = getattr(importlib.import_module(module), name)(**json.loads(json.dumps(kwargs)))

    async def first() -> dict[str, Any]:
        async for event in rebuilt.run():
            return dict(event.payload)
        raise AssertionError("the trigger ended without an event")

    return asyncio.run(first())


def run_deferring(operator: Any, deferral: Any = None) -> tuple[Any, list[dict[str, Any]]]:
    """Run an operator as Airflow runs a deferring task: execute, trigger, resume method, ... until it returns.

    :param deferral: a ``TaskDeferred`` the operator raised already: go on from there instead of executing.
    :returns: the task's return value and the trigger events, in order.
    """
    from airflow.sdk.exceptions import TaskDeferred

    step = functools.partial(operator.execute, context={})
    events: list[dict[str, Any]] = []
    while True:
        try:
            if deferral is None:
                return step(), events
            assert len(events) < 10, "deferred again and again"
            events.append(run_trigger(deferral.trigger))
            step = functools.partial(getattr(operator, deferral.method_name), context={}, event=events[-1])
            deferral = None
        except TaskDeferred as deferred:
            deferral = deferred


#: The merge task of these tests: small target files, the keyless log table keyed by hand; a deferrable one
#: defers at once (these writes end within the default ``defer_after_seconds``, and would not defer); every
#: table on Spark (these small windows would be rewritten in the driver, with no Spark write to defer on).
MERGE_TASK = {
    "task_id": "merge",
    "pipeline": PIPELINE,
    "keys": {"shop.access_log": ["host", "at"]},
    "target_file_bytes": 4096,
    "defer_after_seconds": 0,
    "driver_max_rows": 0,
}


def merge_operator(window: str, target: str, **kwargs: Any) -> Any:
    from airflow_provider_binlog.operators.merge import BinlogMergeOperator

    return BinlogMergeOperator(window_uri=window, target_path=target, **{**MERGE_TASK, **kwargs})


def two_windows(staging: Path) -> list[str]:
    first = {
        "shop.access_log": keyless_spec(),
        **orders(
            [("c", order(1, "new", "1.00")), ("c", order(2, "new", "2.00")), ("c", order(3, "new", "3"))]
        ),
    }
    second = orders([("u", order(2, "paid", "2.50")), ("d", order(1, "new", "1.00"))])
    return [stage_window(staging, 1, first), stage_window(staging, 2, second)]


def staging_folders(target: str, table: str) -> list[Path]:
    root = Path(table_uri(target, table)) / STAGING_DIR
    return sorted(root.iterdir()) if root.exists() else []


@pytest.fixture
def connect_conn(spark_connect: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", spark_connect.connection_json())
    return spark_connect


def test_deferred_merge_commits_what_a_merge_in_the_worker_commits(connect_conn, tmp_path):
    windows = two_windows(tmp_path / "staging")
    deferred_target, worker_target = str(tmp_path / "deferred"), str(tmp_path / "worker")

    all_events = []
    for window in windows:
        result, events = run_deferring(merge_operator(window, deferred_target, deferrable=True))
        assert result["tables"]["shop.orders"]["rows_in_window"] > 0
        all_events += events
        run_deferring(merge_operator(window, worker_target, deferrable=False))

    # one detached write per table a window changes: access_log and orders, then orders
    assert [e["status"] for e in all_events] == ["success"] * 3
    assert len({e["operation_id"] for e in all_events}) == 3
    for table in ("shop.orders", "shop.access_log"):
        assert rows(read_table(deferred_target, table), "msg" if "log" in table else "id") == rows(
            read_table(worker_target, table), "msg" if "log" in table else "id"
        )
        assert staging_folders(deferred_target, table) == []  # the detached outputs were moved and cleaned
    assert rows(read_table(deferred_target, "shop.orders")) == [
        {"id": 2, "status": "paid", "amount": order(2, "paid", "2.50")["amount"]},
        {"id": 3, "status": "new", "amount": order(3, "new", "3")["amount"]},
    ]


def test_a_deferred_merge_on_read_commits_what_a_copy_on_write_merge_in_the_worker_commits(
    connect_conn, tmp_path
):
    from airflow_provider_binlog.contract.delta_log import file_vectors

    windows = two_windows(tmp_path / "staging")
    deferred_target, worker_target = str(tmp_path / "deferred"), str(tmp_path / "worker")
    events = []
    for window in windows:
        events += run_deferring(
            merge_operator(window, deferred_target, deferrable=True, write_mode="merge_on_read")
        )[1]
        run_deferring(merge_operator(window, worker_target, deferrable=False))
    assert [e["status"] for e in events] == [
        "success"
    ] * 3  # the second window's new rows were a detached write
    assert file_vectors(
        deltalake.DeltaTable(table_uri(deferred_target, "shop.orders"))
    )  # its DV was committed
    for table, key in (("shop.orders", "id"), ("shop.access_log", "msg")):
        assert rows(read_table(deferred_target, table), key) == rows(read_table(worker_target, table), key)


def test_a_write_that_ends_while_the_worker_watches_is_taken_without_deferring(connect_conn, tmp_path, capfd):
    windows = two_windows(tmp_path / "staging")
    watched, deferred = str(tmp_path / "watched"), str(tmp_path / "deferred")
    taken = []
    for window in windows:
        capfd.readouterr()
        merge_operator(window, watched, deferrable=True, defer_after_seconds=120).execute(context={})
        taken += re.findall(r"operation \S+ finished within 120 s, without deferring", capfd.readouterr().out)
        run_deferring(merge_operator(window, deferred, deferrable=True))

    assert len(taken) == 3, taken  # access_log and orders, then orders: each write watched to its end
    for table in ("shop.orders", "shop.access_log"):
        key = "msg" if "log" in table else "id"
        assert rows(read_table(watched, table), key) == rows(read_table(deferred, table), key)
        assert staging_folders(watched, table) == []


def test_handling_the_resume_event_twice_commits_once(connect_conn, tmp_path):
    from airflow.sdk.exceptions import TaskDeferred

    window = two_windows(tmp_path / "staging")[0]
    target = str(tmp_path / "target")
    operator = merge_operator(window, target, deferrable=True)
    run_deferring(operator)
    versions = {
        t: deltalake.DeltaTable(table_uri(target, t)).version() for t in ("shop.orders", "shop.access_log")
    }

    # the same event delivered again (a retried resume, a cleared task): the window is in the Delta logs already
    again = merge_operator(window, target, deferrable=True)
    try:
        result = again.execute_complete(
            context={}, event={"status": "success", "operation_id": "x", "message": ""}
        )
    except TaskDeferred:  # pragma: no cover - the assertion says what went wrong
        pytest.fail("a resume of a merged window submitted Spark work again")
    assert {t: deltalake.DeltaTable(table_uri(target, t)).version() for t in versions} == versions
    assert result["tables"]["shop.orders"]["delta_version"] == versions["shop.orders"]


def defer_once(operator: Any) -> tuple[Any, dict[str, Any]]:
    """Run the operator until it defers; run the trigger; return the deferral and its event."""
    from airflow.sdk.exceptions import TaskDeferred

    with pytest.raises(TaskDeferred) as deferred:
        operator.execute(context={})
    return deferred.value, run_trigger(deferred.value.trigger)


def damage_output(target: str, table: str) -> Path:
    """Make the detached write's folder look like an operation that died half-way: no marker, a file gone."""
    (folder,) = staging_folders(target, table)
    (folder / SUCCESS_MARKER).unlink()
    next(folder.rglob("*.parquet")).unlink()
    return folder


def test_a_lost_operation_is_run_again_in_the_worker_and_commits_whole_output(connect_conn, tmp_path):
    spec = orders([("c", order(i, "new", f"{i}.00")) for i in range(1, 41)])
    window = stage_window(tmp_path / "staging", 1, spec)
    target = str(tmp_path / "target")
    operator = merge_operator(window, target, deferrable=True, conf={})
    _, event = defer_once(operator)
    assert event["status"] == "success"
    damaged = damage_output(target, "shop.orders")

    lost = {"status": "error", "lost": True, "operation_id": event["operation_id"], "message": "not found"}
    result = operator.execute_complete(context={}, event=lost)  # runs in the worker: no TaskDeferred

    assert result["tables"]["shop.orders"]["rows_written"] == 40
    assert len(read_table(target, "shop.orders")) == 40
    assert not damaged.exists()


def test_a_success_event_without_complete_output_submits_the_write_again(connect_conn, tmp_path):
    window = stage_window(
        tmp_path / "staging", 1, orders([("c", order(i, "new", "1.00")) for i in range(1, 9)])
    )
    target = str(tmp_path / "target")
    operator = merge_operator(window, target, deferrable=True)
    deferral, event = defer_once(operator)
    damage_output(target, "shop.orders")

    from airflow.sdk.exceptions import TaskDeferred

    with pytest.raises(TaskDeferred) as again:
        operator.execute_complete(context={}, event=event)
    second = again.value.trigger.operation.operation_id
    assert second != deferral.trigger.operation.operation_id
    result, _ = run_deferring(operator, again.value)
    assert result["tables"]["shop.orders"]["rows_written"] == 8
    assert deltalake.DeltaTable(table_uri(target, "shop.orders")).version() == 1  # created, merged once


def slow_batches(fail: bool) -> Any:
    """Return a ``mapInArrow`` function that takes a few seconds (longer than the server's 2 s progress report)."""

    def run(batches: Any) -> Any:
        import time

        time.sleep(4)
        if fail:
            raise ValueError("row 5 is bad")
        yield from batches

    return run


def submit_slow_write(url: str, out: Path, *, fail: bool) -> DetachedOperation:
    """Submit a slow write of 10 rows to ``out`` from a session that then leaves; return the operation."""
    from pyspark.sql import SparkSession

    from airflow_provider_binlog.jobs.connect_operations import leave_session

    session = SparkSession.builder.remote(url).create()
    try:
        frame = session.range(0, 10, 1, 1).mapInArrow(slow_batches(fail), "id long")
        writer = frame.write.mode("error").format("parquet")
        operation = submit_command(session, writer_command(writer, str(out)), "a slow write")
        leave_session(session)
    finally:
        session.stop()
    return operation


def test_a_detached_write_goes_on_after_the_client_left(spark_connect, tmp_path):
    out = tmp_path / "out"
    operation = submit_slow_write(spark_connect.url, out, fail=False)
    assert not (out / SUCCESS_MARKER).exists()  # the client left before the write finished

    outcome = asyncio.run(watch_operation(spark_connect.url, operation))

    assert outcome.status == "success", outcome.message
    assert (out / SUCCESS_MARKER).exists()
    assert list(out.glob("*.parquet"))


def test_a_watch_that_gives_up_leaves_the_operation_to_the_next_watcher(spark_connect, tmp_path):
    out = tmp_path / "out"
    operation = submit_slow_write(spark_connect.url, out, fail=False)

    gave_up = asyncio.run(watch_operation(spark_connect.url, operation, within=1.0))  # the worker's watch

    assert gave_up is None
    assert not (out / SUCCESS_MARKER).exists()
    outcome = asyncio.run(watch_operation(spark_connect.url, operation))  # the trigger's
    assert outcome is not None
    assert outcome.status == "success", outcome.message
    assert (out / SUCCESS_MARKER).exists()


def test_the_trigger_reports_an_operation_the_server_failed(spark_connect, tmp_path):
    operation = submit_slow_write(spark_connect.url, tmp_path / "out", fail=True)

    outcome = asyncio.run(watch_operation(spark_connect.url, operation))

    assert outcome.status == "error"
    assert "row 5 is bad" in outcome.message, outcome.message
    assert not outcome.lost


def test_the_trigger_reports_an_operation_whose_session_is_gone_as_lost(spark_connect):
    from pyspark.sql import SparkSession

    session = SparkSession.builder.remote(spark_connect.url).create()
    try:
        session.range(1).count()
        released = session.client._session_id
    finally:
        session.stop()  # releases the session: the server ends its operations (as after its idle timeout)
    operation = DetachedOperation(session_id=released, operation_id="6f1c1e2a-4a7b-4c46-8a36-0d3a1b0c9e11")

    outcome = asyncio.run(watch_operation(spark_connect.url, operation, retry_seconds=0.1))

    assert outcome.status == "error"
    assert outcome.lost, outcome.message


def test_spark_submit_connection_runs_in_the_worker_and_says_why(tmp_path, monkeypatch, capfd):
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": "local[1]"}))
    window = stage_window(tmp_path / "staging", 1, orders([("c", order(1, "new", "1.00"))]))
    target = str(tmp_path / "target")
    operator = merge_operator(
        window,
        target,
        deferrable=True,
        conf={"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2"},
    )

    capfd.readouterr()
    result = operator.execute(context={})  # no TaskDeferred

    why = [line for line in capfd.readouterr().out.splitlines() if "not deferring" in line]
    assert len(why) == 1, why
    assert "spark-submit" in why[0]
    assert "use a spark_connect connection to defer" in why[0]
    assert result["tables"]["shop.orders"]["rows_written"] == 1
