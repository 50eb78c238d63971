"""RowDecoder against a real MariaDB binlog: hand-written expectations and the library + converter path."""

from __future__ import annotations

import ast
import datetime as dt
import decimal
import itertools
import json
import operator
import random
import re
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pymysql
import pytest
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.column import Column
from pymysqlreplication.constants import FIELD_TYPE
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

from airflow_provider_binlog.extract.columns import ValueConversionError, converter
from airflow_provider_binlog.extract.decoder import RowDecoder, layout_key
from airflow_provider_binlog.extract.errors import UndecodableEventError
from airflow_provider_binlog.extract.events.feeds import read_binlog_socket
from airflow_provider_binlog.extract.events.stream import EventReader
from airflow_provider_binlog.extract.events.stream import RowsEvent as OwnRowsEvent
from airflow_provider_binlog.testing.mariadb import LocalMariaDB

pytestmark = pytest.mark.integration

UTC = dt.timezone.utc
D = decimal.Decimal
TD = dt.timedelta
REPO = Path(__file__).resolve().parents[2]
CASES_FILE = REPO.parent / "shared" / "data" / "pymysqlreplication_types" / "cases.json"
POINT_1_1 = b"\x00\x00\x00\x00\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\xf0?\x00\x00\x00\x00\x00\x00\xf0?"
_server_ids = itertools.count(31_000)

Event = tuple[str, str, list[Any]]
"""(kind: insert/update/delete, table, rows); update rows are (before, after) pairs."""


# --- reading one binlog range both ways ----------------------------------------------------------------


def head(server: LocalMariaDB) -> tuple[str, int]:
    file, pos = server.execute("SHOW MASTER STATUS")[0][:2]
    return str(file), int(pos)


def open_stream(server: LocalMariaDB, start: tuple[str, int], schema: str) -> BinLogStreamReader:
    kwargs = server.connection_kwargs()
    return BinLogStreamReader(
        connection_settings={k: kwargs[k] for k in ("host", "port", "user", "password")},
        server_id=next(_server_ids),
        log_file=start[0],
        log_pos=start[1],
        resume_stream=True,
        blocking=False,
        only_schemas=[schema],
        only_events=[WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent],
        enable_logging=False,
    )


def _kind(event: Any) -> str:
    if isinstance(event, UpdateRowsEvent):
        return "update"
    return "insert" if isinstance(event, WriteRowsEvent) else "delete"


def stream_events(server: LocalMariaDB, start: tuple[str, int], schema: str) -> Iterator[Any]:
    stream = open_stream(server, start, schema)
    try:
        yield from stream
    finally:
        stream.close()


def decoded(server: LocalMariaDB, start: tuple[str, int], schema: str) -> tuple[list[Event], int]:
    """Return the range's row events read over COM_BINLOG_DUMP by our event reader and decoded by RowDecoder
    (one per layout, as the window reader keeps them), and the zero dates it counted."""
    cache: dict[Any, RowDecoder] = {}
    events: list[Event] = []
    conn = pymysql.connect(**server.connection_kwargs())
    try:
        raw = read_binlog_socket(conn, server_id=next(_server_ids), file=start[0], position=start[1])
        for event in EventReader().events(raw):
            data = event.data
            if not isinstance(data, OwnRowsEvent) or data.schema != schema:
                continue
            key = (data.table, layout_key(data.columns))
            decoder = cache.get(key) or cache.setdefault(key, RowDecoder(data.columns))
            events.append((_OWN_KINDS[data.kind], data.table, data.rows_with(decoder)))
    finally:
        conn.close()
    return events, sum(d.zero_dates for d in cache.values())


_OWN_KINDS = {"write": "insert", "update": "update", "delete": "delete"}


def _convert_image(columns: list[Any], values: dict[str, Any], none_sources: dict[str, str]) -> list[Any]:
    out = []
    for column in columns:
        value = values.get(column.name)
        out.append(converter(column)(value, none_sources.get(column.name) if value is None else None))
    return out


def through_library(server: LocalMariaDB, start: tuple[str, int], schema: str) -> list[Event]:
    """Return the range's row events decoded by mysql-replication and columns.converter (today's path)."""
    events: list[Event] = []
    for event in stream_events(server, start, schema):
        columns = event.columns
        if isinstance(event, UpdateRowsEvent):
            rows: list[Any] = [
                (
                    _convert_image(columns, r["before_values"], r["before_none_sources"]),
                    _convert_image(columns, r["after_values"], r["after_none_sources"]),
                )
                for r in event.rows
            ]
        else:
            rows = [_convert_image(columns, r["values"], r["none_sources"]) for r in event.rows]
        events.append((_kind(event), event.table, rows))
    return events


def exact(value: Any) -> Any:
    """Return a form of ``value`` that compares types and representations, not only equality."""
    if isinstance(value, (list, tuple)):
        return [exact(v) for v in value]
    return (type(value).__name__, repr(value))


def only_rows(events: list[Event]) -> list[Any]:
    return [row for _, _, rows in events for row in rows]


# --- hand-written expectations -------------------------------------------------------------------------

