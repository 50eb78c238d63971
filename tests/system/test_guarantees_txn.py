"""Guarantees 7 and 8 of issue 3, shown with the example DAG against a real MariaDB and real Spark.

7. Rolled-back work never reaches the target; non-transactional tables end up as the source has them;
   XA transactions are handled or refused clearly.
8. Ordering edge cases: several changes of one primary key inside one transaction, swapped keys, updates
   that change nothing, a key deleted in one window and back in the next.

Each test runs the ``binlog_cdc`` DAG with ``dag.test()``, compares every table with the source row by
row (:func:`~airflow_provider_binlog.verify.compare_table`) and checks where the checkpoint ended. The
comments say what MariaDB 10.11 writes to the binlog for each scenario (seen with SHOW BINLOG EVENTS);
the staged change records are asserted too, so a failure says which scenario went wrong.
"""

from __future__ import annotations

from typing import Any

import pymysql
import pytest
from conftest import Pipeline as BasePipeline
from conftest import stored_state, task_states

from airflow_provider_binlog.testing.mariadb import LocalMariaDB

pytestmark = pytest.mark.system

TABLE = "(id INT PRIMARY KEY, v VARCHAR(60))"
KEYED_TABLE = "(id INT PRIMARY KEY, k INT, v VARCHAR(60))"


class Pipeline(BasePipeline):
    """The shared pipeline harness plus the views these scenarios assert on."""

    def staged(self, window: dict[str, Any], table: str) -> list[tuple[str, int]]:
        """Return ``(op, id)`` of the table's staged change records in window order."""
        return [(r["_binlog_op"], r["id"]) for r in self.staged_records(window, table)]

    def rows(self, table: str) -> dict[int, tuple[Any, ...]]:
        """Return the source rows by id (the scenario's expected outcome is asserted on them)."""
        return {r[0]: tuple(r[1:]) for r in self.server.execute(f"SELECT * FROM `{self.db}`.`{table}`")}

    def target_rows(self, table: str, **options: bool) -> list[dict[str, Any]]:
        """Return the target table's rows (live ones unless told otherwise), ordered by id."""
        from airflow_provider_binlog.target import read_table

        rows = read_table(self.target, f"{self.db}.{table}", **options).to_pylist()
        return sorted(rows, key=lambda r: r["id"])


@pytest.fixture
def pipeline(connections: LocalMariaDB, scratch_db: str, pipeline_dirs: dict[str, str]) -> Pipeline:
    return Pipeline(connections, scratch_db, pipeline_dirs)


# --------------------------------------------------------------------------------------------------
# 7. Rollbacks and non-transactional tables
# --------------------------------------------------------------------------------------------------


def test_rolled_back_transactions_and_statements_never_reach_the_target(pipeline: Pipeline) -> None:
    pipeline.sql(f"CREATE TABLE rolled {TABLE}")
    pipeline.run_window()  # a new pipeline starts at the head: empty first window
    # Two sessions interleave: the rolled-back one writes nothing to the binlog (its row events live in
    # the session's binlog cache until COMMIT); the committed ones are ordinary GTID groups.
    a, b = pipeline.connect(autocommit=False), pipeline.connect(autocommit=False)
    with a, b, a.cursor() as in_a, b.cursor() as in_b:
        in_b.execute("INSERT INTO rolled VALUES (1, 'kept'), (2, 'kept')")
        b.commit()
        in_a.execute("INSERT INTO rolled VALUES (10, 'rolled back')")
        in_a.execute("UPDATE rolled SET v = 'rolled back' WHERE id = 1")
        in_b.execute("INSERT INTO rolled VALUES (11, 'committed while the other was open')")
        b.commit()
        in_a.execute("DELETE FROM rolled WHERE id = 2")
        a.rollback()
        in_b.execute("UPDATE rolled SET v = 'committed after the rollback' WHERE id = 2")
        b.commit()
        # A failed statement inside a committed transaction is rolled back alone: the binlog holds the
        # transaction without it (row 21 is not in the binlog at all).
        in_b.execute("INSERT INTO rolled VALUES (20, 'kept')")
        with pytest.raises(pymysql.IntegrityError):
            in_b.execute("INSERT INTO rolled VALUES (21, 'rolled back statement'), (1, 'duplicate')")
        b.commit()
    window = pipeline.run_window()

    assert pipeline.rows("rolled") == {
        1: ("kept",),
        2: ("committed after the rollback",),
        11: ("committed while the other was open",),
        20: ("kept",),
    }
    assert pipeline.mismatches("rolled") == []
    assert pipeline.staged(window, "rolled") == [("c", 1), ("c", 2), ("c", 11), ("u", 2), ("c", 20)]


