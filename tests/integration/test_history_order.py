"""History tables do not depend on the order windows are merged in (interval backfills), against real Spark.

Four windows of one table with change logs and SCD2 tables (updates staged with their before images, a key move, a
delete and a re-insert of one key, a truncate marker) are merged in order into one target and out of order into
another: both targets, both change logs and both SCD2 tables must hold the same rows, and both digest chains must
verify. The contract-format staging of ``test_merge.stage_window`` is used, with the before images added.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

pytest.importorskip("pyspark")
deltalake = pytest.importorskip("deltalake")

from test_merge import PIPELINE, order, orders, stage_window  # noqa: E402

from airflow_provider_binlog.contract.columns import OP_TRUNCATE  # noqa: E402
from airflow_provider_binlog.contract.history import (  # noqa: E402
    CHANGELOG,
    ENDED_BY_COLUMN,
    IS_CURRENT_COLUMN,
    SCD2,
    changelog_uri,
    scd2_uri,
)
from airflow_provider_binlog.contract.manifest import read_manifest, write_manifest  # noqa: E402
from airflow_provider_binlog.history import verify_history  # noqa: E402
from airflow_provider_binlog.jobs.merge.job import merge_window  # noqa: E402
from airflow_provider_binlog.target import read_table  # noqa: E402

pytestmark = pytest.mark.integration

MARKER = {"id": None, "status": None, "amount": None}
WINDOWS: list[list[tuple[Any, ...]]] = [
    [("c", order(1, "new", "10.00")), ("c", order(2, "new", "20.00")), ("c", order(3, "new", "30.00"))],
    [
        ("u", order(1, "new", "10.00"), order(1, "paid", "10.00")),
        ("u", order(2, "new", "20.00"), order(20, "new", "20.00")),  # the row moves to key 20
        ("d", order(3, "new", "30.00")),
    ],
    [("t", MARKER), ("c", order(5, "late", "5.00")), ("c", order(1, "again", "1.00"))],
    [
        ("u", order(5, "late", "5.00"), order(5, "paid", "5.00")),
        ("d", order(1, "again", "1.00")),
        ("c", order(1, "third", "3.00")),
    ],
]


def stage(staging: Path, seq: int, changes: list[tuple[Any, ...]]) -> str:
    """Stage a window as a table with history is staged; its manifest asks for history.

    An update is one ``u`` row carrying its before image (``_binlog_before``); one that moves the row's key is the
    ``d`` of the before image, then the ``u``, of one row event, both carrying it (the key-change rule).
    """
    flat: list[tuple[str, dict[str, Any], dict[str, Any] | None]] = []
    moves = []
    for change in changes:
        if change[0] == "u":
            if change[1]["id"] != change[2]["id"]:
                moves.append(len(flat))
                flat.append(("d", change[1], change[1]))
            flat.append(("u", change[2], change[1]))
        else:
            flat.append((change[0], change[1], None))
    uri = stage_window(staging, seq, orders([(op, row) for op, row, _ in flat]))
    manifest = read_manifest(uri)
    assert manifest is not None
    entry = manifest.tables["shop.orders"]
    path = Path(uri) / entry.files[0]
    table = pq.read_table(path)
    rows = table.to_pylist()
    for at in moves:  # the update shares its delete's row event (GTID, position, commit time)
        for column in ("_binlog_gtid", "_binlog_pos", "_binlog_ts"):
            rows[at + 1][column] = rows[at][column]
    source = [f for f in table.schema if not f.name.startswith("_binlog_")]
    for row, (_, _, before) in zip(rows, flat, strict=True):
        row["_binlog_before"] = before
    schema = table.schema.append(pa.field("_binlog_before", pa.struct(source)))
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path)
    markers = sum(op == OP_TRUNCATE for op, _, _ in flat)
    entry = dataclasses.replace(
        entry, history=(CHANGELOG, SCD2), ops={**entry.ops, OP_TRUNCATE: markers} if markers else entry.ops
    )
    write_manifest(uri, dataclasses.replace(manifest, tables={"shop.orders": entry}))
    return uri


def contents(target: str) -> dict[str, Any]:
    def rows(uri: str) -> list[str]:
        return sorted(
            repr(sorted(r.items())) for r in deltalake.DeltaTable(uri).to_pyarrow_table().to_pylist()
        )

    return {
        "target": sorted(repr(sorted(r.items())) for r in read_table(target, "shop.orders").to_pylist()),
        "changelog": rows(changelog_uri(target, "shop.orders")),
        "scd2": rows(scd2_uri(target, "shop.orders")),
    }


def test_history_tables_are_the_same_whatever_order_the_windows_are_merged_in(
    spark: Any, staging: Path, target: str
) -> None:
    uris = [stage(staging, seq, changes) for seq, changes in enumerate(WINDOWS, start=1)]
    backfilled = target + "_out_of_order"
    for uri in uris:
        merge_window(spark, uri, target, pipeline=PIPELINE)
    for index in (2, 0, 3, 1):
        merge_window(spark, uris[index], backfilled, pipeline=PIPELINE)

    in_order, out_of_order = contents(target), contents(backfilled)
    assert out_of_order == in_order
    live = read_table(target, "shop.orders").to_pylist()
    assert sorted((r["id"], r["status"]) for r in live) == [(1, "third"), (5, "paid")]
    versions = deltalake.DeltaTable(scd2_uri(target, "shop.orders")).to_pyarrow_table().to_pylist()
    history_of_1 = sorted(
        (v["_binlog_window"], v["status"], v[ENDED_BY_COLUMN]) for v in versions if v["id"] == 1
    )
    assert history_of_1 == [(1, "new", "u"), (2, "paid", "t"), (3, "again", "d"), (4, "third", None)]
    assert sorted(v["id"] for v in versions if v[IS_CURRENT_COLUMN]) == [1, 5]
    assert [v[ENDED_BY_COLUMN] for v in versions if v["id"] == 2] == ["d"]  # moved to key 20, later truncated
    changes = deltalake.DeltaTable(changelog_uri(target, "shop.orders")).to_pyarrow_table().to_pylist()
    window_2 = sorted(
        (c["_binlog_op"], (c["_binlog_before"] or {}).get("id"), (c["_binlog_after"] or {}).get("id"))
        for c in changes
        if c["_binlog_window"] == 2
    )
    assert window_2 == [("d", 3, None), ("u", 1, 1), ("u", 2, 20)]  # the move is one update, not a delete too
    paid = next(c for c in changes if c["_binlog_window"] == 2 and c["id"] == 1)
    assert (paid["_binlog_before"]["status"], paid["_binlog_after"]["status"]) == ("new", "paid")
    for root in (target, backfilled):
        report = verify_history(root, "shop.orders")
        assert report.ok, str(report)


def test_compacting_history_tables_keeps_their_rows_their_digests_and_later_merges(
    spark: Any, staging: Path, target: str
) -> None:
    """Maintenance joins a change log's small files (one per window) in window order; its rows and digest chain
    stay, its log keeps every commit, and a later window merges into it as into one never compacted."""
    from airflow_provider_binlog.maintenance import checkpoint_table, compact_table

    uris = [stage(staging, seq, changes) for seq, changes in enumerate(WINDOWS, start=1)]
    plain = target + "_never_compacted"
    for uri in uris:
        merge_window(spark, uri, plain, pipeline=PIPELINE)
    for uri in uris[:3]:
        merge_window(spark, uri, target, pipeline=PIPELINE)
    log_uri = changelog_uri(target, "shop.orders")
    before = contents(target)
    assert len(deltalake.DeltaTable(log_uri).file_uris()) == 3
    commits = sorted(p.name for p in Path(log_uri, "_delta_log").glob("*.json"))

    compacted = compact_table(log_uri, appended=True)
    assert (compacted.files_removed, compacted.files_added, compacted.conflict) == (3, 1, False)
    assert compact_table(scd2_uri(target, "shop.orders")).files_removed == 0  # one file: nothing to join
    checkpoint_table(log_uri, keep_log=True)
    (joined,) = deltalake.DeltaTable(log_uri).file_uris()
    assert Path(joined).name.startswith("w1-s0-compacted-")  # named after its first window
    assert contents(target) == before
    assert set(commits) <= {p.name for p in Path(log_uri, "_delta_log").glob("*.json")}
    report = verify_history(target, "shop.orders")
    assert report.ok, str(report)
    assert (report.windows, report.rows) == (3, len(before["changelog"]))

    merge_window(spark, uris[3], target, pipeline=PIPELINE)
    assert contents(target) == contents(plain)
    assert verify_history(target, "shop.orders").ok
    assert compact_table(log_uri, appended=True).files_removed == 2  # the compacted file and the new window's


def test_an_scd2_table_of_many_files_rewrites_only_the_files_of_the_windows_keys(
    spark: Any, staging: Path, target: str
) -> None:
    rows = {i: order(i, "new", f"{i}.00") for i in range(1, 301)}
    windows = [
        [("c", row) for row in rows.values()],
        [
            ("u", rows[7], order(7, "paid", "7.00")),
            ("u", rows[150], order(150, "paid", "150.00")),
            ("d", rows[151]),
            ("c", order(1000, "new", "1.00")),
        ],
    ]
    uris = [stage(staging, seq, changes) for seq, changes in enumerate(windows, start=1)]
    one_file = target + "_one_file"
    for uri in uris:
        merge_window(spark, uri, target, pipeline=PIPELINE, target_file_bytes=4000)
        merge_window(spark, uri, one_file, pipeline=PIPELINE)

    scd2 = deltalake.DeltaTable(scd2_uri(target, "shop.orders"))
    previous = deltalake.DeltaTable(scd2_uri(target, "shop.orders"), version=scd2.version() - 1)
    files_before = len(previous.file_uris())
    removed = scd2.history(1)[0]["binlog.files_removed"]
    assert files_before > 4
    assert 1 <= removed < files_before / 2  # only the files the window's keys can be in
    assert contents(target) == contents(one_file)
    current = {v["id"]: v["status"] for v in scd2.to_pyarrow_table().to_pylist() if v[IS_CURRENT_COLUMN]}
    assert (current[7], current[150], current[1000], 151 in current) == ("paid", "paid", "new", False)