NUMBERS_DDL = """CREATE TABLE nums (
  id INT PRIMARY KEY, ti TINYINT, tu TINYINT UNSIGNED, si SMALLINT, su SMALLINT UNSIGNED, mi MEDIUMINT,
  mu MEDIUMINT UNSIGNED, i INT, iu INT UNSIGNED, bi BIGINT, bu BIGINT UNSIGNED,
  d21 DECIMAL(2,1), d102 DECIMAL(10,2), d55 DECIMAL(5,5), d180 DECIMAL(18,0), d189 DECIMAL(18,9),
  d2010 DECIMAL(20,10), d380 DECIMAL(38,0), d3810 DECIMAL(38,10), d6530 DECIMAL(65,30), d650 DECIMAL(65,0),
  f FLOAT, db DOUBLE, y YEAR
)"""
N38 = "9" * 38
N65 = "9" * 65
N35_30 = "9" * 35 + "." + "9" * 30
NUMBER_ROWS = [
    "(1, -128, 0, -32768, 0, -8388608, 0, -2147483648, 0, -9223372036854775808, 0, -9.9, -99999999.99, -0.99999,"
    f" -999999999999999999, -999999999.999999999, -9999999999.9999999999, -{N38},"
    f" -9999999999999999999999999999.9999999999, -{N35_30}, -{N65}, -1.5, -1.7976931348623157e308, 1901)",
    "(2, 127, 255, 32767, 65535, 8388607, 16777215, 2147483647, 4294967295, 9223372036854775807,"
    " 18446744073709551615, 9.9, 99999999.99, 0.99999, 999999999999999999, 999999999.999999999,"
    f" 9999999999.9999999999, {N38}, 9999999999999999999999999999.9999999999, {N35_30}, {N65}, 3.5,"
    " 2.2250738585072014e-308, 2155)",
    "(3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0.000, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)",
    "(4, 1, 1, -1, 1, -1, 1, -1, 1, -1, 9223372036854775808, 4.2, -0.01, 0.00001, 123456789012345678,"
    " 0.000000001, -42000.123456, 12345678901234567890123456789012345678, -1.0000000001,"
    " 0.000000000000000000000000000001, -1, 42.42, -84.84, 2000)",
    "(5, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,"
    " NULL, NULL, NULL, NULL, NULL, NULL)",
]
NUMBER_EXPECTED = [
    [1, -128, 0, -32768, 0, -8388608, 0, -2147483648, 0, -9223372036854775808, D("0"), D("-9.9"),
     D("-99999999.99"), D("-0.99999"), D("-999999999999999999"), D("-999999999.999999999"),
     D("-9999999999.9999999999"), D("-" + N38), D("-9999999999999999999999999999.9999999999"),
     "-" + N35_30, "-" + N65, -1.5, -1.7976931348623157e308, 1901],
    [2, 127, 255, 32767, 65535, 8388607, 16777215, 2147483647, 4294967295, 9223372036854775807,
     D("18446744073709551615"), D("9.9"), D("99999999.99"), D("0.99999"), D("999999999999999999"),
     D("999999999.999999999"), D("9999999999.9999999999"), D(N38), D("9999999999999999999999999999.9999999999"),
     N35_30, N65, 3.5, 2.2250738585072014e-308, 2155],
    # str(Decimal) of a zero with 30 decimals is '0E-30' (what columns.converter writes for DECIMAL(p>38)).
    [3, 0, 0, 0, 0, 0, 0, 0, 0, 0, D("0"), D("0.0"), D("0.00"), D("0.00000"), D("0"), D("0.000000000"),
     D("0.0000000000"), D("0"), D("0.0000000000"), "0E-30", "0", 0.0, 0.0, 0],
    [4, 1, 1, -1, 1, -1, 1, -1, 1, -1, D("9223372036854775808"), D("4.2"), D("-0.01"), D("0.00001"),
     D("123456789012345678"), D("0.000000001"), D("-42000.1234560000"),
     D("12345678901234567890123456789012345678"), D("-1.0000000001"), "1E-30", "-1", 42.41999816894531,
     -84.84, 2000],
    [5] + [None] * 23,
]  # fmt: skip


def test_numbers_decode_exactly(mariadb: LocalMariaDB, source_db: str) -> None:
    mariadb.execute(NUMBERS_DDL, database=source_db)
    start = head(mariadb)
    mariadb.execute(f"INSERT INTO nums VALUES {', '.join(NUMBER_ROWS)}", database=source_db)
    events, zero_dates = decoded(mariadb, start, source_db)
    assert exact(only_rows(events)) == exact(NUMBER_EXPECTED)
    assert zero_dates == 0
    assert exact(only_rows(through_library(mariadb, start, source_db))) == exact(NUMBER_EXPECTED)


