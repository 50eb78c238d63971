"""Several DDL statements on one table in one window, interleaved with writes: target == source row by row.

Issue 29, item 4: a window holding ``DROP COLUMN b`` then ``CHANGE COLUMN c c_renamed`` between writes (a
migration under load) was reported to leave ``c_renamed`` NULL in rows not written after the rename. Each case
here is a table of its own, created alike (``id``, ``a INT``, ``b`` and ``c`` text holding multi-byte
characters and empty strings), with one sequence of statements (drop, rename by ``CHANGE`` and by ``RENAME
COLUMN``, add with a default, add nullable, widen, in varied orders). All cases go through one pipeline of the
library steps (``test_schema_changes.Flow``), as ``binlog_cdc`` runs them:

1. the initial snapshot (the target holds every row as a snapshot row, ``_binlog_op = 'r'``);
2. window 1: writes to every table (the target then holds rows of an earlier window), and the statements
   a case runs a window ahead;
3. window 2: per table, writes, then each statement followed by writes, with a binlog rotation after each
   step, while another connection keeps updating the tables; read by the task process and a worker process
   (a catch-up read of many files);
4. the next run: its snapshot task (the tables a statement left waiting for a re-snapshot), then window 3
   with writes to every table.

Each test checks one case: the target equals the source row by row, and the target's columns are the
source's plus the columns a followed ``DROP COLUMN`` leaves (documented in ``docs/schema-changes.md``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pymysql
import pytest

pytest.importorskip("pyspark")
pytest.importorskip("deltalake")

from test_schema_changes import Flow  # noqa: E402

from airflow_provider_binlog.hooks.binlog import BinlogHook  # noqa: E402
from airflow_provider_binlog.pipeline.ledger import Checkpoint, PipelineState, now_iso  # noqa: E402
from airflow_provider_binlog.target import read_table  # noqa: E402
from airflow_provider_binlog.testing.mariadb import LocalMariaDB  # noqa: E402
from airflow_provider_binlog.verify import compare_table  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PIPELINE = "ddl"  # Flow's pipeline name
TEXTS = ("中文", "déjà", "", "plain", "naïve", "日本語", "Ωmega", "x", "emoji 😀")
"""Values of the text columns: multi-byte characters (up to 4 bytes) and the empty string."""

DROP_B = "ALTER TABLE {t} DROP COLUMN b"
CHANGE_C = "ALTER TABLE {t} CHANGE COLUMN c c_renamed VARCHAR(40)"
RENAME_C = "ALTER TABLE {t} RENAME COLUMN c TO c_renamed"
ADD_DEFAULT = "ALTER TABLE {t} ADD COLUMN d VARCHAR(10) NOT NULL DEFAULT 'dé'"
ADD_NULLABLE = "ALTER TABLE {t} ADD COLUMN e INT NULL"
WIDEN_A = "ALTER TABLE {t} MODIFY a BIGINT"
WIDEN_C = "ALTER TABLE {t} MODIFY c VARCHAR(60)"
ADD_B = "ALTER TABLE {t} ADD COLUMN b VARCHAR(20) NULL"


@dataclass(frozen=True)
class Case:
    """One table's statements in window 2 (``{t}`` is the table) and the columns the target keeps beside the source's.

    ``earlier``: statements of the table in window 1 (after its writes there).
    """

    statements: tuple[str, ...]
    kept: frozenset[str] = frozenset()
    earlier: tuple[str, ...] = ()


CASES = {
    "drop_then_change": Case((DROP_B, CHANGE_C)),  # the reported sequence
    "change_then_drop": Case((CHANGE_C, DROP_B)),
    "drop_then_rename": Case((DROP_B, RENAME_C)),
    "add_default_then_change": Case((ADD_DEFAULT, CHANGE_C)),
    "change_then_widen": Case((CHANGE_C, "ALTER TABLE {t} MODIFY c_renamed VARCHAR(60)")),
    "drop_widen_rename": Case((DROP_B, WIDEN_A, RENAME_C)),
    "add_drop_change": Case((ADD_NULLABLE, DROP_B, CHANGE_C)),
    "add_default_then_drop": Case((ADD_DEFAULT, DROP_B)),
    "drop_then_widen": Case((DROP_B, WIDEN_C), kept=frozenset({"b"})),  # followed: b stays in the target
    "drop_then_add_back": Case((DROP_B, ADD_B)),  # the target kept b's old values: re-snapshotted
    "add_back_a_column_dropped_earlier": Case((ADD_B,), earlier=(DROP_B,)),  # known from the pipeline's state
    "drop_then_rename_to_dropped": Case((DROP_B, "ALTER TABLE {t} CHANGE COLUMN c b VARCHAR(40)")),
}


def text(n: int) -> str:
    return TEXTS[n % len(TEXTS)]


def write(flow: Flow, table: str, step: int) -> None:
    """Write to ``table`` after step ``step`` of its sequence: updates of a few rows' text, an insert, a delete."""
    column = current_text_column(flow, table)
    low = 5 + step * 6 % 36  # windows 1 and 3 write rows 5-10, the steps of window 2 rows 11 and up
    flow.sql(
        f"UPDATE `{table}` SET `{column}` = CONCAT(`{column}`, '{text(step)}') WHERE id BETWEEN {low} AND {low + 3}",
        f"UPDATE `{table}` SET `{column}` = '' WHERE id = {low + 4}",
        f"INSERT INTO `{table}` (id, `{column}`) VALUES ({1000 + step}, '{text(step + 1)}')",
        f"DELETE FROM `{table}` WHERE id = {low + 5}",
    )


