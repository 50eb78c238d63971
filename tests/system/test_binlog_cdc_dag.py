from __future__ import annotations

import uuid
from typing import Any

import pymysql
import pytest
from conftest import REPO, DagRunner, Pipeline, load_example_dag, load_module, stored_state, xcom
from deltalake import DeltaTable
from sqlalchemy import select

from airflow_provider_binlog.assets import table_asset_uri
from airflow_provider_binlog.contract.delta_log import file_vectors
from airflow_provider_binlog.contract.uris import table_uri
from airflow_provider_binlog.testing.mariadb import LocalMariaDB
from airflow_provider_binlog.testing.workload import SHOP_TABLES, ShopWorkload, create_shop_schema
from airflow_provider_binlog.verify import compare_table

pytestmark = pytest.mark.system


def task_states(run: Any) -> dict[str, str]:
    return {ti.task_id: str(ti.state) for ti in run.get_task_instances()}


@pytest.fixture
def shop(connections: LocalMariaDB, airflow_db: object) -> str:
    name = f"shop_{uuid.uuid4().hex[:8]}"
    with pymysql.connect(**connections.connection_kwargs()) as conn:
        create_shop_schema(conn, name)
    return name


@pytest.mark.parametrize("write_mode", ["copy_on_write", "merge_on_read"])
def test_example_dag_keeps_the_target_equal_to_the_source(
    connections: LocalMariaDB, shop: str, pipeline_dirs: dict[str, str], write_mode: str
) -> None:
    pipeline = f"p_{shop}"
    settings = {"pipeline": pipeline, "tables": f"{shop}.*", "write_mode": write_mode, **pipeline_dirs}
    runner = DagRunner(load_example_dag(), settings)
    assert runner.run().state == "success"  # a new pipeline starts at the head: empty first window
    workload = ShopWorkload(
        connect=lambda: pymysql.connect(**connections.connection_kwargs(autocommit=False)), db=shop, seed=11
    )
    workload.start(50_000, pause_seconds=0.005)
    try:
        for _ in range(3):
            run = runner.run()
            assert run.state == "success", task_states(run)
    finally:
        counts = workload.stop()
    assert runner.run().state == "success"
    assert sum(counts.values()) > 200
    with pymysql.connect(**connections.connection_kwargs()) as conn:
        results = [compare_table(conn, pipeline_dirs["target"], f"{shop}.{t}") for t in SHOP_TABLES]
    assert [str(r) for r in results if not r.matched] == []
    assert all(r.source_rows > 0 for r in results)
    state = stored_state(pipeline)
    assert state is not None
    assert state["checkpoint"]["window"] == state["windows"][-1]["seq"] == state["windows"][0]["seq"] + 4
    assert [w["status"] for w in state["windows"]] == ["merged"] * 5
    windows = state["windows"]
    assert all(a["end"] == b["start"] for a, b in zip(windows, windows[1:], strict=False))
    assert state["checkpoint"]["position"] == windows[-1]["end"]
    vectors = [
        file_vectors(DeltaTable(table_uri(pipeline_dirs["target"], f"{shop}.{t}"))) for t in SHOP_TABLES
    ]
    assert any(vectors) == (write_mode == "merge_on_read")  # updates and deletes of existing rows


def asset_events(uri: str) -> list[dict[str, Any]]:
    """Return the extras of the Asset events recorded for ``uri``, oldest first."""
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session

    with create_session() as session:
        events = session.scalars(
            select(AssetEvent).join(AssetModel, AssetEvent.asset_id == AssetModel.id).where(AssetModel.uri == uri)
            .order_by(AssetEvent.id)
        )  # fmt: skip
        return [dict(event.extra) for event in events]


def queued_dags(uri: str) -> list[str]:
    """Return the DAGs the scheduler will run because ``uri`` had an event (its asset-triggered queue)."""
    from airflow.models.asset import AssetDagRunQueue, AssetModel
    from airflow.utils.session import create_session

    with create_session() as session:
        query = select(AssetDagRunQueue.target_dag_id).join(
            AssetModel, AssetDagRunQueue.asset_id == AssetModel.id
        ).where(AssetModel.uri == uri)  # fmt: skip
        return sorted(session.scalars(query))


def unpause(dag_id: str) -> None:
    """Unpause a DAG the way ``airflow dags unpause`` does (Asset events queue runs only of unpaused DAGs)."""
    from airflow.models.dag import DagModel
    from airflow.utils.session import create_session

    with create_session() as session:
        session.get(DagModel, dag_id).is_paused = False


def test_a_commit_runs_the_downstream_dag_of_the_table_it_changed(
    connections: LocalMariaDB, scratch_db: str, pipeline_dirs: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    table = f"{scratch_db}.items"
    # the downstream example DAG is parsed (by dag.test's sync of the DAG folder) for this table and target
    monkeypatch.setenv("BINLOG_DOWNSTREAM_TABLE", table)
    monkeypatch.setenv("BINLOG_CDC_TARGET", pipeline_dirs["target"])
    items = Pipeline(connections, scratch_db, pipeline_dirs)
    items.sql("CREATE TABLE items (id INT PRIMARY KEY, v VARCHAR(10))", "INSERT INTO items VALUES (1, 'a')")
    pipeline, runner = items.name, items.runner
    assert runner.run().state == "success"  # the snapshot loads the row and announces the table
    uri = table_asset_uri(pipeline_dirs["target"], table)
    assert uri == f"file://{pipeline_dirs['target']}/{scratch_db}/items"
    assert [(e["kind"], e["rows"]) for e in asset_events(uri)] == [("snapshot", 1)]
    unpause("binlog_downstream")  # dag.test synced it (scheduled on this table's Asset) with binlog_cdc
    items.sql("INSERT INTO items VALUES (2, 'b'), (3, 'c')", "UPDATE items SET v = 'z' WHERE id = 1")
    run = runner.run()
    assert run.state == "success", task_states(run)
    state = stored_state(pipeline)
    assert state is not None
    window = state["windows"][-1]
    snapshot_event, window_event = asset_events(uri)
    assert window_event["kind"] == "window"
    assert (window_event["pipeline"], window_event["table"], window_event["seq"]) == (
        pipeline,
        table,
        window["seq"],
    )
    assert (window_event["rows"], window_event["ops"]) == (3, {"c": 2, "u": 1})
    assert (window_event["start"], window_event["end"]) == (window["start"], window["end"])
    assert window_event["last_commit_ts"] == window["last_commit_ts"]
    assert window_event["delta_version"] > snapshot_event["delta_version"]
    assert queued_dags(uri) == ["binlog_downstream"]  # the scheduler's next loop creates its run

    downstream = load_module(REPO / "example_dags" / "binlog_downstream.py").dag
    downstream_run = downstream.test()
    assert downstream_run.state == "success", task_states(downstream_run)
    report = xcom(downstream_run, "report_changes")
    assert report["live_rows"] == 3
    assert report["latest"] == window_event
