"""Unit tests of reading the target back (no Spark: tables are written with deltalake directly)."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pyarrow as pa
import pytest

deltalake = pytest.importorskip("deltalake")

from airflow_provider_binlog.contract.types import (  # noqa: E402
    ARROW_TYPE_KEY,
    TypeMapError,
    parse_arrow_type,
    storage_type,
)
from airflow_provider_binlog.exceptions import BinlogConfigError  # noqa: E402
from airflow_provider_binlog.target import (  # noqa: E402
    live_file_uris,
    read_table,
    source_schema,
    table_uri,
)

UTC = dt.timezone.utc


def test_table_uri_of_local_path_is_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)

    assert table_uri("target", "shop.orders") == f"{tmp_path}/target/shop/orders"


def test_table_uri_of_object_store_uri():
    assert table_uri("s3://bucket/cdc/", "shop.order.items") == "s3://bucket/cdc/shop/order.items"


def test_table_uri_refuses_unqualified_name():
    with pytest.raises(BinlogConfigError, match="'orders' is not qualified"):
        table_uri("/target", "orders")


@pytest.mark.parametrize(
    "arrow_type",
    [
        pa.int8(),
        pa.int64(),
        pa.uint64(),
        pa.float32(),
        pa.float64(),
        pa.decimal128(20, 0),
        pa.decimal128(38, 10),
        pa.string(),
        pa.large_string(),
        pa.binary(),
        pa.date32(),
        pa.timestamp("us"),
        pa.timestamp("us", tz="UTC"),
        pa.duration("us"),
        pa.bool_(),
    ],
)
def test_arrow_type_names_parse_back(arrow_type):
    assert parse_arrow_type(str(arrow_type)) == arrow_type


@pytest.mark.parametrize(
    ("staged", "stored"),
    [
        (pa.duration("us"), pa.int64()),
        (pa.uint64(), pa.decimal128(20, 0)),
        (pa.uint32(), pa.int64()),
        (pa.large_string(), pa.string()),
        (pa.timestamp("ms", tz="Europe/Paris"), pa.timestamp("us", tz="UTC")),
        (pa.timestamp("us"), pa.timestamp("us")),
        (pa.decimal128(10, 2), pa.decimal128(10, 2)),
    ],
)
def test_storage_types(staged, stored):
    assert storage_type(staged, "c") == stored


def test_unstorable_type_is_refused_naming_the_column():
    with pytest.raises(TypeMapError, match="column 'ts' has Arrow type timestamp\\[ns\\]"):
        storage_type(pa.timestamp("ns"), "ts")


def _field(name: str, stored: pa.DataType, staged: str | None = None) -> pa.Field:
    return pa.field(name, stored, metadata={ARROW_TYPE_KEY: staged} if staged else None)


@pytest.fixture
def target(tmp_path) -> str:
    """A target with one table as the merge stores it: TIME as int64, BIGINT UNSIGNED as decimal."""
    schema = pa.schema(
        [
            _field("id", pa.int64(), "int64"),
            _field("tm", pa.int64(), "duration[us]"),
            _field("u", pa.decimal128(20, 0), "uint64"),
            _field("at", pa.timestamp("us"), "timestamp[us]"),
            _field("_binlog_op", pa.string()),
            _field("_binlog_window", pa.int64()),
            _field("_binlog_seq", pa.int64()),
            _field("_binlog_gtid", pa.string()),
            _field("_binlog_file", pa.string()),
            _field("_binlog_pos", pa.int64()),
            _field("_binlog_ts", pa.timestamp("us", tz="UTC")),
            _field("_binlog_deleted", pa.bool_()),
            _field("_binlog_bucket", pa.int32()),
        ]
    )
    data = pa.table(
        {
            "id": [1, 2],
            "tm": [-3020399000000, 1],
            "u": pa.array([Decimal(18446744073709551615), Decimal(0)], pa.decimal128(20, 0)),
            "at": pa.array([dt.datetime(2024, 1, 1), dt.datetime(2024, 1, 2)], pa.timestamp("us")),
            "_binlog_op": ["c", "d"],
            "_binlog_window": [1, 1],
            "_binlog_seq": [1, 2],
            "_binlog_gtid": [None, None],
            "_binlog_file": ["f", "f"],
            "_binlog_pos": [4, 5],
            "_binlog_ts": pa.array([dt.datetime(2024, 1, 1, tzinfo=UTC)] * 2, pa.timestamp("us", tz="UTC")),
            "_binlog_deleted": [False, True],
            "_binlog_bucket": pa.array([0, 1], pa.int32()),
        },
        schema=schema,
    )
    root = str(tmp_path / "target")
    deltalake.write_deltalake(table_uri(root, "shop.t"), data, partition_by=["_binlog_bucket"])
    return root


def test_read_table_returns_live_rows_with_staged_types(target):
    result = read_table(target, "shop.t")

    assert result == pa.table(
        {
            "id": pa.array([1], pa.int64()),
            "tm": pa.array([-dt.timedelta(hours=838, minutes=59, seconds=59)], pa.duration("us")),
            "u": pa.array([18446744073709551615], pa.uint64()),
            "at": pa.array([dt.datetime(2024, 1, 1)], pa.timestamp("us")),
        }
    )


def test_read_table_with_tombstones_and_metadata(target):
    result = read_table(target, "shop.t", with_metadata=True, include_tombstones=True)

    assert result.column_names[-2:] == ["_binlog_deleted", "_binlog_bucket"]
    assert sorted(result.select(["id", "_binlog_deleted"]).to_pylist(), key=lambda r: r["id"]) == [
        {"id": 1, "_binlog_deleted": False},
        {"id": 2, "_binlog_deleted": True},
    ]


def test_source_schema_and_live_files(target):
    assert source_schema(target, "shop.t") == pa.schema(
        [("id", pa.int64()), ("tm", pa.duration("us")), ("u", pa.uint64()), ("at", pa.timestamp("us"))]
    )
    assert len(live_file_uris(target, "shop.t")) == 2


def test_read_table_of_missing_table_says_where_it_looked(tmp_path):
    with pytest.raises(BinlogConfigError, match="no Delta table for shop.nope at .*/shop/nope"):
        read_table(str(tmp_path), "shop.nope")