TIMES_DDL = """CREATE TABLE times (
  id INT PRIMARY KEY, da DATE, dt0 DATETIME, dt1 DATETIME(1), dt2 DATETIME(2), dt3 DATETIME(3),
  dt4 DATETIME(4), dt5 DATETIME(5), dt6 DATETIME(6), ts0 TIMESTAMP NULL, ts1 TIMESTAMP(1) NULL,
  ts3 TIMESTAMP(3) NULL, ts6 TIMESTAMP(6) NULL, t0 TIME, t1 TIME(1), t2 TIME(2), t3 TIME(3), t4 TIME(4),
  t5 TIME(5), t6 TIME(6)
)"""
ZERO_DT = "'0000-00-00 00:00:00'"
TIME_ROWS = [
    "(1, '1000-01-01', '1000-01-01 00:00:00', '2024-02-29 23:59:59.9', '2024-02-29 23:59:59.99',"
    " '2024-02-29 23:59:59.999', '2024-02-29 23:59:59.9999', '2024-02-29 23:59:59.99999',"
    " '9999-12-31 23:59:59.999999', '1970-01-01 00:00:01', '2038-01-19 03:14:07.9', '2001-02-03 04:05:06.789',"
    " '2038-01-19 03:14:07.999999', '-838:59:59', '-838:59:58.9', '-00:00:00.01', '-00:00:01.001',"
    " '-12:34:56.7891', '-00:00:00.00001', '-838:59:58.999999')",
    "(2, '9999-12-31', '9999-12-31 23:59:59', '2000-01-01 00:00:00.1', '2000-01-01 00:00:00.01',"
    " '2000-01-01 00:00:00.001', '2000-01-01 00:00:00.0001', '2000-01-01 00:00:00.00001',"
    " '2000-01-01 00:00:00.000001', '2038-01-19 03:14:07', '1970-01-01 00:00:01.1', '2000-01-01 00:00:00.001',"
    " '2000-01-01 00:00:00.000001', '838:59:59', '838:59:59.9', '00:00:00.01', '00:00:01.001', '12:34:56.7891',"
    " '00:00:00.00001', '838:59:58.999999')",
    f"(3, '0000-00-00', {ZERO_DT}, {ZERO_DT}, {ZERO_DT}, {ZERO_DT}, {ZERO_DT}, {ZERO_DT}, {ZERO_DT}, {ZERO_DT},"
    f" {ZERO_DT}, {ZERO_DT}, {ZERO_DT}, '00:00:00', '00:00:00', '00:00:00', '00:00:00', '00:00:00', '00:00:00',"
    " '00:00:00')",
    "(4, '2015-00-21', '2013-00-00 00:00:00', '2015-05-00 10:00:00.5', '0000-01-21 00:00:00', NULL, NULL, NULL,"
    " NULL, NULL, NULL, NULL, NULL, '-00:00:00', '-00:00:00.0', '-00:00:00.99', '-00:00:00.999', NULL, NULL,"
    " '-00:00:00.000001')",
    "(5" + ", NULL" * 19 + ")",
]
MAX_TIME = TD(hours=838, minutes=59, seconds=59)
TIME_EXPECTED = [
    [1, dt.date(1000, 1, 1), dt.datetime(1000, 1, 1), dt.datetime(2024, 2, 29, 23, 59, 59, 900000),
     dt.datetime(2024, 2, 29, 23, 59, 59, 990000), dt.datetime(2024, 2, 29, 23, 59, 59, 999000),
     dt.datetime(2024, 2, 29, 23, 59, 59, 999900), dt.datetime(2024, 2, 29, 23, 59, 59, 999990),
     dt.datetime(9999, 12, 31, 23, 59, 59, 999999), dt.datetime(1970, 1, 1, 0, 0, 1, tzinfo=UTC),
     dt.datetime(2038, 1, 19, 3, 14, 7, 900000, tzinfo=UTC), dt.datetime(2001, 2, 3, 4, 5, 6, 789000, tzinfo=UTC),
     dt.datetime(2038, 1, 19, 3, 14, 7, 999999, tzinfo=UTC), -MAX_TIME,
     -TD(hours=838, minutes=59, seconds=58, microseconds=900000), -TD(microseconds=10000),
     -TD(seconds=1, microseconds=1000), -TD(hours=12, minutes=34, seconds=56, microseconds=789100),
     -TD(microseconds=10), -TD(hours=838, minutes=59, seconds=58, microseconds=999999)],
    [2, dt.date(9999, 12, 31), dt.datetime(9999, 12, 31, 23, 59, 59), dt.datetime(2000, 1, 1, 0, 0, 0, 100000),
     dt.datetime(2000, 1, 1, 0, 0, 0, 10000), dt.datetime(2000, 1, 1, 0, 0, 0, 1000),
     dt.datetime(2000, 1, 1, 0, 0, 0, 100), dt.datetime(2000, 1, 1, 0, 0, 0, 10), dt.datetime(2000, 1, 1, 0, 0, 0, 1),
     dt.datetime(2038, 1, 19, 3, 14, 7, tzinfo=UTC), dt.datetime(1970, 1, 1, 0, 0, 1, 100000, tzinfo=UTC),
     dt.datetime(2000, 1, 1, 0, 0, 0, 1000, tzinfo=UTC), dt.datetime(2000, 1, 1, 0, 0, 0, 1, tzinfo=UTC),
     MAX_TIME, TD(hours=838, minutes=59, seconds=59, microseconds=900000), TD(microseconds=10000),
     TD(seconds=1, microseconds=1000), TD(hours=12, minutes=34, seconds=56, microseconds=789100),
     TD(microseconds=10), TD(hours=838, minutes=59, seconds=58, microseconds=999999)],
    # The zero TIMESTAMP is stored as 0 seconds: a null counted as a zero date, like DATE/DATETIME.
    [3, None, None, None, None, None, None, None, None, None, None, None, None] + [TD(0)] * 7,
    [4, None, None, None, None, None, None, None, None, None, None, None, None, TD(0), TD(0),
     -TD(microseconds=990000), -TD(microseconds=999000), None, None, -TD(microseconds=1)],
    [5] + [None] * 19,
]  # fmt: skip


