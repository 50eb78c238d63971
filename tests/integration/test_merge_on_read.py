"""Merge-on-read against real Spark (the shared Spark Connect server) and real Delta tables.

Each test stages windows in the contract format (``test_merge.stage_window``), merges them with
``write_mode="merge_on_read"`` and checks the target against a model of the source, row by row, through every
reader available here: the provider's ``read_table``, delta-rs's DataFusion scan and Polars. What merge-on-read
promises besides the rows: no data file a window finds is rewritten by it, each replaced row is marked in a
deletion vector of its file, and a copy-on-write merge after it (a truncate, a CoW window) never brings a
deleted row back.
"""

from __future__ import annotations

import dataclasses
import itertools
import random
import signal
import subprocess
import sys
from decimal import Decimal
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pytest

pytest.importorskip("pyspark")
deltalake = pytest.importorskip("deltalake")

from test_merge import ORDER_TYPES, ORDERS, PIPELINE, StagedTableSpec, order, orders, stage_window  # noqa: E402

from airflow_provider_binlog import maintenance as maintenance_module  # noqa: E402
from airflow_provider_binlog.contract import delta_log  # noqa: E402
from airflow_provider_binlog.contract.columns import OP_TRUNCATE  # noqa: E402
from airflow_provider_binlog.contract.delta_log import file_vectors, live_rows  # noqa: E402
from airflow_provider_binlog.contract.manifest import SNAPSHOT_KIND, read_manifest, write_manifest  # noqa: E402
from airflow_provider_binlog.contract.refusals import refused_tables  # noqa: E402
from airflow_provider_binlog.exceptions import BinlogConfigError  # noqa: E402
from airflow_provider_binlog.jobs.merge import merge_on_read as merge_on_read_module  # noqa: E402
from airflow_provider_binlog.jobs.merge.job import merge_window  # noqa: E402
from airflow_provider_binlog.maintenance import compact_table, compact_with_vectors, vacuum_table  # noqa: E402
from airflow_provider_binlog.target import live_file_uris, read_table, table_uri  # noqa: E402
from airflow_provider_binlog.testing.readers import duckdb_delta  # noqa: E402

pytestmark = pytest.mark.integration

Model = dict[int, tuple[str, Decimal]]


class Flow:
    """Windows of one table, staged and merged in turn, and the source as a model of what the target must hold."""

    def __init__(
        self, spark: Any, staging: Path, target: str, mode: str = "merge_on_read", **merge_args: Any
    ) -> None:
        self.spark, self.staging, self.target, self.mode = spark, staging, target, mode
        self.merge_args = merge_args
        self.seq = 0
        self.model: Model = {}

    def window(self, changes: list[tuple[str, dict[str, Any]]], *, mode: str | None = None) -> dict[str, Any]:
        """Stage and merge one window; apply it to the model; return the table's merge summary."""
        self.seq += 1
        uri = stage_window(self.staging, self.seq, orders(changes))
        if truncates := sum(op == OP_TRUNCATE for op, _ in changes):  # the manifest counts the marker too
            manifest = read_manifest(uri)
            entry = manifest.tables["shop.orders"]
            entry = dataclasses.replace(entry, ops={**entry.ops, OP_TRUNCATE: truncates})
            write_manifest(uri, dataclasses.replace(manifest, tables={"shop.orders": entry}))
        summary = merge_window(
            self.spark, uri, self.target, pipeline=PIPELINE, write_mode=mode or self.mode, **self.merge_args
        )
        for op, row in changes:
            if op == OP_TRUNCATE:
                self.model.clear()
            elif op == "d":
                self.model.pop(row["id"], None)
            else:
                self.model[row["id"]] = (row["status"], row["amount"])
        return summary["tables"]["shop.orders"]

    @property
    def uri(self) -> str:
        return table_uri(self.target, "shop.orders")

    def data_files(self) -> set[str]:
        return set(pa.table(deltalake.DeltaTable(self.uri).get_add_actions()).column("path").to_pylist())

    def check(self) -> None:
        """The target equals the model through each reader; every key has one live row."""
        expected = sorted((k, s, a) for k, (s, a) in self.model.items())
        got = sorted(
            (r["id"], r["status"], r["amount"]) for r in read_table(self.target, "shop.orders").to_pylist()
        )
        assert got == expected
        dt = deltalake.DeltaTable(self.uri)
        everything = live_rows(dt)  # tombstones included: one physical live row per key ever seen
        ids = everything.column("id").to_pylist()
        assert len(ids) == len(set(ids))
        polars_live = pl.read_delta(self.uri).filter(~pl.col("_binlog_deleted"))
        assert sorted(polars_live["id"].to_list()) == [k for k, _, _ in expected]
        duckdb = duckdb_delta()
        assert duckdb is not None, "the test extra installs duckdb and duckdb-extension-delta"
        query = "SELECT id, status, amount FROM delta_scan(?) WHERE NOT _binlog_deleted"
        assert sorted(duckdb.execute(query, [self.uri]).fetchall()) == expected


