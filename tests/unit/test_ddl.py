"""What a DDL statement of the binlog means for the selected tables (``extract/ddl.py``)."""

from __future__ import annotations

import json
import re
from dataclasses import asdict
from pathlib import Path

import pytest
from pymysqlreplication.constants import FIELD_TYPE

from airflow_provider_binlog.extract.ddl import classify_ddl, column_record, keeps_values, record_column
from airflow_provider_binlog.extract.events.tablemap import Column

SELECTED = ["shop.orders", "shop.items", "shop._orders_new", "other.orders"]
DEBEZIUM = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "debezium_ddl"


def effects(sql: str, schema: str = "shop", *, case_sensitive: bool = True) -> dict[str, str]:
    return {e.table: e.action for e in classify_ddl(sql, schema, SELECTED, case_sensitive=case_sensitive)}


@pytest.mark.parametrize(
    "sql",
    [
        "ALTER TABLE orders ADD INDEX i (a)",
        "ALTER TABLE orders ADD UNIQUE KEY k (a, b)",
        "ALTER TABLE orders DROP INDEX k",
        "ALTER TABLE orders DROP KEY k",
        "ALTER TABLE orders DROP FOREIGN KEY fk",
        "ALTER TABLE orders ADD CONSTRAINT fk FOREIGN KEY (a) REFERENCES items (id)",
        "ALTER TABLE orders ENGINE=InnoDB",
        "ALTER TABLE orders COMMENT = 'x'",
        "ALTER TABLE orders AUTO_INCREMENT = 101",
        "ALTER TABLE orders FORCE",
        "ALTER TABLE orders ALTER COLUMN c SET DEFAULT 5",
        "ALTER TABLE orders ALTER COLUMN c DROP DEFAULT",
        "ALTER TABLE `shop`.`orders` ADD INDEX i (a), ALGORITHM=INPLACE, LOCK=NONE",
    ],
)
def test_changes_that_keep_every_value_are_ignored(sql: str) -> None:
    assert effects(sql) == {"shop.orders": "ignore"}


@pytest.mark.parametrize(
    "sql",
    [
        "ALTER TABLE orders ADD COLUMN c INT",
        "ALTER TABLE orders ADD COLUMN c INT NULL AFTER b",
        "ALTER TABLE orders ADD COLUMN c INT DEFAULT NULL FIRST",
        "ALTER TABLE orders ADD c VARCHAR(10) CHARACTER SET latin1 COLLATE latin1_bin NULL COMMENT 'x'",
        "ALTER TABLE orders ADD COLUMN c TIMESTAMP NULL",
        "ALTER TABLE orders DROP COLUMN c",
        "ALTER TABLE orders DROP c, ADD INDEX i (a)",
        "ALTER TABLE orders MODIFY c BIGINT",
        "ALTER TABLE orders MODIFY COLUMN c BIGINT NOT NULL",
        "ALTER TABLE orders CHANGE c c BIGINT",
        "ALTER TABLE orders CHANGE COLUMN `c` `C` DECIMAL(12, 4)",
    ],
)
def test_changes_the_row_images_carry_are_followed(sql: str) -> None:
    assert effects(sql) == {"shop.orders": "follow"}


@pytest.mark.parametrize(
    "sql",
    [
        "ALTER TABLE orders ADD COLUMN c VARCHAR(10) DEFAULT 'dflt'",
        "ALTER TABLE orders ADD COLUMN c INT NOT NULL",
        "ALTER TABLE orders ADD COLUMN c INT NOT NULL DEFAULT 0 AFTER id",
        "ALTER TABLE orders ADD COLUMN c TIMESTAMP",
        "ALTER TABLE orders ADD COLUMN g INT AS (a + 1) VIRTUAL",
        "ALTER TABLE orders ADD COLUMN g INT GENERATED ALWAYS AS (a * 2) STORED",
        "ALTER TABLE orders ADD COLUMN n INT AUTO_INCREMENT, ADD KEY (n)",
        "ALTER TABLE orders ADD COLUMN c INT, ADD COLUMN d INT DEFAULT 1",
        "ALTER TABLE orders CHANGE COLUMN c c_renamed VARCHAR(10)",
        "ALTER TABLE orders RENAME COLUMN a TO b",
        "ALTER TABLE orders ADD PRIMARY KEY (a)",
        "ALTER TABLE orders DROP PRIMARY KEY",
        "ALTER TABLE orders CONVERT TO CHARACTER SET utf8mb4",
        "ALTER TABLE orders ADD COLUMN (a INT, b INT)",
        "ALTER TABLE orders TRUNCATE PARTITION p0",
        "ALTER TABLE orders DROP PARTITION p0",
        "CREATE OR REPLACE TABLE orders (id INT PRIMARY KEY)",
    ],
)
def test_changes_the_binlog_does_not_carry_need_a_resnapshot(sql: str) -> None:
    assert effects(sql)["shop.orders"] == "resnapshot"


