"""Schema changes under writes: the target equals the source after each DDL kind (real MariaDB, local Spark).

One database with a table per DDL kind, all selected by pattern (``db.*``), goes through the pipeline's
library steps in order, as ``binlog_cdc`` runs them: an initial snapshot, window 1 (every DDL with writes
before and after it, ``pt-online-schema-change`` under concurrent writes, and a table with a followed DDL
that keeps flowing under concurrent writes), the next run's snapshot (only the tables the schema changes left waiting), window 2. The steps run
once per module; each test checks one DDL kind: what window 1 decided and staged, and that the target
equals the source row by row (and column by column) at the end.
"""

from __future__ import annotations

import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pymysql
import pytest

pytest.importorskip("pyspark")
pytest.importorskip("deltalake")


from airflow_provider_binlog.contract.manifest import Manifest  # noqa: E402
from airflow_provider_binlog.contract.positions import file_index  # noqa: E402
from airflow_provider_binlog.contract.uris import write_json  # noqa: E402
from airflow_provider_binlog.extract.plan import (  # noqa: E402
    capture_start,
    gone_targets,
    kept_columns,
    schema_barriers,
    snapshot_covers,
)
from airflow_provider_binlog.extract.reader import TableTarget  # noqa: E402
from airflow_provider_binlog.extract.window import extract_window  # noqa: E402
from airflow_provider_binlog.hooks.binlog import BinlogHook  # noqa: E402
from airflow_provider_binlog.jobs.merge.job import merge_window  # noqa: E402
from airflow_provider_binlog.jobs.snapshot import run_snapshot  # noqa: E402
from airflow_provider_binlog.operators.commit import with_schema_changes  # noqa: E402
from airflow_provider_binlog.pipeline.ledger import Checkpoint, PipelineState, Snapshot, now_iso  # noqa: E402
from airflow_provider_binlog.pipeline.staging import schema_history, window_path  # noqa: E402
from airflow_provider_binlog.pipeline.tables import parse_tables  # noqa: E402
from airflow_provider_binlog.pipeline.windows import advance_checkpoint, cut_window, mark_window  # noqa: E402
from airflow_provider_binlog.snapshot.ledger import begin_snapshot, finish_snapshot  # noqa: E402
from airflow_provider_binlog.snapshot.plan import (
    PLAN_NAME,  # noqa: E402
    plan_snapshot,  # noqa: E402
)
from airflow_provider_binlog.target import read_table  # noqa: E402
from airflow_provider_binlog.testing.mariadb import LocalMariaDB  # noqa: E402
from airflow_provider_binlog.verify import compare_table  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PIPELINE = "ddl"
TABLES = ("t_default", "t_rename", "t_trunc", "t_drop", "t_osc", "t_flow", "t_narrow", "t_strict")
PT_OSC = shutil.which("pt-online-schema-change")