def test_rollback_to_a_savepoint_keeps_only_the_part_before_it(pipeline: Pipeline) -> None:
    pipeline.sql(
        f"CREATE TABLE sp {TABLE}",
        f"CREATE TABLE spm {TABLE}",
        f"CREATE TABLE early {TABLE}",
        f"CREATE TABLE big {TABLE}",
        f"CREATE TABLE nontx {TABLE} ENGINE=MyISAM",
    )
    pipeline.run_window()
    # InnoDB only: the binlog group holds Query "SAVEPOINT `s1`"; ROLLBACK TO truncates the session's
    # binlog cache, so the undone rows and the rollback itself are not in the binlog.
    pipeline.transaction(
        "INSERT INTO sp VALUES (1, 'before s1')",
        "SAVEPOINT s1",
        "INSERT INTO sp VALUES (2, 'undone')",
        "UPDATE sp SET v = 'undone' WHERE id = 1",
        "ROLLBACK TO SAVEPOINT s1",
        "INSERT INTO sp VALUES (3, 'after rollback to s1')",
    )
    # A non-transactional change after a savepoint stops MariaDB from truncating the cache: the group
    # holds the undone rows followed by Query "ROLLBACK TO `a`" (the MyISAM row is a group of its own).
    # Savepoint names are reused and savepoints set after the one rolled back to are discarded.
    pipeline.transaction(
        "INSERT INTO spm VALUES (1, 'before a')",
        "SAVEPOINT a",
        "INSERT INTO spm VALUES (2, 'undone')",
        "INSERT INTO nontx VALUES (1, 'non-transactional, kept')",
        "SAVEPOINT b",
        "UPDATE spm SET v = 'undone' WHERE id = 1",
        "ROLLBACK TO SAVEPOINT a",
        "UPDATE spm SET v = 'after rollback to a' WHERE id = 1",
        "SAVEPOINT a",
        "INSERT INTO spm VALUES (5, 'undone by the second rollback to a')",
        "ROLLBACK TO SAVEPOINT a",
        "INSERT INTO spm VALUES (3, 'kept')",
    )
    # Rolled back to a savepoint set before anything was logged: MariaDB logs nothing for SAVEPOINT, and
    # at ROLLBACK TO writes what it holds as a group ending in Query "ROLLBACK" (own GTID); the rest of
    # the transaction becomes another group ending in Xid.
    pipeline.transaction(
        "SAVEPOINT early",
        "INSERT INTO nontx VALUES (3, 'non-transactional, kept')",
        "INSERT INTO early VALUES (1, 'undone')",
        "ROLLBACK TO SAVEPOINT early",
        "INSERT INTO early VALUES (2, 'kept')",
    )
    # The undone part is larger than the rows the reader keeps in memory, so it was spilled to disk
    # together with the kept rows before it when the ROLLBACK TO arrives.
    from airflow_provider_binlog.extract.reader import SPILL_ROWS

    undone = ", ".join(f"({i}, 'undone')" for i in range(1_000, 1_000 + SPILL_ROWS + 10_000))
    pipeline.transaction(
        "INSERT INTO big VALUES (1, 'kept'), (2, 'kept'), (3, 'kept'), (4, 'kept'), (5, 'kept')",
        "SAVEPOINT s",
        "INSERT INTO nontx VALUES (2, 'non-transactional, kept')",
        f"INSERT INTO big VALUES {undone}",
        "ROLLBACK TO SAVEPOINT s",
        "INSERT INTO big VALUES (6, 'after rollback to s')",
    )
    window = pipeline.run_window()

    assert pipeline.rows("sp") == {1: ("before s1",), 3: ("after rollback to s1",)}
    assert pipeline.rows("spm") == {1: ("after rollback to a",), 3: ("kept",)}
    assert pipeline.rows("early") == {2: ("kept",)}
    assert sorted(pipeline.rows("big")) == [1, 2, 3, 4, 5, 6]
    assert sorted(pipeline.rows("nontx")) == [1, 2, 3]
    assert pipeline.mismatches("sp", "spm", "early", "big", "nontx") == []
    assert pipeline.staged(window, "sp") == [("c", 1), ("c", 3)]
    assert pipeline.staged(window, "spm") == [("c", 1), ("u", 1), ("c", 3)]
    assert pipeline.staged(window, "early") == [("c", 2)]
    assert pipeline.staged(window, "big") == [("c", i) for i in range(1, 7)]
    records = [r for t in ("sp", "spm", "early", "big") for r in pipeline.staged_records(window, t)]
    assert all(r["_binlog_gtid"] for r in records), "every row keeps its transaction's GTID"
    manifest = pipeline.manifest(window)
    assert manifest["ddl"] == [], "savepoints are not DDL"
    assert manifest["stats"]["rolled_back"] == 1  # the group of the early savepoint