@pytest.mark.parametrize(
    "sql",
    [
        "CREATE TABLE orders (id INT PRIMARY KEY)",
        "CREATE TABLE IF NOT EXISTS orders (id INT PRIMARY KEY)",
        "CREATE TABLE orders LIKE items",
        "CREATE TABLE orders AS SELECT * FROM items",
        "-- DBZ-1185 handle SERIAL default value\nCREATE TABLE orders (id SMALLINT UNSIGNED SERIAL DEFAULT VALUE)",
        "/* spatial */ CREATE TABLE orders (id INT PRIMARY KEY, p GEOMETRY)",
    ],
)
def test_a_new_table_is_captured_from_its_first_row(sql: str) -> None:
    assert effects(sql)["shop.orders"] == "follow"
    # the target holds rows under that name (its table was dropped while the extract did not see it)
    (again,) = classify_ddl(sql, "shop", ["shop.orders"], captured=["shop.orders"])
    assert again.action == "resnapshot"


def emptied(sql: str, schema: str = "shop") -> dict[str, str]:
    """Return ``{table: empties}`` of the followed effects that empty a table (a truncate marker)."""
    return {e.table: e.empties for e in classify_ddl(sql, schema, SELECTED) if e.empties}


@pytest.mark.parametrize("sql", ["TRUNCATE TABLE orders", "TRUNCATE shop.orders", "truncate `shop`.`orders`"])
def test_truncate_is_followed_with_a_truncate_marker(sql: str) -> None:
    (effect,) = classify_ddl(sql, "shop", SELECTED)
    assert (effect.table, effect.action, effect.empties) == ("shop.orders", "follow", "truncated")


def test_drop_table_and_drop_database_empty_every_named_table() -> None:
    assert effects("DROP TABLE IF EXISTS orders, other.orders") == {
        "shop.orders": "follow",
        "other.orders": "follow",
    }
    assert emptied("DROP TABLE IF EXISTS orders, other.orders") == {
        "shop.orders": "dropped",
        "other.orders": "dropped",
    }
    # as MySQL logs a DROP TABLE in row format
    assert emptied("DROP TABLE IF EXISTS `shop`.`orders` /* generated by server */") == {
        "shop.orders": "dropped"
    }
    assert emptied("DROP DATABASE shop") == {
        "shop.orders": "dropped",
        "shop.items": "dropped",
        "shop._orders_new": "dropped",
    }


def test_a_table_renamed_away_is_emptied_and_a_renamed_destination_resnapshotted() -> None:
    assert effects("RENAME TABLE orders TO orders_archive") == {"shop.orders": "follow"}
    assert emptied("RENAME TABLE orders TO orders_archive") == {"shop.orders": "dropped"}
    assert effects("ALTER TABLE items RENAME TO orders") == {
        "shop.items": "follow",
        "shop.orders": "resnapshot",
    }
    assert emptied("ALTER TABLE items RENAME TO orders") == {"shop.items": "dropped"}


def test_online_schema_change_cut_over_resnapshots_the_table_and_empties_the_shadow() -> None:
    sql = "RENAME TABLE `shop`.`orders` TO `shop`.`_orders_old`, `shop`.`_orders_new` TO `shop`.`orders`"
    # orders is both renamed away and replaced: the re-snapshot is the stronger action
    assert effects(sql) == {"shop.orders": "resnapshot", "shop._orders_new": "follow"}
    assert emptied(sql) == {"shop._orders_new": "dropped"}


STRICT = 1 << 21 | 1 << 30  # STRICT_TRANS_TABLES and another mode bit
LAX = (1 << 30) | (1 << 1) | (1 << 23)  # neither strict mode (NO_ZERO_IN_DATE is bit 23)