@dataclass
class Flow:
    """The pipeline's state kept in memory, and its snapshot / window steps run in this process."""

    server: LocalMariaDB
    db: str
    root: Path
    spark: Any
    state: PipelineState
    hook: BinlogHook = field(default_factory=lambda: BinlogHook(pipeline=PIPELINE))
    manifests: list[Manifest] = field(default_factory=list)
    snapshots: list[Snapshot] = field(default_factory=list)
    read_workers: int = 1
    """Processes reading a window of several binlog files (``extract_window``'s ``max_workers``; 1 reads
    serially; more read in parallel whatever the window's size)."""

    @property
    def target(self) -> str:
        return str(self.root / "target")

    def keys(self) -> dict[str, list[str]]:
        described = self.hook.describe_tables(parse_tables(f"{self.db}.*"))
        return {name: list(info.primary_key) for name, info in described.items()}

    def snapshot(self) -> Snapshot | None:
        """Run the snapshot task's steps (mode ``missing``): begin, plan, read + merge, finish."""
        keys = self.keys()
        head = self.hook.server_state().head
        assert head is not None
        state, snapshot = begin_snapshot(
            self.state,
            run_id=f"run{len(self.manifests) + 1}",
            tables=sorted(keys),
            mode="missing",
            head=head,
            staging_uri=lambda seq: f"file://{self.root}/staging/{PIPELINE}/snapshot={seq}",
            new_pipeline=not self.state.snapshots,
        )
        if snapshot is None:
            return None
        with pymysql.connect(**self.server.connection_kwargs()) as conn, conn.cursor() as cur:
            plan = plan_snapshot(
                cur,
                pipeline=PIPELINE,
                seq=snapshot.seq,
                run_id=snapshot.run_id,
                flavor="mariadb",
                start=head.to_dict(),
                keys={t: keys[t] for t in snapshot.tables},
                chunk_rows=500,
            )
        write_json(f"{snapshot.staging_uri}/{PLAN_NAME}", plan)
        summary = run_snapshot(
            self.spark,
            snapshot.staging_uri,
            self.target,
            pipeline=PIPELINE,
            source=self.server.connection_kwargs(),
            max_connections=1,
        )
        rows = int(summary["snapshot"]["rows"])
        self.state = finish_snapshot(state, snapshot.seq, rows, self.target, written=snapshot.tables)
        self.snapshots.append(snapshot)
        return snapshot

    def window(self) -> dict[str, Any]:
        """Run the extract, merge and commit steps of one head window; return its manifest."""
        server = self.hook.server_state()
        assert server.head is not None
        state, window, _ = cut_window(self.state, run_id=f"run{len(self.manifests) + 1}", head=server.head)
        snapshotted = {t for s in state.snapshots for t in s.tables}
        described = self.keys()
        targets = {  # as the extract operator selects them: a snapshotting pipeline loads new tables first
            name: TableTarget(
                name,
                key,
                since=capture_start(state, name),
                captured=name in state.target_tables,
                kept_columns=kept_columns(state, name),
            )
            for name, key in described.items()
            if not state.snapshots or name in snapshotted
        }
        targets.update(gone_targets(state, [f"{self.db}.*"], described))
        for target in targets.values():
            target.barriers = schema_barriers(state, target.name, window.seq)
        window_dir = window_path(f"{self.root}/staging", PIPELINE, window.seq)
        manifest = extract_window(
            self.hook,
            pipeline=PIPELINE,
            window=window,
            tables=targets,
            window_dir=window_dir,
            server=server,
            covers=snapshot_covers(state, targets),
            schemas=schema_history(state, window, window_dir.parent),
            max_workers=self.read_workers,
            parallel_min_bytes=0,
        )
        merge_window(
            self.spark,
            f"file://{self.root}/staging/{PIPELINE}/window={window.seq}",
            self.target,
            pipeline=PIPELINE,
        )
        merged = mark_window(state, window.seq, status="merged", manifest_uri=str(window_dir))
        self.state = with_schema_changes(
            merged.model_copy(
                update={"checkpoint": advance_checkpoint(merged, merged.window(window.seq))}
            ).with_target(self.target, manifest.changed_tables()),
            manifest,
            window,
        )
        self.manifests.append(manifest)
        return manifest

    def sql(self, *statements: str) -> None:
        self.server.execute(*statements, database=self.db)

    def mismatch(self, table: str) -> str | None:
        """Return what differs between ``db.table`` and its target table (rows, and the set of columns)."""
        name = f"{self.db}.{table}"
        with pymysql.connect(**self.server.connection_kwargs()) as conn:
            result = compare_table(conn, self.target, name)
            with conn.cursor() as cur:
                cur.execute(f"SHOW COLUMNS FROM `{self.db}`.`{table}`")
                source_columns = {row[0] for row in cur.fetchall()}
        target_columns = {
            c for c in read_table(self.target, name).column_names if not c.startswith("_binlog_")
        }
        if not result.matched:
            return str(result)
        if source_columns != target_columns:
            return f"{name}: source columns {sorted(source_columns)}, target columns {sorted(target_columns)}"
        return None

    def ddl_effects(self, manifest: Manifest, table: str) -> list[tuple[str, str]]:
        """Return ``(action, statement)`` of each DDL decision the manifest records for ``table``."""
        name = f"{self.db}.{table}"
        return [
            (e["action"], d["query"][:60]) for d in manifest.ddl for e in d["effects"] if e["table"] == name
        ]