def test_temporal_values_decode_exactly(mariadb: LocalMariaDB, source_db: str) -> None:
    mariadb.execute(TIMES_DDL, database=source_db)
    start = head(mariadb)
    mariadb.execute(
        "SET SESSION sql_mode = ''",
        "SET SESSION time_zone = '+00:00'",
        f"INSERT INTO times VALUES {', '.join(TIME_ROWS)}",
        database=source_db,
    )
    events, zero_dates = decoded(mariadb, start, source_db)
    assert exact(only_rows(events)) == exact(TIME_EXPECTED)
    assert zero_dates == 12 + 4  # row 3: DATE + 7 DATETIMEs + 4 TIMESTAMPs; row 4: DATE + 3 DATETIMEs
    assert exact(only_rows(through_library(mariadb, start, source_db))) == exact(TIME_EXPECTED)


def test_invalid_calendar_date_is_a_counted_null(mariadb: LocalMariaDB, source_db: str) -> None:
    # The library raises on DATE '2015-02-30' (datetime.date refuses it): no library comparison here.
    mariadb.execute("CREATE TABLE d (id INT PRIMARY KEY, da DATE, dt DATETIME(2))", database=source_db)
    start = head(mariadb)
    mariadb.execute(
        "SET SESSION sql_mode = 'ALLOW_INVALID_DATES'",
        "INSERT INTO d VALUES (1, '2015-02-30', '2015-02-31 10:00:00.25'), (2, '2016-02-29', '2016-02-29 10:00:00.25')",
        database=source_db,
    )
    events, zero_dates = decoded(mariadb, start, source_db)
    assert exact(only_rows(events)) == exact(
        [[1, None, None], [2, dt.date(2016, 2, 29), dt.datetime(2016, 2, 29, 10, 0, 0, 250000)]]
    )
    assert zero_dates == 2


ENUM_300 = ", ".join(f"'m{k}'" for k in range(300))
STRINGS_DDL = f"""CREATE TABLE strs (
  id INT PRIMARY KEY, vc VARCHAR(20), v300 VARCHAR(300), ch CHAR(5), l1 VARCHAR(40) CHARACTER SET latin1,
  l1c CHAR(3) CHARACTER SET latin1, asc_ VARCHAR(10) CHARACTER SET ascii, u3 VARCHAR(10) CHARACTER SET utf8mb3,
  bn BINARY(4), vb VARBINARY(300), tb TINYBLOB, bl BLOB, mb MEDIUMBLOB, lb LONGBLOB, tt TINYTEXT, tx TEXT,
  mt MEDIUMTEXT, lt LONGTEXT, js JSON, en ENUM('a','b','c'), en300 ENUM({ENUM_300}), st SET('x','y','z'),
  st9 SET('a','b','c','d','e','f','g','h','i'), b1 BIT(1), b10 BIT(10), b64 BIT(64), g GEOMETRY, i6 INET6,
  u UUID
) DEFAULT CHARSET=utf8mb4"""
STRING_ROWS = [
    "(1, 'héllo 😀', REPEAT('é', 300), 'ab', '€Šÿ', 'àé', 'abc', 'ñ', 0x61000000, X'00FF00', X'00', X'0102',"
    " X'FF', REPEAT('b', 70000), 'é', REPEAT('t', 65535), 'mt', '💾', '{\"k\": [1, \"é\"]}', 'c', 'm299', 'z,x',"
    " 'i,a', b'1', b'1000000001', b'1111111111111111111111111111111111111111111111111111111111111111',"
    " ST_GeomFromText('POINT(1 1)'), '::', '00000000-0000-0000-0000-000000000000')",
    "(2, '', '', '', '', '', '', '', X'', X'', X'', X'', X'', X'', '', '', '', '', '\"\"', 'invalid', 'm0', '',"
    " 'a,b,c,d,e,f,g,h,i', b'0', b'0', b'0', ST_GeomFromText('POINT(1 1)'), '::1',"
    " '123e4567-e89b-12d3-a456-426614174000')",
    "(3" + ", NULL" * 28 + ")",
]
STRING_EXPECTED = [
    [1, "héllo 😀", "é" * 300, "ab", "€Šÿ", "àé", "abc", "ñ", b"a\x00\x00\x00", b"\x00\xff\x00", b"\x00",
     b"\x01\x02", b"\xff", b"b" * 70000, "é", "t" * 65535, "mt", "💾", '{"k": [1, "é"]}', "c", "m299", "x,z",
     "a,i", 1, 513, D(2**64 - 1), POINT_1_1, b"\x00" * 16, b"\x00" * 16],
    [2, "", "", "", "", "", "", "", b"\x00" * 4, b"", b"", b"", b"", b"", "", "", "", "", '""', "", "m0", "",
     "a,b,c,d,e,f,g,h,i", 0, 0, D(0), POINT_1_1, b"\x00" * 15 + b"\x01",
     b"\x12\x3e\x45\x67\xe8\x9b\x12\xd3\xa4\x56\x42\x66\x14\x17\x40\x00"],
    [3] + [None] * 28,
]  # fmt: skip