@pytest.mark.parametrize(
    "sql",
    [
        "ALTER TABLE orders MODIFY c TINYINT",
        "ALTER TABLE orders MODIFY COLUMN c VARCHAR(3) NOT NULL",
        "ALTER TABLE orders CHANGE c c SMALLINT",
    ],
)
def test_a_type_change_under_a_non_strict_sql_mode_is_resnapshotted(sql: str) -> None:
    (lax,) = classify_ddl(sql, "shop", SELECTED, sql_mode=LAX)
    assert lax.action == "resnapshot"
    assert "STRICT_TRANS_TABLES" in lax.reason
    assert lax.retyped == ("c",)  # the reader follows it when the table maps show a lossless widening
    for strict in (STRICT, 1 << 22, None):  # STRICT_ALL_TABLES; None: the event logged no sql_mode
        assert [e.action for e in classify_ddl(sql, "shop", SELECTED, sql_mode=strict)] == ["follow"]


def test_a_non_strict_retype_names_every_column_unless_a_stronger_action_needs_a_resnapshot() -> None:
    (both,) = classify_ddl(
        "ALTER TABLE orders MODIFY a BIGINT, CHANGE b b TEXT", "shop", SELECTED, sql_mode=LAX
    )
    assert (both.action, both.retyped) == ("resnapshot", ("a", "b"))
    (added,) = classify_ddl(
        "ALTER TABLE orders MODIFY a BIGINT, ADD COLUMN c INT DEFAULT 1", "shop", SELECTED, sql_mode=LAX
    )
    assert (added.action, added.retyped) == ("resnapshot", ())
    assert "DEFAULT" in added.reason
    (generated,) = classify_ddl("ALTER TABLE orders MODIFY a INT AS (b + 1) STORED", "shop", SELECTED)
    assert (generated.action, generated.retyped) == ("resnapshot", ())  # under a strict mode too
    (renamed,) = classify_ddl(
        "ALTER TABLE orders MODIFY a BIGINT, RENAME TO gone", "shop", SELECTED, sql_mode=LAX
    )
    assert (renamed.action, renamed.empties, renamed.retyped) == ("follow", "dropped", ())


def _column(code: int, **kwargs: object) -> Column:
    return Column(type=code, name="c", **kwargs)  # type: ignore[arg-type]


TEXT = {"mysql_charset": "utf8mb4"}


