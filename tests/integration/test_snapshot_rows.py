"""Snapshot rows (a plain SELECT + ``rows_to_batch``) equal the rows the binlog path stages, type by type."""

from __future__ import annotations

import datetime as dt
import decimal
import re
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pymysql
import pytest

from airflow_provider_binlog.contract.names import table_folder
from airflow_provider_binlog.contract.positions import BinlogPosition
from airflow_provider_binlog.extract.reader import TableTarget
from airflow_provider_binlog.extract.window import extract_window
from airflow_provider_binlog.hooks.binlog import BinlogHook
from airflow_provider_binlog.pipeline.ledger import Window, now_iso
from airflow_provider_binlog.pipeline.quarantine import OnTableError
from airflow_provider_binlog.pipeline.staging import window_path
from airflow_provider_binlog.snapshot.rows import RowReader, describe_columns
from airflow_provider_binlog.source.sql import quote_identifier as quote
from airflow_provider_binlog.testing.mariadb import LocalMariaDB

pytestmark = pytest.mark.integration


class Recorder:
    """Cut one window between two heads of the private server and extract it (as in test_extract.py)."""

    def __init__(self, staging: Path) -> None:
        self.staging = staging
        self.hook = BinlogHook(pipeline="test")
        self.start: BinlogPosition | None = None

    def mark(self) -> None:
        self.start = self.hook.server_state().head

    def extract(
        self, tables: dict[str, list[str]], on_table_error: OnTableError = "fail", **options: Any
    ) -> tuple[dict[str, Any], dict[str, pa.Table]]:
        """Return the manifest and each table's staged rows (tables without changes have none).

        :param on_table_error: ``fail`` (here the default, so a refusal raises) or ``quarantine``.
        :param options: further arguments of ``extract_window`` (``max_workers``, ``parallel_min_bytes``).
        """
        state = self.hook.server_state()
        assert self.start is not None
        assert state.head is not None
        window = Window(seq=1, start=(self.start), end=(state.head), run_id="r", cut_at=now_iso())
        manifest = extract_window(
            self.hook,
            pipeline="test",
            window=window,
            tables={name: TableTarget(name, key) for name, key in tables.items()},
            window_dir=window_path(str(self.staging), "test", 1),
            server=state,
            on_table_error=on_table_error,
            **options,
        )
        window = self.staging / "test" / "window=1"
        folders = {name: window / table_folder(name) for name in tables}
        staged = {name: pq.read_table(folder) for name, folder in folders.items() if folder.exists()}
        return manifest.to_json(), staged


@pytest.fixture
def recorder(connections: LocalMariaDB, tmp_path: Path) -> Recorder:
    return Recorder(tmp_path / "staging")


DDL = """CREATE TABLE `{db}`.snap (
  id BIGINT UNSIGNED PRIMARY KEY,
  ti TINYINT, tiu TINYINT UNSIGNED, si SMALLINT, siu SMALLINT UNSIGNED, mi MEDIUMINT, miu MEDIUMINT UNSIGNED,
  i INT, iu INT UNSIGNED, bi BIGINT, biz BIGINT(20) UNSIGNED ZEROFILL,
  dec_ DECIMAL(12,4), dec0 DECIMAL(5,0), dec38 DECIMAL(38,10), dec50 DECIMAL(50,0), dec65 DECIMAL(65,30),
  f FLOAT, fu FLOAT UNSIGNED, d DOUBLE,
  y YEAR, da DATE, dt0 DATETIME, dt3 DATETIME(3), dt6 DATETIME(6),
  ts0 TIMESTAMP NULL, ts3 TIMESTAMP(3) NULL, ts6 TIMESTAMP(6) NULL,
  tm0 TIME, tm1 TIME(1), tm6 TIME(6),
  b1 BIT(1), b10 BIT(10), b63 BIT(63),
  js JSON, en ENUM('s','m','l'), st SET('a','b','c'),
  ch CHAR(3), vc VARCHAR(20), vca VARCHAR(300) CHARACTER SET ascii, tt TINYTEXT, tx TEXT, mt MEDIUMTEXT,
  lt LONGTEXT,
  l1 VARCHAR(20) CHARACTER SET latin1, l1c CHAR(5) CHARACTER SET latin1, l1t TEXT CHARACTER SET latin1,
  bn BINARY(4), vb VARBINARY(8), tb TINYBLOB, bl BLOB, mb MEDIUMBLOB, lb LONGBLOB,
  g GEOMETRY, pt POINT, pg POLYGON,
  i6 INET6, u UUID,
  gv BIGINT AS (iu * 2) VIRTUAL, gp VARCHAR(30) AS (CONCAT(vc, '!')) PERSISTENT, inv INT INVISIBLE
) DEFAULT CHARSET=utf8mb4"""