def _ops(rng: random.Random, model: Model, base: int, count: int) -> list[tuple[str, dict[str, Any]]]:
    """Return ``count`` random changes: updates and deletes of existing keys, inserts of new and deleted keys."""
    changes: list[tuple[str, dict[str, Any]]] = []
    live = set(model)
    for n in range(count):
        kind = rng.random()
        if live and kind < 0.6:
            key = rng.choice(sorted(live))
            changes.append(("u", order(key, f"u{base + n}", f"{rng.randint(1, 999)}.50")))
        elif live and kind < 0.8:
            key = rng.choice(sorted(live))
            live.discard(key)
            changes.append(("d", order(key, "gone", "0.00")))
        else:
            key = rng.randint(0, 400)  # new keys and keys deleted before
            if key in live:
                continue
            live.add(key)
            changes.append(("c", order(key, f"c{base + n}", "1.00")))
    return changes


def test_random_updates_deletes_and_reinserts_are_marked_in_deletion_vectors_not_rewritten(
    spark: Any, staging: Path, target: str
) -> None:
    flow = Flow(spark, staging, target)
    first = flow.window([("c", order(i, "new", f"{i}.00")) for i in range(0, 300)], mode="copy_on_write")
    assert first["write_mode"] == "copy_on_write"
    base_files = flow.data_files()
    rng = random.Random(31)
    deleted_total = 0
    for n in range(4):
        result = flow.window(_ops(rng, flow.model, base=n * 100, count=60))
        assert result["write_mode"] == "merge_on_read"
        assert result["files_removed"] == 0
        deleted_total += result["rows_deleted"]
        flow.check()
        assert base_files <= flow.data_files()  # no file the windows found was rewritten
    dt = deltalake.DeltaTable(flow.uri)
    vectors = file_vectors(dt)
    assert vectors
    assert sum(v.cardinality for v in vectors.values()) == deleted_total
    with pytest.raises(BinlogConfigError, match="deletion vectors"):
        live_file_uris(target, "shop.orders")


def test_runs_of_replaced_rows_and_single_ones_are_each_marked_once(
    spark: Any, staging: Path, target: str
) -> None:
    flow = Flow(spark, staging, target)
    flow.window([("c", order(i, "new", f"{i}.00")) for i in range(300)], mode="copy_on_write")

    every = flow.window([("u", order(i, "all", "2.00")) for i in range(300)])  # every row of every file: runs
    flow.check()
    scattered = flow.window([("u", order(i, "some", "3.00")) for i in (0, 2, 3, 4, 7, 150, 299)])
    flow.check()

    assert (every["write_mode"], every["rows_deleted"]) == ("merge_on_read", 300)
    assert (scattered["write_mode"], scattered["rows_deleted"]) == ("merge_on_read", 7)
    vectors = file_vectors(deltalake.DeltaTable(flow.uri))
    assert sum(v.cardinality for v in vectors.values()) == 307


