from __future__ import annotations

import pytest

from airflow_provider_binlog.exceptions import BinlogConfigError
from airflow_provider_binlog.hooks.binlog import TableInfo
from airflow_provider_binlog.operators.extract import parse_tables, table_targets

KEYED = TableInfo("shop.orders", ["id", "total"], ["bigint", "decimal(9,2)"], ["id"])
KEYLESS = TableInfo("shop.log", ["at", "msg"], ["datetime", "text"], [])


def test_selection_accepts_lists_and_comma_separated_text() -> None:
    assert parse_tables(" shop.orders, shop.* ,") == ["shop.orders", "shop.*"]
    assert parse_tables(["shop.a", " ", "shop.b"]) == ["shop.a", "shop.b"]


def test_empty_selection_is_refused() -> None:
    with pytest.raises(ValueError, match="the table selection is empty"):
        parse_tables(" , ")


def test_tables_use_their_primary_key() -> None:
    assert table_targets({"shop.orders": KEYED}, {})["shop.orders"].primary_key == ["id"]


def test_table_without_primary_key_is_refused_with_the_remedy() -> None:
    with pytest.raises(BinlogConfigError, match=r"shop.log has no primary key.*keys=\{'shop.log'"):
        table_targets({"shop.log": KEYLESS}, {})


def test_named_key_makes_a_keyless_table_usable() -> None:
    assert table_targets({"shop.log": KEYLESS}, {"shop.log": ["at", "msg"]})["shop.log"].primary_key == [
        "at",
        "msg",
    ]


def test_named_key_must_exist() -> None:
    with pytest.raises(BinlogConfigError, match=r"names columns \['nope'\]"):
        table_targets({"shop.log": KEYLESS}, {"shop.log": ["nope"]})