ROWS: list[dict[str, str]] = [
    {  # extremes of every type; TIME negative with a fraction; latin1 bytes cp1252 leaves undefined
        "id": "18446744073709551615",
        "ti": "-128",
        "tiu": "255",
        "si": "-32768",
        "siu": "65535",
        "mi": "-8388608",
        "miu": "16777215",
        "i": "-2147483648",
        "iu": "4294967295",
        "bi": "-9223372036854775808",
        "biz": "18446744073709551615",
        "dec_": "-12345678.1234",
        "dec0": "99999",
        "dec38": "-9999999999999999999999999999.9999999999",
        "dec50": "-99999999999999999999999999999999999999999999999999",
        "dec65": "12345678901234567890123456789012345.123456789012345678901234567890",
        "f": "1.2345678",
        "fu": "3.4028234e38",
        "d": "0.30000000000000004",
        "y": "0",
        "da": "'9999-12-31'",
        "dt0": "'1000-01-01 00:00:00'",
        "dt3": "'2024-02-29 23:59:59.999'",
        "dt6": "'9999-12-31 23:59:59.999999'",
        "ts0": "'1970-01-01 00:00:01'",
        "ts3": "'2038-01-19 03:14:07.999'",
        "ts6": "'2000-01-01 00:00:00.000001'",
        "tm0": "'-838:59:59'",
        "tm1": "'-00:00:00.1'",
        "tm6": "'-838:59:58.999999'",
        "b1": "b'1'",
        "b10": "b'1000000001'",
        "b63": "b'" + "1" * 63 + "'",
        "js": """'{"k": [1, "é", 2.50, null], "😀": true}'""",
        "en": "'l'",
        "st": "'c,a,b'",
        "ch": "'😀é'",
        "vc": "'héllo 😀'",
        "vca": "'" + "x" * 300 + "'",
        "tt": "'😀'",
        "tx": "'tab\\tnewline\\nquote''s'",
        "mt": "REPEAT('é', 70000)",
        "lt": "REPEAT('😀', 1000)",
        "l1": "'café €‰ ÿ'",
        "l1c": "_latin1 X'8190'",
        "l1t": "_latin1 X'E9808D8F9D9FFF'",
        "bn": "0x61000000",
        "vb": "0x0000",
        "tb": "0xFF",
        "bl": "0x00FF00",
        "mb": "REPEAT(0xAB, 70000)",
        "lb": "X''",
        "g": "ST_GeomFromText('POINT(1 2)', 4326)",
        "pt": "POINT(1, 1)",
        "pg": "ST_GeomFromText('POLYGON((0 0, 1 0, 1 1, 0 0))')",
        "i6": "'::ffff:1.2.3.4'",
        "u": "'6ccd780c-baba-1026-9564-5b8c656024db'",
        "inv": "7",
    },
    {"id": "1"},  # NULL in every column
    {  # zero dates (counted), zero TIMESTAMP, empty SET, empty strings, padding, positive limits
        "id": "2",
        "ti": "127",
        "tiu": "0",
        "si": "32767",
        "siu": "0",
        "mi": "8388607",
        "miu": "0",
        "i": "2147483647",
        "iu": "0",
        "bi": "9223372036854775807",
        "biz": "42",
        "dec_": "0",
        "dec0": "-99999",
        "dec38": "0.0000000001",
        "dec50": "0",
        "dec65": "0",
        "f": "16777217",
        "fu": "1.4e-45",
        "d": "1.7976931348623157e308",
        "y": "2155",
        "da": "'0000-00-00'",
        "dt0": "'0000-00-00 00:00:00'",
        "dt3": "'2024-00-10 12:00:00.5'",
        "dt6": "'2015-02-30 01:02:03.000004'",
        "ts0": "'0000-00-00 00:00:00'",
        "ts3": "'0000-00-00 00:00:00'",
        "ts6": "'2038-01-19 03:14:07.999999'",
        "tm0": "'838:59:59'",
        "tm1": "'12:34:56.7'",
        "tm6": "'-00:00:01.000001'",
        "b1": "b'0'",
        "b10": "0",
        "b63": "b'1'",
        "js": "'[]'",
        "en": "'s'",
        "st": "''",
        "ch": "''",
        "vc": "''",
        "vca": "''",
        "tt": "''",
        "tx": "''",
        "mt": "''",
        "lt": "''",
        "l1": "''",
        "l1c": "'a  '",
        "l1t": "''",
        "bn": "''",
        "vb": "''",
        "tb": "''",
        "bl": "''",
        "mb": "''",
        "lb": "''",
        "g": "ST_GeomFromText('LINESTRING(0 0, 1 1)')",
        "pt": "POINT(-1.5, 1e300)",
        "pg": "ST_GeomFromText('POLYGON((0 0, 2 0, 2 2, 0 0), (0.5 0.5, 1 0.5, 1 1, 0.5 0.5))')",
        "i6": "'::'",
        "u": "'00000000-0000-0000-0000-000000000000'",
        "inv": "-1",
    },
    {  # ordinary values
        "id": "3",
        "ti": "-1",
        "tiu": "1",
        "si": "-2",
        "siu": "2",
        "mi": "-3",
        "miu": "3",
        "i": "-4",
        "iu": "4",
        "bi": "-5",
        "biz": "6",
        "dec_": "0.5",
        "dec0": "0",
        "dec38": "-0.5",
        "dec50": "1",
        "dec65": "-1.5",
        "f": "-0.1",
        "fu": "0",
        "d": "5e-324",
        "y": "1901",
        "da": "'1000-01-01'",
        "dt0": "'2024-06-30 12:00:00'",
        "dt3": "'2024-06-30 12:00:00.001'",
        "dt6": "'2024-06-30 12:00:00.000001'",
        "ts0": "'2024-06-30 12:00:00'",
        "ts3": "'2024-06-30 12:00:00.5'",
        "ts6": "'2024-06-30 12:00:00.123456'",
        "tm0": "'00:00:00'",
        "tm1": "'-12:00:00.9'",
        "tm6": "'00:00:00.000001'",
        "b1": "1",
        "b10": "1023",
        "b63": "0",
        "js": """'"text"'""",
        "en": "'m'",
        "st": "'b'",
        "ch": "'abc'",
        "vc": "' lead and trail '",
        "vca": "'a'",
        "tt": "'t'",
        "tx": "'x'",
        "mt": "'m'",
        "lt": "'l'",
        "l1": "'ÀÉÎÕÜ'",
        "l1c": "'€'",
        "l1t": "'ß'",
        "bn": "0x00000000",
        "vb": "0x01",
        "tb": "0x02",
        "bl": "0x03",
        "mb": "0x04",
        "lb": "0x05",
        "g": "ST_GeomFromText('GEOMETRYCOLLECTION(POINT(1 1))')",
        "pt": "POINT(0, 0)",
        "pg": "ST_GeomFromText('POLYGON((0 0, 3 0, 3 3, 0 0))', 3857)",
        "i6": "'fe80::1'",
        "u": "UUID()",
        "inv": "0",
    },
]