def test_a_key_moved_and_a_window_merged_again_stay_exact(spark: Any, staging: Path, target: str) -> None:
    flow = Flow(spark, staging, target)
    flow.window([("c", order(i, "new", "1.00")) for i in range(20)], mode="copy_on_write")
    moved = [("d", order(3, "new", "1.00")), ("c", order(1003, "moved", "1.00"))]  # a primary key update
    result = flow.window([*moved, ("u", order(4, "x", "2.00")), ("u", order(4, "y", "3.00"))])
    assert result["rows_deleted"] == 2  # the old row of key 3 and of key 4 (its newest change wins)
    flow.check()
    version = deltalake.DeltaTable(flow.uri).version()
    again = merge_window(
        spark, str(staging / PIPELINE / "window=2"), target, pipeline=PIPELINE, write_mode="merge_on_read"
    )
    assert again["tables"]["shop.orders"]["skipped"]
    assert deltalake.DeltaTable(flow.uri).version() == version
    flow.check()


def test_windows_merged_out_of_order_on_read_give_the_copy_on_write_target(
    spark: Any, tmp_path: Path
) -> None:
    rng = random.Random(7)
    seed: Model = {}
    windows = [[("c", order(i, "new", "1.00")) for i in range(50)]]
    for n in range(3):
        ops = _ops(rng, seed, base=n * 10, count=30)
        for op, row in ops:
            if op == "d":
                seed.pop(row["id"], None)
            else:
                seed[row["id"]] = (row["status"], row["amount"])
        windows.append(ops)
    targets = {}
    for mode, order_of_merges in (("copy_on_write", [1, 2, 3, 4]), ("merge_on_read", [1, 4, 2, 3])):
        staging, target = tmp_path / mode / "staging", str(tmp_path / mode / "target")
        uris = [stage_window(staging, seq, orders(changes)) for seq, changes in enumerate(windows, start=1)]
        for seq in order_of_merges:
            merge_window(
                spark,
                uris[seq - 1],
                target,
                pipeline=PIPELINE,
                write_mode=mode if seq > 1 else "copy_on_write",
            )
        every = read_table(target, "shop.orders", include_tombstones=True, with_metadata=True).to_pylist()
        targets[mode] = sorted(every, key=lambda row: row["id"])
    assert targets["merge_on_read"] == targets["copy_on_write"]


def _merged_on_read(flow: Flow) -> None:
    """A table of 40 rows, then a window merged on read that updates every third row and deletes one."""
    flow.window([("c", order(i, "new", "1.00")) for i in range(40)], mode="copy_on_write")
    flow.window([("u", order(i, "mor", "2.00")) for i in range(0, 40, 3)] + [("d", order(10, "", "0.00"))])
    assert file_vectors(deltalake.DeltaTable(flow.uri))


def test_a_copy_on_write_window_after_merge_on_read_never_brings_a_deleted_row_back(
    spark: Any, staging: Path, target: str
) -> None:
    flow = Flow(spark, staging, target)
    _merged_on_read(flow)
    result = flow.window(
        [("u", order(5, "cow", "5.00")), ("u", order(6, "cow", "6.00"))], mode="copy_on_write"
    )
    # both files can hold keys 5 and 6: the first load's and the merge-on-read window's (overlapping ranges)
    assert (result["write_mode"], result["files_removed"]) == ("copy_on_write", 2)
    flow.check()
    assert file_vectors(deltalake.DeltaTable(flow.uri)) == {}  # the rewritten file took its DV with it


def test_a_truncate_after_merge_on_read_empties_the_table_whatever_the_mode(
    spark: Any, staging: Path, target: str
) -> None:
    flow = Flow(spark, staging, target)
    _merged_on_read(flow)
    marker = {"id": None, "status": None, "amount": None}
    result = flow.window([(OP_TRUNCATE, marker), ("c", order(7, "after", "7.00"))])
    assert result["write_mode"] == "copy_on_write"  # a whole-table operation
    flow.check()
    assert file_vectors(deltalake.DeltaTable(flow.uri)) == {}