def test_non_transactional_changes_of_a_rolled_back_transaction_reach_the_target(pipeline: Pipeline) -> None:
    pipeline.sql(
        f"CREATE TABLE inno {TABLE} ENGINE=InnoDB",
        f"CREATE TABLE my {TABLE} ENGINE=MyISAM",
        f"CREATE TABLE ar {TABLE} ENGINE=Aria",
    )
    pipeline.run_window()
    pipeline.sql(
        "INSERT INTO inno VALUES (100, 'seed')",
        "INSERT INTO my VALUES (100, 'seed')",
        "INSERT INTO ar VALUES (100, 'seed'), (101, 'seed')",
    )
    # MyISAM and Aria cannot roll back. MariaDB writes each statement's non-transactional rows as a group
    # of its own (GTID "BEGIN", Table_map, rows, Query "COMMIT") when the statement ends, also for the
    # MyISAM half of a multi-table UPDATE; the InnoDB rows of the rolled-back transaction never appear.
    conn = pipeline.connect(autocommit=False)
    with conn, conn.cursor() as cur:
        cur.execute("INSERT INTO inno VALUES (1, 'rolled back')")
        cur.execute("INSERT INTO my VALUES (1, 'kept')")
        cur.execute("INSERT INTO ar VALUES (1, 'kept')")
        cur.execute("UPDATE my SET v = 'kept, updated' WHERE id = 1")
        cur.execute(
            "UPDATE inno JOIN my ON inno.id = my.id SET inno.v = 'rolled back', my.v = 'kept (multi-table)' "
            "WHERE inno.id = 100"
        )
        cur.execute("DELETE FROM ar WHERE id = 101")
        conn.rollback()
        cur.execute("SHOW WARNINGS")
        warnings = [w[1] for w in cur.fetchall()]
    assert warnings == [1196]  # "Some non-transactional changed tables couldn't be rolled back"
    window = pipeline.run_window()

    assert pipeline.rows("inno") == {100: ("seed",)}
    assert pipeline.rows("my") == {1: ("kept, updated",), 100: ("kept (multi-table)",)}
    assert pipeline.rows("ar") == {1: ("kept",), 100: ("seed",)}
    assert pipeline.mismatches("inno", "my", "ar") == []
    assert pipeline.staged(window, "inno") == [("c", 100)]
    assert pipeline.staged(window, "my") == [("c", 100), ("c", 1), ("u", 1), ("u", 100)]
    assert pipeline.staged(window, "ar") == [("c", 100), ("c", 101), ("c", 1), ("d", 101)]