def test_strings_blobs_and_sets_decode_exactly(mariadb: LocalMariaDB, source_db: str) -> None:
    mariadb.execute(STRINGS_DDL, database=source_db)
    start = head(mariadb)
    mariadb.execute(
        "SET SESSION sql_mode = ''",
        f"INSERT INTO strs VALUES {', '.join(STRING_ROWS)}",
        database=source_db,
    )
    events, _ = decoded(mariadb, start, source_db)
    assert exact(only_rows(events)) == exact(STRING_EXPECTED)
    assert exact(only_rows(through_library(mariadb, start, source_db))) == exact(STRING_EXPECTED)


def test_latin1_decodes_as_the_server_returns_it(mariadb: LocalMariaDB, source_db: str) -> None:
    # MySQL/MariaDB latin1 is cp1252, with the five bytes cp1252 leaves undefined mapped to C1 controls
    # (the library's cp1252 codec raises on those, so there is no library comparison here).
    mariadb.execute(
        "CREATE TABLE l (id INT PRIMARY KEY, v VARCHAR(40) CHARACTER SET latin1)", database=source_db
    )
    start = head(mariadb)
    mariadb.execute("INSERT INTO l VALUES (1, X'80818D8F909D9FA0FF41E9')", database=source_db)
    expected = "€\x81\x8d\x8f\x90\x9dŸ\xa0ÿAé"
    assert mariadb.execute("SELECT v FROM l", database=source_db) == [(expected,)]
    events, _ = decoded(mariadb, start, source_db)
    assert only_rows(events) == [[1, expected]]


UPDATES_DDL = """CREATE TABLE u (
  id INT PRIMARY KEY, v VARCHAR(300), d DECIMAL(10,2), t TIME(6), n INT NULL, bn BINARY(3)
)"""


def test_updates_and_deletes_carry_both_images(mariadb: LocalMariaDB, source_db: str) -> None:
    mariadb.execute(UPDATES_DDL, database=source_db)
    start = head(mariadb)
    mariadb.execute(
        "INSERT INTO u VALUES (1, 'a', 1.50, '-00:00:00.5', NULL, 'x'), (2, REPEAT('b', 260), -2.25, '01:00:00', 7, NULL)",
        "UPDATE u SET v = CONCAT(v, 'z'), n = 3 WHERE id IN (1, 2)",
        "UPDATE u SET id = 10, n = NULL, bn = X'0000' WHERE id = 1",
        "DELETE FROM u WHERE id = 2",
        database=source_db,
    )
    one = [1, "a", D("1.50"), -TD(microseconds=500000), None, b"x\x00\x00"]
    two = [2, "b" * 260, D("-2.25"), TD(hours=1), 7, None]
    one_z = [1, "az", D("1.50"), -TD(microseconds=500000), 3, b"x\x00\x00"]
    two_z = [2, "b" * 260 + "z", D("-2.25"), TD(hours=1), 3, None]
    ten = [10, "az", D("1.50"), -TD(microseconds=500000), None, b"\x00\x00\x00"]
    expected = [
        ("insert", "u", [one, two]),
        ("update", "u", [(one, one_z), (two, two_z)]),
        ("update", "u", [(one_z, ten)]),
        ("delete", "u", [two_z]),
    ]
    events, _ = decoded(mariadb, start, source_db)
    assert exact(events) == exact(expected)
    assert exact(through_library(mariadb, start, source_db)) == exact(expected)


def test_null_bitmap_wider_than_two_bytes(mariadb: LocalMariaDB, source_db: str) -> None:
    columns = ", ".join(f"c{k} TINYINT NULL" for k in range(20))
    mariadb.execute(f"CREATE TABLE w (id INT PRIMARY KEY, {columns}, tail VARCHAR(5))", database=source_db)
    start = head(mariadb)
    values = ", ".join("NULL" if k % 3 == 0 else str(k) for k in range(20))
    mariadb.execute(
        f"INSERT INTO w VALUES (1, {values}, 'end'), (2, {', '.join(str(-k) for k in range(20))}, NULL)",
        database=source_db,
    )
    events, _ = decoded(mariadb, start, source_db)
    expected = [
        [1, *(None if k % 3 == 0 else k for k in range(20)), "end"],
        [2, *(-k for k in range(20)), None],
    ]
    assert exact(only_rows(events)) == exact(expected)