def insert(row: dict[str, str], db: str) -> str:
    return f"INSERT INTO `{db}`.snap ({', '.join(row)}) VALUES ({', '.join(row.values())})"


def read_snapshot(
    server: LocalMariaDB, db: str, table: str, order: str = "ORDER BY id", driver: str | None = None
) -> tuple[list[dict[str, str]], pa.Table, int]:
    """Read ``db.table`` as a snapshot chunk does: return (column specs, source columns, zero dates).

    :param order: the ``ORDER BY`` clause of the ``SELECT`` (empty for tables without an ``id``).
    :param driver: the :class:`RowReader` driver (None: the one a chunk picks, mysqlclient without TLS).
    """
    conn = pymysql.connect(**server.connection_kwargs(charset="utf8mb4"))
    try:
        with conn.cursor() as cur:
            columns = describe_columns(cur, db, table)
    finally:
        conn.close()
    reader = RowReader(server.connection_kwargs(), driver)
    try:
        sql = f"SELECT {', '.join(c.select_expr for c in columns)} FROM {quote(db)}.{quote(table)} {order}"
        # 2 rows per batch: the batches are staged one by one, a table of several rows spans several
        batches = list(reader.batches(sql, [], columns, 2))
    finally:
        reader.close()
    schema = pa.schema([pa.field(c.name, c.spec.arrow_type) for c in columns])
    data = pa.Table.from_batches([b for b, _ in batches], schema=schema)
    return [c.spec.to_manifest() for c in columns], data, sum(zeros for _, zeros in batches)


