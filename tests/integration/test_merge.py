"""Integration tests of the PySpark merge: real local Spark (``local[2]``), real deltalake tables.

Windows are staged by the helper below in the staging contract format (Parquet per table + manifest
written last). Expected targets are written by hand.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import shutil
import sys
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

pytest.importorskip("pyspark")
deltalake = pytest.importorskip("deltalake")

from airflow_provider_binlog.contract.columns import CHANGE_FIELDS, DELETED_COLUMN  # noqa: E402
from airflow_provider_binlog.contract.delta import (  # noqa: E402
    STAGING_DIR,  # noqa: E402
    already_merged,
    delta_arrow_schema,
    pipeline_app_id,
    window_app_id,
)
from airflow_provider_binlog.contract.keys import MergeKeyError  # noqa: E402
from airflow_provider_binlog.contract.manifest import (  # noqa: E402
    SNAPSHOT_KIND,
    WINDOW_KIND,
    Manifest,
    ManifestMissingError,
    TableEntry,
    write_manifest,
)
from airflow_provider_binlog.contract.positions import BinlogPosition  # noqa: E402
from airflow_provider_binlog.contract.refusals import refused_tables  # noqa: E402
from airflow_provider_binlog.jobs.application import MergeJobError  # noqa: E402
from airflow_provider_binlog.jobs.merge import table as merge_table_module  # noqa: E402
from airflow_provider_binlog.jobs.merge.job import main, merge_window  # noqa: E402
from airflow_provider_binlog.target import live_file_uris, read_table, table_uri  # noqa: E402

pytestmark = pytest.mark.integration

PIPELINE = "shop_cdc"
UTC = dt.timezone.utc
T0 = dt.datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)


# --------------------------------------------------------------------------------------------------
# Fixtures and helpers
# --------------------------------------------------------------------------------------------------


@dataclass
class StagedTableSpec:
    """Source schema, key and changes ``(op, row)`` of one table in a window."""

    schema: pa.Schema
    changes: list[tuple[str, dict[str, Any]]]
    primary_key: list[str] = field(default_factory=lambda: ["id"])
    mysql_types: dict[str, str] = field(default_factory=dict)
    files: int = 1


def stage_window(
    staging: Path,
    seq: int,
    tables: dict[str, StagedTableSpec],
    pipeline: str = PIPELINE,
    kind: str | None = None,
) -> str:
    """Write a staged window in the contract format; return its directory. Seqs are 1, 2, ... in order.

    ``kind="snapshot"`` stages a snapshot (its rows replace the table's rows older than ``seq``).
    """
    window_dir = staging / pipeline / f"window={seq}"
    window_dir.mkdir(parents=True)
    manifest_tables: dict[str, TableEntry] = {}
    seq_in_window = 0
    for name, spec in tables.items():
        rows = []
        for op, row in spec.changes:
            seq_in_window += 1
            rows.append(
                {
                    **row,
                    "_binlog_op": op,
                    "_binlog_window": seq,
                    "_binlog_seq": seq_in_window,
                    "_binlog_gtid": f"0-1-{seq * 1000 + seq_in_window}",
                    "_binlog_file": "mysql-bin.000001",
                    "_binlog_pos": 4 + 100 * seq_in_window,
                    "_binlog_ts": T0 + dt.timedelta(minutes=seq, seconds=seq_in_window),
                }
            )
        schema = spec.schema
        for f in CHANGE_FIELDS:  # nullable, so that tests can stage rows breaking the contract
            schema = schema.append(f.with_nullable(True))
        data = pa.Table.from_pylist(rows, schema=schema)
        files = []
        if data.num_rows:
            (window_dir / name).mkdir()
            per_file = -(-data.num_rows // spec.files)
            for i in range(spec.files):
                part = data.slice(i * per_file, per_file)
                if part.num_rows:
                    relative = f"{name}/part-{i:05d}.parquet"
                    pq.write_table(part, window_dir / relative)
                    files.append(relative)
        ops = {op: sum(1 for o, _ in spec.changes if o == op) for op in "cud"}
        manifest_tables[name] = TableEntry(
            files=tuple(files),
            rows=data.num_rows,
            ops=ops,
            primary_key=tuple(spec.primary_key),
            columns=tuple(
                {"name": f.name, "mysql_type": spec.mysql_types.get(f.name, "?"), "arrow_type": str(f.type)}
                for f in spec.schema
            ),
        )
    manifest = Manifest(
        pipeline=pipeline,
        window=seq,
        start=BinlogPosition("mysql-bin.000001", 4, f"0-1-{seq * 1000}"),
        end=BinlogPosition("mysql-bin.000001", 4 + 100 * seq_in_window, f"0-1-{seq * 1001}"),
        tables=manifest_tables,
        kind=kind or WINDOW_KIND,
    )
    write_manifest(str(window_dir), manifest)
    return str(window_dir)


def run_merge(spark, window_uri: str, target: str, **kwargs: Any) -> dict[str, Any]:
    return merge_window(spark, window_uri, target, pipeline=PIPELINE, **kwargs)


def rows(table: pa.Table, sort_by: str = "id") -> list[dict[str, Any]]:
    return sorted(table.to_pylist(), key=lambda r: r[sort_by])


def delta_version(target: str, table: str) -> int:
    return deltalake.DeltaTable(table_uri(target, table)).version()


ORDERS = pa.schema([("id", pa.int64()), ("status", pa.string()), ("amount", pa.decimal128(10, 2))])
ORDER_TYPES = {"id": "bigint", "status": "varchar(20)", "amount": "decimal(10,2)"}


def orders(changes: list[tuple[str, dict[str, Any]]], **kwargs: Any) -> dict[str, StagedTableSpec]:
    return {"shop.orders": StagedTableSpec(ORDERS, changes, mysql_types=ORDER_TYPES, **kwargs)}


def order(i: int, status: str, amount: str) -> dict[str, Any]:
    return {"id": i, "status": status, "amount": Decimal(amount)}


# --------------------------------------------------------------------------------------------------
# Merge semantics
# --------------------------------------------------------------------------------------------------


def test_inserts_updates_deletes_across_three_windows(spark, staging, target):
    w1 = stage_window(
        staging,
        1,
        orders(
            [
                ("c", order(1, "new", "10.00")),
                ("c", order(2, "new", "20.00")),
                ("c", order(3, "new", "30.00")),
            ]
        ),
    )
    w2 = stage_window(
        staging,
        2,
        orders(
            [
                ("u", order(1, "paid", "10.00")),
                ("c", order(4, "new", "40.00")),
                ("u", order(1, "shipped", "10.00")),
                ("u", order(2, "paid", "21.50")),
            ]
        ),
    )
    w3 = stage_window(staging, 3, orders([("d", order(3, "new", "30.00")), ("u", order(4, "paid", "40.00"))]))

    for window in (w1, w2, w3):
        run_merge(spark, window, target)

    assert read_table(target, "shop.orders").sort_by("id") == pa.table(
        {
            "id": pa.array([1, 2, 4], pa.int64()),
            "status": ["shipped", "paid", "paid"],
            "amount": pa.array([Decimal("10.00"), Decimal("21.50"), Decimal("40.00")], pa.decimal128(10, 2)),
        }
    )
    meta = read_table(target, "shop.orders", with_metadata=True, include_tombstones=True)
    assert rows(meta.select(["id", "_binlog_op", "_binlog_window", "_binlog_seq", "_binlog_deleted"])) == [
        {"id": 1, "_binlog_op": "u", "_binlog_window": 2, "_binlog_seq": 3, "_binlog_deleted": False},
        {"id": 2, "_binlog_op": "u", "_binlog_window": 2, "_binlog_seq": 4, "_binlog_deleted": False},
        {"id": 3, "_binlog_op": "d", "_binlog_window": 3, "_binlog_seq": 1, "_binlog_deleted": True},
        {"id": 4, "_binlog_op": "u", "_binlog_window": 3, "_binlog_seq": 2, "_binlog_deleted": False},
    ]


def test_a_snapshot_replaces_the_rows_older_than_it_and_keeps_newer_changes(spark, staging, target):
    run_merge(
        spark,
        stage_window(staging, 1, orders([("c", order(i, "new", f"{i}.00")) for i in (1, 2, 3)])),
        target,
    )
    run_merge(spark, stage_window(staging, 3, orders([("u", order(2, "paid", "2.50"))])), target)
    snapshot = orders([("r", order(1, "shipped", "1.00")), ("r", order(4, "new", "4.00"))])
    run_merge(spark, stage_window(staging, 2, snapshot, kind=SNAPSHOT_KIND), target)

    meta = read_table(target, "shop.orders", with_metadata=True, include_tombstones=True)
    assert rows(
        meta.select(["id", "status", "_binlog_op", "_binlog_window", "_binlog_seq", "_binlog_deleted"])
    ) == [
        {
            "id": 1,
            "status": "shipped",
            "_binlog_op": "r",
            "_binlog_window": 2,
            "_binlog_seq": 1,
            "_binlog_deleted": False,
        },
        # changed after the snapshot started (window 3): kept although the snapshot did not read it
        {
            "id": 2,
            "status": "paid",
            "_binlog_op": "u",
            "_binlog_window": 3,
            "_binlog_seq": 1,
            "_binlog_deleted": False,
        },
        # older than the snapshot and not in it: deleted while nobody read the binlog
        {
            "id": 3,
            "status": "new",
            "_binlog_op": "d",
            "_binlog_window": 2,
            "_binlog_seq": 0,
            "_binlog_deleted": True,
        },
        {
            "id": 4,
            "status": "new",
            "_binlog_op": "r",
            "_binlog_window": 2,
            "_binlog_seq": 2,
            "_binlog_deleted": False,
        },
    ]
    version = delta_version(target, "shop.orders")
    run_merge(spark, str(staging / PIPELINE / "window=2"), target)
    assert delta_version(target, "shop.orders") == version  # merging the snapshot again changes nothing


def test_a_commit_that_loses_to_another_writer_is_planned_again(spark, staging, target, monkeypatch):
    run_merge(
        spark,
        stage_window(staging, 1, orders([("c", order(i, "new", f"{i}.00")) for i in range(1, 40)])),
        target,
    )
    late = stage_window(staging, 3, orders([("u", order(i, "paid", f"{i}.00")) for i in range(1, 40)]))
    early = stage_window(staging, 2, orders([("u", order(i, "packed", f"{i}.00")) for i in range(1, 40)]))
    original = merge_table_module.commit_window
    calls: list[int] = []

    def commit_after_a_rival(dt, removed, added, *, seq, **kwargs):
        calls.append(seq)
        if len(calls) == 1:  # another writer commits to the same table between our read and our commit
            run_merge(spark, early, target)
        return original(dt, removed, added, seq=seq, **kwargs)

    monkeypatch.setattr(merge_table_module, "commit_window", commit_after_a_rival)
    run_merge(spark, late, target)
    assert calls == [3, 2, 3]  # the rival's commit won the race; the late window was planned again
    live = read_table(target, "shop.orders", with_metadata=True)
    assert set(live.column("status").to_pylist()) == {"paid"}
    assert set(live.column("_binlog_window").to_pylist()) == {3}


def test_delete_keeps_tombstone_with_before_image(spark, staging, target):
    run_merge(spark, stage_window(staging, 1, orders([("c", order(7, "new", "1.00"))])), target)
    run_merge(spark, stage_window(staging, 2, orders([("d", order(7, "new", "1.00"))])), target)

    assert read_table(target, "shop.orders").num_rows == 0
    tombstones = read_table(target, "shop.orders", with_metadata=True, include_tombstones=True)
    assert rows(
        tombstones.select(["id", "status", "amount", "_binlog_deleted", "_binlog_gtid", "_binlog_ts"])
    ) == [
        {
            "id": 7,
            "status": "new",
            "amount": Decimal("1.00"),
            "_binlog_deleted": True,
            "_binlog_gtid": "0-1-2001",
            "_binlog_ts": T0 + dt.timedelta(minutes=2, seconds=1),
        }
    ]


def test_remerge_of_same_window_is_a_noop(spark, staging, target):
    w1 = stage_window(staging, 1, orders([("c", order(1, "new", "1.00")), ("c", order(2, "new", "2.00"))]))
    run_merge(spark, w1, target)
    version = delta_version(target, "shop.orders")
    before = read_table(target, "shop.orders", with_metadata=True, include_tombstones=True)

    summary = run_merge(spark, w1, target)

    assert summary["tables"]["shop.orders"]["skipped"] is True
    assert delta_version(target, "shop.orders") == version
    assert read_table(target, "shop.orders", with_metadata=True, include_tombstones=True) == before


def test_out_of_order_windows_give_the_same_target(spark, staging, tmp_path):
    w1 = stage_window(
        staging,
        1,
        orders(
            [("c", order(1, "new", "1.00")), ("c", order(2, "new", "2.00")), ("c", order(3, "new", "3.00"))]
        ),
    )
    w2 = stage_window(staging, 2, orders([("u", order(2, "paid", "2.00")), ("d", order(3, "new", "3.00"))]))
    in_order, out_of_order = str(tmp_path / "in_order"), str(tmp_path / "out_of_order")

    for window in (w1, w2):
        run_merge(spark, window, in_order)
    for window in (w2, w1):
        run_merge(spark, window, out_of_order)

    expected = [
        {"id": 1, "status": "new", "amount": Decimal("1.00"), "_binlog_window": 1, "_binlog_deleted": False},
        {"id": 2, "status": "paid", "amount": Decimal("2.00"), "_binlog_window": 2, "_binlog_deleted": False},
        {"id": 3, "status": "new", "amount": Decimal("3.00"), "_binlog_window": 2, "_binlog_deleted": True},
    ]
    columns = ["id", "status", "amount", "_binlog_window", "_binlog_deleted"]
    for root in (in_order, out_of_order):
        full = read_table(root, "shop.orders", with_metadata=True, include_tombstones=True)
        assert rows(full.select(columns)) == expected
    assert rows(read_table(in_order, "shop.orders", with_metadata=True, include_tombstones=True)) == rows(
        read_table(out_of_order, "shop.orders", with_metadata=True, include_tombstones=True)
    )
    # the high-water app transaction stays at the newest window; each window has its own marker
    table = deltalake.DeltaTable(table_uri(out_of_order, "shop.orders"))
    assert table.transaction_version(pipeline_app_id(PIPELINE)) == 2
    assert table.transaction_version(window_app_id(PIPELINE, 1)) == 1


def test_primary_key_update_moves_the_row(spark, staging, target):
    run_merge(spark, stage_window(staging, 1, orders([("c", order(1, "new", "5.00"))])), target)
    # UPDATE orders SET id = 100 WHERE id = 1: staged as delete of the before image + insert-like update
    w2 = stage_window(staging, 2, orders([("d", order(1, "new", "5.00")), ("u", order(100, "new", "5.00"))]))
    run_merge(spark, w2, target)

    assert rows(read_table(target, "shop.orders")) == [
        {"id": 100, "status": "new", "amount": Decimal("5.00")}
    ]
    everything = read_table(target, "shop.orders", with_metadata=True, include_tombstones=True)
    assert rows(everything.select(["id", "_binlog_deleted"])) == [
        {"id": 1, "_binlog_deleted": True},
        {"id": 100, "_binlog_deleted": False},
    ]


LOG = pa.schema([("host", pa.string()), ("at", pa.timestamp("us")), ("msg", pa.string())])


def keyless_window(staging: Path) -> str:
    spec = StagedTableSpec(
        LOG,
        [
            ("c", {"host": "a", "at": dt.datetime(2024, 1, 1), "msg": "one"}),
            ("c", {"host": "b", "at": dt.datetime(2024, 1, 1), "msg": "two"}),
            ("u", {"host": "a", "at": dt.datetime(2024, 1, 1), "msg": "one again"}),
        ],
        primary_key=[],
    )
    return stage_window(staging, 1, {"shop.access_log": spec, **orders([("c", order(1, "new", "1.00"))])})


def test_table_without_primary_key_is_refused(spark, staging, target):
    window = keyless_window(staging)

    with pytest.raises(MergeKeyError, match=r"shop\.access_log has no primary key.*--key shop\.access_log="):
        run_merge(spark, window, target)
    assert not Path(target).exists()  # refused before any table was touched


def test_table_without_primary_key_merges_with_a_named_key(spark, staging, target):
    window = keyless_window(staging)

    run_merge(spark, window, target, key_overrides={"shop.access_log": ["host", "at"]})

    assert rows(read_table(target, "shop.access_log"), sort_by="host") == [
        {"host": "a", "at": dt.datetime(2024, 1, 1), "msg": "one again"},
        {"host": "b", "at": dt.datetime(2024, 1, 1), "msg": "two"},
    ]


def test_main_refuses_keyless_table_and_accepts_key_argument(
    spark, spark_connect, staging, target, capsys, monkeypatch
):
    """The application's own entry point, on the test server (in spark-submit it starts its own session)."""
    monkeypatch.setenv("SPARK_REMOTE", spark_connect.url)
    window = keyless_window(staging)
    args = ["--window-uri", window, "--target", target, "--pipeline", PIPELINE]

    assert main(args) == 2
    assert "shop.access_log has no primary key" in json.loads(capsys.readouterr().out.strip())["error"]

    assert main([*args, "--key", "shop.access_log=host,at", "--target-file-bytes", "4096"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["window"] == 1
    assert summary["tables"]["shop.access_log"]["rows_in_window"] == 3
    assert summary["tables"]["shop.access_log"]["rows_written"] == 2
    assert summary["tables"]["shop.orders"]["skipped"] is False


# --------------------------------------------------------------------------------------------------
# Schema evolution
# --------------------------------------------------------------------------------------------------


def test_new_column_is_added(spark, staging, target):
    run_merge(spark, stage_window(staging, 1, orders([("c", order(1, "new", "1.00"))])), target)
    wider = ORDERS.append(pa.field("note", pa.string()))
    w2 = stage_window(
        staging,
        2,
        {"shop.orders": StagedTableSpec(wider, [("c", {**order(2, "new", "2.00"), "note": "gift"})])},
    )

    run_merge(spark, w2, target)

    result = read_table(target, "shop.orders")
    assert result.schema == wider
    assert rows(result) == [
        {"id": 1, "status": "new", "amount": Decimal("1.00"), "note": None},
        {"id": 2, "status": "new", "amount": Decimal("2.00"), "note": "gift"},
    ]


def test_column_missing_from_window_is_null_in_new_rows(spark, staging, target):
    run_merge(spark, stage_window(staging, 1, orders([("c", order(1, "new", "1.00"))])), target)
    narrower = pa.schema([("id", pa.int64()), ("amount", pa.decimal128(10, 2))])
    w2 = stage_window(
        staging, 2, {"shop.orders": StagedTableSpec(narrower, [("c", {"id": 2, "amount": Decimal("2.00")})])}
    )

    run_merge(spark, w2, target)

    assert rows(read_table(target, "shop.orders")) == [
        {"id": 1, "status": "new", "amount": Decimal("1.00")},
        {"id": 2, "status": None, "amount": Decimal("2.00")},
    ]


def test_unfollowable_type_change_refuses_only_its_table(spark, staging, target):
    narrow = pa.schema([("id", pa.int64()), ("qty", pa.int32())])
    text = pa.schema([("id", pa.int64()), ("qty", pa.string())])
    run_merge(
        spark,
        stage_window(staging, 1, {"shop.items": StagedTableSpec(narrow, [("c", {"id": 1, "qty": 1})])}),
        target,
    )
    w2 = stage_window(
        staging,
        2,
        {
            "shop.items": StagedTableSpec(text, [("c", {"id": 2, "qty": "two"})]),
            **orders([("c", order(1, "new", "1.00"))]),
        },
    )

    summary = run_merge(spark, w2, target)

    assert "refused" in summary["tables"]["shop.items"]
    (refusal,) = refused_tables(w2).values()
    assert (refusal["table"], refusal["column"], refusal["window"]) == ("shop.items", "qty", 2)
    assert "int32" in refusal["detail"]
    assert "string" in refusal["detail"]
    assert rows(read_table(target, "shop.items")) == [{"id": 1, "qty": 1}]  # untouched, waits for a snapshot
    assert rows(read_table(target, "shop.orders")) == [{"id": 1, "status": "new", "amount": Decimal("1.00")}]


def test_narrower_column_in_older_window_is_cast_up(spark, staging, target):
    wide = pa.schema([("id", pa.int64()), ("qty", pa.int64())])
    narrow = pa.schema([("id", pa.int64()), ("qty", pa.int32())])
    w2 = stage_window(staging, 2, {"shop.items": StagedTableSpec(wide, [("c", {"id": 2, "qty": 2**40})])})
    w1 = stage_window(staging, 1, {"shop.items": StagedTableSpec(narrow, [("c", {"id": 1, "qty": 7})])})

    run_merge(spark, w2, target)
    run_merge(spark, w1, target)

    result = read_table(target, "shop.items")
    assert result.schema == wide
    assert rows(result) == [{"id": 1, "qty": 7}, {"id": 2, "qty": 2**40}]


# --------------------------------------------------------------------------------------------------
# Types and readers
# --------------------------------------------------------------------------------------------------

MAX_TIME = dt.timedelta(hours=838, minutes=59, seconds=59)
ALL_TYPES = pa.schema(
    [
        ("id", pa.int64()),
        ("u64", pa.decimal128(20, 0)),
        ("i8", pa.int8()),
        ("i16", pa.int16()),
        ("i32", pa.int32()),
        ("f32", pa.float32()),
        ("f64", pa.float64()),
        ("price", pa.decimal128(10, 2)),
        ("big", pa.decimal128(38, 10)),
        ("txt", pa.string()),
        ("js", pa.string()),
        ("kind", pa.string()),
        ("tags", pa.string()),
        ("blob", pa.binary()),
        ("day", pa.date32()),
        ("dt6", pa.timestamp("us")),
        ("ts", pa.timestamp("us", tz="UTC")),
        ("tm", pa.duration("us")),
    ]
)
ALL_TYPE_ROWS: list[dict[str, Any]] = [
    {
        "id": 1,
        "u64": Decimal(18446744073709551615),
        "i8": -128,
        "i16": -32768,
        "i32": -2147483648,
        "f32": 1.5,
        "f64": -2.2250738585072014e-308,
        "price": Decimal("-99999999.99"),
        "big": Decimal("9999999999999999999999999999.9999999999"),
        "txt": "utf8mb4 😀 ✓ ñ",
        "js": '{"a": [1, 2.5, {"b": null}], "c": "é"}',
        "kind": "small",
        "tags": "a,b",
        "blob": b"ab\x00\x00",
        "day": dt.date(1000, 1, 1),
        "dt6": dt.datetime(9999, 12, 31, 23, 59, 59, 999999),
        "ts": dt.datetime(2038, 1, 19, 3, 14, 7, 999999, tzinfo=UTC),
        "tm": -MAX_TIME,
    },
    {
        "id": 2,
        "u64": Decimal(0),
        "i8": 127,
        "i16": 32767,
        "i32": 2147483647,
        "f32": -0.25,
        "f64": 1.7976931348623157e308,
        "price": Decimal("0.01"),
        "big": Decimal("-0.0000000001"),
        "txt": "",
        "js": "null",
        "kind": "",
        "tags": "",
        "blob": b"",
        "day": dt.date(9999, 12, 31),
        "dt6": dt.datetime(1000, 1, 1, 0, 0, 0, 1),
        "ts": dt.datetime(1970, 1, 1, 0, 0, 1, tzinfo=UTC),
        "tm": MAX_TIME,
    },
    {"id": 3, **{f.name: None for f in ALL_TYPES if f.name != "id"}},
]


def all_types_window(staging: Path) -> str:
    spec = StagedTableSpec(
        ALL_TYPES, [("c", row) for row in ALL_TYPE_ROWS], mysql_types={"u64": "bigint unsigned"}
    )
    return stage_window(staging, 1, {"shop.types": spec})


def test_all_types_round_trip_exactly(spark, staging, target):
    run_merge(spark, all_types_window(staging), target)

    result = read_table(target, "shop.types")

    expected = pa.Table.from_pylist(ALL_TYPE_ROWS, schema=ALL_TYPES)
    assert result.schema == ALL_TYPES
    assert result.sort_by("id").equals(expected)


def test_time_column_is_stored_as_int64_microseconds_with_its_type_recorded(spark, staging, target):
    run_merge(spark, all_types_window(staging), target)

    stored = delta_arrow_schema(deltalake.DeltaTable(table_uri(target, "shop.types")))

    assert stored.field("tm").type == pa.int64()
    assert stored.field("tm").metadata[b"binlog.arrow_type"] == b"duration[us]"
    assert stored.field("u64").metadata[b"binlog.mysql_type"] == b"bigint unsigned"


# The rows other engines must read: stored types (TIME as int64 microseconds), live rows only.
ENGINE_SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("u64", pa.decimal128(20, 0)),
        ("i8", pa.int8()),
        ("price", pa.decimal128(10, 2)),
        ("txt", pa.string()),
        ("blob", pa.binary()),
        ("day", pa.date32()),
        ("dt6", pa.timestamp("us")),
        ("ts", pa.timestamp("us", tz="UTC")),
        ("tm", pa.int64()),
    ]
)
ENGINE_ROWS = pa.table(
    {
        "id": pa.array([2, 3], pa.int64()),
        "u64": pa.array([Decimal(0), None], pa.decimal128(20, 0)),
        "i8": pa.array([127, None], pa.int8()),
        "price": pa.array([Decimal("0.01"), None], pa.decimal128(10, 2)),
        "txt": ["", None],
        "blob": pa.array([b"", None], pa.binary()),
        "day": pa.array([dt.date(9999, 12, 31), None], pa.date32()),
        "dt6": pa.array([dt.datetime(1000, 1, 1, 0, 0, 0, 1), None], pa.timestamp("us")),
        "ts": pa.array([dt.datetime(1970, 1, 1, 0, 0, 1, tzinfo=UTC), None], pa.timestamp("us", tz="UTC")),
        "tm": pa.array([3020399000000, None], pa.int64()),
    }
)


@pytest.fixture
def types_target_with_tombstone(spark, staging, target) -> str:
    run_merge(spark, all_types_window(staging), target)
    w2 = stage_window(staging, 2, {"shop.types": StagedTableSpec(ALL_TYPES, [("d", ALL_TYPE_ROWS[0])])})
    run_merge(spark, w2, target)
    return target


def as_engine_rows(table: pa.Table) -> pa.Table:
    return pa.Table.from_arrays(
        [table[f.name].cast(f.type) for f in ENGINE_SCHEMA], schema=ENGINE_SCHEMA
    ).sort_by("id")


def test_deltalake_reads_the_live_rows(types_target_with_tombstone):
    data = deltalake.DeltaTable(table_uri(types_target_with_tombstone, "shop.types")).to_pyarrow_table()

    live = data.filter(pc.invert(data["_binlog_deleted"]))

    assert as_engine_rows(live).equals(ENGINE_ROWS)


def test_duckdb_reads_the_live_file_list(types_target_with_tombstone):
    # DuckDB's delta extension needs a download (impossible offline): read the live file list instead.
    duckdb = pytest.importorskip("duckdb")
    files = live_file_uris(types_target_with_tombstone, "shop.types")
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")

    live = con.execute(
        "SELECT * FROM read_parquet(?, union_by_name = true) WHERE NOT _binlog_deleted", [files]
    ).to_arrow_table()

    assert as_engine_rows(live).equals(ENGINE_ROWS)


def test_polars_reads_the_delta_table(types_target_with_tombstone):
    pl = pytest.importorskip("polars")

    live = pl.read_delta(table_uri(types_target_with_tombstone, "shop.types")).filter(
        ~pl.col("_binlog_deleted")
    )

    assert as_engine_rows(live.to_arrow()).equals(ENGINE_ROWS)


def test_spark_reads_the_live_file_list(spark, types_target_with_tombstone):
    files = live_file_uris(types_target_with_tombstone, "shop.types")

    live = spark.read.parquet(*files).where("NOT _binlog_deleted").toArrow()

    assert as_engine_rows(live).equals(ENGINE_ROWS)


def test_new_files_use_int64_microsecond_timestamps_and_no_partition_column(types_target_with_tombstone):
    for uri in live_file_uris(types_target_with_tombstone, "shop.types"):
        metadata = pq.read_metadata(uri)
        columns = [metadata.schema.column(i) for i in range(metadata.num_columns)]
        physical = {c.name: c.physical_type for c in columns}
        assert [physical["dt6"], physical["ts"], physical["_binlog_ts"]] == ["INT64"] * 3
        assert "_binlog_bucket" not in physical
    table_dir = Path(table_uri(types_target_with_tombstone, "shop.types"))
    leftovers = [
        p.name
        for p in table_dir.rglob("*")
        if p.name.startswith(("_SUCCESS", ".")) or p.name.endswith(".crc")
    ]
    assert leftovers == []
    assert not (table_dir / STAGING_DIR).exists()


# --------------------------------------------------------------------------------------------------
# Files
# --------------------------------------------------------------------------------------------------


def test_window_split_over_several_files_is_merged(spark, staging, target):
    changes = [("c", order(i, "new", "1.00")) for i in range(1, 11)] + [("u", order(3, "paid", "1.00"))]

    run_merge(spark, stage_window(staging, 1, orders(changes, files=3)), target)

    result = {r["id"]: r["status"] for r in read_table(target, "shop.orders").to_pylist()}
    assert result == {i: ("paid" if i == 3 else "new") for i in range(1, 11)}


# --------------------------------------------------------------------------------------------------
# Window handling
# --------------------------------------------------------------------------------------------------


def test_table_without_changes_creates_nothing(spark, staging, target):
    window = stage_window(
        staging, 1, {"shop.empty": StagedTableSpec(ORDERS, []), **orders([("c", order(1, "new", "1.00"))])}
    )

    summary = run_merge(spark, window, target)

    assert summary["tables"]["shop.empty"]["skipped"] is True
    assert not Path(table_uri(target, "shop.empty")).exists()
    assert read_table(target, "shop.orders").num_rows == 1


def test_incomplete_window_is_refused(spark, staging, target):
    window = stage_window(staging, 1, orders([("c", order(1, "new", "1.00"))]))
    os.remove(os.path.join(window, "manifest.json"))

    with pytest.raises(ManifestMissingError, match="not staged completely"):
        run_merge(spark, window, target)


def test_window_of_another_pipeline_is_refused(spark, staging, target):
    window = stage_window(staging, 1, orders([("c", order(1, "new", "1.00"))]), pipeline="other")

    with pytest.raises(MergeJobError, match="belongs to pipeline 'other'"):
        run_merge(spark, window, target)


# --------------------------------------------------------------------------------------------------
# The operator (spark-submit from the venv)
# --------------------------------------------------------------------------------------------------


def test_launcher_environment_points_spark_submit_at_pyspark():
    from airflow_provider_binlog.operators.spark import launcher_environment, pyspark_home

    env = launcher_environment("local[2]", None, environ={"PATH": "/usr/bin:/bin"})

    home = pyspark_home()
    assert home is not None
    assert env["SPARK_HOME"] == home
    assert env["PATH"] == f"{home}/bin:/usr/bin:/bin"
    assert env["PYSPARK_PYTHON"] == sys.executable
    # a Spark home that is set up already is left alone (and a cluster-mode driver keeps its own Python)
    assert launcher_environment("yarn", "cluster", environ={"SPARK_HOME": home, "PATH": f"{home}/bin"}) == {}


def test_operator_merges_a_window_with_spark_submit(
    staging, target, spark_connect, tmp_path, monkeypatch, capfd
):
    """Over spark-submit the merge logs little, and writes the same target as over Spark Connect."""
    from test_snapshot_first_load import delta_state

    from airflow_provider_binlog.operators.merge import BinlogMergeOperator

    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": "local[2]"}))
    for name in ("SPARK_HOME", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PATH", "/usr/local/bin:/usr/bin:/bin")  # no venv bin: the operator must cope
    assert shutil.which("spark-submit") is None
    window = stage_window(
        staging,
        1,
        {
            "shop.access_log": keyless_spec(),
            **orders(
                [
                    ("c", order(1, "new", "1.00")),
                    ("c", order(2, "new", "2.00")),
                    ("d", order(1, "new", "1.00")),
                ]
            ),
        },
    )
    task = {
        "task_id": "merge",
        "pipeline": PIPELINE,
        "window_uri": window,
        "keys": {"shop.access_log": ["host", "at"]},
        "target_file_bytes": 4096,
        "conf": {"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "4"},
    }
    operator = BinlogMergeOperator(target_path=target, **task)

    capfd.readouterr()
    result = operator.execute(context={})

    # A task log a person reads: Spark at WARN. Of the JVM's INFO lines (``yy/MM/dd HH:mm:ss INFO ...``),
    # only the banner SparkContext prints before it applies ``spark.log.level`` (version, OS, Java) remains.
    lines = capfd.readouterr().out.splitlines()
    print("\n".join(lines))
    assert 5 <= len(lines) <= 40, "\n".join(lines)
    spark_info = [line for line in lines if re.search(r" \d\d/\d\d/\d\d \S+ INFO ", line)]
    assert len(spark_info) <= 3, "\n".join(spark_info)
    assert result["window"] == 1
    assert result["tables"]["shop.orders"]["rows_in_window"] == 3
    assert result["tables"]["shop.orders"]["rows_written"] == 2
    assert result["tables"]["shop.access_log"]["rows_written"] == 2
    assert rows(read_table(target, "shop.orders")) == [{"id": 2, "status": "new", "amount": Decimal("2.00")}]
    assert os.environ.get("SPARK_HOME") is None  # the environment was restored

    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", spark_connect.connection_json())
    connected = str(tmp_path / "connected")
    assert BinlogMergeOperator(target_path=connected, **task).execute(context={}) == result
    for table, keys in (("shop.orders", ["id"]), ("shop.access_log", ["host", "at"])):
        submitted, over_connect = (
            delta_state(t, table, keys, pipeline=PIPELINE) for t in (target, connected)
        )
        for what in ("rows", "schema", "configuration", "partitions", "stats", "apps"):
            assert submitted[what] == over_connect[what], (table, what)


def test_operator_merges_a_window_over_spark_connect(staging, target, spark, spark_connect, monkeypatch):
    """With a ``spark_connect`` connection the job runs in the task's process on the server: no JVM start."""
    from airflow_provider_binlog.operators.merge import BinlogMergeOperator

    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", spark_connect.connection_json())
    first = stage_window(staging, 1, orders([("c", order(1, "new", "1.00")), ("c", order(2, "new", "2.00"))]))
    second = stage_window(
        staging, 2, orders([("u", order(2, "paid", "2.50")), ("d", order(1, "new", "1.00"))])
    )
    for seq, window in ((1, first), (2, second)):
        operator = BinlogMergeOperator(
            task_id="merge", pipeline=PIPELINE, window_uri=window, target_path=target, target_file_bytes=4096
        )
        result = operator.execute(context={})
        assert result["window"] == seq
        assert result["tables"]["shop.orders"]["rows_in_window"] == 2

    assert rows(read_table(target, "shop.orders")) == [{"id": 2, "status": "paid", "amount": Decimal("2.50")}]
    assert already_merged(deltalake.DeltaTable(table_uri(target, "shop.orders")), PIPELINE, 2)
    assert spark.range(3).count() == 3  # the operator made and stopped a session of its own


def keyless_spec() -> StagedTableSpec:
    return StagedTableSpec(
        LOG,
        [
            ("c", {"host": "a", "at": dt.datetime(2024, 1, 1), "msg": "one"}),
            ("c", {"host": "b", "at": dt.datetime(2024, 1, 1), "msg": "two"}),
        ],
        primary_key=[],
    )


def test_operator_refuses_keyless_table_before_submitting(staging, target, monkeypatch):
    from airflow_provider_binlog.exceptions import BinlogConfigError
    from airflow_provider_binlog.operators.merge import BinlogMergeOperator

    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": "local[2]"}))
    window = stage_window(staging, 1, {"shop.access_log": keyless_spec()})
    operator = BinlogMergeOperator(task_id="merge", pipeline=PIPELINE, window_uri=window, target_path=target)

    with pytest.raises(BinlogConfigError, match=r"shop\.access_log has no primary key"):
        operator.execute(context={})


def test_new_datetime_column_is_added_to_a_table_without_one(spark, staging, target):
    # timestamp_ntz needs Delta reader 3 / writer 7 (timestampNtz feature); the table starts without it
    run_merge(spark, stage_window(staging, 1, orders([("c", order(1, "new", "1.00"))])), target)
    wider = ORDERS.append(pa.field("shipped_at", pa.timestamp("us")))
    w2 = stage_window(
        staging,
        2,
        {
            "shop.orders": StagedTableSpec(
                wider, [("u", {**order(1, "shipped", "1.00"), "shipped_at": dt.datetime(2024, 5, 2, 8, 30)})]
            )
        },
    )

    run_merge(spark, w2, target)

    assert rows(read_table(target, "shop.orders")) == [
        {
            "id": 1,
            "status": "shipped",
            "amount": Decimal("1.00"),
            "shipped_at": dt.datetime(2024, 5, 2, 8, 30),
        }
    ]
    protocol = deltalake.DeltaTable(table_uri(target, "shop.orders")).protocol()
    assert (protocol.min_reader_version, protocol.min_writer_version) == (3, 7)


def test_column_added_in_the_middle_of_a_window(spark, staging, target):
    # the extractor starts a new part file when ALTER TABLE changes the layout inside a window
    wider = ORDERS.append(pa.field("note", pa.string()))
    window = stage_window(
        staging,
        1,
        orders(
            [("c", order(1, "new", "1.00")), ("c", order(2, "new", "2.00")), ("u", order(1, "paid", "1.00"))]
        ),
    )
    first = pq.read_table(os.path.join(window, "shop.orders", "part-00000.parquet"))
    later = first.slice(2).add_column(3, "note", pa.array(["after alter"], pa.string()))
    pq.write_table(first.slice(0, 2), os.path.join(window, "shop.orders", "part-00000.parquet"))
    pq.write_table(later, os.path.join(window, "shop.orders", "part-00001.parquet"))
    manifest_path = Path(window) / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["tables"]["shop.orders"]["files"] = [
        "shop.orders/part-00000.parquet",
        "shop.orders/part-00001.parquet",
    ]
    manifest["tables"]["shop.orders"]["columns"].append(
        {"name": "note", "mysql_type": "text", "arrow_type": "string"}
    )
    manifest_path.write_text(json.dumps(manifest))

    run_merge(spark, window, target)

    result = read_table(target, "shop.orders")
    assert result.schema == wider
    assert rows(result) == [
        {"id": 1, "status": "paid", "amount": Decimal("1.00"), "note": "after alter"},
        {"id": 2, "status": "new", "amount": Decimal("2.00"), "note": None},
    ]


def test_file_uris_for_window_and_target(spark, staging, tmp_path):
    # the extractor hands windows over as file:// URIs
    window = stage_window(staging, 1, orders([("c", order(1, "new", "1.00"))]))
    target_uri = f"file://{tmp_path}/target_uri"

    merge_window(spark, f"file://{window}", target_uri, pipeline=PIPELINE)

    assert rows(read_table(target_uri, "shop.orders")) == [
        {"id": 1, "status": "new", "amount": Decimal("1.00")}
    ]
    assert (tmp_path / "target_uri" / "shop" / "orders" / "_delta_log").is_dir()
    assert not (tmp_path / "target_uri" / "shop" / "orders" / STAGING_DIR).exists()


# Twelve rows cycling through the all-types rows: every value sits in several buckets, and the all-null
# row puts nulls beside values in some files but not in others.
FILTER_ROWS = [{**ALL_TYPE_ROWS[i % 3], "id": i} for i in range(1, 13)]


@pytest.fixture(scope="module")
def filter_target(spark, tmp_path_factory) -> str:
    base = tmp_path_factory.mktemp("filters")
    target = str(base / "target")
    w1 = stage_window(
        base / "staging", 1, {"shop.types": StagedTableSpec(ALL_TYPES, [("c", r) for r in FILTER_ROWS])}
    )
    run_merge(spark, w1, target)
    w2 = stage_window(
        base / "staging", 2, {"shop.types": StagedTableSpec(ALL_TYPES, [("d", FILTER_ROWS[3])])}
    )
    run_merge(spark, w2, target, write_mode="copy_on_write")  # the readers tested here skip deletion vectors
    return target


def reader_predicates(data: pa.Table) -> list[pc.Expression]:
    """``==``, ``isin``, ``>=``, ``<`` and ``is_null`` on every column, with values of rows 1 and 3."""
    first = data.filter(pc.field("id") == 1)
    second = data.filter(pc.field("id") == 3)
    predicates = []
    for name in data.column_names:
        value, other = first[name][0], second[name][0]
        column = pc.field(name)
        predicates += [
            column == value,
            column.isin(pa.array([value.as_py(), other.as_py()], value.type)),
            column.is_null(),
        ]
        if not pa.types.is_boolean(value.type):
            predicates += [column >= value, column < value]
    return predicates + [~pc.field(DELETED_COLUMN)]


def test_filtered_reads_see_every_matching_row(spark, filter_target):
    # Regression: partial minValues/maxValues in our add actions made deltalake's pyarrow fragments
    # claim `column >= null` for every non-integer column, so pushed-down filters dropped whole files.
    uri = table_uri(filter_target, "shop.types")
    live = [r for r in FILTER_ROWS if r["id"] != FILTER_ROWS[3]["id"]]
    assert (
        read_table(filter_target, "shop.types")
        .sort_by("id")
        .equals(pa.Table.from_pylist(live, schema=ALL_TYPES))
    )
    table = deltalake.DeltaTable(uri)
    data = table.to_pyarrow_table()
    wrong = []
    for predicate in reader_predicates(data):
        expected = sorted(data.filter(predicate)["id"].to_pylist())
        for reader, found in [
            ("to_pyarrow_dataset", table.to_pyarrow_dataset().to_table(filter=predicate)),
            ("to_pyarrow_table", table.to_pyarrow_table(filters=predicate)),
        ]:
            if sorted(found["id"].to_pylist()) != expected:
                wrong.append((reader, str(predicate), sorted(found["id"].to_pylist()), expected))
    assert wrong == []
    assert sorted(data.filter(pc.field("kind") == "small")["id"].to_pylist()) == [3, 6, 9, 12]
    spark_rows = spark.read.parquet(*live_file_uris(filter_target, "shop.types")).where("kind = 'small'")
    assert sorted(r["id"] for r in spark_rows.select("id").collect()) == [3, 6, 9, 12]


def test_files_with_integer_only_min_max_are_read_right_under_the_key_statistics_property(
    filter_target, tmp_path
):
    # Files merged before the fix carry min/max of integer columns only, in tables with hash buckets. Their
    # first merge since ADR 0020 sets delta.dataSkippingStatsColumns to the key before anything else, and
    # deltalake then ignores the other columns' statistics: pushed-down filters are right again.
    from deltalake.transaction import AddAction

    copy = tmp_path / "types"
    shutil.copytree(table_uri(filter_target, "shop.types"), copy)
    table = deltalake.DeltaTable(str(copy))
    readds = []
    for action in pa.table(table.get_add_actions(flatten=True)).to_pylist():
        data = pq.read_table(copy / action["path"])
        ints = [n for n in data.column_names if pa.types.is_integer(data.schema.field(n).type)]
        stats = {
            "numRecords": data.num_rows,
            "nullCount": {n: data[n].null_count for n in data.column_names},
            "minValues": {n: pc.min(data[n]).as_py() for n in ints},
            "maxValues": {n: pc.max(data[n]).as_py() for n in ints},
        }
        readds.append(AddAction(action["path"], action["size_bytes"], {}, 0, False, json.dumps(stats)))
    table.create_write_transaction(readds, mode="append", schema=table.schema())
    table = deltalake.DeltaTable(str(copy))
    small = pc.field("kind") == "small"

    pushed_down = table.to_pyarrow_dataset().to_table(filter=small)

    assert sorted(pushed_down["id"].to_pylist()) == [r["id"] for r in FILTER_ROWS if r["kind"] == "small"]
