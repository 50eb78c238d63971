from __future__ import annotations

import pytest

from airflow_provider_binlog.exceptions import BinlogConfigError
from airflow_provider_binlog.extract.plan import table_targets
from airflow_provider_binlog.pipeline.tables import KeylessTableError, parse_tables, select_tables, takes
from airflow_provider_binlog.source.schema import TableInfo

KEYED = TableInfo("shop.orders", ["id", "total"], ["bigint", "decimal(9,2)"], ["id"])
KEYLESS = TableInfo("shop.log", ["at", "msg"], ["datetime", "text"], [])
EXISTING = ["shop.orders", "shop.items", "shop.tmp_a", "shop.tmp_b", "crm.tmp_c"]


def test_selection_accepts_lists_and_comma_separated_text() -> None:
    assert parse_tables(" shop.orders, shop.* ,") == ["shop.orders", "shop.*"]
    assert parse_tables(["shop.a", " ", "shop.b"]) == ["shop.a", "shop.b"]
    assert parse_tables("shop.*, !shop.tmp_*") == ["shop.*", "!shop.tmp_*"]


def test_empty_selection_is_refused() -> None:
    with pytest.raises(ValueError, match="the table selection is empty"):
        parse_tables(" , ")


def test_a_selection_of_exclusions_only_is_refused() -> None:
    with pytest.raises(ValueError, match="only excludes tables"):
        parse_tables("!shop.tmp_*")
    with pytest.raises(ValueError, match=r"entry '!' must be"):
        parse_tables("shop.*, !")


def test_exclusions_apply_after_the_includes_whatever_their_place() -> None:
    assert select_tables(["shop.*", "!shop.tmp_*"], EXISTING) == ["shop.items", "shop.orders"]
    assert select_tables(["!*.tmp_*", "*.*"], EXISTING) == ["shop.items", "shop.orders"]
    assert select_tables(["shop.orders", "!shop.gone"], EXISTING) == ["shop.orders"]


def test_an_include_matching_nothing_or_exclusions_leaving_nothing_are_refused() -> None:
    with pytest.raises(BinlogConfigError, match="'shop.nope' matches no table"):
        select_tables(["shop.nope"], EXISTING)
    with pytest.raises(BinlogConfigError, match="excludes all of them"):
        select_tables(["shop.tmp_*", "!shop.tmp_?"], EXISTING)


def test_tables_use_their_primary_key() -> None:
    targets, skipped = table_targets({"shop.orders": KEYED}, {})
    assert targets["shop.orders"].primary_key == ["id"]
    assert skipped == {}


def test_table_without_primary_key_is_refused_with_the_remedy() -> None:
    with pytest.raises(
        KeylessTableError, match=r"shop.log has no primary key.*keys=\{'shop.log'.*'!shop.log'"
    ):
        table_targets({"shop.log": KEYLESS}, {})


def test_table_without_primary_key_is_set_aside_in_skip_mode() -> None:
    targets, skipped = table_targets({"shop.orders": KEYED, "shop.log": KEYLESS}, {}, keyless_tables="skip")
    assert list(targets) == ["shop.orders"]
    assert list(skipped) == ["shop.log"]
    assert "ADD PRIMARY KEY" in skipped["shop.log"]


def test_named_key_makes_a_keyless_table_usable() -> None:
    targets, _ = table_targets({"shop.log": KEYLESS}, {"shop.log": ["at", "msg"]})
    assert targets["shop.log"].primary_key == ["at", "msg"]


def test_named_key_must_exist_even_when_keyless_tables_are_skipped() -> None:
    with pytest.raises(BinlogConfigError, match=r"names columns \['nope'\]"):
        table_targets({"shop.log": KEYLESS}, {"shop.log": ["nope"]}, keyless_tables="skip")


def test_takes_tells_whether_the_selection_takes_a_name_that_may_no_longer_exist() -> None:
    selection = ["shop.*", "!shop._*", "other.orders"]
    assert takes(selection, "shop.orders")
    assert takes(selection, "other.orders")
    assert not takes(selection, "shop._orders_new")  # excluded
    assert not takes(selection, "other.items")  # not included