@pytest.mark.parametrize("driver", ["mysqlclient", "pymysql"])
def test_snapshot_rows_equal_binlog_staged_rows(
    driver: str, recorder: Recorder, mariadb: LocalMariaDB, source_db: str
) -> None:
    table = f"{source_db}.snap"
    mariadb.execute(DDL.format(db=source_db))
    recorder.mark()
    # Zero dates, zero-in-date and invalid calendar dates need a permissive mode (MariaDB KB, "SQL_MODE").
    mariadb.execute(
        "SET SESSION sql_mode = 'STRICT_TRANS_TABLES,ALLOW_INVALID_DATES'",
        "SET SESSION time_zone = '+00:00'",
        *(insert(row, source_db) for row in ROWS),
    )
    manifest, staged = recorder.extract({table: ["id"]})

    specs, snapshot, zero_dates = read_snapshot(mariadb, source_db, "snap", driver=driver)

    entry = manifest["tables"][table]
    assert specs == entry["columns"]
    names = [spec["name"] for spec in specs]
    binlog = staged[table].filter(pc.equal(staged[table]["_binlog_op"], "c")).select(names)
    binlog = binlog.sort_by("id")
    assert [(f.name, f.type) for f in snapshot.schema] == [(f.name, f.type) for f in binlog.schema]
    assert snapshot.num_rows == binlog.num_rows == len(ROWS)
    mismatches = {
        name: (binlog[name].to_pylist(), snapshot[name].to_pylist())
        for name in names
        if not binlog[name].combine_chunks().equals(snapshot[name].combine_chunks())
    }
    assert mismatches == {}
    assert snapshot.equals(binlog.replace_schema_metadata(None))
    assert zero_dates == entry["zero_dates"] == 6  # da, dt0, dt3, dt6 and the zero TIMESTAMPs ts0, ts3
    # The rows really hold what the edge cases are about (equality alone would pass on two wrong paths).
    nulls, zero, _, first = snapshot.to_pylist()
    assert set(nulls.values()) == {1, None}
    assert first["tm6"] == -dt.timedelta(hours=838, minutes=59, seconds=58, microseconds=999999)
    assert first["tm1"] == -dt.timedelta(microseconds=100000)
    assert first["bn"] == b"a\x00\x00\x00"
    assert first["l1t"] == "é€\x8d\x8f\x9dŸÿ"
    assert first["ch"] == "😀é"
    assert first["f"] == pytest.approx(1.2345678)
    assert first["f"] != 1.23457  # what the text protocol sends for FLOAT
    assert (zero["st"], zero["bn"], zero["lb"]) == ("", b"\x00" * 4, b"")
    assert [zero[c] for c in ("da", "dt0", "dt3", "dt6")] == [None] * 4
    assert (zero["ts0"], zero["ts3"]) == (None, None)


@pytest.mark.parametrize("driver", ["mysqlclient", "pymysql"])
def test_bit64_values_beyond_int64_are_staged_as_decimals(
    driver: str, mariadb: LocalMariaDB, source_db: str
) -> None:
    mariadb.execute(
        f"CREATE TABLE `{source_db}`.b (id INT PRIMARY KEY, b BIT(64))",
        f"INSERT INTO `{source_db}`.b VALUES (1, b'{'1' * 64}'), (2, b'1{'0' * 63}'), (3, 0), (4, NULL)",
    )
    specs, data, _ = read_snapshot(mariadb, source_db, "b", driver=driver)
    assert specs[1] == {"name": "b", "mysql_type": "bit(64)", "arrow_type": "decimal128(20, 0)"}
    assert data.column(1).to_pylist() == [
        decimal.Decimal("18446744073709551615"),
        decimal.Decimal("9223372036854775808"),
        decimal.Decimal("0"),
        None,
    ]


def test_values_arrow_does_not_parse_exactly_are_refused() -> None:
    """Arrow parses numbers column-wise and strictly: text out of range, needing more scale or not a number
    raises, naming the column, instead of staging a changed value; rows of unequal width are refused."""
    from airflow_provider_binlog.extract.columns import ColumnSpec
    from airflow_provider_binlog.snapshot.rows import SourceColumn, rows_to_batch

    for text, arrow in [("2147483648", pa.int32()), ("1.5", pa.decimal128(5, 0)), ("12abc", pa.int64())]:
        column = SourceColumn("v", ColumnSpec("v", "int", arrow), "`v`")
        with pytest.raises(
            ValueError, match=re.escape(f"column 'v' (int): a value cannot be staged as {arrow}")
        ):
            rows_to_batch([column], [(text.encode(),)])
    with pytest.raises(ValueError, match="zip"):
        rows_to_batch([column, column], [(b"1", b"2"), (b"3",)])
