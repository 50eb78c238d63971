"""Integration tests of the key-range file layout (``docs/adr/0020-key-range-file-layout.md``).

Real Spark (the session's Spark Connect server) and real deltalake tables. Windows are staged with
``test_merge``'s helper; which files a window must rewrite is read from the data files themselves (which
file holds which key), never from the merge's own plan. Small target file sizes give tables of many files.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

pytest.importorskip("pyspark")
deltalake = pytest.importorskip("deltalake")

from test_merge import ORDERS, PIPELINE, StagedTableSpec, order, orders, stage_window  # noqa: E402

from airflow_provider_binlog.contract.columns import BUCKET_COLUMN, OP_TRUNCATE  # noqa: E402
from airflow_provider_binlog.contract.delta import (  # noqa: E402
    BUCKETS_PROPERTY,
    KEY_RANGE_LAYOUT,
    LAYOUT_PROPERTY,
    OWNER_PROPERTY,
    PRIMARY_KEY_PROPERTY,
    STAGING_DIR,
    STATS_COLUMNS_PROPERTY,
    TARGET_FILE_BYTES_PROPERTY,
    delta_arrow_schema,
    window_app_id,
)
from airflow_provider_binlog.contract.manifest import read_manifest, write_manifest  # noqa: E402
from airflow_provider_binlog.jobs.merge.job import merge_window  # noqa: E402
from airflow_provider_binlog.jobs.merge.layout import key_region, region_column  # noqa: E402
from airflow_provider_binlog.maintenance import checkpoint_table, compact_table, vacuum_table  # noqa: E402
from airflow_provider_binlog.target import live_file_uris, read_table, table_uri  # noqa: E402

pytestmark = pytest.mark.integration

TABLE = "shop.orders"
SMALL = 6000
"""Target file size of the tests' tables (bytes): a few dozen rows per file."""


ENGINES = pytest.mark.parametrize("engine", [0, 10_000], ids=["spark", "driver"])
"""The rewrite's engine by ``driver_max_rows``: the file choice is the same in Spark's merge and the driver's."""


def merge(spark: Any, window: str, target: str, **kwargs: Any) -> dict[str, Any]:
    """Merge copy-on-write unless told otherwise: this module tests which files its rewrites touch (ADR 0020)."""
    kwargs.setdefault("write_mode", "copy_on_write")
    return merge_window(spark, window, target, pipeline=PIPELINE, **kwargs)


def commit_actions(target: str, version: int | None = None) -> tuple[set[str], set[str]]:
    """Return the paths a commit of the table removed and added (its log entry, read as JSON)."""
    dt = deltalake.DeltaTable(table_uri(target, TABLE))
    version = dt.version() if version is None else version
    log = Path(table_uri(target, TABLE)) / "_delta_log" / f"{version:020d}.json"
    actions = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    removed = {a["remove"]["path"] for a in actions if "remove" in a}
    added = {a["add"]["path"] for a in actions if "add" in a}
    return removed, added


def ids_by_file(target: str) -> dict[str, set[int]]:
    """Return the keys each current data file holds, read from the files."""
    dt = deltalake.DeltaTable(table_uri(target, TABLE))
    root = Path(table_uri(target, TABLE))
    return {
        path: set(pq.read_table(root / path, columns=["id"])["id"].to_pylist())
        for path in pa.table(dt.get_add_actions(flatten=True))["path"].to_pylist()
    }


def holders(target: str, keys: set[int]) -> set[str]:
    """Return the current files that hold any of ``keys``."""
    return {path for path, ids in ids_by_file(target).items() if ids & keys}


def key_ranges(target: str) -> list[tuple[int, int]]:
    """Return the (min, max) of ``id`` of every current file, from the Delta log, ascending."""
    actions = pa.table(deltalake.DeltaTable(table_uri(target, TABLE)).get_add_actions(flatten=True))
    return sorted(zip(actions["min.id"].to_pylist(), actions["max.id"].to_pylist(), strict=True))