def test_xa_is_handled_when_committed_in_one_phase_and_refused_clearly_when_prepared(
    pipeline: Pipeline, source_db: str
) -> None:
    pipeline.sql(f"CREATE TABLE xa {TABLE}")
    other = f"`{source_db}`.elsewhere"
    pipeline.sql(f"CREATE TABLE {other} (id INT PRIMARY KEY)")
    failures: list[BaseException] = []
    pipeline.dag.task_dict["extract"].on_failure_callback = [lambda ctx: failures.append(ctx["exception"])]
    pipeline.run_window()
    # XA COMMIT ... ONE PHASE is binlogged like an ordinary transaction (GTID "BEGIN", rows, Xid).
    pipeline.sql(
        "XA START 'one'",
        "INSERT INTO xa VALUES (1, 'one phase')",
        "XA END 'one'",
        "XA COMMIT 'one' ONE PHASE",
    )
    # XA ROLLBACK before XA PREPARE writes nothing.
    pipeline.sql(
        "XA START 'rb'", "INSERT INTO xa VALUES (2, 'rolled back')", "XA END 'rb'", "XA ROLLBACK 'rb'"
    )
    # A prepared XA transaction on a table the pipeline does not select: its group (GTID with the XA
    # flag, rows, Query "XA END", XA_prepare) and the later GTID + Query "XA COMMIT" group hold nothing
    # for the pipeline and must not stop it.
    pipeline.sql(
        "XA START 'elsewhere'",
        f"INSERT INTO {other} VALUES (1)",
        "XA END 'elsewhere'",
        "XA PREPARE 'elsewhere'",
        "XA COMMIT 'elsewhere'",
    )
    pipeline.sql("INSERT INTO xa VALUES (3, 'after the other XA transaction')")
    merged = pipeline.run_window()
    assert pipeline.rows("xa") == {1: ("one phase",), 3: ("after the other XA transaction",)}
    assert pipeline.mismatches("xa") == []
    assert failures == []
    assert pipeline.manifest(merged)["ddl"] == [], "XA statements are not DDL"

    # Two-phase XA on a selected table: the rows sit in the XA PREPARE group, and whether they count is
    # decided by a later, separate XA COMMIT / XA ROLLBACK group (possibly in another window). The
    # extractor refuses the window with a message naming XA and the position; nothing moves.
    pipeline.sql(
        "XA START 'two'",
        "INSERT INTO xa VALUES (4, 'two phase')",
        "XA END 'two'",
        "XA PREPARE 'two'",
        "XA COMMIT 'two'",
    )
    before = stored_state(pipeline.name)
    head = pipeline.head()
    run = pipeline.runner.run()
    assert run.state == "failed"
    assert task_states(run) == {
        "purge_risk": "success",
        "snapshot": "success",
        "extract": "failed",
        "merge": "upstream_failed",
        "commit": "upstream_failed",
        "quarantine": "upstream_failed",
    }
    assert len(failures) == 1
    assert type(failures[0]).__name__ == "UnsupportedEventError"
    message = str(failures[0])
    assert "XA PREPARE at mariadb-bin." in message
    assert f"changed {pipeline.db}.xa: XA transactions are not supported" in message
    after = stored_state(pipeline.name)
    assert before is not None
    assert after is not None
    assert after["checkpoint"] == before["checkpoint"]
    assert after["checkpoint"]["position"] == merged["end"]
    refused = after["windows"][-1]
    assert (refused["status"], refused["start"], refused["end"]) == ("cut", merged["end"], head)
    assert [r["id"] for r in pipeline.target_rows("xa")] == [1, 3]


# --------------------------------------------------------------------------------------------------
# 8. Ordering edge cases
# --------------------------------------------------------------------------------------------------