@pytest.mark.parametrize(
    ("before", "after", "kept"),
    [
        (_column(FIELD_TYPE.SHORT), _column(FIELD_TYPE.LONG), True),
        (_column(FIELD_TYPE.LONG), _column(FIELD_TYPE.INT24), False),  # both staged as int32
        (_column(FIELD_TYPE.LONG), _column(FIELD_TYPE.LONG, unsigned=True), False),  # negatives clamp to 0
        (_column(FIELD_TYPE.LONG, unsigned=True), _column(FIELD_TYPE.LONGLONG), True),
        (_column(FIELD_TYPE.LONG), _column(FIELD_TYPE.NEWDECIMAL, precision=12, decimals=2), True),
        (_column(FIELD_TYPE.LONG), _column(FIELD_TYPE.NEWDECIMAL, precision=11, decimals=2), False),
        (
            _column(FIELD_TYPE.NEWDECIMAL, precision=6, decimals=2),
            _column(FIELD_TYPE.NEWDECIMAL, precision=9, decimals=3),
            True,
        ),
        (
            _column(FIELD_TYPE.NEWDECIMAL, precision=6, decimals=2),
            _column(FIELD_TYPE.NEWDECIMAL, precision=9, decimals=1),
            False,
        ),
        (_column(FIELD_TYPE.FLOAT), _column(FIELD_TYPE.DOUBLE), True),
        (_column(FIELD_TYPE.DOUBLE), _column(FIELD_TYPE.FLOAT), False),
        (_column(FIELD_TYPE.DATETIME2, fsp=3), _column(FIELD_TYPE.DATETIME2, fsp=6), True),
        (_column(FIELD_TYPE.DATETIME2, fsp=6), _column(FIELD_TYPE.DATETIME2, fsp=3), False),
        (_column(FIELD_TYPE.DATE), _column(FIELD_TYPE.DATETIME2), True),
        (_column(FIELD_TYPE.BIT, bits=8), _column(FIELD_TYPE.BIT, bits=64), True),
        (
            _column(FIELD_TYPE.VARCHAR, max_length=40, **TEXT),
            _column(FIELD_TYPE.VARCHAR, max_length=80, **TEXT),
            True,
        ),
        (
            _column(FIELD_TYPE.VARCHAR, max_length=80, **TEXT),
            _column(FIELD_TYPE.VARCHAR, max_length=40, **TEXT),
            False,
        ),
        (
            _column(FIELD_TYPE.VARCHAR, max_length=40, **TEXT),
            _column(FIELD_TYPE.BLOB, length_size=2, **TEXT),
            True,
        ),
        (
            _column(FIELD_TYPE.BLOB, length_size=2, **TEXT),
            _column(FIELD_TYPE.BLOB, length_size=1, **TEXT),
            False,
        ),
        (
            _column(FIELD_TYPE.STRING, max_length=40, **TEXT),
            _column(FIELD_TYPE.VARCHAR, max_length=40, **TEXT),
            True,
        ),
        (
            _column(FIELD_TYPE.VARCHAR, max_length=40, **TEXT),
            _column(FIELD_TYPE.STRING, max_length=80, **TEXT),
            False,
        ),
        (
            _column(FIELD_TYPE.VARCHAR, max_length=40, **TEXT),
            _column(FIELD_TYPE.VARCHAR, max_length=80, mysql_charset="latin1"),
            False,
        ),
        (
            _column(FIELD_TYPE.VARCHAR, max_length=40),
            _column(FIELD_TYPE.VARCHAR, max_length=80),
            False,
        ),  # charset?
        (
            _column(FIELD_TYPE.STRING, max_length=4, mysql_charset="binary"),
            _column(FIELD_TYPE.STRING, max_length=8, mysql_charset="binary"),
            False,  # a longer BINARY pads with zero bytes
        ),
        (
            _column(FIELD_TYPE.STRING, max_length=4, mysql_charset="binary"),
            _column(FIELD_TYPE.VARCHAR, max_length=8, mysql_charset="binary"),
            True,
        ),
        (
            _column(FIELD_TYPE.ENUM, enum_values=["", "a", "b"], **TEXT),
            _column(FIELD_TYPE.ENUM, enum_values=["", "a", "b", "c"], **TEXT),
            True,
        ),
        (
            _column(FIELD_TYPE.ENUM, enum_values=["", "a", "b"], **TEXT),
            _column(FIELD_TYPE.ENUM, enum_values=["", "a"], **TEXT),
            False,
        ),
        (_column(FIELD_TYPE.LONG), _column(FIELD_TYPE.VARCHAR, max_length=80, **TEXT), False),
        (_column(FIELD_TYPE.SHORT), _column(FIELD_TYPE.LONG, nullable=False), False),  # NULL becomes 0
        (_column(FIELD_TYPE.SHORT, nullable=False), _column(FIELD_TYPE.LONG), True),
    ],
)
def test_keeps_values_only_for_lossless_widenings(before: Column, after: Column, kept: bool) -> None:
    assert keeps_values(before, after) is kept


def test_a_column_record_keeps_what_keeps_values_reads() -> None:
    enum = _column(FIELD_TYPE.ENUM, enum_values=["", "a", "b"], **TEXT)
    text = _column(FIELD_TYPE.VARCHAR, max_length=40, **TEXT)
    back = [record_column(json.loads(json.dumps(column_record(c)))) for c in (enum, text)]
    assert [asdict(c) for c in back] == [asdict(enum), asdict(text)]
    assert keeps_values(back[1], _column(FIELD_TYPE.VARCHAR, max_length=80, **TEXT))


def test_a_non_strict_sql_mode_changes_nothing_else() -> None:
    for sql, action in [
        ("ALTER TABLE orders ADD COLUMN c INT", "follow"),
        ("ALTER TABLE orders ADD INDEX i (a)", "ignore"),
        ("ALTER TABLE orders DROP COLUMN c", "follow"),
    ]:
        assert [e.action for e in classify_ddl(sql, "shop", SELECTED, sql_mode=LAX)] == [action]


@pytest.mark.parametrize(
    "sql",
    [
        "CREATE TEMPORARY TABLE orders (a INT)",
        "DROP TEMPORARY TABLE orders",
        "CREATE INDEX i ON orders (a)",
        "CREATE DEFINER=`root`@`127.0.0.1` TRIGGER `pt_osc_shop_orders_ins` AFTER INSERT ON `shop`.`orders` FOR EACH ROW "
        "REPLACE INTO _orders_new (id) VALUES (NEW.id)",
        "DROP TRIGGER IF EXISTS `shop`.`pt_osc_shop_orders_del`",
        "CREATE OR REPLACE VIEW v AS SELECT * FROM orders",
        "GRANT SELECT ON shop.orders TO 'u'@'%'",
        "ANALYZE TABLE orders",
        "OPTIMIZE TABLE orders",
        "ALTER TABLE unselected ADD COLUMN c INT DEFAULT 1",
        "CREATE DATABASE shop2",
    ],
)
def test_statements_that_change_no_selected_row_have_no_effect(sql: str) -> None:
    assert effects(sql) == {}


