from __future__ import annotations

import uuid
from typing import Any

import pymysql
import pytest
from conftest import DagRunner, load_example_dag, stored_state

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


def test_example_dag_keeps_the_target_equal_to_the_source(
    connections: LocalMariaDB, shop: str, pipeline_dirs: dict[str, str]
) -> None:
    pipeline = f"p_{shop}"
    runner = DagRunner(load_example_dag(), {"pipeline": pipeline, "tables": f"{shop}.*", **pipeline_dirs})
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