def test_minimal_row_image_is_refused(mariadb: LocalMariaDB, source_db: str) -> None:
    mariadb.execute(
        "CREATE TABLE m (id INT PRIMARY KEY, a INT, b INT)",
        "INSERT INTO m VALUES (1, 2, 3)",
        database=source_db,
    )
    start = head(mariadb)
    mariadb.execute(
        "SET SESSION binlog_row_image = 'MINIMAL'", "UPDATE m SET a = 5 WHERE id = 1", database=source_db
    )
    with pytest.raises(UndecodableEventError, match="binlog_row_image=FULL"):
        decoded(mariadb, start, source_db)


def test_unsupported_layouts_are_reported(mariadb: LocalMariaDB, source_db: str) -> None:
    # Every character set the server offers decodes (swe7 was refused before the server's tables shipped);
    # a character set the extractor does not know is refused.
    mariadb.execute(
        "CREATE TABLE x (id INT PRIMARY KEY, s VARCHAR(5) CHARACTER SET swe7)", database=source_db
    )
    start = head(mariadb)
    mariadb.execute("INSERT INTO x VALUES (1, 'a')", database=source_db)
    [event] = list(stream_events(mariadb, start, source_db))
    assert RowDecoder.supports(event.columns)
    unknown = Column(type=FIELD_TYPE.VARCHAR, name="s", max_length=5, character_set_name="nosuchset")
    assert not RowDecoder.supports([Column(type=FIELD_TYPE.LONG, name="id", unsigned=False), unknown])
    with pytest.raises(ValueError, match="character set"):
        RowDecoder([unknown])
    old_datetime = Column(type=FIELD_TYPE.DATETIME, name="old")
    assert not RowDecoder.supports([Column(type=FIELD_TYPE.LONG, name="id", unsigned=False), old_datetime])
    assert not RowDecoder.supports([Column(type=FIELD_TYPE.ENUM, name="e", size=1, enum_values=None)])
    assert RowDecoder.supports([Column(type=FIELD_TYPE.LONG, name="id", unsigned=False)])


def test_layout_key_tells_lengths_and_fractions_apart() -> None:
    def varchar(max_length: int) -> Column:
        return Column(type=FIELD_TYPE.VARCHAR, name="v", max_length=max_length, character_set_name="utf8")

    assert layout_key([varchar(40)]) != layout_key([varchar(1200)])
    assert layout_key([varchar(40)]) == layout_key([varchar(40)])
    assert layout_key([Column(type=FIELD_TYPE.DATETIME2, name="t", fsp=0)]) != layout_key(
        [Column(type=FIELD_TYPE.DATETIME2, name="t", fsp=6)]
    )


# --- MySQL binary JSON and partial update events (not writable on MariaDB: bodies built here) -----------


def _small_object(key: bytes, int16_value: int) -> bytes:
    """Return MySQL binary JSON of ``{key: int16_value}`` (``json_binary.cc``: small object)."""
    key_offset = 2 + 2 + 4 + 3
    size = key_offset + len(key)
    body = struct.pack("<HHHHBh", 1, size, key_offset, len(key), 0x05, int16_value) + key
    return b"\x00" + body


def test_mysql_binary_json_becomes_json_text() -> None:
    columns = [
        Column(type=FIELD_TYPE.LONG, name="id", unsigned=False),
        Column(type=FIELD_TYPE.JSON, name="j", length_size=4),
    ]
    obj = _small_object("é".encode(), -5)
    text = b"\x0c\x03abc"  # a top-level string: type 0x0c, variable-length size 3, bytes
    body = b"".join(
        [
            b"\x00" + struct.pack("<iI", 1, len(obj)) + obj,
            b"\x00" + struct.pack("<iI", 2, len(text)) + text,
            b"\x02" + struct.pack("<i", 3),  # j is NULL
            b"\x00" + struct.pack("<iI", 4, 0),  # empty value: None, as the library decodes it
        ]
    )
    rows = RowDecoder(columns).decode_rows_bytes(body)
    assert rows == [[1, '{"é": -5}'], [2, '"abc"'], [3, None], [4, None]]


def test_partial_update_event_with_whole_values_decodes() -> None:
    columns = [
        Column(type=FIELD_TYPE.LONG, name="id", unsigned=False),
        Column(type=FIELD_TYPE.JSON, name="j", length_size=4),
    ]
    obj = _small_object(b"a", 1)
    image = b"\x00" + struct.pack("<iI", 1, len(obj)) + obj
    decoder = RowDecoder(columns)
    whole = image + b"\x00" + image  # value_options 0: a plain after image
    assert decoder.decode_updates_bytes(whole, partial=True) == [([1, '{"a": 1}'], [1, '{"a": 1}'])]
    flagged = image + b"\x01\x00" + image  # PARTIAL_JSON_UPDATES set, no column holds a diff
    assert decoder.decode_updates_bytes(flagged, partial=True) == [([1, '{"a": 1}'], [1, '{"a": 1}'])]
    with pytest.raises(UndecodableEventError, match="PARTIAL_JSON"):
        decoder.decode_updates_bytes(image + b"\x01\x01" + image, partial=True)


