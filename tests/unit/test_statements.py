"""Written tables of statement-based DML, and the reader's decision on them, without a server."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from airflow_provider_binlog.contract.positions import BinlogPosition
from airflow_provider_binlog.exceptions import UnsupportedEventError
from airflow_provider_binlog.extract.reader import SnapshotCover, TableTarget, WindowReader
from airflow_provider_binlog.extract.statements import written_tables


@pytest.mark.parametrize(
    ("sql", "schema", "written"),
    [
        ("INSERT INTO t (a) VALUES (1)", "shop", ["shop.t"]),
        ("INSERT IGNORE INTO `my db`.`t` VALUES (1) ON DUPLICATE KEY UPDATE a = 1", "shop", ["my db.t"]),
        ("insert into other.t select * from shop.x join y", "shop", ["other.t"]),
        ("INSERT INTO t SET a = 1", "shop", ["shop.t"]),
        ("REPLACE INTO t VALUES (1)", "shop", ["shop.t"]),
        ("replace low_priority into x.t select 1", "", ["x.t"]),
        ("UPDATE shop.customers SET name = 'x' WHERE id = 1", "", ["shop.customers"]),
        ("UPDATE LOW_PRIORITY IGNORE t SET a = (SELECT MAX(b) FROM u)", "shop", ["shop.t"]),
        ("UPDATE orders o, customers c SET o.x = c.y WHERE o.c = c.id", "shop", ["shop.orders"]),
        ("UPDATE a JOIN b ON a.id = b.id SET a.x = 1, b.y = 2", "shop", ["shop.a", "shop.b"]),
        ("UPDATE a JOIN b ON a.id = b.id SET x = 1", "shop", ["shop.a", "shop.b"]),
        ("DELETE FROM t WHERE id IN (SELECT id FROM u)", "shop", ["shop.t"]),
        ("DELETE QUICK FROM t ORDER BY id LIMIT 5", "shop", ["shop.t"]),
        ("DELETE t1, t2 FROM t1 JOIN t2 ON t1.id = t2.id JOIN t3", "shop", ["shop.t1", "shop.t2"]),
        ("DELETE a FROM orders a JOIN items b ON a.id = b.o", "shop", ["shop.orders"]),
        ("DELETE FROM t1, t2 USING t1 JOIN t2 JOIN t3", "shop", ["shop.t1", "shop.t2"]),
        ("LOAD DATA INFILE '/tmp/x' INTO TABLE shop.t FIELDS TERMINATED BY ','", "", ["shop.t"]),
        ("LOAD DATA LOCAL INFILE '/tmp/x' IGNORE INTO TABLE `t`", "shop", ["shop.t"]),
    ],
)
def test_written_tables_of_each_statement_shape(sql: str, schema: str, written: list[str]) -> None:
    found = written_tables(sql, schema)
    assert found.parsed, found.error
    assert sorted(found.tables) == written


@pytest.mark.parametrize(
    "sql", ["UPDATE t SET = 3", "INSERT INTO t VALUES (", "UPDATE t SET a = 1; DELETE FROM u"]
)
def test_a_statement_that_cannot_be_parsed_says_so(sql: str) -> None:
    found = written_tables(sql, "shop")
    assert not found.parsed
    assert found.tables == ()
    assert found.error


def _reader(window: int, covers: dict[str, SnapshotCover]) -> WindowReader:
    tables = {name: TableTarget(name, ["id"]) for name in ("shop.orders", "shop.nopk", "crm.people")}
    return WindowReader(
        [],
        start=BinlogPosition("mariadb-bin.000002", 4),
        end=BinlogPosition("mariadb-bin.000002", 90_000),
        tables=tables,
        window=window,
        sink=lambda *args: None,
        pipeline="shop_cdc",
        covers=covers,
    )


def _query(reader: WindowReader, sql: str, schema: str, pos: int = 5_000) -> None:
    event = SimpleNamespace(query=sql, schema=schema.encode())
    reader._query(event, "mariadb-bin.000002", pos)


def test_the_reader_ignores_skips_or_refuses_by_written_tables_and_snapshot_cover() -> None:
    after = SnapshotCover(seq=11, start=BinlogPosition("mariadb-bin.000003", 4))
    reader = _reader(10, {"shop.orders": after})
    reader.txn.open, reader.txn.gtid = True, "0-1-77"
    _query(reader, "UPDATE shop.customers SET name = 'x'", "")  # no default database, unselected table
    _query(reader, "UPDATE orders SET total = 0", "shop")
    assert reader.txn.open  # a statement is no transaction boundary
    assert reader.stats.statements_ignored == 1
    assert reader.stats.covered_tables == {"shop.orders": 11}
    assert reader.stats.skipped_statements == [
        {
            "file": "mariadb-bin.000002",
            "pos": 5_000,
            "gtid": "0-1-77",
            "query": "UPDATE orders SET total = 0",
            "tables": ["shop.orders"],
            "snapshots": {"shop.orders": 11},
        }
    ]
    with pytest.raises(UnsupportedEventError) as err:
        _query(reader, "DELETE FROM nopk", "shop")
    message = str(err.value)
    assert (
        "pipeline 'shop_cdc', window 10: statement-based DML 'DELETE FROM nopk' at mariadb-bin.000002:5000"
        in message
    )
    assert "(GTID 0-1-77): it writes the selected table(s) shop.nopk," in message
    assert (
        """pipeline 'shop_cdc''s binlog_resnapshot DAG with {"tables": "shop.nopk", "mode": "requested"}"""
        in message
    )


@pytest.mark.parametrize(
    ("cover", "why"),
    [
        (
            SnapshotCover(seq=9, start=BinlogPosition("mariadb-bin.000003", 4)),
            "a snapshot older than the window",
        ),
        (
            SnapshotCover(seq=11, start=BinlogPosition("mariadb-bin.000002", 5_000)),
            "started at the statement",
        ),
    ],
)
def test_a_snapshot_covers_only_when_cut_after_the_window_and_started_after_the_statement(
    cover: SnapshotCover, why: str
) -> None:
    reader = _reader(10, {"shop.orders": cover})
    with pytest.raises(UnsupportedEventError, match="shop.orders"):
        _query(reader, "UPDATE orders SET total = 0", "shop")


def test_an_unparseable_statement_counts_as_writing_every_selected_table_of_its_database() -> None:
    reader = _reader(10, {})
    with pytest.raises(UnsupportedEventError) as err:
        _query(reader, "UPDATE orders SET = 3", "shop")
    assert "it could not be parsed (ParseError" in str(err.value)
    assert '"tables": "shop.nopk,shop.orders"' in str(err.value)
    with pytest.raises(UnsupportedEventError) as err:
        _query(reader, "INSERT INTO (", "")
    assert '"tables": "crm.people,shop.nopk,shop.orders"' in str(err.value)