def assert_disjoint_and_exact(target: str) -> None:
    ranges = key_ranges(target)
    assert all(high < low for (_, high), (low, _) in zip(ranges, ranges[1:], strict=False)), ranges
    files = ids_by_file(target)
    actions = pa.table(
        deltalake.DeltaTable(table_uri(target, TABLE)).get_add_actions(flatten=True)
    ).to_pylist()
    for action in actions:
        ids = files[action["path"]]
        assert (action["min.id"], action["max.id"]) == (min(ids), max(ids))


def live(target: str) -> dict[int, dict[str, Any]]:
    return {r["id"]: r for r in read_table(target, TABLE).to_pylist()}


def assert_engines_agree(target: str, expected: dict[int, dict[str, Any]]) -> None:
    """deltalake (pushed-down filter), DuckDB over the live files and read_table see the same rows."""
    import pyarrow.compute as pc

    dt = deltalake.DeltaTable(table_uri(target, TABLE))
    by_deltalake = dt.to_pyarrow_table(filters=~pc.field("_binlog_deleted")).select(
        ["id", "status", "amount"]
    )
    assert sorted(by_deltalake.to_pylist(), key=lambda r: r["id"]) == [expected[k] for k in sorted(expected)]
    duckdb = pytest.importorskip("duckdb")
    rows = (
        duckdb.connect()
        .execute(
            "SELECT id, status, amount FROM read_parquet(?, union_by_name = true) WHERE NOT _binlog_deleted "
            "ORDER BY id",
            [live_file_uris(target, TABLE)],
        )
        .to_arrow_table()
    )
    assert rows.to_pylist() == [expected[k] for k in sorted(expected)]
    assert {k: {c: r[c] for c in ("id", "status", "amount")} for k, r in live(target).items()} == expected


def loaded(spark: Any, staging: Path, target: str, n: int = 300, **kwargs: Any) -> dict[int, dict[str, Any]]:
    """Merge window 1 inserting ids 1..n (step 1) into a new table of SMALL files; return the rows."""
    rows = {i: order(i, "new", f"{i}.00") for i in range(1, n + 1)}
    merge(spark, stage_window(staging, 1, orders([("c", r) for r in rows.values()])), target, **kwargs)
    return rows


# --------------------------------------------------------------------------------------------------
# Pruning
# --------------------------------------------------------------------------------------------------


def test_a_new_table_is_unpartitioned_with_the_key_as_its_statistics_columns(spark, staging, target):
    loaded(spark, staging, target, target_file_bytes=SMALL)

    dt = deltalake.DeltaTable(table_uri(target, TABLE))
    configuration = dt.metadata().configuration
    assert dt.metadata().partition_columns == []
    assert BUCKET_COLUMN not in delta_arrow_schema(dt).names
    assert configuration[LAYOUT_PROPERTY] == KEY_RANGE_LAYOUT
    assert configuration[STATS_COLUMNS_PROPERTY] == "`id`"
    assert len(key_ranges(target)) > 3
    assert_disjoint_and_exact(target)


@ENGINES
def test_a_window_rewrites_only_the_files_holding_its_keys(spark, staging, target, engine):
    rows = loaded(spark, staging, target, target_file_bytes=SMALL)
    changed = {5, 150, 151}
    before = set(ids_by_file(target))
    expected_removed = holders(target, changed)
    assert 2 <= len(expected_removed) < len(ids_by_file(target))

    window = orders([("u", order(5, "paid", "5.00")), ("u", order(150, "paid", "1.50")), ("d", rows[151])])
    summary = merge(spark, stage_window(staging, 2, window), target, driver_max_rows=engine)

    removed, added = commit_actions(target)
    assert removed == expected_removed
    assert summary["tables"][TABLE]["files_removed"] == len(expected_removed)
    assert set(ids_by_file(target)) == (before - removed) | added  # the other files are kept as they are
    rewritten = set().union(*ids_by_file_at(target, added).values())
    assert rewritten == set().union(*ids_by_file_at(target, removed).values()) - {151} | {
        151
    }  # tombstone kept
    rows[5], rows[150] = order(5, "paid", "5.00"), order(150, "paid", "1.50")
    del rows[151]
    assert_engines_agree(target, rows)
    assert_disjoint_and_exact(target)