def test_truncated_row_data_is_an_error() -> None:
    columns = [
        Column(type=FIELD_TYPE.LONG, name="id", unsigned=False),
        Column(type=FIELD_TYPE.VARCHAR, name="v", max_length=40, character_set_name="utf8"),
    ]
    decoder = RowDecoder(columns)
    assert decoder.decode_rows_bytes(b"\x00" + struct.pack("<i", 7) + b"\x02hi") == [[7, "hi"]]
    with pytest.raises(UndecodableEventError, match="does not match"):
        decoder.decode_rows_bytes(b"\x00" + struct.pack("<i", 7) + b"\x05hi")


# --- random rows: RowDecoder == library + converter -------------------------------------------------------

RANDOM_DDL = """CREATE TABLE r (
  id INT PRIMARY KEY, ti TINYINT, su SMALLINT UNSIGNED, mi MEDIUMINT, bu BIGINT UNSIGNED, d DECIMAL(19,7),
  d2 DECIMAL(9,9), f FLOAT, y YEAR, da DATE, dt DATETIME(4), ts TIMESTAMP(2) NULL, t TIME(5), t0 TIME,
  vc VARCHAR(100), txt TEXT, bn BINARY(6), vb VARBINARY(70), en ENUM('one','two','three'),
  st SET('p','q','r','s','t','u','v','w','x','y'), bt BIT(13)
) DEFAULT CHARSET=utf8mb4"""
_CHARS = "aZ09 é€ñ中😀\t'\""


def _random_row(rng: random.Random, key: int) -> tuple[Any, ...]:
    def maybe(value: Any) -> Any:
        return None if rng.random() < 0.15 else value

    seconds = rng.randint(-838 * 3600, 838 * 3600)
    sign = "-" if seconds < 0 else ""
    hms = f"{sign}{abs(seconds) // 3600}:{abs(seconds) // 60 % 60:02d}:{abs(seconds) % 60:02d}"
    day = dt.date(1000, 1, 1) + TD(days=rng.randint(0, 3_280_000))
    return (
        key,
        maybe(rng.randint(-128, 127)),
        maybe(rng.randint(0, 65535)),
        maybe(rng.randint(-(2**23), 2**23 - 1)),
        maybe(rng.randint(0, 2**64 - 1)),
        maybe(D(rng.randint(-(10**19) + 1, 10**19 - 1)).scaleb(-7)),
        maybe(D(rng.randint(-(10**9) + 1, 10**9 - 1)).scaleb(-9)),
        maybe(rng.uniform(-1e6, 1e6)),
        maybe(rng.choice([0, 1901, 2155, rng.randint(1901, 2155)])),
        maybe(day),
        maybe(
            f"{day} {rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}.{rng.randint(0, 9999):04d}"
        ),
        maybe(
            f"{dt.datetime.fromtimestamp(rng.randint(1, 2**31 - 1), UTC):%Y-%m-%d %H:%M:%S}.{rng.randint(0, 99):02d}"
        ),
        maybe(f"{hms}.{rng.randint(0, 99999):05d}"),
        maybe(hms),
        maybe("".join(rng.choice(_CHARS) for _ in range(rng.randint(0, 100)))),
        maybe("".join(rng.choice(_CHARS) for _ in range(rng.randint(0, 400)))),
        maybe(bytes(rng.choice([0, 1, 255]) for _ in range(rng.randint(0, 6)))),
        maybe(bytes(rng.randint(0, 255) for _ in range(rng.randint(0, 70)))),
        maybe(rng.choice(["one", "two", "three"])),
        maybe(",".join(m for m in "pqrstuvwxy" if rng.random() < 0.3)),
        maybe(rng.randint(0, 2**13 - 1)),
    )


RANDOM_ROW_CHANGES = 400 + 134 + 80
"""Row changes :func:`write_random_rows` logs: 400 inserts, 134 updates (id % 3 = 0), 80 deletes (id % 5 = 0)."""


def write_random_rows(server: LocalMariaDB, database: str, seed: int) -> tuple[str, int]:
    """Create table ``r`` (:data:`RANDOM_DDL`) and log random rows into it; return the binlog head before them.

    400 inserts in batches of 25 (one transaction each under autocommit), then one UPDATE of every third
    row and one DELETE of every fifth.
    """
    server.execute(RANDOM_DDL, database=database)
    rng = random.Random(seed)
    rows = [_random_row(rng, key) for key in range(400)]
    start = head(server)
    conn = pymysql.connect(**server.connection_kwargs(database=database))
    try:
        with conn.cursor() as cur:
            cur.execute("SET SESSION time_zone = '+00:00'")
            marks = ", ".join(["%s"] * len(rows[0]))
            for first in range(0, len(rows), 25):
                cur.executemany(f"INSERT INTO r VALUES ({marks})", rows[first : first + 25])
            cur.execute("UPDATE r SET vc = CONCAT(LEFT(IFNULL(vc, ''), 99), 'ü'), t = NULL WHERE id % 3 = 0")
            cur.execute("DELETE FROM r WHERE id % 5 = 0")
    finally:
        conn.close()
    return start


