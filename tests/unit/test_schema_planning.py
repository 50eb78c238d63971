"""Planning a table's schema change for a window, without Spark or Delta: pure Arrow schemas."""

from __future__ import annotations

import pyarrow as pa
import pytest

from airflow_provider_binlog.contract.columns import CHANGE_FIELDS, DELETED_COLUMN, TS_COLUMN
from airflow_provider_binlog.contract.types import ARROW_TYPE_KEY, MYSQL_TYPE_KEY
from airflow_provider_binlog.jobs.merge.schema import (
    UnfollowableSchemaChange,
    plan_schema_change,
    replaced_columns,
)
from airflow_provider_binlog.jobs.merge.window import target_schema


def table(*columns: tuple[str, pa.DataType, str]) -> pa.Schema:
    """Return a target schema for source ``columns`` (name, staged Arrow type, MySQL type)."""
    staged = pa.schema([*(pa.field(n, t) for n, t, _ in columns), *CHANGE_FIELDS])
    return target_schema(staged, [{"name": n, "mysql_type": m, "arrow_type": str(t)} for n, t, m in columns])


def plan(current: pa.Schema, wanted: pa.Schema, *, newest: bool = True):  # type: ignore[no-untyped-def]
    return plan_schema_change(current, wanted, "shop.t", pipeline="p", newest=newest)


def test_the_target_schema_stores_wider_types_and_records_the_staged_ones() -> None:
    schema = table(("id", pa.uint32(), "int unsigned"), ("t", pa.duration("us"), "time(6)"))
    assert [f.name for f in schema][-2:] == [TS_COLUMN, DELETED_COLUMN]  # no partition column (ADR 0020)
    assert schema.field("id").type == pa.int64()
    assert schema.field("id").metadata[ARROW_TYPE_KEY.encode()] == b"uint32"
    assert schema.field("t").type == pa.int64()
    assert schema.field("t").metadata[MYSQL_TYPE_KEY.encode()] == b"time(6)"
    assert all(f.nullable for f in schema)


def test_equal_schemas_need_no_change() -> None:
    current = table(("id", pa.int32(), "int"))
    change = plan(current, current)
    assert (change.new_fields, change.metadata, change.widened) == ([], {}, {})


def test_a_new_column_is_added_and_names_match_case_insensitively() -> None:
    current = table(("ID", pa.int32(), "int"))
    change = plan(current, table(("id", pa.int32(), "int"), ("note", pa.string(), "text")))
    assert [f.name for f in change.new_fields] == ["note"]
    assert change.widened == {}


def test_a_wider_type_is_planned_as_a_rewrite_under_the_tables_spelling() -> None:
    current = table(("Qty", pa.int32(), "int"))
    change = plan(current, table(("qty", pa.int64(), "bigint")))
    assert list(change.widened) == ["Qty"]
    assert change.widened["Qty"].type == pa.int64()


def test_a_longer_varchar_changes_only_the_metadata() -> None:
    change = plan(table(("s", pa.string(), "varchar(10)")), table(("s", pa.string(), "varchar(20)")))
    assert change.metadata == {"s": {ARROW_TYPE_KEY: "string", MYSQL_TYPE_KEY: "varchar(20)"}}
    assert change.widened == {}


def test_an_older_window_narrower_than_the_table_is_cast_up() -> None:
    change = plan(table(("q", pa.int64(), "bigint")), table(("q", pa.int32(), "int")), newest=False)
    assert (change.new_fields, change.metadata, change.widened) == ([], {}, {})


def test_a_narrowing_modify_of_the_same_scale_keeps_the_wide_type_and_records_the_new_one() -> None:
    change = plan(table(("q", pa.int64(), "bigint")), table(("q", pa.int32(), "int")))
    assert change.widened == {}
    assert change.metadata["q"][MYSQL_TYPE_KEY] == "int"


@pytest.mark.parametrize(
    ("have", "wanted", "reason"),
    [
        (("q", pa.int32(), "int"), ("q", pa.string(), "varchar(10)"), "neither a widening nor a narrowing"),
        (
            ("d", pa.decimal128(12, 4), "decimal(12,4)"),
            ("d", pa.decimal128(10, 2), "decimal(10,2)"),
            "narrowed by rounding",
        ),
        (
            ("ts", pa.timestamp("us"), "datetime(6)"),
            ("ts", pa.timestamp("us"), "datetime(3)"),
            "lost fraction digits",
        ),
    ],
)
def test_changes_the_table_cannot_follow_are_refused_naming_column_and_types(
    have: tuple[str, pa.DataType, str], wanted: tuple[str, pa.DataType, str], reason: str
) -> None:
    with pytest.raises(UnfollowableSchemaChange, match=reason) as caught:
        plan(table(have), table(wanted))
    assert caught.value.column == have[0]
    assert caught.value.table == "shop.t"
    assert f"{have[2]} (" in caught.value.detail


def test_a_snapshot_replaces_columns_that_are_gone_or_changed_type() -> None:
    current = table(("id", pa.int32(), "int"), ("gone", pa.string(), "text"), ("q", pa.int32(), "int"))
    wanted = table(("ID", pa.int32(), "int"), ("q", pa.string(), "varchar(5)"), ("new", pa.int8(), "tinyint"))
    assert replaced_columns(current, wanted) == ["gone", "q"]
    assert replaced_columns(current, current) == []
