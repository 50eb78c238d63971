"""Guarantee 14 of docs/guarantees.md: a dead run never wedges the pipeline.

One window dies four times, each time with a new run id as the scheduler's next run would have: in its
extract, after its extract, in the Spark merge after one table's commit, and after the merge before the
commit. Each next run adopts the window from the dead holder (failed, deleted, failed, succeeded without
its commit), while a holder Airflow still shows running turns the next run away. The window is merged
exactly once per table, the checkpoint moves once, and the target equals the source.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import Pipeline, delete_run, mark_run, stored_state, task_states

from airflow_provider_binlog.contract.delta import window_app_id
from airflow_provider_binlog.target import window_merged
from airflow_provider_binlog.testing.mariadb import LocalMariaDB

pytestmark = [pytest.mark.system, pytest.mark.slow]

ROWS = 20_000
"""Row changes of the window: more than one Parquet batch (8192 rows), so a kill in the extract lands
between two."""
TABLES = ("items", "notes")


@pytest.fixture
def pipeline(connections: LocalMariaDB, scratch_db: str, pipeline_dirs: dict[str, str]) -> Pipeline:
    connections.execute(
        f"CREATE TABLE {scratch_db}.items (id INT PRIMARY KEY, v VARCHAR(40), n BIGINT)",
        f"CREATE TABLE {scratch_db}.notes (id INT PRIMARY KEY, body TEXT)",
    )
    return Pipeline(connections, scratch_db, pipeline_dirs)


def window_commits(pipeline: Pipeline, table: str, seq: int) -> int:
    """Count the commits in the table's Delta log that record window ``seq`` (its app transaction)."""
    app_id = window_app_id(pipeline.name, seq)
    log = Path(pipeline.target, pipeline.db, table, "_delta_log")
    commits = 0
    for path in sorted(log.glob("*.json")):
        actions = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        commits += any(a.get("txn", {}).get("appId") == app_id for a in actions)
    return commits


def held_window(pipeline: Pipeline, before: dict[str, Any]) -> dict[str, Any]:
    """Return the newest window, checking that the ledger and checkpoint did not move past ``before``."""
    state = stored_state(pipeline.name)
    assert state is not None
    assert state["checkpoint"] == before["checkpoint"], "the checkpoint moved although no run committed"
    assert len(state["windows"]) == len(before["windows"]) + 1, "a second window was cut"
    window = dict(state["windows"][-1])
    assert window["status"] != "merged"
    return window