def test_compaction_leaves_key_ranged_files_without_vectors_and_vacuum_keeps_the_vectors_in_use(
    spark: Any, staging: Path, target: str
) -> None:
    flow = Flow(spark, staging, target)
    _merged_on_read(flow)
    flow.window([("u", order(i, "again", "3.00")) for i in range(1, 40, 4)])
    dv_files = sorted(Path(flow.uri).glob("deletion_vector_*.bin"))
    assert len(dv_files) == 2  # one per merge-on-read window; the second replaced the first's vector
    in_use = {v.relative_path() for v in file_vectors(deltalake.DeltaTable(flow.uri)).values()}
    assert len(in_use) == 1

    freed = vacuum_table(flow.uri, retention_hours=0)
    assert sorted(p.name for p in Path(flow.uri).glob("deletion_vector_*.bin")) == sorted(in_use)
    assert freed.files == 1  # the superseded vector's file; no data file is unreferenced
    flow.check()

    assert compact_with_vectors(deltalake.DeltaTable(flow.uri), ["id"], dry_run=True).files_removed == 3
    compacted = compact_table(flow.uri)
    assert (compacted.files_removed, compacted.files_added, compacted.conflict) == (3, 1, False)
    dt = deltalake.DeltaTable(flow.uri)
    assert file_vectors(dt) == {}
    flow.check()
    ranges = pa.table(dt.get_add_actions(flatten=True)).select(["min.id", "max.id"]).to_pylist()
    assert ranges == [{"min.id": 0, "max.id": 39}]
    assert compact_table(flow.uri).files_removed == 0  # nothing more to do
    vacuum_table(flow.uri, retention_hours=0)
    assert list(Path(flow.uri).glob("deletion_vector_*.bin")) == []
    flow.check()