def test_random_rows_match_the_library_path(mariadb: LocalMariaDB, source_db: str) -> None:
    start = write_random_rows(mariadb, source_db, 20240229)
    events, _ = decoded(mariadb, start, source_db)
    library = through_library(mariadb, start, source_db)
    assert sum(len(rows) for _, _, rows in events) == RANDOM_ROW_CHANGES
    assert exact(events) == exact(library)


# --- mysql-replication's own type cases (reference data, when present) ----------------------------------

_LHS = re.compile(r'^(?P<wrap>round\(|type\()?event\.rows\[0\]\["values"\]\["(?P<column>\w+)"\]')
_CALLS = {
    "Decimal": decimal.Decimal,
    "datetime.datetime": dt.datetime,
    "datetime.date": dt.date,
    "datetime.timedelta": dt.timedelta,
    "type": type,
}
_OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul}


class Unevaluable(Exception):
    """An expected value that is not a literal (built by Python code in the original test)."""


def safe_eval(text: str) -> Any:
    """Evaluate an expected value made of literals, arithmetic and whitelisted constructors only."""
    return _evaluate(ast.parse(text.strip(), mode="eval").body)


def _evaluate(node: ast.AST) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_evaluate(node.operand)
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        return _OPERATORS[type(node.op)](_evaluate(node.left), _evaluate(node.right))
    if isinstance(node, ast.Call):
        function = _CALLS.get(ast.unparse(node.func))
        if function is None:
            raise Unevaluable(ast.unparse(node))
        return function(
            *[_evaluate(a) for a in node.args], **{k.arg: _evaluate(k.value) for k in node.keywords}
        )
    raise Unevaluable(ast.unparse(node))


def _reference_cases() -> list[Any]:
    if not CASES_FILE.exists():
        reason = f"{CASES_FILE} is absent (shared reference data, not part of the repository)"
        return [pytest.param(None, marks=pytest.mark.skip(reason=reason), id="reference-data-absent")]
    cases = json.loads(CASES_FILE.read_text())
    return [
        pytest.param(case, id=f"{index}-{case['test']}")
        for index, case in enumerate(cases)
        if not case["dynamic"] and case.get("mariadb_10_11") == "ok" and case.get("insert")
    ]


def _check_expectation(expectation: dict[str, str], columns: list[Any], row: list[Any]) -> None:
    """Assert one of the library's expectations on our row (skipping values built by Python code)."""
    match = _LHS.match(expectation["lhs"])
    assert match, expectation["lhs"]
    try:
        expected = safe_eval(expectation["expected_py"])
    except Unevaluable:
        return
    index = [c.name for c in columns].index(match["column"])
    actual = row[index]
    if match["wrap"] == "type(":
        assert type(actual) is expected, expectation
    elif match["wrap"] == "round(":
        assert round(actual, 2) == expected, expectation
    else:
        # The library's tests compare with ==: Decimal("4.20") passes for Decimal("4.2").
        staged = converter(columns[index])(expected, "null" if expected is None else None)
        assert (type(actual), actual) == (type(staged), staged), expectation


@pytest.mark.parametrize("case", _reference_cases())
def test_mysql_replication_type_cases(case: dict[str, Any], mariadb: LocalMariaDB, source_db: str) -> None:
    mariadb.execute(case["create"].strip().rstrip(";"), database=source_db)
    start = head(mariadb)
    mariadb.execute(case["insert"].strip().rstrip(";"), database=source_db)
    events, _ = decoded(mariadb, start, source_db)
    assert exact(events) == exact(through_library(mariadb, start, source_db))
    columns = next(iter(stream_events(mariadb, start, source_db))).columns
    for expectation in case["expected"] or []:
        _check_expectation(expectation, columns, events[0][2][0])


def test_value_error_names_its_column_in_any_image() -> None:
    columns = [
        Column(type=FIELD_TYPE.LONG, name="id", unsigned=False),
        Column(type=FIELD_TYPE.VARCHAR, name="a", max_length=10, character_set_name="utf8"),
        Column(type=FIELD_TYPE.VARCHAR, name="v", max_length=10, character_set_name="cp1250"),
    ]
    decoder = RowDecoder(columns)

    def image(key: int, text: bytes) -> bytes:
        return b"\x00" + struct.pack("<i", key) + b"\x01x" + bytes([len(text)]) + text

    good = image(1, b"\xb3\xf3d\x9f")  # cp1250 "łódź"
    assert decoder.decode_updates_bytes(good + good) == [([1, "x", "łódź"], [1, "x", "łódź"])]
    with pytest.raises(ValueConversionError, match=r"\?\.\?\.v \(varchar\(10\).*character set cp1250.*0x81"):
        decoder.decode_updates_bytes(good + good + good + image(2, b"a\x81"))