def current_text_column(flow: Flow, table: str) -> str:
    """Return what the text column that started as ``c`` is called now (``c``, ``c_renamed`` or ``b``)."""
    columns = {str(row[0]) for row in flow.server.execute(f"SHOW COLUMNS FROM `{table}`", database=flow.db)}
    return next(name for name in ("c_renamed", "c", "b") if name in columns)


class Updater(threading.Thread):
    """Update column ``a`` of the case tables from another connection until stopped (writes during the DDL)."""

    def __init__(self, server: LocalMariaDB, db: str) -> None:
        super().__init__(daemon=True)
        self.server, self.db = server, db
        self.stopped = threading.Event()
        self.writes = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with (
                pymysql.connect(**self.server.connection_kwargs(database=self.db)) as conn,
                conn.cursor() as cur,
            ):
                while not self.stopped.is_set():
                    for number, table in enumerate(CASES):  # rows 1-4 only: most rows are not written after
                        row = (self.writes + number) % 4 + 1
                        cur.execute(f"UPDATE `{table}` SET a = a + 1 WHERE id = %s", (row,))
                    self.writes += 1
                    time.sleep(0.01)
        except BaseException as err:  # surfaced by stop()
            self.error = err

    def stop(self) -> None:
        self.stopped.set()
        self.join(timeout=30)
        assert self.error is None, self.error
        assert self.writes > 0


@pytest.fixture(scope="module")
def flow(mariadb: LocalMariaDB, spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Flow]:
    """Run every case through the pipeline once (see the module docstring)."""
    with pytest.MonkeyPatch.context() as patch, mariadb.scratch_database("seq") as db:
        patch.setenv("AIRFLOW_CONN_BINLOG_DEFAULT", mariadb.uri())
        rows = ", ".join(f"({i}, {i}, 'b{i}', '{text(i)}')" for i in range(1, 41))
        for table in CASES:
            mariadb.execute(
                f"CREATE TABLE `{table}` (id INT PRIMARY KEY, a INT, b VARCHAR(20), c VARCHAR(30)) "
                "DEFAULT CHARSET=utf8mb4",
                f"INSERT INTO `{table}` VALUES {rows}",
                database=db,
            )
        hook = BinlogHook(pipeline=PIPELINE)
        head = hook.server_state().head  # the pipeline starts after the tables exist
        assert head is not None
        state = PipelineState(
            pipeline=PIPELINE,
            source_identity="test",
            flavor="mariadb",
            revision=0,
            checkpoint=Checkpoint(position=head, window=1, updated_at=now_iso()),
        )
        flow = Flow(mariadb, db, tmp_path_factory.mktemp("seq"), spark, state, hook, read_workers=2)
        assert flow.snapshot() is not None  # the initial load: snapshot rows
        for table, case in CASES.items():
            write(flow, table, 0)
            for statement in case.earlier:
                flow.sql(statement.format(t=f"`{table}`"))
        flow.window()  # rows the target holds from an earlier window
        updater = Updater(mariadb, db)
        updater.start()
        for table, case in CASES.items():
            write(flow, table, 1)
            for step, statement in enumerate(case.statements, start=2):
                flow.sql(statement.format(t=f"`{table}`"))
                write(flow, table, step)
                flow.sql("FLUSH BINARY LOGS")
        updater.stop()
        flow.window()  # every sequence in one window, read from many binlog files
        flow.snapshot()  # the next run's snapshot task: the tables waiting for one
        for table in CASES:
            write(flow, table, 6)
        flow.window()
        yield flow


@pytest.mark.parametrize("table", sorted(CASES))
def test_target_equals_source_after_the_sequence(flow: Flow, table: str) -> None:
    name = f"{flow.db}.{table}"
    decided = flow.ddl_effects(flow.manifests[1], table)
    assert len(decided) == len(CASES[table].statements), decided  # every statement was seen in window 2
    with pymysql.connect(**flow.server.connection_kwargs()) as conn:
        result = compare_table(conn, flow.target, name)
    assert result.matched, f"{result} {result.columns}"
    source = {str(row[0]) for row in flow.server.execute(f"SHOW COLUMNS FROM `{table}`", database=flow.db)}
    target = {c for c in read_table(flow.target, name).column_names if not c.startswith("_binlog_")}
    assert target - source == CASES[table].kept
    assert source <= target


def test_a_column_added_under_the_name_of_a_dropped_one_is_resnapshotted(flow: Flow) -> None:
    """The target keeps a dropped column's values: adding a column of that name again cannot be followed."""
    for table in ("drop_then_add_back", "add_back_a_column_dropped_earlier"):
        name = f"{flow.db}.{table}"
        added = [e for d in flow.manifests[1].ddl for e in d["effects"] if e["table"] == name][-1]
        assert added["action"] == "resnapshot", added
        assert "still holds the dropped column b" in added["reason"]
        assert any(name in s.tables for s in flow.snapshots[1:])
    (dropped,) = [e for d in flow.manifests[0].ddl for e in d["effects"]]  # window 1: the earlier DROP
    assert dropped["dropped_columns"] == ["b"]
    # the snapshot replaced the re-snapshotted tables' schemas; followed drops stay recorded until one does
    assert flow.state.kept_columns == {f"{flow.db}.drop_then_widen": ["b"]}
