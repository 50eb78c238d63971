"""The example DAG with a deferrable snapshot and merge: the tasks defer and complete through the triggerer.

``dag.test()`` (Airflow 3.3) runs a deferred task's trigger in line (``_run_inline_trigger``) and then resumes the
task with the event, as a triggerer and a worker would; ``airflow standalone`` runs them in its real triggerer.
The Spark work runs on the shared Spark Connect server.
"""

from __future__ import annotations

import re
import uuid
from pathlib import Path
from typing import Any

import deltalake
import pyarrow.compute as pc
import pymysql
import pytest
from conftest import DagRunner, load_example_dag, stored_state, task_states
from test_under_scheduler import running_standalone

from airflow_provider_binlog.contract.delta import COMMIT_WINDOW_KEY
from airflow_provider_binlog.contract.history import IS_CURRENT_COLUMN, scd2_uri
from airflow_provider_binlog.contract.uris import table_uri
from airflow_provider_binlog.history import read_changes, verify_history
from airflow_provider_binlog.target import read_table
from airflow_provider_binlog.testing.mariadb import LocalMariaDB
from airflow_provider_binlog.testing.workload import SHOP_TABLES, ShopWorkload, create_shop_schema
from airflow_provider_binlog.verify import compare_table

pytestmark = pytest.mark.system