def test_compaction_reads_the_table_a_target_file_at_a_time_and_writes_disjoint_key_ranges(
    spark: Any, staging: Path, target: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    flow = Flow(spark, staging, target, target_file_bytes=6000)
    flow.window([("c", order(i, "new", "1.00")) for i in range(0, 800, 2)], mode="copy_on_write")
    rng = random.Random(31)
    for n in range(3):  # random updates, deletes and inserts all over the key range: files that span it
        flow.window(_ops(rng, flow.model, 1000 * n, 60))
    flow.check()
    before = deltalake.DeltaTable(flow.uri)
    files_before = len(before.get_add_actions())
    read: list[str] = []
    reads_at_first_chunk: list[int] = []
    live_rows_of = maintenance_module._live_rows_of

    def counting(table: Any, f: Any, *args: Any) -> Any:
        read.append(f.path)
        return live_rows_of(table, f, *args)

    chunks = maintenance_module.key_ordered_chunks

    def watching(*args: Any) -> Any:
        for chunk in chunks(*args):
            reads_at_first_chunk.append(len(read))
            yield chunk

    monkeypatch.setattr(maintenance_module, "_live_rows_of", counting)
    monkeypatch.setattr(maintenance_module, "key_ordered_chunks", watching)
    compacted = compact_table(flow.uri)

    assert compacted.files_removed == files_before > 4
    assert sorted(read) == sorted(set(read))  # each file read once
    assert reads_at_first_chunk[0] < files_before  # the first file went out before the last was read
    dt = deltalake.DeltaTable(flow.uri)
    assert file_vectors(dt) == {}
    ranges = (
        pa.table(dt.get_add_actions(flatten=True)).select(["min.id", "max.id", "num_records"]).to_pylist()
    )
    ranges.sort(key=lambda r: r["min.id"])
    assert len(ranges) == compacted.files_added > 1
    assert all(a["max.id"] < b["min.id"] for a, b in itertools.pairwise(ranges))
    assert sum(r["num_records"] for r in ranges) == live_rows(dt).num_rows
    flow.check()
    flow.window(_ops(rng, flow.model, 9000, 40))  # and merges on read go on over the compacted files
    flow.check()


def test_a_resnapshot_of_a_table_merged_on_read_replaces_its_rows_and_its_vectors(
    spark: Any, staging: Path, target: str
) -> None:
    flow = Flow(spark, staging, target)
    _merged_on_read(flow)  # windows 1 and 2
    snapshot = orders([("r", order(i, "snap", "9.00")) for i in range(0, 40, 2)])  # the odd keys were deleted
    merge_window(spark, stage_window(staging, 3, snapshot, kind=SNAPSHOT_KIND), target, pipeline=PIPELINE,
                 write_mode="merge_on_read")  # fmt: skip
    flow.seq, flow.model = 3, {i: ("snap", Decimal("9.00")) for i in range(0, 40, 2)}
    flow.check()
    assert file_vectors(deltalake.DeltaTable(flow.uri)) == {}
    flow.window([("u", order(4, "after", "4.00"))])
    assert file_vectors(deltalake.DeltaTable(flow.uri))
    flow.check()


def test_a_lost_deletion_vector_file_holds_back_only_its_table_and_a_resnapshot_heals_it(
    spark: Any, staging: Path, target: str
) -> None:
    flow = Flow(spark, staging, target)
    _merged_on_read(flow)  # windows 1 and 2
    for vector_file in Path(flow.uri).glob("deletion_vector_*.bin"):
        vector_file.unlink()  # as delta-rs's full vacuum does to vector files in use
    items = {
        "shop.items": StagedTableSpec(ORDERS, [("c", order(1, "item", "1.00"))], mysql_types=ORDER_TYPES)
    }
    window = stage_window(staging, 3, {**orders([("u", order(5, "lost", "5.00"))]), **items})

    summary = merge_window(spark, window, target, pipeline=PIPELINE)

    entry = summary["tables"]["shop.orders"]
    assert entry["skipped"]
    assert "window 3 is not merged into shop.orders" in entry["refused"]
    assert "deletion vector file" in entry["refused"]
    assert '"tables": "shop.orders"' in entry["refused"]  # the re-snapshot remedy
    assert summary["tables"]["shop.items"]["rows_written"] == 1  # the other table of the window merged
    assert [r["id"] for r in read_table(target, "shop.items").to_pylist()] == [1]
    record = refused_tables(window)["shop.orders"]
    assert record["reason"].startswith("the merge of window 3 was refused: a deletion vector of the target")

    # The re-snapshot reads the target without its vectors and keeps each key's newest version: exact.
    flow.model[5] = ("lost", Decimal("5.00"))  # the source, window 3's update included
    snapshot = orders([("r", order(k, s, str(a))) for k, (s, a) in sorted(flow.model.items())])
    merge_window(spark, stage_window(staging, 4, snapshot, kind=SNAPSHOT_KIND), target, pipeline=PIPELINE)
    flow.seq = 4
    flow.check()
    assert file_vectors(deltalake.DeltaTable(flow.uri)) == {}
    flow.window([("u", order(6, "after", "6.00"))])
    flow.check()


def test_a_column_added_after_deletion_vectors_exist_is_merged_on_read(
    spark: Any, staging: Path, target: str
) -> None:
    flow = Flow(spark, staging, target)
    _merged_on_read(flow)
    wider = ORDERS.append(pa.field("note", pa.string()))
    changes = [
        ("u", {**order(8, "noted", "8.00"), "note": "gift"}),
        ("c", {**order(77, "new", "7.00"), "note": None}),
    ]
    uri = stage_window(staging, 3, {"shop.orders": StagedTableSpec(wider, changes, mysql_types=ORDER_TYPES)})
    result = merge_window(spark, uri, target, pipeline=PIPELINE, write_mode="merge_on_read")["tables"][
        "shop.orders"
    ]
    assert (result["write_mode"], result["rows_deleted"]) == ("merge_on_read", 1)
    flow.model[8], flow.model[77] = ("noted", Decimal("8.00")), ("new", Decimal("7.00"))
    flow.check()
    notes = {r["id"]: r["note"] for r in read_table(target, "shop.orders").to_pylist()}
    assert (notes[8], notes[77], notes[9]) == ("gift", None, None)


KILLED_AT_COMMIT = """
import os, signal, sys
from pyspark.sql import SparkSession
from airflow_provider_binlog.jobs.merge import merge_on_read
from airflow_provider_binlog.jobs.merge.job import merge_window

def killed(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGKILL)  # after the new files and the DV file are written, before the commit

merge_on_read.commit = killed
spark = SparkSession.builder.remote(sys.argv[1]).getOrCreate()
spark.conf.set("spark.sql.session.timeZone", "UTC")
spark.conf.set("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
merge_window(spark, sys.argv[2], sys.argv[3], pipeline=sys.argv[4], write_mode="merge_on_read")
"""


def test_a_merge_killed_between_its_vectors_and_its_commit_leaves_no_trace_readers_see_and_merges_once_on_retry(
    spark: Any, spark_connect: Any, staging: Path, target: str
) -> None:
    flow = Flow(spark, staging, target)
    _merged_on_read(flow)
    before = sorted(flow.model.items())
    changes = [("u", order(i, "retried", "4.00")) for i in range(0, 40, 5)]
    window = stage_window(staging, 3, orders(changes))
    version = deltalake.DeltaTable(flow.uri).version()
    killed = subprocess.run(
        [sys.executable, "-c", KILLED_AT_COMMIT, spark_connect.url, window, target, PIPELINE],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    assert deltalake.DeltaTable(flow.uri).version() == version  # nothing committed
    assert len(list(Path(flow.uri).glob("deletion_vector_*.bin"))) == 2  # the killed merge's is unreferenced
    flow.check()  # readers see the table as before the window
    assert sorted(flow.model.items()) == before

    retried = merge_window(spark, window, target, pipeline=PIPELINE, write_mode="merge_on_read")  # the retry
    assert retried["tables"]["shop.orders"]["rows_deleted"] == len(changes)
    flow.model.update({row["id"]: (row["status"], row["amount"]) for _, row in changes})
    flow.check()
    orphans = vacuum_table(flow.uri, retention_hours=0)
    assert orphans.files >= 2  # the killed merge's new data file and its DV file (and superseded vectors)
    assert len(list(Path(flow.uri).glob("deletion_vector_*.bin"))) == 1
    flow.check()


def test_a_compaction_committing_during_a_merge_makes_the_merge_plan_again(
    spark: Any, staging: Path, target: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    flow = Flow(spark, staging, target)
    _merged_on_read(flow)
    compactions: list[Any] = []
    commit_of_merge = merge_on_read_module.commit

    def compaction_first(*args: Any, **kwargs: Any) -> int:
        if not compactions:  # another writer commits between the merge's read and its commit
            compactions.append(compact_table(flow.uri))
        return commit_of_merge(*args, **kwargs)

    monkeypatch.setattr(merge_on_read_module, "commit", compaction_first)
    result = flow.window([("u", order(i, "after", "5.00")) for i in range(1, 40, 7)])
    assert compactions[0].files_removed == 2
    assert not compactions[0].conflict
    assert result["write_mode"] == "merge_on_read"  # planned again on the compacted files
    flow.check()


def test_a_merge_committing_during_a_compaction_makes_the_compaction_a_no_op(
    spark: Any, staging: Path, target: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    flow = Flow(spark, staging, target)
    _merged_on_read(flow)
    real_commit = delta_log.commit

    def merge_first(dt: Any, actions: Any, *, operation: str, **kwargs: Any) -> int:
        if operation == "OPTIMIZE":
            flow.window([("d", order(2, "", "0.00")), ("c", order(99, "late", "9.00"))])
        return real_commit(dt, actions, operation=operation, **kwargs)

    monkeypatch.setattr(delta_log, "commit", merge_first)
    assert compact_table(flow.uri).conflict
    flow.check()
    monkeypatch.setattr(delta_log, "commit", real_commit)
    assert not compact_table(flow.uri).conflict  # the next maintenance run compacts
    assert file_vectors(deltalake.DeltaTable(flow.uri)) == {}
    flow.check()


def test_a_window_of_new_keys_only_adds_files_and_leaves_the_protocol_as_it_was(
    spark: Any, staging: Path, target: str
) -> None:
    flow = Flow(spark, staging, target)
    flow.window([("c", order(i, "new", "1.00")) for i in range(10)], mode="copy_on_write")
    files = flow.data_files()
    flow.merge_args["driver_max_rows"] = (
        0  # auto on Spark: the driver would rewrite these small files (ADR 0040)
    )
    result = flow.window([("c", order(i, "later", "2.00")) for i in range(10, 20)], mode="auto")
    assert (result["write_mode"], result["rows_deleted"], result["rows_written"]) == ("merge_on_read", 0, 10)
    assert files < flow.data_files()  # the first file is not rewritten
    assert not delta_log.supports_deletion_vectors(
        deltalake.DeltaTable(flow.uri)
    )  # plain readers still read it
    assert len(live_file_uris(target, "shop.orders")) == 2
    flow.check()
