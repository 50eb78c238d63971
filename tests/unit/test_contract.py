"""The staging contract without Spark or a server: manifest, names, keys, type map, locations."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from airflow_provider_binlog.contract import ContractError
from airflow_provider_binlog.contract.columns import (
    CHANGE_FIELDS,
    OP_SNAPSHOT,
    OPS,
    change_schema,
    is_key_change,
    key_change_update_order,
    moving_columns,
)
from airflow_provider_binlog.contract.keys import MergeKeyError, parse_key_overrides, resolve_keys
from airflow_provider_binlog.contract.manifest import (
    MANIFEST_NAME,
    SNAPSHOT_KIND,
    WINDOW_KIND,
    Manifest,
    ManifestError,
    ManifestMissingError,
    TableEntry,
    read_manifest,
    require_manifest,
    write_manifest,
)
from airflow_provider_binlog.contract.names import TableNameError, split_table_name
from airflow_provider_binlog.contract.positions import BinlogPosition
from airflow_provider_binlog.contract.types import (
    ARROW_TYPE_KEY,
    TypeMapError,
    is_lossless_widening,
    parse_arrow_type,
    recorded_arrow_type,
    storage_type,
)
from airflow_provider_binlog.contract.uris import (
    STORAGE_OPTIONS_ENV,
    filesystem_for,
    join_uri,
    s3_filesystem,
    storage_options_from_env,
    table_uri,
)

WINDOW = Manifest(
    pipeline="shop",
    window=3,
    run_id="scheduled__1",
    start=BinlogPosition("b.000001", 4),
    end=BinlogPosition("b.000001", 900),
    created_at="2026-01-01T00:00:00+00:00",
    tables={
        "shop.orders": TableEntry(
            files=("shop.orders/part-00000.parquet",),
            rows=2,
            ops={"c": 1, "u": 1},
            primary_key=("id",),
            columns=({"name": "id", "mysql_type": "int", "arrow_type": "int32"},),
        ),
        "shop.empty": TableEntry(primary_key=("id",)),
        "shop.log": TableEntry(files=("shop.log/part-00000.parquet",), rows=1, ops={"c": 1}),
    },
    stats={"rows": 3, "read_seconds": 0.5},
    ddl=[{"query": "ALTER TABLE t ADD COLUMN x INT", "effects": []}],
    foreign_keys=[{"name": "fk", "child": "shop.items", "parent": "shop.orders"}],
)


def test_a_window_manifest_round_trips_through_its_text() -> None:
    assert Manifest.from_text(WINDOW.to_text()) == WINDOW
    body = json.loads(WINDOW.to_text())
    assert body["format_version"] == 1
    assert body["kind"] == WINDOW_KIND
    assert "watermarks" not in body  # None fields are left out, as before the dataclass
    assert body["tables"]["shop.orders"]["ops"] == {"c": 1, "u": 1}


def test_a_snapshot_manifest_round_trips_and_merges_its_empty_tables() -> None:
    snapshot = Manifest(
        pipeline="shop",
        window=4,
        kind=SNAPSHOT_KIND,
        tables={
            "shop.orders": TableEntry(files=("a.parquet",), rows=0, ops={}, chunks=1),
            "shop.unread": TableEntry(),
        },
        watermarks={"lowest": BinlogPosition("b.000001", 4), "highest": BinlogPosition("b.000001", 9)},
    )
    assert Manifest.from_json(snapshot.to_json()) == snapshot
    assert snapshot.tables_to_merge() == {
        "shop.orders": ()
    }  # files but no rows: it replaces the table's rows


def test_a_window_merges_only_tables_with_rows() -> None:
    assert WINDOW.tables_to_merge() == {"shop.orders": ("id",), "shop.log": ()}
    assert WINDOW.changed_tables() == ["shop.log", "shop.orders"]


def test_a_manifest_written_before_kind_existed_is_a_window() -> None:
    body = WINDOW.to_json()
    del body["kind"]
    assert Manifest.from_json(body).kind == WINDOW_KIND


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"format_version": 2}, r"format_version 2; this provider reads \[1\]"),
        ({"pipeline": None, "window": "x"}, "does not follow the staging contract"),
        ({"tables": {"orders": {}}}, "'orders' is not qualified"),
        ({"kind": "delta"}, "unknown kind 'delta'"),
        ({"tables": {"shop.t": {"rows": "many"}}}, "does not follow the staging contract"),
    ],
)
def test_an_invalid_manifest_is_refused_naming_the_file(change: dict[str, object], message: str) -> None:
    body = {**WINDOW.to_json(), **change}
    with pytest.raises(ManifestError, match=message) as caught:
        Manifest.from_json(body, where="s3://b/window=3/manifest.json")
    assert "s3://b/window=3/manifest.json" in str(caught.value)


def test_manifest_text_that_is_not_json_is_refused() -> None:
    with pytest.raises(ManifestError, match="is not valid JSON"):
        Manifest.from_text(b"{half", where="m.json")


def test_the_manifest_is_written_last_under_its_name_and_read_back(tmp_path: Path) -> None:
    window = str(tmp_path / "shop" / "window=3")
    assert read_manifest(window) is None
    with pytest.raises(ManifestMissingError, match="not staged completely"):
        require_manifest(window)

    location = write_manifest(window, WINDOW)

    assert location == f"{window}/{MANIFEST_NAME}"
    assert [p.name for p in Path(window).iterdir()] == [MANIFEST_NAME]  # no temporary file left
    assert require_manifest(window) == WINDOW


def test_change_columns_follow_the_source_columns() -> None:
    schema = change_schema([pa.field("id", pa.int32())])
    assert schema.names == ["id", *(f.name for f in CHANGE_FIELDS)]
    assert OP_SNAPSHOT in OPS


def test_a_key_change_is_a_delete_then_an_update_of_one_event_at_the_next_order_key() -> None:
    event = {"_binlog_gtid": "0-1-7", "_binlog_file": "b.000001", "_binlog_pos": 900, "_binlog_ts": 1}
    delete = {"id": 1, "_binlog_op": "d", "_binlog_window": 5, "_binlog_seq": 41, **event}
    update = {"id": 2, "_binlog_op": "u", "_binlog_window": 5, "_binlog_seq": 42, **event}
    assert key_change_update_order((5, 41)) == (5, 42)
    assert is_key_change(delete, update)
    assert not is_key_change(delete, None)
    assert not is_key_change(delete, {**update, "_binlog_pos": 1000})  # the next event's update
    assert not is_key_change(delete, {**update, "_binlog_seq": 43})
    assert not is_key_change(delete, {**update, "_binlog_op": "c"})
    assert moving_columns(["a", "b"], ["code", "b"]) == ["a", "b", "code"]


@pytest.mark.parametrize(
    ("name", "parts"), [("shop.orders", ("shop", "orders")), ("shop.order.items", ("shop", "order.items"))]
)
def test_table_names_split_at_the_first_dot(name: str, parts: tuple[str, str]) -> None:
    assert split_table_name(name) == parts


@pytest.mark.parametrize("name", ["orders", ".orders", "shop.", ""])
def test_unqualified_table_names_are_refused(name: str) -> None:
    with pytest.raises(TableNameError, match="is not qualified as 'db.table'"):
        split_table_name(name)


def test_a_table_is_merged_by_its_primary_key_or_a_named_key() -> None:
    keys = resolve_keys(
        {"shop.orders": ("id",), "shop.log": ()}, {"shop.log": ["host", "at"], "shop.ID": ["x"]}
    )
    assert keys == {"shop.orders": ("id",), "shop.log": ("host", "at")}
    assert resolve_keys({"shop.orders": ("ID",)}, {"shop.orders": ["id"]}) == {"shop.orders": ("ID",)}


def test_a_table_without_any_key_is_refused_naming_the_option() -> None:
    with pytest.raises(MergeKeyError, match=r"shop\.log has no primary key.*--key shop\.log=col1,col2"):
        resolve_keys({"shop.log": ()})


def test_a_named_key_may_not_contradict_a_primary_key() -> None:
    with pytest.raises(MergeKeyError, match=r"has primary key \['id'\]; a user-named key \(\['code'\]\)"):
        resolve_keys({"shop.orders": ("id",)}, {"shop.orders": ["code"]})


@pytest.mark.parametrize(
    ("specs", "message"),
    [(["shop.t"], "must look like"), (["shop.t=a", "shop.t=b"], "twice"), (["t=a"], "not qualified")],
)
def test_malformed_key_options_are_refused(specs: list[str], message: str) -> None:
    with pytest.raises(ContractError, match=message):
        parse_key_overrides(specs)


def test_key_options_parse_into_column_tuples() -> None:
    assert parse_key_overrides(["shop.t= a , b", "shop.u=c"]) == {"shop.t": ("a", "b"), "shop.u": ("c",)}


@pytest.mark.parametrize(
    "staged",
    [
        pa.int8(),
        pa.uint64(),
        pa.float32(),
        pa.decimal128(20, 0),
        pa.decimal256(65, 30),
        pa.string(),
        pa.binary(),
        pa.date32(),
        pa.timestamp("us"),
        pa.timestamp("us", tz="UTC"),
        pa.duration("us"),
    ],
)
def test_the_recorded_type_text_parses_back_to_the_staged_type(staged: pa.DataType) -> None:
    assert parse_arrow_type(str(staged)) == staged
    stored = pa.field("c", pa.int64(), metadata={ARROW_TYPE_KEY: str(staged)})
    assert recorded_arrow_type(stored) == staged


@pytest.mark.parametrize(
    ("staged", "stored"),
    [
        (pa.uint8(), pa.int16()),
        (pa.uint32(), pa.int64()),
        (pa.uint64(), pa.decimal128(20, 0)),
        (pa.duration("us"), pa.int64()),
        (pa.large_string(), pa.string()),
        (pa.timestamp("ms", tz="+02:00"), pa.timestamp("us", tz="UTC")),
        (pa.date64(), pa.date32()),
    ],
)
def test_types_delta_lacks_are_stored_wider(staged: pa.DataType, stored: pa.DataType) -> None:
    assert storage_type(staged, "c") == stored


def test_unknown_type_text_is_refused_and_an_unreadable_record_falls_back_to_the_stored_type() -> None:
    with pytest.raises(TypeMapError, match="unrecognised Arrow type 'list<int32>'"):
        parse_arrow_type("list<int32>")
    assert recorded_arrow_type(pa.field("c", pa.int64(), metadata={ARROW_TYPE_KEY: "list<x>"})) == pa.int64()


@pytest.mark.parametrize(
    ("narrow", "wide", "lossless"),
    [
        (pa.int32(), pa.int64(), True),
        (pa.int64(), pa.int32(), False),
        (pa.int32(), pa.decimal128(10, 0), True),
        (pa.int32(), pa.decimal128(10, 2), False),
        (pa.int16(), pa.float32(), True),
        (pa.int32(), pa.float32(), False),
        (pa.int32(), pa.float64(), True),
        (pa.float32(), pa.float64(), True),
        (pa.decimal128(10, 2), pa.decimal128(12, 4), True),
        (pa.decimal128(10, 2), pa.decimal128(12, 1), False),
        (pa.date32(), pa.timestamp("us"), True),
        (pa.date32(), pa.timestamp("us", tz="UTC"), False),
        (pa.string(), pa.binary(), False),
    ],
)
def test_lossless_widenings(narrow: pa.DataType, wide: pa.DataType, lossless: bool) -> None:
    assert is_lossless_widening(narrow, wide) is lossless


def test_locations_join_with_slashes_and_tables_live_under_db_and_name(tmp_path: Path) -> None:
    assert join_uri("s3://b/root/", "/shop/", "window=1") == "s3://b/root/shop/window=1"
    assert table_uri("s3://b/t", "shop.order.items") == "s3://b/t/shop/order.items"
    assert filesystem_for(str(tmp_path))[1] == str(tmp_path)


def test_s3_options_configure_the_endpoint_keys_and_scheme() -> None:
    fs = s3_filesystem(
        {
            "aws_access_key_id": "k",
            "AWS_SECRET_ACCESS_KEY": "s",
            "AWS_ENDPOINT_URL": "http://127.0.0.1:9",
            "AWS_REGION": "eu-west-1",
        }
    )
    settings = fs.__reduce__()[1][0]  # pyarrow's own record of how the filesystem was configured
    assert (settings["endpoint_override"], settings["scheme"], settings["region"]) == (
        "127.0.0.1:9",
        "http",
        "eu-west-1",
    )
    assert (settings["access_key"], settings["secret_key"]) == ("k", "s")


def test_storage_options_come_from_the_environment_as_json() -> None:
    assert storage_options_from_env({}) == {}
    assert storage_options_from_env({STORAGE_OPTIONS_ENV: '{"AWS_REGION": "x"}'}) == {"AWS_REGION": "x"}
    with pytest.raises(ContractError, match="JSON object of strings"):
        storage_options_from_env({STORAGE_OPTIONS_ENV: '{"AWS_ALLOW_HTTP": true}'})
