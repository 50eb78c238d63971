"""Table names an attacker with CREATE on a captured schema could choose: parsing, folders, selections, DDL."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from airflow_provider_binlog.contract.manifest import MANIFEST_NAME
from airflow_provider_binlog.contract.names import (
    STAGING_FILE_NAMES,
    TableNameError,
    TablePattern,
    canonical_name,
    name_of_segment,
    path_segment,
    qualified_name,
    split_table_name,
    sql_name_parts,
    table_folder,
    table_of_folder,
    table_path,
)
from airflow_provider_binlog.contract.uris import join_uri, table_uri
from airflow_provider_binlog.extract.ddl import classify_ddl
from airflow_provider_binlog.extract.statements import qualify_name
from airflow_provider_binlog.pipeline.tables import parse_tables, select_tables, takes
from airflow_provider_binlog.snapshot.plan import PLAN_NAME

HOSTILE = [
    ("shop", "orders"),
    ("shop", "ORDERS"),
    ("shop", "Orders"),
    ("evil", "../evil/orders"),
    ("shop", "../../../../escaped"),
    ("shop", ".."),
    ("shop", "."),
    ("shop", ".hidden"),
    ("shop", "a/b"),
    ("shop", "a\\b"),
    ("a.b", "c"),
    ("a", "b.c"),
    ("a", "b~2Ec"),
    ("shop", "`quoted`"),
    ("sh`op", "t"),
    ("shop", "secret[s]"),
    ("shop", "secrets"),
    ("shop", "*"),
    ("shop", "with space"),
    ("shop", "заказы"),
    ("shop", "x%2F.."),
    ("shop", "s3:"),
    ("shop", "a?b#c"),
    ("shop", "_delta_log"),
    ("shop", "-x"),
    ("manifest", "json"),  # its folder would be the window's manifest file
    ("plan", "json"),  # a snapshot's plan
    ("manifest", "~6A~73~6F~6E"),
]


@pytest.mark.parametrize(("db", "table"), HOSTILE)
def test_qualified_names_round_trip(db: str, table: str) -> None:
    name = qualified_name(db, table)
    assert split_table_name(name) == (db, table)
    assert canonical_name(name) == name


def test_ordinary_names_keep_their_spelling_and_folders() -> None:
    for name in ("shop.orders", "shop.a.b", "shop_2.Order$Items", "db-1.t-1"):
        assert canonical_name(name) == name
    assert table_path("shop.orders") == "shop/orders"
    assert table_path("shop.a.b") == "shop/a.b"
    assert table_folder("shop.orders") == "shop.orders"
    assert qualified_name("a.b", "c") == "`a.b`.c"


@pytest.mark.parametrize(
    "name", ["shop", "`shop", "`shop`", "`shop`x.t", "shop.`t", "shop.`t`x", ".t", "shop.", "``.t"]
)
def test_malformed_names_are_refused(name: str) -> None:
    with pytest.raises(TableNameError):
        split_table_name(name)


@pytest.mark.parametrize(("db", "table"), HOSTILE)
def test_a_folder_name_is_one_safe_segment_and_reversible(db: str, table: str) -> None:
    for part in (db, table):
        segment = path_segment(part)
        assert "/" not in segment
        assert "\\" not in segment
        assert segment not in (".", "..")
        assert not segment.startswith(".")
        assert all(c.isascii() and c.isprintable() and c not in "%?#: " for c in segment)
        assert name_of_segment(segment) == part


def test_no_two_tables_share_a_folder() -> None:
    names = [qualified_name(db, table) for db, table in HOSTILE]
    assert len({table_path(n) for n in names}) == len(names)
    assert len({table_folder(n) for n in names}) == len(names)
    for a, b in itertools.combinations(names, 2):
        assert table_folder(a) != table_folder(b)
        assert not table_folder(a).startswith(table_folder(b) + "/")


def test_no_table_folder_is_a_file_of_the_staging_folder() -> None:
    assert MANIFEST_NAME in STAGING_FILE_NAMES
    assert PLAN_NAME in STAGING_FILE_NAMES
    for file in STAGING_FILE_NAMES:
        assert table_folder(file) != file
        assert table_of_folder(table_folder(file)) == file
    assert table_folder("manifest.json") == "manifest.~6A~73~6F~6E"
    assert table_folder("shop.json") == "shop.json"  # every other name keeps its folder


@pytest.mark.parametrize("root", ["/tmp/target/root", "s3://bucket/prefix"])
@pytest.mark.parametrize(("db", "table"), HOSTILE)
def test_a_table_location_stays_under_its_root(root: str, db: str, table: str) -> None:
    uri = table_uri(root, qualified_name(db, table))
    relative = uri.removeprefix(join_uri(root) + "/")
    assert relative != uri
    parts = relative.split("/")
    assert len(parts) == 2
    assert ".." not in parts
    assert "." not in parts


def test_a_dotted_database_is_not_taken_by_the_pattern_of_its_prefix() -> None:
    existing = ["a.t", qualified_name("a.b", "c")]
    assert select_tables(parse_tables("a.*"), existing) == ["a.t"]
    assert select_tables(parse_tables("`a.b`.*"), existing) == ["`a.b`.c"]
    assert not takes(["a.*"], "`a.b`.c")


def test_glob_characters_in_names() -> None:
    existing = ["shop.orders", "shop.secret[s]", "shop.secrets"]
    assert select_tables(parse_tables("shop.*, !shop.secret[s]"), existing) == ["shop.orders"]
    assert select_tables(parse_tables("shop.*, !shop.`secret[s]`"), existing) == [
        "shop.orders",
        "shop.secrets",
    ]
    assert select_tables(parse_tables("shop.`secret[s]`"), existing) == ["shop.secret[s]"]
    assert TablePattern.parse("shop.`*`").takes("shop.*")
    assert not TablePattern.parse("shop.`*`").takes("shop.x")


def test_selections_compare_names_as_the_server_does() -> None:
    existing = ["shop.ORDERS", "shop.orders"]
    assert select_tables(parse_tables("shop.orders"), existing) == ["shop.orders"]
    assert select_tables(parse_tables("Shop.Orders"), ["shop.orders"], case_sensitive=False) == [
        "shop.orders"
    ]
    with pytest.raises(ValueError, match="backquote"):
        parse_tables("shop.`open")


@pytest.mark.parametrize(
    "sql",
    [
        "DROP TABLE shop2.ORDERS",
        "TRUNCATE TABLE shop2.ORDERS",
        "RENAME TABLE shop2.ORDERS TO shop2.old_orders",
        "ALTER TABLE shop2.ORDERS ADD COLUMN c INT",
        "ALTER TABLE ORDERS DROP COLUMN note",
        "DROP DATABASE SHOP2",
    ],
)
def test_ddl_of_a_name_differing_in_case_touches_the_table_only_where_the_server_folds_case(sql: str) -> None:
    selected = ["shop2.orders"]
    assert classify_ddl(sql, "shop2", selected, selected, case_sensitive=True) == []
    folded = classify_ddl(sql, "shop2", selected, selected, case_sensitive=False)
    assert [e.table for e in folded] == ["shop2.orders"]


def test_a_table_named_star_is_only_itself() -> None:
    selected = ["shop.orders", "shop.*"]
    effects = classify_ddl("DROP TABLE shop.`*`", "shop", selected, selected)
    assert [e.table for e in effects] == ["shop.*"]
    everything = classify_ddl("DROP DATABASE shop", "", selected, selected)
    assert sorted(e.table for e in everything) == ["shop.*", "shop.orders"]


def test_a_table_still_in_its_unescaped_folder_is_refused_with_the_move_that_fixes_it(tmp_path: Path) -> None:
    import pyarrow as pa
    from deltalake import write_deltalake

    from airflow_provider_binlog.contract.positions import BinlogPosition
    from airflow_provider_binlog.exceptions import BinlogConfigError
    from airflow_provider_binlog.pipeline.ledger import PipelineState
    from airflow_provider_binlog.target import check_target, target_root

    target = str(tmp_path / "target")
    table = "shop.with space"
    write_deltalake(str(tmp_path / "target" / "shop" / "with space"), pa.table({"id": [1]}))
    state = PipelineState(
        pipeline="p",
        source_identity="s",
        flavor="mariadb",
        revision=1,
        checkpoint={"position": BinlogPosition("b.000001", 4, ""), "window": 0, "updated_at": "t"},
        target=target_root(target),
        target_tables=[table],
    )
    with pytest.raises(BinlogConfigError, match="Move the folder .*with space to .*with~20space"):
        check_target("p", state, target, [table])
    check_target("p", state, target, ["shop.orders"])  # an ordinary name's folder never moved


@pytest.mark.parametrize(
    ("sql", "parts"),
    [
        ("orders", ("orders",)),
        ("shop.orders", ("shop", "orders")),
        ("`shop` . `orders`", ("shop", "orders")),
        ("`a.b`.`c.d`", ("a.b", "c.d")),
        ("`x``y`", ("x`y",)),
        ("```lead`.t", ("`lead", "t")),  # a name beginning with a backquote: strip("`") lost it
        ("`заказы`", ("заказы",)),
    ],
)
def test_sql_names_are_read_by_the_one_backquote_parser(sql: str, parts: tuple[str, ...]) -> None:
    assert sql_name_parts(sql) == parts
    expected = qualified_name(*parts) if len(parts) == 2 else qualified_name("dflt", parts[0])
    assert qualify_name(sql, "dflt") == expected


@pytest.mark.parametrize("sql", ["", "a.", ".b", "a.b.c", "`a`b", "`open", "`a`.`b` x"])
def test_malformed_sql_names_are_refused(sql: str) -> None:
    with pytest.raises(TableNameError):
        sql_name_parts(sql)
