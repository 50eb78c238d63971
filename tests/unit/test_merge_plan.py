"""The window's merge plan (``jobs/merge/plan.py``): read once, ordered, keyed; no Spark, no server."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_provider_binlog.contract.columns import CHANGE_FIELDS, EVENT_COLUMNS, UTC
from airflow_provider_binlog.contract.foreign_keys import ForeignKey
from airflow_provider_binlog.contract.keys import MergeKeyError
from airflow_provider_binlog.contract.manifest import Manifest, TableEntry, write_manifest
from airflow_provider_binlog.jobs.merge import window as window_module
from airflow_provider_binlog.jobs.merge.cascades import CASCADES_DIR
from airflow_provider_binlog.jobs.merge.plan import plan_window
from airflow_provider_binlog.jobs.merge.schema import UnfollowableSchemaChange
from airflow_provider_binlog.jobs.merge.window import load_window

PIPELINE = "shop"
SEQ = 7
T0 = dt.datetime(2026, 1, 1, tzinfo=UTC)


def change(op: str, seq: int, pos: int, **values: Any) -> dict[str, Any]:
    """Return a staged change row; rows of one event share ``pos`` (and so their event columns)."""
    return {
        **values,
        "_binlog_op": op,
        "_binlog_window": SEQ,
        "_binlog_seq": seq,
        "_binlog_gtid": f"0-1-{pos}",
        "_binlog_file": "mysql-bin.000001",
        "_binlog_pos": pos,
        "_binlog_ts": T0,
    }


def stage(
    window: Path,
    tables: dict[str, tuple[list[pa.Schema], list[list[dict[str, Any]]], tuple[str, ...]]],
    foreign_keys: Sequence[ForeignKey] = (),
) -> str:
    """Stage ``{table: ([file schemas], [file rows], primary key)}``, one Parquet file per schema."""
    entries = {}
    for name, (schemas, files, primary_key) in tables.items():
        (window / name).mkdir(parents=True)
        relative = []
        for i, (schema, rows) in enumerate(zip(schemas, files, strict=True)):
            path = f"{name}/part-{i}.parquet"
            pq.write_table(
                pa.Table.from_pylist(rows, schema=pa.schema([*schema, *CHANGE_FIELDS])), window / path
            )
            relative.append(path)
        ops: dict[str, int] = {}
        for row in (r for rows in files for r in rows):
            ops[row["_binlog_op"]] = ops.get(row["_binlog_op"], 0) + 1
        entries[name] = TableEntry(
            files=tuple(relative),
            rows=sum(map(len, files)),
            ops=ops,
            primary_key=primary_key,
            columns=tuple({"name": f.name, "arrow_type": str(f.type)} for f in schemas[0]),
        )
    manifest = Manifest(
        pipeline=PIPELINE, window=SEQ, tables=entries, foreign_keys=[k.to_manifest() for k in foreign_keys]
    )
    write_manifest(str(window), manifest)
    return str(window)


ORDERS = pa.schema([("id", pa.int64()), ("status", pa.string())])


def test_each_footer_is_read_once_and_an_unmergeable_schema_waits_for_its_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wider = ORDERS.append(pa.field("note", pa.string()))
    texts = pa.schema([("id", pa.int64()), ("qty", pa.string())])
    uri = stage(
        tmp_path / "window",
        {
            "shop.orders": (
                [ORDERS, wider],
                [
                    [change("c", 1, 100, id=1, status="new")],
                    [change("u", 2, 200, id=1, status="paid", note="x")],
                ],
                ("id",),
            ),
            "shop.items": (
                [texts.set(1, pa.field("qty", pa.int32())), texts],
                [[change("c", 3, 300, id=1, qty=1)], [change("c", 4, 400, id=2, qty="two")]],
                ("id",),
            ),
        },
    )
    reads: list[str] = []
    original = window_module.pq.read_schema

    def counted(path: str, **kwargs: Any) -> pa.Schema:
        reads.append(path)
        return original(path, **kwargs)

    monkeypatch.setattr(window_module.pq, "read_schema", counted)

    plan = plan_window(load_window(uri), str(tmp_path / "target"))

    assert len(reads) == 4  # one footer read per staged file, for the whole window
    items, orders = plan.tables  # manifest order (its tables are sorted by name)
    assert (orders.name, orders.keys, items.keys) == ("shop.orders", ("id",), ("id",))
    assert orders.staged_schema().names == ["id", "status", "note", *(f.name for f in CHANGE_FIELDS)]
    assert orders.target_schema().field("note").nullable
    with pytest.raises(UnfollowableSchemaChange, match="qty"):
        items.staged_schema()


def test_the_truncate_marker_is_planned_with_its_event_columns(tmp_path: Path) -> None:
    marker = change("t", 2, 250)
    uri = stage(
        tmp_path / "window",
        {"shop.orders": ([ORDERS], [[change("c", 1, 100, id=1, status="new"), marker]], ("id",))},
    )
    (orders,) = plan_window(load_window(uri), str(tmp_path / "target")).tables
    assert orders.truncation.marker == (SEQ, 2)
    assert orders.truncation.floor is None  # the table's, read when it is merged
    assert orders.truncation.coordinates == {c: marker[c] for c in EVENT_COLUMNS}


def test_a_parent_key_change_plans_the_child_parents_first_with_its_synthesised_file(tmp_path: Path) -> None:
    parent = pa.schema([("id", pa.int64())])
    child = pa.schema([("id", pa.int64()), ("p_id", pa.int64())])
    key = ForeignKey("c_fk", "shop.c", ("p_id",), "shop.p", ("id",), "CASCADE", "CASCADE")
    uri = stage(
        tmp_path / "window",
        {
            "shop.c": ([child], [[change("c", 1, 100, id=10, p_id=1)]], ("id",)),
            # UPDATE p SET id = 2 WHERE id = 1: the key change's d and u, one event at consecutive order keys
            "shop.p": ([parent], [[change("d", 2, 200, id=1), change("u", 3, 200, id=2)]], ("id",)),
        },
        [key],
    )
    target = tmp_path / "target"

    plan = plan_window(load_window(uri), str(target))

    p, c = plan.tables
    assert (p.name, c.name) == ("shop.p", "shop.c")
    (synthesised,) = (target / CASCADES_DIR / PIPELINE / f"window={SEQ}").glob("*.parquet")
    assert c.staged.files[-1].endswith(synthesised.name)
    assert c.staged.rows == 2
    assert pq.read_table(synthesised).select(["id", "p_id", "_binlog_seq"]).to_pylist() == [
        {"id": 10, "p_id": 2, "_binlog_seq": 2}
    ]
    assert c.staged_schema().names == [*child.names, *(f.name for f in CHANGE_FIELDS)]


def test_a_table_without_a_key_is_refused_before_anything_is_merged(tmp_path: Path) -> None:
    uri = stage(tmp_path / "window", {"shop.log": ([ORDERS], [[change("c", 1, 100, id=1, status="x")]], ())})
    with pytest.raises(MergeKeyError, match="shop.log"):
        plan_window(load_window(uri), str(tmp_path / "target"))
    named = plan_window(load_window(uri), str(tmp_path / "target"), key_overrides={"shop.log": ["id"]})
    assert named.tables[0].keys == ("id",)
