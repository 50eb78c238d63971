"""Snapshots through the example DAGs: initial load under concurrent writes, interrupt and resume,
re-snapshot of one table while windows keep merging (the shop schema has a composite key)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pymysql
import pytest
from conftest import DagRunner, Pipeline, load_module, mark_run, stored_state, task_states

from airflow_provider_binlog.testing.mariadb import LocalMariaDB
from airflow_provider_binlog.testing.workload import SHOP_TABLES, ShopWorkload, create_shop_schema

pytestmark = pytest.mark.system

REPO = Path(__file__).resolve().parents[2]


class ShopPipeline(Pipeline):
    """The example DAG over a shop database that already holds rows when the pipeline starts."""

    def workload(self, seed: int) -> ShopWorkload:
        return ShopWorkload(
            connect=lambda: pymysql.connect(**self.server.connection_kwargs(autocommit=False)),
            db=self.db,
            seed=seed,
            first_number=seed * 1_000_000,
        )

    def snapshots(self) -> list[dict[str, Any]]:
        state = stored_state(self.name)
        assert state is not None
        return list(state["snapshots"])

    def snapshot_manifest(self, seq: int) -> dict[str, Any]:
        return dict(json.loads((self.staging / self.name / f"snapshot={seq}" / "manifest.json").read_text()))

    def counts(self) -> dict[str, int]:
        return {t: int(self.sql(f"SELECT COUNT(*) FROM `{t}`")[0][0]) for t in SHOP_TABLES}


@pytest.fixture
def shop(
    connections: LocalMariaDB,
    airflow_db: object,
    pipeline_dirs: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
):
    monkeypatch.setenv("BINLOG_CDC_SNAPSHOT_CHUNK_ROWS", "50")
    db = f"snap_{uuid.uuid4().hex[:8]}"
    with pymysql.connect(**connections.connection_kwargs()) as conn:
        create_shop_schema(conn, db)
    pipeline = ShopPipeline(connections, db, pipeline_dirs)
    pipeline.workload(seed=3).run(1500)  # rows that exist before the pipeline does
    yield pipeline
    connections.execute(f"DROP DATABASE IF EXISTS `{db}`")


def test_snapshot_under_concurrent_writes_ends_equal_to_the_source(shop: ShopPipeline) -> None:
    before = shop.counts()
    workload = shop.workload(seed=4)
    workload.start(100_000, pause_seconds=0.002)
    try:
        run = shop.runner.run()  # snapshot (chunks read while the workload writes), then the first window
        assert run.state == "success", task_states(run)
        second = shop.runner.run()
        assert second.state == "success", task_states(second)
    finally:
        written = workload.stop()
    shop.run_window()
    assert shop.mismatches(*SHOP_TABLES) == []
    (snapshot,) = shop.snapshots()
    manifest = shop.snapshot_manifest(snapshot["seq"])
    assert snapshot["status"] == "merged"
    assert snapshot["reason"] == "initial"
    assert snapshot["rows"] == manifest["stats"]["rows"] >= sum(before.values())
    assert manifest["stats"]["chunks"] >= 10
    assert manifest["stats"]["read_tasks"] == 2
    # the binlog moved while the chunks were read: the writes really raced with the snapshot
    low, high = manifest["watermarks"]["lowest"], manifest["watermarks"]["highest"]
    assert (low["file"], low["pos"]) < (high["file"], high["pos"])
    assert written["rekey"] > 0
    assert written["delete_items"] > 0
    assert sum(written.values()) > 100
    state = stored_state(shop.name)
    assert state is not None
    first_window = state["windows"][0]
    assert first_window["start"] == snapshot["start"]
    assert first_window["seq"] == snapshot["seq"] + 1
    assert shop.runner.run().state == "success"  # a later run: every table has its snapshot
    assert len(shop.snapshots()) == 1


def test_an_interrupted_snapshot_resumes_after_its_finished_chunks(
    shop: ShopPipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The killed task's Spark job goes on in the Connect server until it ends, so chunks must be left
    # unread when the test looks: with 50-row chunks (15 of them) a read task reusing its connections read
    # them all before the watcher's kill had landed. 5-row chunks: about 300 of them.
    monkeypatch.setenv("BINLOG_CDC_SNAPSHOT_CHUNK_ROWS", "5")
    dates = shop.runner.next_dates()
    assert shop.runner.run_in_child(dates, kill_at="snapshot") == -9
    (snapshot,) = shop.snapshots()
    assert snapshot["status"] == "running"
    folder = shop.staging / shop.name / f"snapshot={snapshot['seq']}"
    finished = {p: p.stat().st_mtime_ns for p in folder.rglob("chunk-*.json")}
    assert len(finished) >= 3
    assert not (folder / "manifest.json").exists()
    shop.workload(seed=5).run(200)  # the source moves on before the retry
    run = shop.runner.run(dates)  # the same run again: same snapshot, same plan
    assert run.state == "success", task_states(run)
    assert {p: p.stat().st_mtime_ns for p in finished} == finished  # finished chunks were not read again
    (again,) = shop.snapshots()
    assert again["seq"] == snapshot["seq"]
    assert again["status"] == "merged"
    manifest = shop.snapshot_manifest(snapshot["seq"])
    assert manifest["stats"]["chunks"] > len(finished)
    shop.run_window()
    assert shop.mismatches(*SHOP_TABLES) == []


def test_a_snapshot_whose_run_died_is_taken_over_by_the_next_run_never_skipped(shop: ShopPipeline) -> None:
    assert shop.runner.run_in_child(shop.runner.next_dates(), kill_at="snapshot") == -9
    (dead,) = shop.snapshots()
    assert dead["status"] == "running"
    assert dead["dag_id"] == "binlog_cdc"
    # While Airflow still shows the holder as running, the next run waits: its snapshot task fails busy.
    waiting = shop.runner.run()
    assert task_states(waiting)["snapshot"] == "failed"
    assert task_states(waiting).get("extract") != "success"
    assert shop.snapshots() == [dead]
    # Once the holder run has ended (the scheduler fails a run whose worker was killed), the next run
    # takes the snapshot over: same seq, finished chunks kept, rows loaded.
    mark_run("binlog_cdc", dead["run_id"], "failed")
    shop.workload(seed=9).run(200)
    run = shop.runner.run()
    assert run.state == "success", task_states(run)
    (taken,) = shop.snapshots()
    assert taken["seq"] == dead["seq"]
    assert taken["status"] == "merged"
    assert [(h["from_run"], h["holder_state"]) for h in taken["handovers"]] == [(dead["run_id"], "failed")]
    assert taken["run_id"] == run.run_id
    shop.run_window()
    assert shop.mismatches(*SHOP_TABLES) == []


def test_resnapshot_of_one_table_while_windows_keep_merging(shop: ShopPipeline) -> None:
    shop.run_window()
    # changes the binlog never delivers to this pipeline: written with binary logging off for the session
    shop.sql(
        "SET SESSION sql_log_bin = 0",
        "DELETE FROM order_items WHERE line_no = 1",
        "UPDATE order_items SET qty = qty + 1000",
        "SET SESSION sql_log_bin = 1",
    )
    assert shop.mismatches("order_items") != []
    resnapshot = DagRunner(
        load_module(REPO / "example_dags" / "binlog_resnapshot.py").dag,
        {"pipeline": shop.name, "tables": f"{shop.db}.order_items", "mode": "requested", **_dirs(shop)},
    )
    workload = shop.workload(seed=6)
    workload.start(100_000, pause_seconds=0.002)
    child = resnapshot.start_in_child(resnapshot.next_dates())
    runs = 0
    try:
        while runs < 2 or (child.poll() is None and runs < 4):
            run = shop.runner.run()
            assert run.state == "success", task_states(run)
            runs += 1
    finally:
        workload.stop()
    assert child.wait(timeout=600) == 0
    shop.run_window()
    assert shop.mismatches(*SHOP_TABLES) == []
    initial, again = shop.snapshots()
    assert again["tables"] == [f"{shop.db}.order_items"]
    assert again["reason"] == "requested"
    assert again["status"] == "merged"
    state = stored_state(shop.name)
    assert state is not None
    merged_during = [w for w in state["windows"] if w["seq"] > again["seq"]]
    assert merged_during, "no window was cut while the re-snapshot ran"


def _dirs(shop: ShopPipeline) -> dict[str, str]:
    return {"staging": str(shop.staging), "target": shop.target}


def test_after_a_purge_a_purged_mode_resnapshot_puts_the_pipeline_back_on_its_feet(
    shop: ShopPipeline,
) -> None:
    shop.run_window()
    shop.workload(seed=7).run(300)  # changes the pipeline will never read from the binlog
    shop.server.purge_binlogs_before_current()
    stuck = shop.runner.run()
    assert task_states(stuck)["purge_risk"] == "failed"  # the guard sees the purge before anything is read
    assert task_states(stuck)["extract"] == "upstream_failed"
    assert shop.mismatches(*SHOP_TABLES) != []
    recovery = DagRunner(
        load_module(REPO / "example_dags" / "binlog_resnapshot.py").dag,
        {"pipeline": shop.name, "tables": f"{shop.db}.*", "mode": "purged", **_dirs(shop)},
    )
    run = recovery.run()
    assert run.state == "success", task_states(run)
    shop.workload(seed=8).run(100)
    shop.run_window()
    assert shop.mismatches(*SHOP_TABLES) == []
    snapshot = shop.snapshots()[-1]
    assert snapshot["reason"] == "purged"
    assert sorted(snapshot["tables"]) == sorted(f"{shop.db}.{t}" for t in SHOP_TABLES)