def test_deferred_snapshot_and_merges_keep_the_target_equal_to_the_source(
    connections: LocalMariaDB,
    airflow_db: object,
    pipeline_dirs: dict[str, str],
    capfd: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    db = f"defer_{uuid.uuid4().hex[:8]}"
    with pymysql.connect(**connections.connection_kwargs()) as conn:
        create_shop_schema(conn, db)

    def workload(seed: int) -> ShopWorkload:
        return ShopWorkload(
            connect=lambda: pymysql.connect(**connections.connection_kwargs(autocommit=False)),
            db=db,
            seed=seed,
            first_number=seed * 1_000_000,
        )

    workload(seed=5).run(300)  # rows the snapshot reads
    dag = load_example_dag(
        {"BINLOG_CDC_HISTORY": "changelog,scd2"}
    )  # history is written beside deferred merges
    for task_id in ("snapshot", "merge"):
        dag.get_task(task_id).deferrable = True
        dag.get_task(
            task_id
        ).defer_after_seconds = 0  # these small actions would end while the worker watches
    dag.get_task("merge").driver_max_rows = 0  # on Spark: these small windows would be merged in the driver
    pipeline = f"p_{db}"
    runner = DagRunner(dag, {"pipeline": pipeline, "tables": f"{db}.*", **pipeline_dirs})
    capfd.readouterr()

    first = runner.run()  # the snapshot, then an empty first window
    assert first.state == "success", task_states(first)
    workload(seed=6).run(200)
    second = runner.run()  # a window with changes in every table
    assert second.state == "success", task_states(second)

    out = capfd.readouterr().out
    deferrals = re.findall(
        r"Deferring while Spark Connect runs (reading \d+ chunks|window \d+'s new files)", out
    )
    resumes = re.findall(r"Spark Connect operation \S+ finished; finishing the task", out)
    assert any(d.startswith("reading") for d in deferrals), out[-3000:]
    # The snapshot is every table's first load (ADR 0026: written without a merge, so nothing of it defers
    # but the chunk read); the second window changes every table and defers once per table.
    assert sum(d.startswith("window") for d in deferrals) >= len(SHOP_TABLES), deferrals
    assert len(resumes) == len(deferrals)
    inline = [r for r in caplog.records if r.getMessage() == "[DAG TEST] running trigger in line"]
    assert len(inline) == len(deferrals)  # each deferral went through the trigger
    with pymysql.connect(**connections.connection_kwargs()) as conn:
        results = [compare_table(conn, pipeline_dirs["target"], f"{db}.{t}") for t in SHOP_TABLES]
    assert [str(r) for r in results if not r.matched] == []
    state = stored_state(pipeline)
    assert state is not None
    assert state["checkpoint"]["window"] == state["windows"][-1]["seq"]
    assert [w["status"] for w in state["windows"]] == ["merged"] * len(state["windows"])
    for table in SHOP_TABLES:  # the history thread never defers: each window is in both history tables, once
        name = f"{db}.{table}"
        report = verify_history(pipeline_dirs["target"], name)
        assert report.ok, str(report)
        changes = read_changes(pipeline_dirs["target"], name)
        live = read_table(pipeline_dirs["target"], name)
        assert changes.num_rows > live.num_rows, name
        scd2 = deltalake.DeltaTable(scd2_uri(pipeline_dirs["target"], name)).to_pyarrow_table()
        assert pc.sum(scd2[IS_CURRENT_COLUMN]).as_py() == live.num_rows, name


def test_deferred_merge_and_snapshot_under_a_real_scheduler_and_triggerer(
    mariadb: LocalMariaDB, spark_connect: Any, tmp_path: Path
) -> None:
    deferrable = {
        "AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE": "True",  # the snapshot and merge take their default from it
        "AIRFLOW__BINLOG__DEFER_AFTER_SECONDS": "0",  # defer at once: these small actions end within seconds
        "AIRFLOW__BINLOG__MERGE_DRIVER_MAX_ROWS": "0",  # on Spark: these small windows would merge in the driver
        "AIRFLOW_CONN_SPARK_DEFAULT": spark_connect.connection_json(),
        # Airflow 3.3.2 race (ADR 0024, "Consequences"): when the trigger fires before the deferring worker's
        # exit is reported, the scheduler marks the resumed task up_for_retry; its retry finds the work done.
        "AIRFLOW__CORE__DEFAULT_TASK_RETRY_DELAY": "5",
    }
    with running_standalone(mariadb, tmp_path, airflow_env=deferrable) as (server, db, target):
        mariadb.execute(f"INSERT INTO {db}.items VALUES (1, '{{\"a\": 1}}', 1.5), (2, NULL, -2.25)")
        assert server.run_dag("binlog_cdc") == "success", server.tail()  # snapshot of 2 rows, empty window
        mariadb.execute(
            f"INSERT INTO {db}.items VALUES (3, '[]', 0)",
            f"UPDATE {db}.items SET d = 9.125 WHERE id = 1",
            f"DELETE FROM {db}.items WHERE id = 2",
        )
        assert server.run_dag("binlog_cdc") == "success", server.tail()
        logs = {
            str(path.relative_to(server.home / "logs")): path.read_text()
            for path in (server.home / "logs").rglob("attempt=*.log")
            if "task_id=snapshot" in str(path) or "task_id=merge" in str(path)
        }
        with pymysql.connect(**mariadb.connection_kwargs()) as conn:
            result = compare_table(conn, str(target), f"{db}.items")
        history = deltalake.DeltaTable(table_uri(str(target), f"{db}.items")).history()
    windows = [c[COMMIT_WINDOW_KEY] for c in history if COMMIT_WINDOW_KEY in c]
    assert len(windows) == len(set(windows)), windows  # each window (and the snapshot) committed once
    assert result.matched, str(result)
    assert result.source_rows == 2
    text = "\n".join(logs.values())
    assert "Deferring while Spark Connect runs reading" in text, sorted(logs)
    assert "Deferring while Spark Connect runs window" in text, sorted(logs)
    assert "finished; finishing the task" in text, sorted(logs)  # the triggerer resumed a task
    for task, attempts in _attempts_by_task(logs).items():
        deferred = sum(log.count("Deferring while Spark Connect runs") for log in attempts)
        resumed = sum(log.count("finished; finishing the task") for log in attempts)
        # Each deferral was resumed, or (the Airflow race of ADR 0024) the resumed attempt was marked
        # up_for_retry and a later attempt of the task found its work done.
        assert resumed == deferred or len(attempts) > 1, (task, deferred, resumed, sorted(logs))


def _attempts_by_task(logs: dict[str, str]) -> dict[str, list[str]]:
    """Group task logs (``.../run_id=R/task_id=T/attempt=N.log``) by run and task, attempts in order."""
    grouped: dict[str, list[tuple[int, str]]] = {}
    for path, text in logs.items():
        task, attempt = path.rsplit("/attempt=", 1)
        grouped.setdefault(task, []).append((int(attempt.split(".")[0]), text))
    return {task: [text for _, text in sorted(attempts)] for task, attempts in grouped.items()}
