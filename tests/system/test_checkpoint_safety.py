from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from typing import Any

import pymysql
import pytest
from conftest import REPO, DagRunner, load_module, stored_state

from airflow_provider_binlog.testing.mariadb import LocalMariaDB
from airflow_provider_binlog.verify import compare_table

pytestmark = pytest.mark.system


@pytest.fixture
def items(connections: LocalMariaDB, airflow_db: object) -> Iterator[str]:
    db = f"d_{uuid.uuid4().hex[:8]}"
    connections.execute(
        f"CREATE DATABASE {db}", f"CREATE TABLE {db}.items (id INT PRIMARY KEY, v VARCHAR(20))"
    )
    yield db
    connections.execute(f"DROP DATABASE {db}")


@pytest.fixture
def dags() -> Iterator[Any]:
    module = load_module(REPO / "tests" / "system" / "dags" / "checkpoint_dags.py")
    yield module
    module.ON_MERGE_RETRY.clear()


def test_commit_refuses_a_window_that_was_not_merged(
    connections: LocalMariaDB, items: str, pipeline_dirs: dict[str, str], dags: Any
) -> None:
    pipeline = f"p_{items}"
    runner = DagRunner(
        dags.without_merge, {"pipeline": pipeline, "tables": f"{items}.items", **pipeline_dirs}
    )
    assert runner.run().state == "success"  # empty first window: nothing to verify
    before = stored_state(pipeline)
    connections.execute(f"INSERT INTO {items}.items VALUES (1, 'a')")
    run = runner.run()
    assert run.state == "failed"
    assert {ti.task_id: str(ti.state) for ti in run.get_task_instances()}["commit"] == "failed"
    after = stored_state(pipeline)
    assert after["checkpoint"] == before["checkpoint"]
    assert after["windows"][-1]["status"] == "extracted"


def test_a_failed_merge_moves_nothing_and_its_retry_remerges_the_same_window(
    connections: LocalMariaDB,
    items: str,
    pipeline_dirs: dict[str, str],
    dags: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pipeline = f"p_{items}"
    local_spark = '{"conn_type": "spark", "host": "local[2]"}'
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_FLAKY", local_spark)
    seen: dict[str, Any] = {}

    def repair_spark(context: Any) -> None:
        from airflow_provider_binlog.pipeline.state import StateManager

        seen["state_at_failure"] = StateManager(pipeline).load()
        os.environ["AIRFLOW_CONN_SPARK_FLAKY"] = local_spark

    dags.ON_MERGE_RETRY.append(repair_spark)
    runner = DagRunner(dags.flaky_merge, {"pipeline": pipeline, "tables": f"{items}.items", **pipeline_dirs})
    assert runner.run().state == "success"
    checkpoint = stored_state(pipeline)["checkpoint"]
    connections.execute(
        f"INSERT INTO {items}.items VALUES (1, 'a'), (2, 'b')",
        f"UPDATE {items}.items SET v = 'c' WHERE id = 1",
    )
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_FLAKY", '{"conn_type": "spark", "host": "bogus://no-such-master"}')
    run = runner.run()
    assert run.state == "success"
    failed_state = seen["state_at_failure"]
    assert failed_state.checkpoint.model_dump(mode="json") == checkpoint
    assert failed_state.windows[-1].status == "extracted"
    final = stored_state(pipeline)
    assert final["checkpoint"]["window"] == final["windows"][-1]["seq"] == final["windows"][0]["seq"] + 1
    with pymysql.connect(**connections.connection_kwargs()) as conn:
        result = compare_table(conn, pipeline_dirs["target"], f"{items}.items")
    assert result.matched, str(result)
