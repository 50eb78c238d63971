"""The maintenance DAG frees committed staging and removed target files, and keeps what the ledger needs."""

from __future__ import annotations

from pathlib import Path

import pymysql
import pytest
from conftest import REPO, DagRunner, Pipeline, load_module, mark_run, stored_state, task_states, xcom

from airflow_provider_binlog.target import read_table
from airflow_provider_binlog.testing.mariadb import LocalMariaDB
from airflow_provider_binlog.verify import compare_table

pytestmark = pytest.mark.system


def table_files(path: Path) -> set[Path]:
    """Return a table's Parquet files and deletion vector files (a merge-on-read window writes those)."""
    return set(path.rglob("*.parquet")) | set(path.glob("deletion_vector_*.bin"))


def test_maintenance_frees_committed_staging_and_removed_files_but_keeps_an_uncommitted_window(
    connections: LocalMariaDB, scratch_db: str, pipeline_dirs: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    table = f"{scratch_db}.items"
    items = Pipeline(connections, scratch_db, pipeline_dirs)
    sql, pipeline, runner, conf = items.sql, items.name, items.runner, items.conf
    sql(
        "CREATE TABLE items (id INT PRIMARY KEY, v VARCHAR(10))",
        "INSERT INTO items VALUES (1, 'a'), (2, 'b')",
    )
    assert runner.run().state == "success"  # snapshot + an empty window
    for value in ("x", "y"):  # each merge rewrites the table's files: the old ones are removed from the log
        sql(f"UPDATE items SET v = '{value}'", f"INSERT INTO items VALUES ({ord(value)}, '{value}')")
        run = runner.run()
        assert run.state == "success", task_states(run)
    sql("UPDATE items SET v = 'z' WHERE id = 1")
    assert runner.run_in_child(runner.next_dates(), kill_at="before_commit") == -9  # merged, never committed
    state = stored_state(pipeline)
    assert state is not None
    uncommitted = state["windows"][-1]
    assert uncommitted["status"] == "extracted"
    staging = Path(pipeline_dirs["staging"]) / pipeline
    merged = sorted(f"window={w['seq']}" for w in state["windows"] if w["status"] == "merged")
    snapshot = f"snapshot={state['snapshots'][-1]['seq']}"
    assert len(merged) == 3
    doomed = {
        path: path.stat().st_size
        for name in [*merged, snapshot]
        for path in (staging / name).rglob("*")
        if path.is_file()
    }
    delta_dir = Path(pipeline_dirs["target"]) / scratch_db / "items"
    live_before = read_table(pipeline_dirs["target"], table).sort_by("id")
    files_before = table_files(delta_dir)
    size_before = {path: path.stat().st_size for path in files_before}

    monkeypatch.setenv("BINLOG_MAINTENANCE_STAGING_RETENTION_HOURS", "0")
    monkeypatch.setenv("BINLOG_MAINTENANCE_TARGET_RETENTION_HOURS", "0")
    maintenance = DagRunner(load_module(REPO / "example_dags" / "binlog_maintenance.py").dag, conf)
    run = maintenance.run()
    assert run.state == "success", task_states(run)
    report = xcom(run, "maintenance")

    assert sorted(report["staging"]["folders"]) == sorted([*merged, snapshot])
    assert report["staging"]["kept"] == [f"window={uncommitted['seq']}"]
    assert (report["staging"]["files"], report["staging"]["bytes"]) == (len(doomed), sum(doomed.values()))
    assert sorted(p.name for p in staging.iterdir() if "=" in p.name) == [f"window={uncommitted['seq']}"]
    removed = files_before - table_files(delta_dir)
    assert report["target"]["files"] == len(removed) > 0
    assert report["target"]["bytes"] == sum(size_before[p] for p in removed)
    assert read_table(pipeline_dirs["target"], table).sort_by("id").equals(live_before)

    # the uncommitted window is still there for the run that adopts it
    mark_run("binlog_cdc", uncommitted["run_id"], "failed")
    run = runner.run()
    assert run.state == "success", task_states(run)
    state = stored_state(pipeline)
    assert state is not None
    assert next(w for w in state["windows"] if w["seq"] == uncommitted["seq"])["status"] == "merged"
    with pymysql.connect(**connections.connection_kwargs()) as conn:
        assert compare_table(conn, pipeline_dirs["target"], table).matched
