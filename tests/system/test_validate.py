"""BinlogValidateOperator through the example DAG: deliberate mismatches are reported, lag is not."""

from __future__ import annotations

import pytest
from conftest import REPO, DagRunner, Pipeline, load_module, task_states, xcom

from airflow_provider_binlog.testing.mariadb import LocalMariaDB

pytestmark = pytest.mark.system


def test_validation_reports_rows_changed_behind_the_binlog_and_leaves_lag_pending(
    connections: LocalMariaDB, scratch_db: str, pipeline_dirs: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    table = f"{scratch_db}.items"
    items = Pipeline(connections, scratch_db, pipeline_dirs)
    sql, pipeline, cdc = items.sql, items.name, items.runner
    sql(
        "CREATE TABLE items (id INT PRIMARY KEY, v VARCHAR(10), n INT)",
        "INSERT INTO items SELECT seq, 'a', seq FROM seq_1_to_5",
    )
    assert cdc.run().state == "success"
    # the deliberate mismatch: changes the binlog never sees, so the pipeline cannot know of them
    sql(
        "SET SESSION sql_log_bin = 0",
        "UPDATE items SET v = 'bad' WHERE id = 2",
        "DELETE FROM items WHERE id = 3",
        "INSERT INTO items VALUES (9, 'ghost', 9)",
    )
    sql("UPDATE items SET n = 40 WHERE id = 4")  # logged: the pipeline follows it
    assert cdc.run().state == "success"

    monkeypatch.setenv("BINLOG_VALIDATE_RECHECK_TIMEOUT_SECONDS", "3")
    monkeypatch.setenv("BINLOG_VALIDATE_POLL_SECONDS", "0.5")
    validate_dag = load_module(REPO / "example_dags" / "binlog_validate.py").dag
    conf = {"pipeline": pipeline, "target": pipeline_dirs["target"], "tables": table}
    run = DagRunner(validate_dag, {**conf, "on_mismatch": "warn"}).run()
    assert run.state == "success", task_states(run)
    report = xcom(run, "validate")
    assert report["mismatched"] == [table]
    result = report["tables"][table]
    # 9 is in the source only, 3 in the target only, 2 differs in column v
    assert (result["missing"], result["extra"], result["different"]) == ([[9]], [[3]], {"2": ["v"]})
    assert (result["pending"], result["rechecks"]) == ([], 1)
    assert (result["source_rows"], result["target_rows"]) == (5, 5)

    run = DagRunner(validate_dag, {**conf, "on_mismatch": "fail"}).run()
    assert task_states(run) == {"validate": "failed"}

    # a logged change the target has not caught up with is never a mismatch: with binlog_cdc not running,
    # the re-check times out and every differing row stays pending
    sql("UPDATE items SET v = 'later' WHERE id = 5")
    run = DagRunner(validate_dag, {**conf, "on_mismatch": "fail"}).run()
    assert run.state == "success", task_states(run)
    result = xcom(run, "validate")["tables"][table]
    assert (result["missing"], result["extra"], result["different"], result["rechecks"]) == ([], [], {}, 0)
    assert sorted(result["pending"]) == [[2], [3], [5], [9]]