class Writer(threading.Thread):
    """Insert and update rows of some tables in a loop until stopped (the writes going on during a DDL)."""

    def __init__(self, server: LocalMariaDB, db: str, tables: tuple[str, ...], first_id: int) -> None:
        super().__init__(daemon=True)
        self.server, self.db, self.tables, self.next_id = server, db, tables, first_id
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
                    for table in self.tables:
                        cur.execute(f"INSERT INTO {table} (id, v) VALUES (%s, 'w')", (self.next_id,))
                        cur.execute(
                            f"UPDATE {table} SET v = CONCAT(v, '+') WHERE id = %s", (self.next_id % 97 + 1,)
                        )
                    self.next_id += 1
                    self.writes += 1
                    time.sleep(0.01)
        except BaseException as err:  # surfaced by stop()
            self.error = err

    def stop(self) -> None:
        self.stopped.set()
        self.join(timeout=30)
        assert self.error is None, self.error
        assert self.writes > 0


def pt_osc(server: LocalMariaDB, db: str, table: str, alter: str) -> None:
    """Run ``pt-online-schema-change`` on ``db.table`` (shadow table, triggers, copy in chunks, RENAME cut-over)."""
    assert PT_OSC is not None
    dsn = f"h=127.0.0.1,P={server.port},u=root,p={server.root_password},D={db},t={table}"
    subprocess.run(
        [PT_OSC, "--alter", alter, dsn, "--execute", "--no-version-check", "--recursion-method=none",
         "--chunk-size=40", "--no-check-unique-key-change"],
        check=True, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


@pytest.fixture(scope="module")
def flow(mariadb: LocalMariaDB, spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Flow]:
    """Run the pipeline through every schema change once (see the module docstring)."""
    if PT_OSC is None:
        pytest.skip("pt-online-schema-change (Debian package percona-toolkit) is not installed")
    with pytest.MonkeyPatch.context() as patch, mariadb.scratch_database("ddl") as db:
        patch.setenv("AIRFLOW_CONN_BINLOG_DEFAULT", mariadb.uri())
        for table in TABLES:
            mariadb.execute(
                f"CREATE TABLE {table} (id INT PRIMARY KEY, v VARCHAR(200))",
                f"INSERT INTO {table} SELECT seq, CONCAT('r', seq) FROM seq_1_to_100",
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
            checkpoint=Checkpoint(position=(head), window=1, updated_at=now_iso()),
        )
        flow = Flow(mariadb, db, tmp_path_factory.mktemp("ddl"), spark, state, hook)
        assert flow.snapshot() is not None  # the initial load
        writer = Writer(mariadb, db, ("t_osc", "t_flow"), first_id=1000)
        writer.start()
        flow.sql(
            "UPDATE t_default SET v = 'before' WHERE id <= 10",
            "ALTER TABLE t_default ADD COLUMN c VARCHAR(10) DEFAULT 'dflt' AFTER id",
            "UPDATE t_default SET v = 'after' WHERE id BETWEEN 5 AND 15",
            "INSERT INTO t_default (id, v, c) VALUES (1001, 'new', 'mine'), (1002, 'new', DEFAULT)",
            "DELETE FROM t_default WHERE id = 20",
            "UPDATE t_flow SET v = 'before' WHERE id <= 10",
            "ALTER TABLE t_flow ADD COLUMN n INT NULL",  # while the writer thread writes to it
            "UPDATE t_flow SET n = id * 2 WHERE id BETWEEN 5 AND 15",
            "INSERT INTO t_flow (id, v, n) VALUES (900, 'new', 7)",
            "UPDATE t_rename SET v = 'before' WHERE id <= 10",
            "ALTER TABLE t_rename CHANGE COLUMN v v_renamed VARCHAR(200)",
            "UPDATE t_rename SET v_renamed = 'after' WHERE id BETWEEN 5 AND 15",
            "INSERT INTO t_trunc (id, v) VALUES (1001, 'before truncate')",
            "UPDATE t_trunc SET v = 'before' WHERE id <= 10",
            "TRUNCATE TABLE t_trunc",
            "INSERT INTO t_trunc (id, v) VALUES (5, 'after truncate'), (1002, 'after truncate')",
            "UPDATE t_drop SET v = 'before' WHERE id <= 10",
            "DROP TABLE t_drop",
            "CREATE TABLE t_drop (id INT PRIMARY KEY, w INT NOT NULL)",
            "INSERT INTO t_drop SELECT seq, seq * 3 FROM seq_1_to_30",
        )
        for table, sql_mode in (("t_narrow", ""), ("t_strict", "@@GLOBAL.sql_mode")):  # one session each
            flow.sql(
                f"UPDATE {table} SET v = 'before' WHERE id <= 10",
                f"SET SESSION sql_mode = {sql_mode or repr(sql_mode)}",
                # values that do not fit only under non-strict mode: 'r100' and longer are cut to 3 characters
                f"ALTER TABLE {table} MODIFY v VARCHAR({3 if table == 't_narrow' else 150})",
                f"UPDATE {table} SET v = 'aft' WHERE id BETWEEN 5 AND 15",
                f"INSERT INTO {table} (id, v) VALUES (1001, 'new')",
            )
        pt_osc(mariadb, db, "t_osc", "ADD COLUMN extra VARCHAR(10) NOT NULL DEFAULT 'osc'")
        time.sleep(0.3)  # writes after the cut-over too
        writer.stop()
        flow.window()
        flow.snapshot()  # the next run's snapshot task: only the tables waiting for one
        flow.sql(
            "UPDATE t_default SET v = 'window 2' WHERE id BETWEEN 50 AND 55",
            "UPDATE t_rename SET v_renamed = 'window 2' WHERE id = 60",
            "INSERT INTO t_trunc (id, v) VALUES (7, 'window 2')",
            "DELETE FROM t_drop WHERE id = 30",
            "UPDATE t_osc SET extra = 'w2' WHERE id = 3",
            "INSERT INTO t_flow (id, v) VALUES (5000, 'window 2')",
        )
        flow.window()
        yield flow


def test_add_column_with_default_is_resnapshotted_and_existing_rows_show_it(flow: Flow) -> None:
    first = flow.manifests[0]
    name = f"{flow.db}.t_default"
    assert [a for a, _ in flow.ddl_effects(first, "t_default")] == ["resnapshot"], first.ddl
    assert [r["table"] for r in first.resnapshots].count(name) == 1
    assert first.schema_skipped_row_events[name] >= 3  # the update, the insert and the delete after it
    assert first.tables[name].rows == 10  # only the update before the ALTER
    (resnapshot,) = [s for s in flow.snapshots[1:] if name in s.tables]
    assert resnapshot.reason == "schema_change"
    assert not flow.state.resnapshots_needed
    assert flow.mismatch("t_default") is None
    rows = read_table(flow.target, name).to_pylist()
    assert {r["c"] for r in rows if r["id"] < 1000} == {"dflt"}


def test_nullable_add_column_is_followed_without_snapshot(flow: Flow) -> None:
    name = f"{flow.db}.t_flow"
    assert [a for a, _ in flow.ddl_effects(flow.manifests[0], "t_flow")] == ["follow"]
    assert all(name not in s.tables for s in flow.snapshots[1:])
    assert flow.mismatch("t_flow") is None


def test_renamed_column_is_resnapshotted_without_a_stale_column(flow: Flow) -> None:
    assert [a for a, _ in flow.ddl_effects(flow.manifests[0], "t_rename")] == ["resnapshot"]
    assert flow.mismatch("t_rename") is None  # also: no column 'v' left behind in the target


def test_truncate_removes_rows_before_it_and_keeps_rows_after_it(flow: Flow) -> None:
    name = f"{flow.db}.t_trunc"
    first = flow.manifests[0]
    assert [a for a, _ in flow.ddl_effects(first, "t_trunc")] == ["follow"]
    assert first.tables[name].ops == {"c": 3, "t": 1, "u": 10}  # a marker, no row event left out
    assert all(name not in s.tables for s in flow.snapshots[1:])  # exact without a re-snapshot
    assert flow.mismatch("t_trunc") is None
    ids = sorted(r["id"] for r in read_table(flow.target, name).to_pylist())
    assert ids == [5, 7, 1002]


def test_dropped_and_created_again_with_another_schema(flow: Flow) -> None:
    decided = flow.ddl_effects(flow.manifests[0], "t_drop")
    # the DROP empties the target at its place; the CREATE of a name the target holds is re-snapshotted,
    # which replaces the old table's columns
    assert [(a, q.split()[0]) for a, q in decided] == [("follow", "DROP"), ("resnapshot", "CREATE")]
    (dropped,) = [d for d in flow.manifests[0].dropped if d["table"] == f"{flow.db}.t_drop"]
    assert dropped["marker_seq"] is not None
    assert flow.mismatch("t_drop") is None  # the old rows and the old column 'v' are gone
    assert len(read_table(flow.target, f"{flow.db}.t_drop")) == 29


def test_narrowing_under_a_non_strict_sql_mode_is_resnapshotted(flow: Flow) -> None:
    name = f"{flow.db}.t_narrow"
    (decided,) = flow.ddl_effects(flow.manifests[0], "t_narrow")
    assert decided[0] == "resnapshot"
    assert any(name in s.tables for s in flow.snapshots[1:])
    assert flow.mismatch("t_narrow") is None  # the server cut 'r100' to 'r10' without a row event
    rows = {r["id"]: r["v"] for r in read_table(flow.target, name).to_pylist()}
    assert rows[100] == "r10"
    assert rows[1001] == "new"


def test_a_type_change_under_strict_mode_is_followed(flow: Flow) -> None:
    name = f"{flow.db}.t_strict"
    assert [a for a, _ in flow.ddl_effects(flow.manifests[0], "t_strict")] == ["follow"]
    assert all(name not in s.tables for s in flow.snapshots[1:])
    assert flow.mismatch("t_strict") is None


def test_online_schema_change_cut_over_under_writes(flow: Flow) -> None:
    name = f"{flow.db}.t_osc"
    decided = flow.ddl_effects(flow.manifests[0], "t_osc")
    assert [q.split()[0] for a, q in decided] == ["RENAME"], decided  # not the triggers, the cut-over
    assert decided[0][0] == "resnapshot"
    assert flow.mismatch("t_osc") is None
    rows = read_table(flow.target, name).to_pylist()
    assert {r["extra"] for r in rows if r["id"] != 3} == {"osc"}


def test_a_table_keeps_flowing_beside_the_schema_changes_of_others(flow: Flow) -> None:
    name = f"{flow.db}.t_flow"
    assert flow.manifests[0].schema_skipped_row_events.keys() == {
        f"{flow.db}.{t}" for t in ("t_default", "t_rename", "t_drop", "t_osc", "t_narrow")
    }
    first = flow.manifests[0]
    staged = pq.read_table(flow.root / "staging" / PIPELINE / f"window={first.window}" / name).to_pylist()
    last_ddl = max((file_index(d["file"]), d["pos"]) for d in first.ddl)
    assert any(
        (file_index(r["_binlog_file"]), r["_binlog_pos"]) > last_ddl for r in staged
    )  # after every DDL
    assert [s.tables for s in flow.snapshots[1:]] == [
        [f"{flow.db}.{t}" for t in ("t_default", "t_drop", "t_narrow", "t_osc", "t_rename")]
    ]
    assert flow.mismatch("t_flow") is None