def test_names_match_as_the_server_compares_them_and_take_the_default_database() -> None:
    altered = "ALTER TABLE `ORDERS` ADD COLUMN c INT DEFAULT 1"
    assert effects(altered, schema="SHOP", case_sensitive=False) == {"shop.orders": "resnapshot"}
    assert effects(altered, schema="SHOP") == {}  # lower_case_table_names=0: another table
    assert effects("ALTER TABLE orders ADD COLUMN c INT DEFAULT 1", schema="other") == {
        "other.orders": "resnapshot"
    }


def test_an_unparsed_statement_resnapshots_every_selected_table_it_names() -> None:
    found = classify_ddl("ALTER TABLE orders FROBNICATE everything", "shop", SELECTED)
    assert {e.table for e in found} == {"shop.orders", "other.orders"}
    assert {e.action for e in found} == {"resnapshot"}
    assert classify_ddl("FROBNICATE items_archive", "shop", SELECTED) == []


def test_the_strongest_action_of_a_statement_wins() -> None:
    assert effects("ALTER TABLE orders ADD INDEX i (a), ADD COLUMN c INT, DROP COLUMN d") == {
        "shop.orders": "follow"
    }
    assert effects("ALTER TABLE orders ADD COLUMN c INT, RENAME COLUMN a TO b") == {
        "shop.orders": "resnapshot"
    }


def test_a_dropped_column_is_named_and_kept_by_the_target() -> None:
    (effect,) = classify_ddl("ALTER TABLE orders DROP COLUMN c, DROP `D`, ADD INDEX i (a)", "shop", SELECTED)
    assert (effect.action, effect.dropped) == ("follow", ("c", "D"))
    (renamed,) = classify_ddl("ALTER TABLE orders DROP COLUMN c, CHANGE a b INT", "shop", SELECTED)
    assert (renamed.action, renamed.dropped) == ("resnapshot", ("c",))  # the re-snapshot replaces the schema


@pytest.mark.parametrize(
    ("sql", "kept"),
    [
        ("ALTER TABLE orders ADD COLUMN c INT NULL", {"shop.orders": ["c"]}),
        ("ALTER TABLE `orders` ADD `C` VARCHAR(10)", {"shop.orders": ["c"]}),  # column names in any case
        ("ALTER TABLE orders DROP COLUMN c, ADD COLUMN c INT", {}),  # dropped by the statement itself
        ("ALTER TABLE orders ADD COLUMN e INT, ADD COLUMN c INT", {"shop.orders": ["c", "x"]}),
    ],
)
def test_adding_a_column_whose_dropped_namesake_the_target_holds_is_resnapshotted(
    sql: str, kept: dict[str, list[str]]
) -> None:
    """The target keeps a dropped column's values: a column added again under its name would show them."""
    (effect,) = classify_ddl(sql, "shop", SELECTED, kept=kept)
    assert effect.action == "resnapshot"
    assert "still holds the dropped column" in effect.reason


def test_a_kept_column_of_another_table_changes_nothing() -> None:
    kept = {"shop.items": ["c"], "shop.orders": ["x"]}
    (effect,) = classify_ddl("ALTER TABLE orders ADD COLUMN c INT", "shop", SELECTED, kept=kept)
    assert effect.action == "follow"


@pytest.mark.skipif(not DEBEZIUM.exists(), reason=f"{DEBEZIUM} is absent (shared reference data)")
def test_debezium_ddl_corpus_classifies_without_errors() -> None:
    """Every statement of Debezium's MySQL DDL test scripts gets a decision (no exception, no empty reason)."""
    statements = [
        s.strip()
        for script in sorted(DEBEZIUM.glob("*.sql"))
        for s in re.split(r";\s*\n", script.read_text() + "\n")
        if s.strip() and not all(line.strip().startswith("--") or not line.strip() for line in s.splitlines())
    ]
    assert len(statements) > 100
    decided = 0
    for sql in statements:
        names = re.findall(r"(?i)(?:TABLE|INTO)\s+`?(\w+)`?", sql)
        found = classify_ddl(sql, "db", [f"db.{n}" for n in names])
        assert all(e.reason for e in found)
        decided += bool(found)
    assert decided > 50