def handovers(window: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [(h["from_run"], h["to_run"], h["holder_state"]) for h in window["handovers"]]


def test_a_window_whose_run_died_is_adopted_by_the_next_run_and_merged_exactly_once(
    pipeline: Pipeline, capfd: pytest.CaptureFixture[str]
) -> None:
    runner, dag_id = pipeline.runner, pipeline.dag.dag_id
    pipeline.run_window()  # empty tables: snapshot and first window start no Spark job
    pipeline.sql(
        f"INSERT INTO items SELECT seq, CONCAT('v', seq), seq * 7 FROM seq_1_to_{ROWS}",
        "UPDATE items SET v = 'updated', n = n + 1 WHERE id % 5 = 0",
        "DELETE FROM items WHERE id % 11 = 0",
        f"UPDATE items SET id = id + {ROWS} WHERE id BETWEEN 100 AND 120",
        "INSERT INTO notes VALUES (1, 'one'), (2, 'two')",
        "UPDATE notes SET body = 'uno' WHERE id = 1",
    )
    before = stored_state(pipeline.name)
    assert before is not None

    # 1. The first holder dies in its extract: Parquet of the window's first batch, no manifest.
    assert runner.run_in_child(runner.next_dates(), kill_at="extract") == -9
    window = held_window(pipeline, before)
    seq, first_holder = window["seq"], window["run_id"]
    half_written = pipeline.staging / pipeline.name / f"window={seq}"
    assert window["status"] == "cut"
    assert list(half_written.rglob("*.parquet"))
    assert not (half_written / "manifest.json").exists()

    # 2. While Airflow still shows it running, the next run is turned away and changes nothing.
    capfd.readouterr()
    busy = runner.run()
    output = capfd.readouterr().out
    assert task_states(busy)["extract"] == "failed"
    assert "PipelineBusyError" in output
    assert f"is held by run {first_holder!r}: its window {seq} is cut" in output
    assert "Airflow shows that run as running" in output
    assert held_window(pipeline, before) == window

    # 3. Once it has failed, the next run adopts the window, reads it into a fresh folder, and dies
    #    after its extract.
    mark_run(dag_id, first_holder, "failed")
    assert runner.run_in_child(runner.next_dates(), kill_at="before_merge") == -9
    window = held_window(pipeline, before)
    second_holder = window["run_id"]
    assert window["seq"] == seq
    assert window["status"] == "extracted"
    assert window["manifest_uri"].endswith(f"/window={seq}.handover-1")
    assert handovers(window) == [(first_holder, second_holder, "failed")]
    assert not (half_written / "manifest.json").exists(), "the dead run's half-written folder was used"
    manifest = Path(window["manifest_uri"].removeprefix("file://"), "manifest.json")
    staged_at = manifest.stat().st_mtime_ns

    # 4. Once that run is deleted, the next run adopts the staged window as it is and dies in the Spark
    #    merge, after the window's commit to one table and before the other's.
    delete_run(dag_id, second_holder)
    assert runner.run_in_child(runner.next_dates(), kill_at="first_commit") == -9
    window = held_window(pipeline, before)
    third_holder = window["run_id"]
    assert handovers(window)[-1] == (second_holder, third_holder, "missing")
    merged = {t: window_merged(pipeline.target, f"{pipeline.db}.{t}", pipeline.name, seq) for t in TABLES}
    assert sorted(merged.values()) == [False, True], f"the kill did not land between two tables: {merged}"

    # 5. Once it has failed, the health summary says what happens next; the next run adopts the window,
    #    merges only the table still missing it, and dies before its commit.
    mark_run(dag_id, third_holder, "failed")
    code, summary = health(pipeline, dag_id, capfd)
    print(summary)
    assert code == 1  # a run failed: someone should know why
    assert f"open window {seq} (extracted): held by run {third_holder} (failed)" in summary
    assert "the next run of the pipeline adopts it" in summary
    assert runner.run_in_child(runner.next_dates(), kill_at="before_commit") == -9
    window = held_window(pipeline, before)
    fourth_holder = window["run_id"]
    assert handovers(window)[-1] == (third_holder, fourth_holder, "failed")
    assert all(window_merged(pipeline.target, f"{pipeline.db}.{t}", pipeline.name, seq) for t in TABLES)

    # 6. A run that succeeded without its commit has ended too: the next run adopts and commits.
    mark_run(dag_id, fourth_holder, "success")
    run = runner.run()
    assert run.state == "success", task_states(run)
    state = stored_state(pipeline.name)
    assert state is not None
    window = state["windows"][-1]
    assert (window["seq"], window["status"], window["run_id"]) == (seq, "merged", run.run_id)
    assert handovers(window) == [
        (first_holder, second_holder, "failed"),
        (second_holder, third_holder, "missing"),
        (third_holder, fourth_holder, "failed"),
        (fourth_holder, run.run_id, "success"),
    ]
    assert len(state["windows"]) == len(before["windows"]) + 1
    assert state["checkpoint"]["position"] == window["end"]
    assert state["checkpoint"]["window"] == seq
    assert manifest.stat().st_mtime_ns == staged_at, "the staged window was read again after step 3"
    assert not (pipeline.staging / pipeline.name / f"window={seq}.handover-2").exists()
    assert {t: window_commits(pipeline, t, seq) for t in TABLES} == {t: 1 for t in TABLES}
    assert pipeline.mismatches(*TABLES) == []
    assert int(pipeline.sql("SELECT COUNT(*) FROM items")[0][0]) > ROWS // 2
    code, summary = health(pipeline, dag_id, capfd)
    print(summary)
    assert f"last merged window: {seq} by run {run.run_id}" in summary
    assert "open window" not in summary


def health(pipeline: Pipeline, dag_id: str, capfd: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """Return the exit code and text of ``admin health`` for the pipeline, as an operator runs it."""
    from airflow_provider_binlog import admin

    capfd.readouterr()
    code = admin.main(["health", "--pipeline", pipeline.name, "--dag-id", dag_id])
    return code, capfd.readouterr().out
