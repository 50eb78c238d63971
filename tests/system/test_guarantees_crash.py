"""Guarantees 1, 2 and 5 of docs/guarantees.md: same bytes on re-run, crash anywhere, one run at a time.

Every test runs the example DAG against the private MariaDB and local Spark, injects its fault, lets the
same DAG run run again (dag.test with the same dates clears and re-runs it under the same run id, like
a retry or a clear from the UI) and compares target and source row by row.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pymysql
import pytest
from child_run import RELEASE
from conftest import DagRunner, load_example_dag, stored_state

from airflow_provider_binlog.target import window_merged
from airflow_provider_binlog.testing.mariadb import LocalMariaDB
from airflow_provider_binlog.verify import compare_table

pytestmark = pytest.mark.system

ROWS = 20_000
"""Rows in the faulted window: more than one Parquet batch (8192 rows), so a kill can land between two."""


@pytest.fixture
def items(connections: LocalMariaDB, scratch_db: str) -> str:
    connections.execute(
        f"CREATE TABLE {scratch_db}.items (id INT PRIMARY KEY, v VARCHAR(40), n BIGINT)",
        f"CREATE TABLE {scratch_db}.notes (id INT PRIMARY KEY, body TEXT)",
    )
    return scratch_db


def write_changes(server: LocalMariaDB, db: str) -> None:
    """Inserts, updates, deletes and a key change across two tables, in a few transactions."""
    server.execute(
        f"INSERT INTO {db}.items SELECT seq, CONCAT('v', seq), seq * 7 FROM {db}.seq_1_to_{ROWS}",
        f"UPDATE {db}.items SET v = 'updated', n = n + 1 WHERE id % 5 = 0",
        f"DELETE FROM {db}.items WHERE id % 11 = 0",
        f"UPDATE {db}.items SET id = id + {ROWS} WHERE id BETWEEN 100 AND 120",
        f"INSERT INTO {db}.notes VALUES (1, 'one'), (2, 'two')",
        f"UPDATE {db}.notes SET body = 'uno' WHERE id = 1",
    )


def assert_target_equals_source(server: LocalMariaDB, target: str, db: str) -> None:
    with pymysql.connect(**server.connection_kwargs()) as conn:
        results = [compare_table(conn, target, f"{db}.{table}") for table in ("items", "notes")]
    assert [str(r) for r in results if not r.matched] == []
    assert results[0].source_rows > ROWS // 2


def staged_rows(window_uri: str) -> dict[str, Any]:
    """Every staged Parquet file of a window, as a table, by relative path."""
    root = Path(window_uri.removeprefix("file://"))
    return {str(p.relative_to(root)): pq.read_table(p) for p in sorted(root.rglob("*.parquet"))}


@pytest.mark.slow
@pytest.mark.parametrize("kill_at", ["extract", "before_merge", "spark", "before_commit"])
def test_a_killed_run_loses_nothing_and_its_retry_completes(
    connections: LocalMariaDB, items: str, pipeline_dirs: dict[str, str], kill_at: str
) -> None:
    pipeline = f"p_{items}"
    runner = DagRunner(load_example_dag(), {"pipeline": pipeline, "tables": f"{items}.*", **pipeline_dirs})
    assert runner.run().state == "success"  # empty first window
    write_changes(connections, items)
    before = stored_state(pipeline)
    assert before is not None
    dates = runner.next_dates()

    assert runner.run_in_child(dates, kill_at) == -9, "the fault was not injected"
    killed = stored_state(pipeline)
    assert killed is not None
    assert killed["checkpoint"] == before["checkpoint"], "the checkpoint moved although the run died"
    assert killed["windows"][-1]["status"] != "merged"
    seq = killed["windows"][-1]["seq"]
    window_dir = Path(pipeline_dirs["staging"], pipeline, f"window={seq}")
    merged = window_merged(pipeline_dirs["target"], f"{items}.items", pipeline, seq)
    print(
        f"killed at {kill_at}: window {seq} staged={(window_dir / 'manifest.json').exists()} merged={merged}"
    )
    if kill_at == "extract":
        assert list(window_dir.rglob("*.parquet")), "the kill came before any Parquet was written"
        assert not (window_dir / "manifest.json").exists()
    elif kill_at == "before_merge":
        assert (window_dir / "manifest.json").exists()
        assert not merged
    elif kill_at == "before_commit":
        assert merged, "the merge had not committed before the kill"

    retried = runner.run(dates)
    assert retried.state == "success"
    assert_target_equals_source(connections, pipeline_dirs["target"], items)
    after = stored_state(pipeline)
    assert after is not None
    window = after["windows"][-1]
    assert window["seq"] == killed["windows"][-1]["seq"], "the retry cut a new window instead of its own"
    assert (window["status"], window["rows"]) == ("merged", window["rows"])
    assert after["checkpoint"]["position"] == window["end"]


def test_clearing_a_run_rereads_the_same_bytes_and_leaves_the_target_unchanged(
    connections: LocalMariaDB, items: str, pipeline_dirs: dict[str, str]
) -> None:
    from deltalake import DeltaTable

    from airflow_provider_binlog.target import table_uri

    pipeline = f"p_{items}"
    runner = DagRunner(load_example_dag(), {"pipeline": pipeline, "tables": f"{items}.*", **pipeline_dirs})
    assert runner.run().state == "success"
    write_changes(connections, items)
    dates = runner.next_dates()
    assert runner.run(dates).state == "success"
    state = stored_state(pipeline)
    assert state is not None
    window = state["windows"][-1]
    first = staged_rows(window["manifest_uri"])
    versions = {
        t: DeltaTable(table_uri(pipeline_dirs["target"], f"{items}.{t}")).version()
        for t in ("items", "notes")
    }
    connections.execute(f"INSERT INTO {items}.notes VALUES (3, 'written after the window')")

    shutil.rmtree(window["manifest_uri"].removeprefix("file://"))  # force a real re-read
    assert runner.run(dates).state == "success"

    again = stored_state(pipeline)
    assert again is not None
    assert again["windows"][-1] == window, "the cleared run changed its window"
    second = staged_rows(window["manifest_uri"])
    assert first.keys() == second.keys()
    for name, table in first.items():
        assert table.equals(second[name]), f"{name}: the re-read staged different rows or order keys"
    assert {
        t: DeltaTable(table_uri(pipeline_dirs["target"], f"{items}.{t}")).version() for t in versions
    } == versions
    assert again["checkpoint"] == state["checkpoint"]


def test_a_second_run_beside_a_running_one_is_turned_away(
    connections: LocalMariaDB, items: str, pipeline_dirs: dict[str, str], capfd: pytest.CaptureFixture[str]
) -> None:
    pipeline = f"p_{items}"
    runner = DagRunner(load_example_dag(), {"pipeline": pipeline, "tables": f"{items}.*", **pipeline_dirs})
    assert runner.run().state == "success"
    write_changes(connections, items)
    # The first run holds its window at the merge until the second run ended: a fast first run could
    # otherwise commit before the second one starts, and nothing would be held.
    first = runner.start_in_child(runner.next_dates(), kill_at="hold_merge")
    try:
        deadline = time.monotonic() + 120
        while len((stored_state(pipeline) or {}).get("windows", [])) < 2:
            assert time.monotonic() < deadline, "the first run never cut its window"
            time.sleep(0.1)
        capfd.readouterr()
        second = runner.run()
        output = capfd.readouterr().out
    finally:
        (Path(pipeline_dirs["staging"]).parent / RELEASE).touch()
        assert first.wait(timeout=600) == 0, "the first run did not commit"
    assert {ti.task_id: str(ti.state) for ti in second.get_task_instances()} == {
        "purge_risk": "success",
        "snapshot": "success",  # the tables have their snapshot: nothing to read, nothing held
        "extract": "failed",
        "merge": "upstream_failed",
        "commit": "upstream_failed",
        "quarantine": "upstream_failed",
    }
    assert "PipelineBusyError" in output
    assert f"pipeline {pipeline!r} is held by run" in output
    assert_target_equals_source(connections, pipeline_dirs["target"], items)
    state = stored_state(pipeline)
    assert state is not None
    assert [w["status"] for w in state["windows"]] == ["merged", "merged"]
    assert state["windows"][-1]["run_id"] != second.run_id