def test_many_changes_of_one_key_in_one_transaction_and_across_windows(pipeline: Pipeline) -> None:
    tables = ("sysbench", "multi", "swap", "transient", "noop", "replaced")
    pipeline.sql(
        *(f"CREATE TABLE {t} {KEYED_TABLE}" for t in tables[:-1]),
        "CREATE TABLE replaced (id INT PRIMARY KEY, k INT UNIQUE, v VARCHAR(60))",
    )
    pipeline.run_window()
    pipeline.sql(
        "INSERT INTO sysbench VALUES (1, 1, 'seed'), (2, 2, 'seed'), (3, 3, 'seed')",
        "INSERT INTO multi VALUES (1, 1, 'seed'), (2, 2, 'seed')",
        "INSERT INTO swap VALUES (1, 1, 'one'), (2, 2, 'two'), (10, 10, 'ten'), (11, 11, 'eleven')",
        "INSERT INTO transient VALUES (1, 1, 'seed')",
        "INSERT INTO noop VALUES (1, 1, 'same'), (2, 2, 'old')",
        "INSERT INTO replaced VALUES (1, 1, 'a'), (2, 2, 'b')",
    )
    seeded = pipeline.run_window()
    assert pipeline.mismatches(*tables) == []

    # sysbench oltp_write_only: index update, non-index update, delete and re-insert of the same key.
    # The binlog holds Update_rows, Update_rows, Delete_rows, Write_rows in one group.
    pipeline.transaction(
        "UPDATE sysbench SET k = k + 1 WHERE id = 2",
        "UPDATE sysbench SET v = 'c updated' WHERE id = 2",
        "DELETE FROM sysbench WHERE id = 2",
        "INSERT INTO sysbench VALUES (2, 7, 're-inserted')",
        "DELETE FROM sysbench WHERE id = 3",
        "INSERT INTO sysbench VALUES (3, 3, 'seed')",
    )
    # The same key updated several times, also by multi-row statements.
    pipeline.transaction(
        "UPDATE multi SET v = 'first' WHERE id = 1",
        "UPDATE multi SET v = 'second' WHERE id = 1",
        "UPDATE multi SET k = k + 10 WHERE id IN (1, 2)",
        "UPDATE multi SET k = k + 10 WHERE id IN (1, 2)",
        "UPDATE multi SET v = 'third' WHERE id = 1",
    )
    # Swapping two keys in one statement fails on InnoDB (unique checks are per row) and logs nothing;
    # through a temporary key it is three PK-changing Update_rows events. A shift in descending order is
    # one Update_rows event with two PK changes (11 -> 12 first, then 10 -> 11).
    with pytest.raises(pymysql.IntegrityError):
        pipeline.sql("UPDATE swap SET id = 3 - id WHERE id IN (1, 2)")
    pipeline.transaction(
        "UPDATE swap SET id = -1 WHERE id = 1",
        "UPDATE swap SET id = 1 WHERE id = 2",
        "UPDATE swap SET id = 2 WHERE id = -1",
    )
    pipeline.sql("UPDATE swap SET id = id + 1 WHERE id >= 10 ORDER BY id DESC")
    # Inserted, changed and deleted inside one transaction: Write, Update, Delete rows; no row remains.
    pipeline.transaction(
        "INSERT INTO transient VALUES (5, 5, 'transient')",
        "UPDATE transient SET v = 'still transient' WHERE id = 5",
        "DELETE FROM transient WHERE id = 5",
    )
    pipeline.sql("DELETE FROM transient WHERE id = 1")  # comes back in the next window
    # Updates that change nothing write no row event (and an autocommit one no group at all); an update
    # that matches a changed and an unchanged row logs only the changed one.
    pipeline.sql("UPDATE noop SET v = v", "UPDATE noop SET v = 'same' WHERE id IN (1, 2)")
    # REPLACE that collides on the secondary unique key k is logged as one Update_rows moving id 1 to 3;
    # INSERT ... ON DUPLICATE KEY UPDATE as an Update_rows of the existing row.
    pipeline.sql(
        "REPLACE INTO replaced VALUES (3, 1, 'replaced through k')",
        "INSERT INTO replaced VALUES (2, 2, 'dup') ON DUPLICATE KEY UPDATE v = 'updated on duplicate'",
    )
    edge = pipeline.run_window()

    assert pipeline.rows("sysbench") == {1: (1, "seed"), 2: (7, "re-inserted"), 3: (3, "seed")}
    assert pipeline.rows("multi") == {1: (21, "third"), 2: (22, "seed")}
    assert pipeline.rows("swap") == {1: (2, "two"), 2: (1, "one"), 11: (10, "ten"), 12: (11, "eleven")}
    assert pipeline.rows("transient") == {}
    assert pipeline.rows("noop") == {1: (1, "same"), 2: (2, "same")}
    assert pipeline.rows("replaced") == {2: (2, "updated on duplicate"), 3: (1, "replaced through k")}
    assert pipeline.mismatches(*tables) == []
    assert pipeline.staged(edge, "sysbench") == [("u", 2), ("u", 2), ("d", 2), ("c", 2), ("d", 3), ("c", 3)]
    assert pipeline.staged(edge, "multi") == [
        ("u", 1),
        ("u", 1),
        ("u", 1),
        ("u", 2),
        ("u", 1),
        ("u", 2),
        ("u", 1),
    ]
    assert pipeline.staged(edge, "swap") == [
        *[("d", 1), ("u", -1), ("d", 2), ("u", 1), ("d", -1), ("u", 2)],
        *[("d", 11), ("u", 12), ("d", 10), ("u", 11)],
    ]
    assert pipeline.staged(edge, "transient") == [("c", 5), ("u", 5), ("d", 5), ("d", 1)]
    assert pipeline.staged(edge, "noop") == [("u", 2)]
    assert pipeline.staged(edge, "replaced") == [("d", 1), ("u", 3), ("u", 2)]
    assert edge["seq"] == seeded["seq"] + 1

    # A window of updates that change nothing: the binlog head does not move, the window is empty.
    head = pipeline.head()
    pipeline.sql("UPDATE noop SET v = v", "UPDATE multi SET v = 'nobody' WHERE id = 999")
    pipeline.transaction("UPDATE noop SET k = k WHERE id = 1")
    assert pipeline.head() == head
    empty = pipeline.run_window()
    assert empty["start"] == empty["end"] == edge["end"] == head
    assert pipeline.manifest(empty)["stats"]["rows"] == 0

    # Keys deleted in the previous window (a source row and the swap's temporary key) come back.
    pipeline.sql(
        "INSERT INTO transient VALUES (1, 1, 'back in the next window')",
        "INSERT INTO swap VALUES (-1, 0, 'temporary key, now a row')",
    )
    back = pipeline.run_window()
    assert pipeline.rows("transient") == {1: (1, "back in the next window")}
    assert pipeline.mismatches(*tables) == []
    assert pipeline.staged(back, "transient") == [("c", 1)]
    audit = pipeline.target_rows("transient", include_tombstones=True, with_metadata=True)
    assert [(r["id"], r["_binlog_deleted"]) for r in audit] == [(1, False), (5, True)]
