"""Two pipelines built by BinlogPipeline in one DAG, run end to end as the least-privileged user the connection
Test recommends: each takes its own tables and state."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import DagRunner, load_module, stored_state, task_states

pytestmark = pytest.mark.system

DAGS = Path(__file__).with_name("dags")


@pytest.mark.slow  # two pipelines, two runs with Spark merges
def test_two_pipelines_of_one_dag_flow_side_by_side_into_their_own_targets(
    connections: Any,
    airflow_db: object,
    least_privileged: None,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import pymysql

    from airflow_provider_binlog.verify import compare_table

    with connections.scratch_database("shop") as shop, connections.scratch_database("crm") as crm:
        for db in (shop, crm):
            connections.execute(
                "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(60))",
                f"INSERT INTO t VALUES (1, '{db}-a'), (2, '{db}-b')",
                database=db,
            )
        roots = {db: (str(tmp_path / db / "staging"), str(tmp_path / db / "target")) for db in (shop, crm)}
        settings = [
            {"pipeline": f"p_{db}", "tables": f"{db}.*", "staging": staging, "target": target}
            for db, (staging, target) in roots.items()
        ]
        monkeypatch.setenv("BINLOG_TWO_PIPELINES", json.dumps(settings))  # read whenever the file is parsed
        runner = DagRunner(load_module(DAGS / "two_pipelines.py").dag, {})
        first = runner.run()  # both snapshots, then both first windows
        assert first.state == "success", task_states(first)
        for db in (shop, crm):
            connections.execute(f"UPDATE t SET v = '{db}-updated' WHERE id = 1", "INSERT INTO t VALUES (3, 'c')",
                                database=db)  # fmt: skip
        connections.execute("DELETE FROM t WHERE id = 2", database=crm)
        second = runner.run()
        assert second.state == "success", task_states(second)

        assert sorted(task_states(second)) == sorted(
            f"p_{db}.{task}"
            for db in (shop, crm)
            for task in ("purge_risk", "snapshot", "extract", "merge", "commit", "quarantine")
        )
        with pymysql.connect(**connections.connection_kwargs()) as conn:
            for db, (_, target) in roots.items():
                result = compare_table(conn, target, f"{db}.t")
                assert result.matched, str(result)
                assert [p.name for p in Path(target).iterdir()] == [
                    db
                ]  # each target holds its own tables only
        for db in (shop, crm):
            state = stored_state(f"p_{db}")
            assert state is not None
            assert state["checkpoint"]["window"] == state["windows"][-1]["seq"]
