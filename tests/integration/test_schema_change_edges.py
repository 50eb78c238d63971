"""The last schema-change edge cases (issue 10), each ending with target == source row by row (real MariaDB, local Spark).

The pipeline's library steps run as in ``test_schema_changes.py`` (its :class:`Flow`):

- a pipeline that takes no snapshot (tables are captured from their first row) sees ``CREATE``, ``DROP`` and
  ``CREATE`` again of one table inside one window;
- a pipeline with an initial snapshot sees, after a window 0 whose manifest keeps a table map (the schema
  history), in window 1 a table that needs a re-snapshot and is then dropped for good, lossless widenings under
  a non-strict ``sql_mode`` (followed, the old types from the window or from window 0's manifest) beside a lossy
  one and one whose old type nothing shows (re-snapshotted), and a table that keeps flowing; then the next run's
  snapshot and window 2.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("deltalake")

from test_schema_changes import Flow  # noqa: E402

from airflow_provider_binlog.hooks.binlog import BinlogHook  # noqa: E402
from airflow_provider_binlog.pipeline.ledger import Checkpoint, PipelineState, now_iso  # noqa: E402
from airflow_provider_binlog.target import read_table  # noqa: E402
from airflow_provider_binlog.testing.mariadb import LocalMariaDB  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PIPELINE = "ddl"  # Flow's pipeline name


def new_flow(mariadb: LocalMariaDB, spark: Any, db: str, root: Any) -> Flow:
    """Return a pipeline over ``db.*`` starting at the source head now (no snapshot taken yet)."""
    hook = BinlogHook(pipeline=PIPELINE)
    head = hook.server_state().head
    assert head is not None
    state = PipelineState(
        pipeline=PIPELINE,
        source_identity="test",
        flavor="mariadb",
        revision=0,
        checkpoint=Checkpoint(position=(head), window=1, updated_at=now_iso()),
    )
    return Flow(mariadb, db, root, spark, state, hook)


@pytest.fixture(scope="module")
def twice(mariadb: LocalMariaDB, spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Flow]:
    """A pipeline without snapshots: one window holds CREATE, rows, DROP, CREATE with other columns, rows."""
    with pytest.MonkeyPatch.context() as patch, mariadb.scratch_database("twice") as db:
        patch.setenv("AIRFLOW_CONN_BINLOG_DEFAULT", mariadb.uri())
        mariadb.execute("CREATE TABLE t_other (id INT PRIMARY KEY, v VARCHAR(20))", database=db)
        flow = new_flow(mariadb, spark, db, tmp_path_factory.mktemp("twice"))
        flow.window()  # the pipeline starts at the head: an empty first window
        flow.sql(
            "CREATE TABLE t_twice (id INT PRIMARY KEY, a VARCHAR(10), k INT)",
            "INSERT INTO t_twice VALUES (1, 'first', 1), (2, 'first', 2), (3, 'first', 3)",
            "UPDATE t_twice SET a = 'changed' WHERE id = 2",
            "INSERT INTO t_other VALUES (1, 'before')",
            "DROP TABLE t_twice",
            "CREATE TABLE t_twice (id INT PRIMARY KEY, b INT, k VARCHAR(5))",
            "INSERT INTO t_twice VALUES (2, 20, 'x'), (4, 40, 'y')",
            "UPDATE t_twice SET b = 41 WHERE id = 4",
            "INSERT INTO t_other VALUES (2, 'after')",
        )
        flow.window()
        yield flow


def test_create_drop_create_in_one_window_keeps_only_the_second_tables_columns(twice: Flow) -> None:
    manifest = twice.manifests[-1]
    decided = [(a, q.split()[0]) for a, q in twice.ddl_effects(manifest, "t_twice")]
    assert decided == [("follow", "CREATE"), ("follow", "DROP"), ("follow", "CREATE")]
    assert manifest.resnapshots == []  # followed from the binlog alone
    assert not twice.state.resnapshots_needed
    name = f"{twice.db}.t_twice"
    assert [c["name"] for c in manifest.tables[name].columns] == ["id", "b", "k"]
    assert manifest.tables[name].ops == {"c": 2, "u": 1}  # nothing of the first table is staged
    assert twice.mismatch("t_twice") is None  # also: no column 'a' of the first table in the target
    assert twice.mismatch("t_other") is None
    rows = sorted((r["id"], r["b"], r["k"]) for r in read_table(twice.target, name).to_pylist())
    assert rows == [(2, 20, "x"), (4, 41, "y")]


WIDENED = "s INT, MODIFY v VARCHAR(20), MODIFY d DECIMAL(9,3), MODIFY f DOUBLE, MODIFY e ENUM('a','b','c')"
"""Lossless widenings of every column of t_widen but the key (SMALLINT, VARCHAR(10), DECIMAL(6,2), FLOAT, ENUM)."""


@pytest.fixture(scope="module")
def edges(mariadb: LocalMariaDB, spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Flow]:
    """A pipeline with an initial snapshot through window 1 (the schema changes), a snapshot and window 2."""
    with pytest.MonkeyPatch.context() as patch, mariadb.scratch_database("edges") as db:
        patch.setenv("AIRFLOW_CONN_BINLOG_DEFAULT", mariadb.uri())
        mariadb.execute(
            "CREATE TABLE t_gone (id INT PRIMARY KEY, v VARCHAR(20))",
            "INSERT INTO t_gone SELECT seq, 'r' FROM seq_1_to_20",
            "CREATE TABLE t_widen (id INT PRIMARY KEY, s SMALLINT, v VARCHAR(10), d DECIMAL(6,2), f FLOAT, "
            "e ENUM('a','b'))",
            "INSERT INTO t_widen SELECT seq, -CAST(seq AS SIGNED) * 100, REPEAT('x', 10), seq * 3.25 - 9999.99, seq / 4, "
            "IF(seq % 2, 'a', 'b') FROM seq_1_to_50",
            "CREATE TABLE t_lossy (id INT PRIMARY KEY, n INT)",
            "INSERT INTO t_lossy SELECT seq, CAST(seq AS SIGNED) - 10 FROM seq_1_to_20",
            "CREATE TABLE t_cold (id INT PRIMARY KEY, n SMALLINT)",
            "INSERT INTO t_cold SELECT seq, seq FROM seq_1_to_20",
            "CREATE TABLE t_history (id INT PRIMARY KEY, n SMALLINT, v VARCHAR(10))",
            "INSERT INTO t_history SELECT seq, seq, 'r' FROM seq_1_to_20",
            "CREATE TABLE t_gone_later (id INT PRIMARY KEY, v VARCHAR(20))",
            "INSERT INTO t_gone_later SELECT seq, 'r' FROM seq_1_to_20",
            "CREATE TABLE t_keep (id INT PRIMARY KEY, v VARCHAR(20))",
            "INSERT INTO t_keep SELECT seq, 'r' FROM seq_1_to_20",
            database=db,
        )
        flow = new_flow(mariadb, spark, db, tmp_path_factory.mktemp("edges"))
        assert flow.snapshot() is not None  # the initial load
        flow.sql("UPDATE t_history SET v = 'window 0' WHERE id = 1")
        flow.window()  # its manifest keeps t_history's table map: the schema history window 1 starts from
        flow.sql(
            "UPDATE t_gone SET v = 'before' WHERE id <= 5",
            "ALTER TABLE t_gone ADD COLUMN c VARCHAR(5) NOT NULL DEFAULT 'x'",  # waits for a re-snapshot ...
            "UPDATE t_gone SET v = 'after' WHERE id <= 10",
            "DROP TABLE t_gone",  # ... until it is dropped for good
            "ALTER TABLE t_gone_later ADD COLUMN c INT NOT NULL DEFAULT 7",  # dropped in the next window
            "UPDATE t_keep SET v = 'window 1' WHERE id <= 3",
        )
        for sql in (
            "UPDATE t_widen SET v = 'abcdefghij', s = -32768 WHERE id <= 5",  # a table map before the ALTER
            f"ALTER TABLE t_widen MODIFY {WIDENED}",
            "UPDATE t_widen SET v = 'abcdefghijklmnopqrst', s = 100000, d = 123456.789, e = 'c' WHERE id = 7",
            "INSERT INTO t_widen VALUES (1000, 2000000, 'new', 1.5, 2.5, 'c')",
            "UPDATE t_lossy SET n = n - 1 WHERE id = 1",
            "ALTER TABLE t_lossy MODIFY n INT UNSIGNED",  # negative values become 0, without row events
            "UPDATE t_lossy SET n = 7 WHERE id = 20",
            "ALTER TABLE t_cold MODIFY n INT",  # no row of t_cold before it in any window: old type unknown
            "UPDATE t_cold SET n = 100000 WHERE id = 1",
            "ALTER TABLE t_history MODIFY n INT, MODIFY v VARCHAR(30)",  # old types from window 0's manifest
            "UPDATE t_history SET n = 100000, v = REPEAT('y', 30) WHERE id = 2",
        ):
            flow.sql("SET SESSION sql_mode = ''", sql)  # one session per statement: each logs sql_mode ''
        flow.window()
        flow.sql("DROP TABLE t_gone_later")  # before the next run: its snapshot no longer finds the table
        flow.snapshot()  # the next run's snapshot task: only the tables waiting for one
        flow.sql(
            "UPDATE t_widen SET v = 'window 2' WHERE id = 9",
            "UPDATE t_keep SET v = 'window 2' WHERE id = 9",
            "UPDATE t_lossy SET n = 8 WHERE id = 19",
        )
        flow.window()
        yield flow


def test_a_table_dropped_for_good_no_longer_waits_for_its_resnapshot(edges: Flow) -> None:
    name = f"{edges.db}.t_gone"
    first = edges.manifests[1]
    assert [a for a, _ in edges.ddl_effects(first, "t_gone")] == ["resnapshot", "follow"]
    assert [r["table"] for r in first.resnapshots].count(name) == 1
    (dropped,) = [d for d in first.dropped if d["table"] == name]
    assert dropped["marker_seq"] is not None  # staged although the ALTER before it left the table waiting
    assert all(r.table != name for r in edges.state.resnapshots_needed)
    assert all(name not in s.tables for s in edges.snapshots[1:])
    assert read_table(edges.target, name).num_rows == 0  # as the source: no table, no rows


def test_a_waiting_table_dropped_in_a_later_window_no_longer_waits(edges: Flow) -> None:
    name = f"{edges.db}.t_gone_later"
    assert [r["table"] for r in edges.manifests[1].resnapshots].count(name) == 1
    assert all(name not in s.tables for s in edges.snapshots[1:])  # the snapshot task never finds it again
    (dropped,) = [d for d in edges.manifests[2].dropped if d["table"] == name]
    assert dropped["marker_seq"] is not None
    assert all(r.table != name for r in edges.state.resnapshots_needed)
    assert read_table(edges.target, name).num_rows == 0


def test_a_table_dropped_long_ago_is_not_in_later_manifests(edges: Flow) -> None:
    name = f"{edges.db}.t_gone"
    assert name in edges.manifests[1].tables  # the window holding the DROP stages its marker
    assert name not in edges.manifests[2].tables
    assert f"{edges.db}.t_keep" in edges.manifests[2].tables


def test_lossless_widening_under_a_non_strict_sql_mode_is_followed(edges: Flow) -> None:
    name = f"{edges.db}.t_widen"
    first = edges.manifests[1]
    assert [a for a, _ in edges.ddl_effects(first, "t_widen")] == ["follow"], first.ddl
    assert all(r.table != name for r in edges.state.resnapshots_needed)
    assert all(name not in s.tables for s in edges.snapshots[1:])
    assert name not in first.schema_skipped_row_events
    assert edges.mismatch("t_widen") is None
    rows = {r["id"]: r for r in read_table(edges.target, name).to_pylist()}
    assert rows[7]["v"] == "abcdefghijklmnopqrst"
    assert rows[1000]["s"] == 2000000


def test_the_schema_history_of_an_earlier_window_tells_the_old_type(edges: Flow) -> None:
    name = f"{edges.db}.t_history"
    assert [c["name"] for c in edges.manifests[0].schemas[name]] == ["id", "n", "v"]
    first = edges.manifests[1]
    assert first.tables[name].rows == 1  # no row of it before the ALTER in this window
    assert [a for a, _ in edges.ddl_effects(first, "t_history")] == ["follow"], first.ddl
    assert all(name not in s.tables for s in edges.snapshots[1:])
    assert edges.mismatch("t_history") is None
    assert {c["name"]: c["max_length"] for c in first.schemas[name] if c["name"] == "v"} == {"v": 120}


def test_lossy_type_changes_under_a_non_strict_sql_mode_are_resnapshotted(edges: Flow) -> None:
    first = edges.manifests[1]
    for table in ("t_lossy", "t_cold"):  # INT -> INT UNSIGNED; and an old type the window cannot tell
        name = f"{edges.db}.{table}"
        assert [a for a, _ in edges.ddl_effects(first, table)] == ["resnapshot"], first.ddl
        assert any(name in s.tables for s in edges.snapshots[1:])
        assert edges.mismatch(table) is None
    lossy = {r["id"]: r["n"] for r in read_table(edges.target, f"{edges.db}.t_lossy").to_pylist()}
    assert lossy[1] == 0  # the server clamped -10 to 0 without a row event
    assert lossy[19] == 8
    assert not edges.state.resnapshots_needed


def test_other_tables_keep_flowing(edges: Flow) -> None:
    assert edges.mismatch("t_keep") is None
