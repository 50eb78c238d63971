"""Statement-based writes in the binlog (a session with ``binlog_format=STATEMENT`` or ``MIXED``), end to end.

1. A statement that writes no selected table is ignored, decided by the tables it writes, not by its
   database: with no default database, a qualified ``UPDATE`` of another table of the same database does not
   stop the pipeline, nor does it cut the transaction it is part of.
2. A statement writing a selected table fails the extract at once with the remedy; following the remedy
   (``binlog_resnapshot`` with ``mode: requested``, then the same CDC run again) re-reads the same window,
   skips the statement and ends with the target equal to the source, including a row the window inserted
   and the statement deleted.
3. ``LOAD DATA`` in statement format is an Execute_load_query event, which mysql-replication does not decode:
   its statement is read from the event body, so one into an unselected table is ignored and one into a
   selected table refused (it used to be dropped without a word).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pymysql
import pytest
from conftest import Pipeline, stored_state, task_states

from airflow_provider_binlog.testing.mariadb import LocalMariaDB

pytestmark = pytest.mark.system

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def pipeline(connections: LocalMariaDB, scratch_db: str, pipeline_dirs: dict[str, str]) -> Pipeline:
    connections.execute(
        "CREATE TABLE t (id INT PRIMARY KEY, v INT)",
        "CREATE TABLE u (id INT PRIMARY KEY, v VARCHAR(64))",
        "INSERT INTO t VALUES (1, 1), (2, 2), (3, 3), (4, 4)",
        "INSERT INTO u VALUES (1, 'one')",
        database=scratch_db,
    )
    return Pipeline(connections, scratch_db, pipeline_dirs)


def _session(server: LocalMariaDB, binlog_format: str, database: str | None = None) -> Any:
    """Open an autocommit session logging with ``binlog_format`` (the test user may set it: checked)."""
    conn = pymysql.connect(**server.connection_kwargs(database=database, autocommit=True))
    with conn.cursor() as cur:
        cur.execute(f"SET SESSION binlog_format = '{binlog_format}'")
        cur.execute("SELECT @@session.binlog_format")
        assert cur.fetchone() == (binlog_format,)
    return conn


def _logged_as_statement(server: LocalMariaDB, text: str) -> bool:
    """Return True when the current binlog file holds ``text`` as a Query event (not as row events)."""
    file = server.execute("SHOW MASTER STATUS")[0][0]
    return any(
        e[2] == "Query" and text in str(e[5]) for e in server.execute(f"SHOW BINLOG EVENTS IN '{file}'")
    )


@pytest.mark.slow  # two DAG runs with Spark merges: about a minute on 2 cores
def test_a_statement_writing_only_unselected_tables_is_ignored(pipeline: Pipeline) -> None:
    pipeline.conf["tables"] = f"{pipeline.db}.u"  # the runner reads this dict
    pipeline.run_window()
    db = pipeline.db
    conn = _session(pipeline.server, "MIXED")  # no default database
    with conn.cursor() as cur:
        cur.execute("BEGIN")
        cur.execute(f"INSERT INTO {db}.u VALUES (2, UUID())")  # unsafe for statements: logged as rows
        cur.execute(f"UPDATE {db}.t SET v = v + 1")  # deterministic: logged as a statement
        cur.execute("COMMIT")
        cur.execute("SET SESSION binlog_format = 'STATEMENT'")
        cur.execute(f"UPDATE {db}.t SET v = v + 10 WHERE id = 1")
    conn.close()
    assert _logged_as_statement(pipeline.server, f"UPDATE {db}.t SET v = v + 10 WHERE id = 1")
    merged = pipeline.run_window()
    assert pipeline.manifest(merged)["stats"]["statements_ignored"] == 2
    assert [r["id"] for r in pipeline.staged_records(merged, "u", ["id", "_binlog_seq"])] == [2]
    assert pipeline.mismatches("u") == []


@pytest.mark.slow  # three DAG runs and a Spark snapshot: about 3 minutes on 2 cores
def test_a_statement_on_a_selected_table_quarantines_it_until_its_resnapshot(pipeline: Pipeline) -> None:
    """Its rows are not in the binlog: the table stops at the statement's transaction, the others flow, and the
    next run re-snapshots it (issue 30: a refusal of one table never halts the others)."""
    pipeline.run_window()
    db = pipeline.db
    pipeline.sql(
        "INSERT INTO t VALUES (7, 70)",
        "UPDATE t SET v = 11 WHERE id = 1",
        # more rows than the reader keeps before writing a Parquet file (BATCH_ROWS): staged before the
        # statement is met, so they must be staged exactly as far as the statement's transaction
        "INSERT INTO t (id, v) SELECT seq, seq FROM seq_100_to_9000",
    )
    conn = _session(pipeline.server, "STATEMENT", database=db)
    with conn.cursor() as cur:
        cur.execute("DELETE FROM t WHERE id = 7")  # deletes a row the same window inserted
        cur.execute("UPDATE t SET v = v + 100 WHERE id <= 3")
    conn.close()
    assert _logged_as_statement(pipeline.server, "DELETE FROM t WHERE id = 7")
    pipeline.sql("INSERT INTO t VALUES (8, 80)", "INSERT INTO u VALUES (2, 'two')")

    stuck = pipeline.runner.run(pipeline.runner.next_dates())
    states = task_states(stuck)
    assert states.pop("quarantine") == "failed", states  # the run says so; every other task succeeded
    assert set(states.values()) == {"success"}, states
    window = stored_state(pipeline.name)["windows"][-1]  # type: ignore[index]
    assert window["status"] == "merged"
    manifest = pipeline.manifest(window)
    [entry] = manifest["resnapshots"]
    message = entry["error"]
    print(f"\nthe message a user sees:\n{message}")
    assert (entry["table"], entry["cause"]) == (f"{db}.t", "quarantine")
    assert f"pipeline {pipeline.name!r}" in message
    assert "'DELETE FROM t WHERE id = 7' at mariadb-bin." in message
    assert f"writes the selected table(s) {db}.t," in message
    assert "binlog_format=ROW" in message
    assert [r["id"] for r in pipeline.staged_records(window, "u", ["id", "_binlog_seq"])] == [2]
    assert pipeline.mismatches("u") == []

    pipeline.sql("UPDATE t SET v = 0 WHERE id = 8")
    pipeline.run_window()  # re-snapshots t alone, then its window
    state = stored_state(pipeline.name)
    assert state is not None
    assert (state["snapshots"][-1]["tables"], state["snapshots"][-1]["reason"]) == ([f"{db}.t"], "quarantine")
    assert pipeline.mismatches("t", "u") == []


@pytest.mark.slow  # three DAG runs with Spark merges: about a minute on 2 cores
def test_a_statement_based_load_data_is_read_from_its_event(pipeline: Pipeline, tmp_path: Path) -> None:
    pipeline.conf["tables"] = f"{pipeline.db}.u"
    pipeline.run_window()
    rows = tmp_path / "rows.tsv"
    rows.write_text("10\t10\n11\t11\n")
    conn = pymysql.connect(**pipeline.server.connection_kwargs(database=pipeline.db, local_infile=True))
    with conn.cursor() as cur:
        cur.execute("SET SESSION binlog_format = 'STATEMENT'")
        cur.execute(f"LOAD DATA LOCAL INFILE '{rows}' INTO TABLE t")  # an Execute_load_query event
    conn.commit()
    conn.close()
    merged = pipeline.run_window()
    assert pipeline.manifest(merged)["stats"]["statements_ignored"] == 1
    conn = pymysql.connect(**pipeline.server.connection_kwargs(database=pipeline.db, local_infile=True))
    with conn.cursor() as cur:
        cur.execute("SET SESSION binlog_format = 'STATEMENT'")
        cur.execute(f"LOAD DATA LOCAL INFILE '{rows}' INTO TABLE u")
    conn.commit()
    conn.close()
    run = pipeline.runner.run()
    states = task_states(run)
    assert (states["extract"], states["quarantine"]) == ("success", "failed"), states  # u alone stops
    [entry] = pipeline.manifest(stored_state(pipeline.name)["windows"][-1])["resnapshots"]  # type: ignore[index]
    assert (entry["table"], entry["cause"]) == (f"{pipeline.db}.u", "quarantine")
    assert f"writes the selected table(s) {pipeline.db}.u," in entry["error"]