def ids_by_file_at(target: str, paths: set[str]) -> dict[str, set[int]]:
    """Return the keys of files (removed ones too: vacuum has not run) by path."""
    root = Path(table_uri(target, TABLE))
    return {p: set(pq.read_table(root / p, columns=["id"])["id"].to_pylist()) for p in paths}


@ENGINES
def test_keys_above_the_maximum_join_the_tail_file_while_it_is_small(spark, staging, target, engine):
    rows = loaded(spark, staging, target, n=20, target_file_bytes=10 * SMALL)
    (tail,) = holders(target, {20})

    merge(
        spark,
        stage_window(staging, 2, orders([("c", order(21, "new", "1.00"))])),
        target,
        driver_max_rows=engine,
    )

    removed, added = commit_actions(target)
    assert removed == {tail}
    assert len(added) == 1
    rows[21] = order(21, "new", "1.00")
    assert_engines_agree(target, rows)


@ENGINES
def test_keys_above_the_maximum_go_to_new_files_when_the_tail_is_full(spark, staging, target, engine):
    rows = loaded(spark, staging, target, target_file_bytes=SMALL // 4)
    new = {i: order(i, "new", "1.00") for i in range(301, 311)}

    merge(
        spark,
        stage_window(staging, 2, orders([("c", r) for r in new.values()])),
        target,
        driver_max_rows=engine,
    )

    removed, added = commit_actions(target)
    assert removed == set()
    assert set().union(*ids_by_file_at(target, added).values()) == set(new)
    assert_engines_agree(target, {**rows, **new})
    assert_disjoint_and_exact(target)


@ENGINES
def test_a_key_in_a_gap_goes_to_the_file_before_it(spark, staging, target, engine):
    evens = {i: order(i, "new", f"{i}.00") for i in range(2, 601, 2)}
    merge(
        spark,
        stage_window(staging, 1, orders([("c", r) for r in evens.values()])),
        target,
        target_file_bytes=SMALL,
    )
    ranges = key_ranges(target)
    (_, high), (next_low, _) = ranges[1], ranges[2]
    gap = high + 1
    assert gap < next_low  # odd keys are in no file's range
    (before,) = holders(target, {high})

    merge(
        spark,
        stage_window(staging, 2, orders([("c", order(gap, "new", "1.00"))])),
        target,
        driver_max_rows=engine,
    )

    removed, _ = commit_actions(target)
    assert removed == {before}
    evens[gap] = order(gap, "new", "1.00")
    assert_engines_agree(target, evens)
    assert_disjoint_and_exact(target)


@ENGINES
def test_random_windows_with_key_moves_give_the_expected_rows(spark, staging, target, engine):
    rng = random.Random(20)
    expected = loaded(spark, staging, target, target_file_bytes=SMALL)
    for seq in range(2, 7):
        changes: list[tuple[str, dict[str, Any]]] = []
        for _ in range(15):
            kind = rng.choice("cudm")
            existing = sorted(expected)
            if kind == "c":
                key = rng.choice([max(existing) + rng.randint(1, 5), rng.randint(1, 1000)])
                if key in expected:
                    continue
                expected[key] = order(key, "new", "1.00")
                changes.append(("c", expected[key]))
            elif kind == "u":
                key = rng.choice(existing)
                expected[key] = order(key, f"u{seq}", "2.00")
                changes.append(("u", expected[key]))
            elif kind == "d":
                key = rng.choice(existing)
                changes.append(("d", expected.pop(key)))
            else:  # a primary key update: the row leaves its key (a delete) and appears under another
                key, moved = rng.choice(existing), rng.randint(1, 2000)
                if moved in expected:
                    continue
                changes.append(("d", expected.pop(key)))
                expected[moved] = order(moved, f"m{seq}", "3.00")
                changes.append(("c", expected[moved]))
        keys = {r["id"] for _, r in changes}
        expected_removed = holders(target, keys)

        merge(spark, stage_window(staging, seq, orders(changes)), target, driver_max_rows=engine)

        removed, _ = commit_actions(target)
        assert expected_removed <= removed  # a key's file is always rewritten
        assert len(removed) <= len(expected_removed) + len(keys)  # plus one neighbour per key at most
        assert_engines_agree(target, expected)
        assert_disjoint_and_exact(target)


# --------------------------------------------------------------------------------------------------
# Whole-table operations
# --------------------------------------------------------------------------------------------------


def test_a_snapshot_rewrites_every_file_and_tombstones_the_rows_it_lacks(spark, staging, target):
    rows = loaded(spark, staging, target, target_file_bytes=SMALL)
    before = set(ids_by_file(target))
    kept = {i: order(i, "snap", "9.00") for i in range(1, 301) if i % 3}

    merge(spark, stage_window(staging, 2, orders([("c", r) for r in kept.values()]), kind="snapshot"), target)

    removed, _ = commit_actions(target)
    assert removed == before
    assert_engines_agree(target, kept)
    assert_disjoint_and_exact(target)
    assert len(rows) == 300


def test_a_truncate_marker_rewrites_every_file(spark, staging, target):
    loaded(spark, staging, target, target_file_bytes=SMALL)
    before = set(ids_by_file(target))
    marker = {"id": None, "status": None, "amount": None}
    after = order(7, "again", "7.00")
    window = stage_window(staging, 2, orders([(OP_TRUNCATE, marker), ("c", after)]))
    manifest = read_manifest(window)
    entry = manifest.tables[TABLE]
    write_manifest(
        window,
        dataclasses.replace(
            manifest, tables={TABLE: dataclasses.replace(entry, ops={**entry.ops, OP_TRUNCATE: 1})}
        ),
    )

    merge(spark, window, target)

    removed, _ = commit_actions(target)
    assert removed == before
    assert_engines_agree(target, {7: after})


def test_a_wider_key_type_rewrites_the_table_and_pruning_goes_on(spark, staging, target):
    narrow = pa.schema([("id", pa.int32()), ("status", pa.string()), ("amount", pa.decimal128(10, 2))])
    rows = {i: order(i, "new", "1.00") for i in range(1, 301)}
    merge(
        spark,
        stage_window(staging, 1, {TABLE: StagedTableSpec(narrow, [("c", r) for r in rows.values()])}),
        target,
        target_file_bytes=SMALL,
    )
    rows[400] = order(400, "wide", "1.00")

    merge(spark, stage_window(staging, 2, orders([("c", rows[400])])), target)

    dt = deltalake.DeltaTable(table_uri(target, TABLE))
    assert delta_arrow_schema(dt).field("id").type == pa.int64()
    assert_engines_agree(target, rows)
    assert_disjoint_and_exact(target)
    expected_removed = holders(target, {10})
    rows[10] = order(10, "paid", "1.00")
    merge(spark, stage_window(staging, 3, orders([("u", rows[10])])), target)
    assert commit_actions(target)[0] == expected_removed
    assert_engines_agree(target, rows)


# --------------------------------------------------------------------------------------------------
# A table created with hash buckets
# --------------------------------------------------------------------------------------------------


def bucket_table(target: str, rows: dict[int, dict[str, Any]], buckets: int = 4) -> None:
    """Write a table as merges before ADR 0020 did: partitioned by ``_binlog_bucket``, files without min/max."""
    from deltalake import CommitProperties, Transaction
    from deltalake.transaction import AddAction

    uri = table_uri(target, TABLE)
    schema = pa.schema(
        [
            *ORDERS,
            pa.field("_binlog_op", pa.string()),
            pa.field("_binlog_window", pa.int64()),
            pa.field("_binlog_seq", pa.int64()),
            pa.field("_binlog_gtid", pa.string()),
            pa.field("_binlog_file", pa.string()),
            pa.field("_binlog_pos", pa.int64()),
            pa.field("_binlog_ts", pa.timestamp("us", tz="UTC")),
            pa.field("_binlog_deleted", pa.bool_()),
        ]
    )
    dt = deltalake.DeltaTable.create(
        uri,
        schema.append(pa.field(BUCKET_COLUMN, pa.int32())),
        partition_by=[BUCKET_COLUMN],
        name=TABLE,
        configuration={
            BUCKETS_PROPERTY: str(buckets),
            PRIMARY_KEY_PROPERTY: '["id"]',
            OWNER_PROPERTY: PIPELINE,
        },
        raise_if_key_not_exists=False,
    )
    adds = []
    for bucket in range(buckets):
        part = [
            {**r, "_binlog_op": "c", "_binlog_window": 1, "_binlog_seq": r["id"], "_binlog_deleted": False}
            for k, r in rows.items()
            if k % buckets == bucket
        ]
        relative = f"{BUCKET_COLUMN}={bucket}/w1-part-{bucket}.parquet"
        (Path(uri) / relative).parent.mkdir(parents=True)
        pq.write_table(pa.Table.from_pylist(part, schema=schema), Path(uri) / relative)
        stats = json.dumps({"numRecords": len(part), "nullCount": {"id": 0}})
        adds.append(
            AddAction(
                relative, (Path(uri) / relative).stat().st_size, {BUCKET_COLUMN: str(bucket)}, 0, True, stats
            )
        )
    dt.create_write_transaction(
        adds,
        mode="append",
        schema=dt.schema(),
        partition_by=[BUCKET_COLUMN],
        commit_properties=CommitProperties(app_transactions=[Transaction(window_app_id(PIPELINE, 1), 1)]),
    )


def test_a_bucket_table_moves_to_key_ranges_at_its_first_merge(spark, staging, target):
    rows = {i: order(i, "old", f"{i}.00") for i in range(1, 201)}
    bucket_table(target, rows)
    old_files = set(ids_by_file(target))
    rows[3] = order(3, "paid", "3.00")

    merge(spark, stage_window(staging, 2, orders([("u", rows[3])])), target, target_file_bytes=SMALL)

    dt = deltalake.DeltaTable(table_uri(target, TABLE))
    assert dt.metadata().configuration[LAYOUT_PROPERTY] == KEY_RANGE_LAYOUT
    assert dt.metadata().configuration[STATS_COLUMNS_PROPERTY] == "`id`"
    removed, added = commit_actions(target)
    assert removed == old_files
    assert all(p.startswith(f"{BUCKET_COLUMN}=0/") for p in added)
    assert dt.transaction_version(window_app_id(PIPELINE, 2)) == 2
    assert_engines_agree(target, {k: {**r} for k, r in rows.items()})
    assert_disjoint_and_exact(target)
    expected_removed = holders(target, {120})
    rows[120] = order(120, "paid", "1.20")

    merge(spark, stage_window(staging, 3, orders([("u", rows[120])])), target)

    assert commit_actions(target)[0] == expected_removed
    assert_engines_agree(target, rows)


# --------------------------------------------------------------------------------------------------
# Compaction
# --------------------------------------------------------------------------------------------------


def test_compaction_joins_adjacent_small_files_without_a_data_change(spark, staging, target):
    rows = loaded(spark, staging, target, target_file_bytes=SMALL)
    before = ids_by_file(target)
    dt = deltalake.DeltaTable(table_uri(target, TABLE))
    dt.alter.set_table_properties(
        {TARGET_FILE_BYTES_PROPERTY: str(SMALL * 4)}, raise_if_not_exists=False
    )  # every file is small now

    result = compact_table(table_uri(target, TABLE))

    after = ids_by_file(target)
    assert result.files_removed > result.files_added >= 1
    assert len(after) == len(before) - result.files_removed + result.files_added
    removed, added = commit_actions(target)
    assert len(removed) == result.files_removed
    assert set().union(*ids_by_file_at(target, removed).values()) == set().union(
        *ids_by_file_at(target, added).values()
    )
    log = Path(table_uri(target, TABLE)) / "_delta_log"
    version = deltalake.DeltaTable(table_uri(target, TABLE)).version()
    actions = [json.loads(x) for x in (log / f"{version:020d}.json").read_text().splitlines()]
    assert all(not a["add"]["dataChange"] for a in actions if "add" in a)
    assert all(not a["remove"]["dataChange"] for a in actions if "remove" in a)
    assert_engines_agree(target, rows)
    assert_disjoint_and_exact(target)
    assert checkpoint_table(table_uri(target, TABLE)) == version
    assert_engines_agree(target, rows)


def aged(path: Path, hours: float) -> Path:
    """Set the modification time of ``path`` (and everything under it) ``hours`` back; return it."""
    stamp = time.time() - hours * 3600
    for p in [path, *path.rglob("*")] if path.is_dir() else [path]:
        os.utime(p, (stamp, stamp))
    return path


def test_vacuum_deletes_removed_uncommitted_and_abandoned_files_past_the_retention(spark, staging, target):
    rows = loaded(spark, staging, target, target_file_bytes=SMALL)
    merge(spark, stage_window(staging, 2, orders([("u", order(1, "paid", "1.00"))])), target)
    rows[1] = order(1, "paid", "1.00")
    removed, _ = commit_actions(target)
    table = Path(table_uri(target, TABLE))
    live_files = {table / p for p in ids_by_file(target)}
    sample = next(iter(live_files)).read_bytes()
    uncommitted = table / "part-uncommitted.parquet"  # a failed first load's file
    uncommitted.write_bytes(sample)
    aged(uncommitted, 2)
    recent_uncommitted = table / "part-in-flight.parquet"  # a running merge's file, moved, not committed yet
    recent_uncommitted.write_bytes(sample)
    abandoned = table / STAGING_DIR / "w9-abandoned" / "_binlog_segment=0"
    abandoned.mkdir(parents=True)
    (abandoned / "part-0.parquet").write_bytes(sample)
    (abandoned.parent / "_SUCCESS").write_bytes(b"")
    aged(abandoned.parent, 2)
    running = table / STAGING_DIR / "w10-running" / "_binlog_segment=0"
    running.mkdir(parents=True)
    (running / "part-0.parquet").write_bytes(sample)
    aged(running / "part-0.parquet", 2)
    (running / "part-1.parquet").write_bytes(sample)  # still being written: its newest file is recent

    freed = vacuum_table(table_uri(target, TABLE), retention_hours=1)

    assert freed.files == 3  # the old uncommitted file and the abandoned folder's two files
    assert freed.bytes == 2 * len(sample)
    assert not uncommitted.exists()
    assert not abandoned.parent.exists()
    assert recent_uncommitted.exists()
    assert running.exists()
    assert all((table / p).exists() for p in removed)  # removed from the log less than an hour ago
    assert_engines_agree(target, rows)

    recent_uncommitted.unlink()
    freed = vacuum_table(table_uri(target, TABLE), retention_hours=0)

    assert freed.files == len(removed) + 2  # the files the merge removed, and the running folder
    assert not any((table / p).exists() for p in removed)
    assert not (table / STAGING_DIR / "w10-running").exists()
    assert {p for p in table.rglob("*.parquet") if "_delta_log" not in p.parts} == live_files
    assert_engines_agree(target, rows)


def test_a_merge_concurrent_with_a_compaction_loses_no_change(spark, staging, target, monkeypatch):
    from airflow_provider_binlog.jobs.merge import table as merge_table_module

    rows = loaded(spark, staging, target, target_file_bytes=SMALL)
    deltalake.DeltaTable(table_uri(target, TABLE)).alter.set_table_properties(
        {TARGET_FILE_BYTES_PROPERTY: str(SMALL * 4)}, raise_if_not_exists=False
    )
    compactions: list[Any] = []
    commit = merge_table_module.commit_window

    def compaction_in_between(dt, removed, added, **kwargs):
        if not compactions:  # the first attempt loses to the compaction, the second is planned again
            compactions.append(compact_table(table_uri(target, TABLE)))
        return commit(dt, removed, added, **kwargs)

    monkeypatch.setattr(merge_table_module, "commit_window", compaction_in_between)
    rows[1] = order(1, "paid", "1.00")
    rows[301] = order(301, "new", "1.00")

    merge(spark, stage_window(staging, 2, orders([("u", rows[1]), ("c", rows[301])])), target)

    assert compactions[0].files_removed > 0
    assert_engines_agree(target, rows)
    assert_disjoint_and_exact(target)


def test_the_decimal_key_of_an_unsigned_bigint_prunes(spark, staging, target):
    unsigned = pa.schema(
        [("id", pa.decimal128(20, 0)), ("status", pa.string()), ("amount", pa.decimal128(10, 2))]
    )
    big = 18446744073709551000
    rows = [{"id": Decimal(big + i), "status": "new", "amount": Decimal("1.00")} for i in range(300)]
    spec = StagedTableSpec(unsigned, [("c", r) for r in rows])
    merge(spark, stage_window(staging, 1, {TABLE: spec}), target, target_file_bytes=SMALL)
    ranges = key_ranges(target)
    assert ranges[-1][1] == Decimal(big + 299)
    touched = {"id": Decimal(big + 7), "status": "paid", "amount": Decimal("1.00")}

    merge(spark, stage_window(staging, 2, {TABLE: StagedTableSpec(unsigned, [("u", touched)])}), target)

    removed, _ = commit_actions(target)
    assert len(removed) == 1
    status = {r["id"]: r["status"] for r in read_table(target, TABLE).to_pylist()}
    assert status[big + 7] == "paid"


def test_a_snapshot_that_drops_a_column_of_a_bucket_table_keeps_its_partition_column(spark, staging, target):
    bucket_table(target, {i: order(i, "old", "1.00") for i in range(1, 51)})
    narrow = pa.schema([("id", pa.int64()), ("status", pa.string())])
    kept = [{"id": i, "status": "snap"} for i in range(1, 41)]

    merge(
        spark,
        stage_window(staging, 2, {TABLE: StagedTableSpec(narrow, [("c", r) for r in kept])}, kind="snapshot"),
        target,
        target_file_bytes=SMALL,
    )

    dt = deltalake.DeltaTable(table_uri(target, TABLE))
    assert dt.metadata().partition_columns == [BUCKET_COLUMN]
    assert "amount" not in delta_arrow_schema(dt).names
    assert sorted(read_table(target, TABLE).to_pylist(), key=lambda r: r["id"]) == kept
    assert_disjoint_and_exact(target)


def test_a_compaction_that_loses_to_a_merge_commits_nothing(spark, staging, target, monkeypatch):
    from airflow_provider_binlog.contract import delta as contract_delta

    rows = loaded(spark, staging, target, target_file_bytes=SMALL)
    deltalake.DeltaTable(table_uri(target, TABLE)).alter.set_table_properties(
        {TARGET_FILE_BYTES_PROPERTY: str(SMALL * 4)}, raise_if_not_exists=False
    )
    rows[2] = order(2, "paid", "2.00")
    stats = contract_delta.file_stats
    merged: list[dict[str, Any]] = []

    def merge_in_between(*args: Any, **kwargs: Any) -> str:
        if not merged:  # the compaction has read the table and written its first file
            merged.append(merge(spark, stage_window(staging, 2, orders([("u", rows[2])])), target))
        return stats(*args, **kwargs)

    monkeypatch.setattr(contract_delta, "file_stats", merge_in_between)
    version = deltalake.DeltaTable(table_uri(target, TABLE)).version()

    result = compact_table(table_uri(target, TABLE))

    assert result.conflict
    assert deltalake.DeltaTable(table_uri(target, TABLE)).version() == version + 1  # the merge only
    assert not [p for p in Path(table_uri(target, TABLE)).rglob("compacted-*")]
    assert_engines_agree(target, rows)


KEY_VALUES = {
    "bigint": [-(2**63), -7, 0, 1, 2, 9, 10, 11, 2**63 - 1],
    "decimal(20,0)": [Decimal(0), Decimal(2**63), Decimal(2**64 - 1), Decimal(5), Decimal(2**63 - 1)],
    "string": [
        "",
        "A",
        "a",
        "ab",
        "b",
        "ä",
        "ß",
        "z\x00",
        "Z",
        "\u00ff",
        "\u0100",
        "\ufffd",
        "\U0001f600",
        "é",
    ],
    "binary": [b"", b"\x00", b"\x7f", b"\x80", b"\xff", b"\xff\x00", b"a"],
}


@pytest.mark.parametrize("spark_type", list(KEY_VALUES))
def test_spark_places_keys_in_the_regions_python_does(spark, spark_type):
    values = KEY_VALUES[spark_type]
    points = sorted(values[::2])
    frame = spark.createDataFrame([(v,) for v in values], f"k {spark_type}")

    placed = frame.select("k", region_column("k", points).alias("region")).toArrow().to_pylist()

    assert sorted((r["k"], r["region"]) for r in placed) == sorted((v, key_region(points, v)) for v in values)
    assert len({r["region"] for r in placed}) > len(points) // 2  # the values spread over the regions
