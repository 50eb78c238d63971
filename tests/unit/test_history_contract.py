"""The history contract: kinds and settings, the change log's folder and columns, and the digest's canonical form."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pyarrow as pa
import pytest

from airflow_provider_binlog.contract.history import (
    AFTER_COLUMN,
    BEFORE_COLUMN,
    STATEMENT_COLUMN,
    STATEMENT_POS_COLUMN,
    STATEMENTS_FILE,
    HistoryConfigError,
    HistorySettings,
    chain_digest,
    changelog_schema,
    changelog_uri,
    history_kinds,
    rows_digest,
    scd2_schema,
)
from airflow_provider_binlog.contract.manifest import Manifest, TableEntry
from airflow_provider_binlog.contract.names import path_segment
from airflow_provider_binlog.contract.uris import table_uri

UTC = dt.timezone.utc


def test_history_kinds_accept_off_names_and_lists_and_refuse_unknown_kinds() -> None:
    assert history_kinds(None) == history_kinds("off") == history_kinds("") == ()
    assert (
        history_kinds("changelog")
        == history_kinds(["changelog"])
        == history_kinds(" changelog,off")
        == ("changelog",)
    )
    with pytest.raises(HistoryConfigError, match=r"\['audit'\] is not a history kind"):
        history_kinds("changelog,audit")


def test_table_history_overrides_the_default_by_canonical_name() -> None:
    settings = HistorySettings.parse("changelog", {"shop.`orders`": "off", "shop.t": None})
    assert settings.kinds_for("shop.orders") == ()
    assert settings.kinds_for("shop.t") == ()
    assert settings.kinds_for("shop.customers") == ("changelog",)
    assert not HistorySettings.parse(None, {})
    assert HistorySettings.parse(None, {"a.b": "changelog"})
    with pytest.raises(HistoryConfigError, match="table_history"):
        HistorySettings.parse(None, {"no_database": "changelog"})


def test_manifest_entries_keep_their_history_kinds() -> None:
    entry = TableEntry(files=("t/part-0.parquet",), rows=1, history=("changelog",))
    assert entry.to_json()["history"] == ["changelog"]
    assert TableEntry.from_json(entry.to_json()) == entry
    assert "history" not in TableEntry().to_json()


def test_a_manifest_names_its_statements_side_file_when_it_has_one() -> None:
    manifest = Manifest(pipeline="p", window=3, tables={}, statements=STATEMENTS_FILE)
    assert Manifest.from_text(manifest.to_text()).statements == STATEMENTS_FILE
    assert "statements" not in Manifest(pipeline="p", window=3, tables={}).to_json()
    assert "." not in STATEMENTS_FILE.split("/")[0]  # no table folder (<db>.<table>) can be its folder


@pytest.mark.parametrize("name", ["orders~changes", "orders", "a b", "~", "ORDERS~CHANGES"])
def test_no_source_table_shares_a_change_log_folder(name: str) -> None:
    """A change log's folder name ends in ``~changes``, which no table's folder name can (``~`` is escaped)."""
    assert not path_segment(name).endswith("~changes")
    assert changelog_uri("/lake", f"shop.{name}") == table_uri("/lake", f"shop.{name}") + "~changes"


def test_changelog_schema_has_the_key_the_change_columns_both_images_and_the_statement() -> None:
    source = pa.schema([("id", pa.int32()), ("status", pa.string())])
    schema = changelog_schema(source, ["id"])
    assert schema.names[0] == "id"
    assert schema.names[-4:] == [BEFORE_COLUMN, AFTER_COLUMN, STATEMENT_POS_COLUMN, STATEMENT_COLUMN]
    assert schema.field(AFTER_COLUMN).type == pa.struct(source)
    with pytest.raises(HistoryConfigError, match="missing"):
        changelog_schema(source, ["missing"])


def test_every_column_the_provider_adds_takes_the_reserved_prefix() -> None:
    """The rule that refuses a source column ``_binlog_*`` (any case) covers every column added, so none collides."""
    from airflow_provider_binlog.contract.columns import (
        METADATA_COLUMN_NAMES,
        RESERVED_PREFIX,
        reserved_name_problem,
    )

    source = pa.schema([("id", pa.int32())])
    added = {*METADATA_COLUMN_NAMES, *changelog_schema(source, ["id"]).names, *scd2_schema(source).names} - {
        "id"
    }
    assert added
    assert all(name.startswith(RESERVED_PREFIX) for name in added)
    assert all(reserved_name_problem(name.upper()) for name in added)
    assert reserved_name_problem("binlog_op") is None
    assert reserved_name_problem("x_binlog_op") is None


def _rows() -> pa.Table:
    image = pa.struct(
        [("id", pa.int32()), ("amount", pa.decimal128(10, 2)), ("at", pa.timestamp("us", tz="UTC"))]
    )
    return pa.table(
        {
            "id": pa.array([1, 2, 3], pa.int32()),
            "_binlog_op": ["c", "u", "d"],
            "_binlog_seq": pa.array([1, 2, 3], pa.int64()),
            AFTER_COLUMN: pa.array(
                [
                    {"id": 1, "amount": Decimal("1.50"), "at": dt.datetime(2026, 1, 1, tzinfo=UTC)},
                    {"id": 2, "amount": Decimal("2.00"), "at": None},
                    None,
                ],
                image,
            ),
        }
    )


def test_the_digest_ignores_row_order_file_split_and_columns_added_later() -> None:
    rows = _rows()
    digest = rows_digest(rows)
    assert rows_digest(rows.take([2, 0, 1])) == digest
    assert rows_digest(pa.concat_tables([rows.slice(0, 1), rows.slice(1)])) == digest
    assert rows_digest(rows.append_column("note", pa.nulls(3, pa.string()))) == digest


def test_the_digest_survives_a_lossless_widening_and_sees_a_changed_value() -> None:
    rows = _rows()
    digest = rows_digest(rows)
    wider = pa.struct(
        [("id", pa.int64()), ("amount", pa.decimal128(12, 3)), ("at", pa.timestamp("us", tz="UTC"))]
    )
    widened = rows.set_column(0, "id", rows.column("id").cast(pa.int64())).set_column(
        3, AFTER_COLUMN, rows.column(AFTER_COLUMN).cast(wider)
    )
    assert rows_digest(widened) == digest
    changed = rows.set_column(1, "_binlog_op", pa.array(["c", "u", "c"]))
    assert rows_digest(changed) != digest
    assert rows_digest(rows.slice(0, 2)) != digest
    assert rows_digest(rows.drop_columns(["id"])) != digest


def test_the_digest_of_numbers_survives_their_widening_to_doubles() -> None:
    ints = pa.table({"n": pa.array([1_000_000_000, -5, None, 32767], pa.int32())})
    assert rows_digest(ints) == rows_digest(ints.cast(pa.schema([("n", pa.float64())])))
    floats = pa.table({"x": pa.array([0.1, 2.5, None, 1e30], pa.float32())})
    assert rows_digest(floats) == rows_digest(floats.cast(pa.schema([("x", pa.float64())])))
    assert rows_digest(floats) != rows_digest(floats.cast(pa.schema([("x", pa.float64())])).slice(1))


def test_the_chain_depends_on_the_previous_value_the_window_and_the_digest() -> None:
    first = chain_digest("", 7, "aa")
    assert len(first) == 64
    assert len({first, chain_digest("x", 7, "aa"), chain_digest("", 8, "aa"), chain_digest("", 7, "ab")}) == 4


def test_a_change_log_takes_new_columns_and_wider_types_and_refuses_other_type_changes() -> None:
    from airflow_provider_binlog.jobs.merge.history_schema import HistoryTypeChange, _merged_field

    image = pa.struct([("id", pa.int32()), ("amount", pa.decimal128(10, 2))])
    have = pa.field(AFTER_COLUMN, image)
    wider = pa.schema([(AFTER_COLUMN, pa.struct([("id", pa.int64()), ("note", pa.string())]))])
    assert _merged_field(have, wider, "shop.t", "p").type == pa.struct(
        [("id", pa.int64()), ("amount", pa.decimal128(10, 2)), ("note", pa.string())]
    )
    narrower = pa.schema([(AFTER_COLUMN, pa.struct([("id", pa.int16())]))])  # an older window merged later
    assert _merged_field(have, narrower, "shop.t", "p") == have
    text = pa.schema([(AFTER_COLUMN, pa.struct([("amount", pa.string())]))])
    with pytest.raises(HistoryTypeChange, match="move the change log aside"):
        _merged_field(have, text, "shop.t", "p")
