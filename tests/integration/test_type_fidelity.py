"""Every column type stages the same Arrow type and value through the binlog path and the snapshot path.

One module-scoped database on the private MariaDB holds a table per type case. The rows are written
(inserted, some updated) between two binlog heads; the window between them is extracted once through
``extract_window`` (binlog path: RowDecoder + converters + batches), and each table is read once
through ``describe_columns``/``rows_to_batch`` (snapshot path). Each case compares the newest binlog
image of every row with the snapshot row, and both with the values written out by hand below.
"""

from __future__ import annotations

import datetime as dt
import decimal
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from airflow.sdk.exceptions import AirflowFailException
from test_snapshot_rows import Recorder, read_snapshot

from airflow_provider_binlog.exceptions import UndecodableValueError
from airflow_provider_binlog.testing.mariadb import LocalMariaDB

pytestmark = pytest.mark.integration

D = decimal.Decimal
TD = dt.timedelta
UTC = dt.timezone.utc


@dataclass
class Case:
    """One table: its columns (after ``id INT PRIMARY KEY``), rows, and the staged values expected.

    :param rows: SQL value tuples, ``id`` first.
    :param expected: the final row per id in id order, ``id`` first, as staged Python values.
    :param arrow: the staged Arrow type of each column after ``id``, in order.
    :param updates: statements run after the inserts (their after images are the newest).
    :param zero_dates: zero dates both paths count for the final rows (snapshot) and for all images.
    """

    table: str
    columns: str
    rows: list[str]
    expected: list[list[Any]]
    arrow: list[pa.DataType]
    updates: list[str] = field(default_factory=list)
    zero_dates: tuple[int, int] = (0, 0)


I64 = 2**63
CASES = [
    Case(
        "integers",
        "ti TINYINT, tu TINYINT UNSIGNED, si SMALLINT, su SMALLINT UNSIGNED, mi MEDIUMINT, mu MEDIUMINT UNSIGNED,"
        " i INT, iu INT UNSIGNED, bi BIGINT, bu BIGINT UNSIGNED",
        [
            "(1, -128, 0, -32768, 0, -8388608, 0, -2147483648, 0, -9223372036854775808, 0)",
            "(2, 127, 255, 32767, 65535, 8388607, 16777215, 2147483647, 4294967295, 9223372036854775807,"
            " 18446744073709551615)",
            "(3, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)",
        ],
        [
            [1, -128, 0, -32768, 0, -8388608, 0, -2147483648, 0, -I64, D(0)],
            [2, 127, 255, 32767, 65535, 8388607, 16777215, 2147483647, 4294967295, I64 - 1, D(2**64 - 1)],
            [3] + [None] * 10,
        ],
        [
            pa.int8(),
            pa.int16(),
            pa.int16(),
            pa.int32(),
            pa.int32(),
            pa.int32(),
            pa.int32(),
            pa.int64(),
            pa.int64(),
            pa.decimal128(20, 0),
        ],
    ),  # fmt: skip
    Case(
        "bits",
        "b1 BIT(1), b8 BIT(8), b13 BIT(13), b63 BIT(63), b64 BIT(64)",
        [
            "(1, 0, 0, 0, 0, 0)",
            f"(2, b'1', b'{'1' * 8}', b'{'1' * 13}', b'{'1' * 63}', b'{'1' * 64}')",
            f"(3, 1, 128, 4096, b'1{'0' * 62}', b'1{'0' * 63}')",
            "(4, NULL, NULL, NULL, NULL, NULL)",
        ],
        [
            [1, 0, 0, 0, 0, D(9223372036854775809)],
            [2, 1, 255, 8191, I64 - 1, D(18446744073709551615)],
            [3, 1, 128, 4096, 2**62, D(9223372036854775808)],
            [4, None, None, None, None, None],
        ],
        [pa.int64()] * 4 + [pa.decimal128(20, 0)],
        updates=[f"UPDATE bits SET b64 = b'1{'0' * 62}1' WHERE id = 1"],
    ),
    Case(
        "decimals",
        "d650 DECIMAL(65,0), d6530 DECIMAL(65,30), d3810 DECIMAL(38,10), d200 DECIMAL(20,0)",
        [
            f"(1, -{'9' * 65}, -{'9' * 35}.{'9' * 30}, -{'9' * 28}.{'9' * 10}, -{'9' * 20})",
            f"(2, {'9' * 65}, {'9' * 35}.{'9' * 30}, {'9' * 28}.{'9' * 10}, {'9' * 20})",
            "(3, 0, 0.000000000000000000000000000001, 0, 0)",
        ],
        [
            [
                1,
                "-" + "9" * 65,
                "-" + "9" * 35 + "." + "9" * 30,
                D("-" + "9" * 28 + "." + "9" * 10),
                D("-" + "9" * 20),
            ],
            [2, "9" * 65, "9" * 35 + "." + "9" * 30, D("9" * 28 + "." + "9" * 10), D("9" * 20)],
            [3, "0", "1E-30", D("0E-10"), D(0)],
        ],
        [pa.string(), pa.string(), pa.decimal128(38, 10), pa.decimal128(20, 0)],
    ),  # fmt: skip
    Case(
        "times",
        "t0 TIME, t3 TIME(3), t6 TIME(6), y YEAR",
        [
            "(1, '-838:59:59', '-838:59:58.999', '-838:59:58.999999', 0)",
            "(2, '838:59:59', '100:00:00.5', '24:00:00.000001', 1901)",
            "(3, '-00:00:01', '-00:00:00.001', '-25:30:00.250001', 2155)",
            "(4, '00:00:00', '-49:00:00.5', '-00:00:00.000001', 2024)",
        ],
        [
            [
                1,
                -TD(hours=838, minutes=59, seconds=59),
                -TD(hours=838, minutes=59, seconds=58, milliseconds=999),
                -TD(hours=838, minutes=59, seconds=58, microseconds=999999),
                0,
            ],
            [
                2,
                TD(hours=838, minutes=59, seconds=59),
                TD(hours=100, milliseconds=500),
                TD(hours=24, microseconds=1),
                1901,
            ],
            [3, -TD(seconds=1), -TD(milliseconds=1), -TD(hours=25, minutes=30, microseconds=250001), 2155],
            [4, TD(0), -TD(hours=49, milliseconds=500), -TD(microseconds=1), 2024],
        ],
        [pa.duration("us")] * 3 + [pa.int16()],
    ),  # fmt: skip
    Case(
        "zero_dates",
        "da DATE, dt DATETIME(3), ts TIMESTAMP NULL, ts6 TIMESTAMP(6) NULL",
        [
            "(1, '0000-00-00', '0000-00-00 00:00:00', '0000-00-00 00:00:00', '0000-00-00 00:00:00')",
            "(2, '2024-02-29', '2024-02-29 23:59:59.999', '1970-01-01 00:00:01', '2038-01-19 03:14:07.999999')",
            "(3, '2024-00-10', '2015-02-30 10:00:00', NULL, NULL)",
        ],
        [
            [1, None, None, dt.datetime(2000, 1, 1, tzinfo=UTC), None],
            [
                2,
                dt.date(2024, 2, 29),
                dt.datetime(2024, 2, 29, 23, 59, 59, 999000),
                dt.datetime(1970, 1, 1, 0, 0, 1, tzinfo=UTC),
                dt.datetime(2038, 1, 19, 3, 14, 7, 999999, tzinfo=UTC),
            ],
            [3, None, None, None, None],
        ],
        [pa.date32(), pa.timestamp("us"), pa.timestamp("us", tz="UTC"), pa.timestamp("us", tz="UTC")],
        # The binlog count includes the update's before image (4 zero values) and after image (3).
        updates=["UPDATE zero_dates SET ts = '2000-01-01 00:00:00' WHERE id = 1"],
        zero_dates=(5, 6 + 4 + 3),
    ),  # fmt: skip
    Case(
        "sets_enums",
        "s64 SET(" + ", ".join(f"'m{k}'" for k in range(64)) + "), e ENUM('small', 'médium', 'large')",
        [
            "(1, '', 'small')",
            "(2, '" + ",".join(f"m{k}" for k in range(64)) + "', 'médium')",
            "(3, 'm63,m0,m31', 'large')",
            "(4, NULL, NULL)",
        ],
        [
            [1, "", "small"],
            [2, ",".join(f"m{k}" for k in range(64)), "médium"],
            [3, "m0,m31,m63", "large"],
            [4, None, None],
        ],
        [pa.string(), pa.string()],
    ),
    Case(
        "documents",
        "js JSON, g GEOMETRY, pt POINT",
        [
            """(1, '{"k": [1, "é", 2.50, null], "😀": true}', ST_GeomFromText('POINT(1 2)', 4326), POINT(1, 1))""",
            "(2, '[]', ST_GeomFromText('LINESTRING(0 0, 1 1)'), POINT(-1.5, 0))",
            "(3, NULL, NULL, NULL)",
        ],
        [
            [
                1,
                '{"k": [1, "é", 2.50, null], "😀": true}',
                b"\xe6\x10\x00\x00\x01\x01\x00\x00\x00"
                + b"\x00\x00\x00\x00\x00\x00\xf0?"
                + b"\x00\x00\x00\x00\x00\x00\x00@",
                b"\x00\x00\x00\x00\x01\x01\x00\x00\x00" + b"\x00\x00\x00\x00\x00\x00\xf0?" * 2,
            ],
            [
                2,
                "[]",
                b"\x00\x00\x00\x00\x01\x02\x00\x00\x00\x02\x00\x00\x00"
                + b"\x00" * 16
                + b"\x00\x00\x00\x00\x00\x00\xf0?" * 2,
                b"\x00\x00\x00\x00\x01\x01\x00\x00\x00" + b"\x00\x00\x00\x00\x00\x00\xf8\xbf" + b"\x00" * 8,
            ],
            [3, None, None, None],
        ],
        [pa.string(), pa.binary(), pa.binary()],
    ),  # fmt: skip
    Case(
        "generated",
        "a INT, v BIGINT AS (a * 2) VIRTUAL, s VARCHAR(20) AS (CONCAT('x', a)) PERSISTENT, h INT INVISIBLE",
        ["(1, 5, DEFAULT, DEFAULT)", "(2, NULL, DEFAULT, DEFAULT)"],
        [[1, 6, 12, "x6", 9], [2, None, None, None, None]],
        [pa.int32(), pa.int64(), pa.string(), pa.int32()],
        updates=["UPDATE generated SET a = 6, h = 9 WHERE id = 1"],
    ),
    Case(
        "addresses",
        "ip4 INET4, ip6 INET6, u UUID",
        [
            "(1, '0.0.0.0', '::', '00000000-0000-0000-0000-000000000000')",
            "(2, '255.255.255.255', 'ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff', 'ffffffff-ffff-ffff-ffff-ffffffffffff')",
            "(3, '10.1.2.3', '::ffff:1.2.3.4', '6ccd780c-baba-1026-9564-5b8c656024db')",
            "(4, NULL, NULL, NULL)",
        ],
        [
            [1, b"\x00" * 4, b"\x00" * 16, b"\x00" * 16],
            [2, b"\xff" * 4, b"\xff" * 16, b"\xff" * 16],
            [
                3,
                b"\x0a\x01\x02\x03",
                b"\x00" * 10 + b"\xff\xff\x01\x02\x03\x04",
                bytes.fromhex("6ccd780cbaba102695645b8c656024db"),
            ],
            [4, None, None, None],
        ],
        [pa.binary()] * 3,
    ),  # fmt: skip
]

CHARSET_TEXT = {
    "utf8mb4": "héllo 😀",
    "utf8mb3": "héllo ñ€",
    "ucs2": "ĉé€ñ ÿ",
    "utf16": "é😀€ ž",
    "utf16le": "é😀€ ž",
    "utf32": "é😀€ ž",
    "latin1": "café €‰ ÿ",
    "latin2": "Łódź ő",
    "latin5": "İşğ ü",
    "latin7": "Ąžų ė",
    "ascii": "plain ~",
    "hebrew": "שלום",
    "greek": "Ελλάδα",
    "tis620": "ภาษาไทย",
    "koi8r": "Привет",
    "koi8u": "Привіт ї",
    "cp850": "Ñandú ÿ",
    "cp852": "Łódź ő",
    "cp866": "Привет",
    "cp1250": "Łódź ő",
    "cp1251": "Привет ђ",
    "cp1256": "مرحبا",
    "cp1257": "Ąžų ė",
    "macce": "Čeština",
    "macroman": "café ÿ",
    "sjis": "日本語ｱ",
    "cp932": "日本語①",
    "gbk": "中文汉字",
    "gb2312": "中文",
    "euckr": "한국어",
    "big5": "中文繁體",
    "ujis": "日本語テキスト",
    "eucjpms": "日本語①",
    "dec8": "Œuvre ñ ÿ",
    "hp8": "Ñandú Ç",
    "swe7": "Räksmörgås",
    "armscii8": "Հայերեն",
    "keybcs2": "Čeština ů",
    "geostd8": "ქართული",
}
"""Non-ASCII text every character set of MariaDB 10.11 can hold (gb18030 is MySQL only): every set
``SHOW CHARACTER SET`` lists but binary (:func:`test_the_charset_case_holds_every_character_set`)."""
ONCE_REFUSED = ("big5", "ujis", "eucjpms", "dec8", "hp8", "swe7", "armscii8", "keybcs2", "geostd8")
"""Character sets refused before the server's own tables were shipped (``extract/charset_tables/``)."""
CHARSET_BYTES = {
    "latin1": ("X'81809D'", "\x81€\x9d"),
    "koi8u": ("X'95'", "•"),
    "cp866": ("X'FCFD'", "ⁿ²"),
    "hebrew": ("X'AF'", "‾"),
    "greek": ("X'A1A2'", "ʽʼ"),
    "sjis": ("X'815F'", "\\"),
    "cp932": ("X'8740'", "①"),
    "utf16": ("X'FEFF0041'", "\ufeffA"),
    "big5": ("X'F9D6'", "碁"),  # ETEN extension: Python's big5 has no character there
    "ujis": ("X'A1C0F5A1'", "\\\ue000"),  # Python's euc_jp: U+FF3C, and no user-defined area
    "eucjpms": ("X'A1C1ADA1'", "～①"),  # Python's euc_jp: U+301C, and no NEC row 13
}
"""Stored bytes where the server's table differs from the plain Python codec, and the server's text."""


def _charset_case() -> Case:
    names = list(CHARSET_TEXT)
    columns = ", ".join(f"c_{cs} VARCHAR(20) CHARACTER SET {cs}" for cs in names)
    row_text = ", ".join(f"'{CHARSET_TEXT[cs]}'" for cs in names)
    row_bytes = ", ".join(f"_{cs} {CHARSET_BYTES[cs][0]}" if cs in CHARSET_BYTES else "''" for cs in names)
    bytes_text = [CHARSET_BYTES[cs][1] if cs in CHARSET_BYTES else "" for cs in names]
    return Case(
        "charsets",
        columns,
        [f"(1, {row_text})", f"(2, {', '.join(['NULL'] * len(names))})", f"(3, {row_bytes})"],
        [[1, *CHARSET_TEXT.values()], [2, *CHARSET_TEXT.values()], [3, *bytes_text]],
        [pa.string()] * len(names),
        updates=[
            f"UPDATE charsets a JOIN charsets b ON b.id = 1 SET {', '.join(f'a.c_{cs} = b.c_{cs}' for cs in names)}"
            " WHERE a.id = 2"
        ],
    )


CASES.append(_charset_case())
CASES.append(
    Case(
        "charset_members",
        "e1 ENUM('é', 'ü', 'a') CHARACTER SET latin1, s1 SET('€', 'b') CHARACTER SET latin1,"
        " e16 ENUM('é', '😀') CHARACTER SET utf16, s51 SET('ж', 'b') CHARACTER SET cp1251,"
        " e32 ENUM('é', 'x') CHARACTER SET utf32, esj ENUM('日本', 'b') CHARACTER SET sjis,"
        " e0 ENUM('', 'ÿ') CHARACTER SET latin1",
        ["(1, 'é', '€,b', '😀', 'ж', 'é', '日本', 'ÿ')", "(2, 'a', '', 'é', 'b', 'x', 'b', '')"],
        [[1, "é", "€,b", "😀", "ж", "é", "日本", "ÿ"], [2, "a", "", "é", "b", "x", "b", ""]],
        [pa.string()] * 7,
    )
)
CASES.append(
    Case(
        "charset_kinds",
        "u16c CHAR(4) CHARACTER SET utf16, u2c CHAR(4) CHARACTER SET ucs2, u32t TEXT CHARACTER SET utf32,"
        " l1c CHAR(4) CHARACTER SET latin1, sjt MEDIUMTEXT CHARACTER SET sjis, bn BINARY(3)",
        ["(1, 'é😀', 'ab ', 'é😀 ', 'é  ', '日本 ', 'a')", "(2, '', '', '', '', '', '')"],
        [[1, "é😀", "ab", "é😀 ", "é", "日本 ", b"a\x00\x00"], [2, "", "", "", "", "", b"\x00\x00\x00"]],
        [pa.string()] * 5 + [pa.binary()],
    )
)


@dataclass
class Staged:
    """What both paths staged for one table."""

    binlog: pa.Table
    snapshot: pa.Table
    binlog_types: list[pa.DataType]
    snapshot_types: list[pa.DataType]
    binlog_zero_dates: int
    snapshot_zero_dates: int
    name: str
    """``db.table``."""
    window_uri: str
    """The staged window holding the table's changes (all cases share it)."""


@pytest.fixture(scope="module")
def mariadb() -> Iterator[LocalMariaDB]:
    """A private server for this module, shared by its cases (overrides the session's ``mariadb``)."""
    with LocalMariaDB() as server:
        yield server


@pytest.fixture(scope="module")
def staged(mariadb: LocalMariaDB, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Staged]]:
    """Write every case's rows in one window, extract it once, snapshot every table once."""
    with pytest.MonkeyPatch.context() as patch, mariadb.scratch_database("types") as db:
        patch.setenv("AIRFLOW_CONN_BINLOG_DEFAULT", mariadb.uri())
        mariadb.execute(
            *(
                f"CREATE TABLE `{db}`.`{c.table}` (id INT PRIMARY KEY, {c.columns}) DEFAULT CHARSET=utf8mb4"
                for c in CASES
            )
        )
        recorder = Recorder(Path(tmp_path_factory.mktemp("types")) / "staging")
        recorder.mark()
        statements = [f"INSERT INTO `{c.table}` VALUES {', '.join(c.rows)}" for c in CASES]
        mariadb.execute(
            "SET SESSION sql_mode = ''",
            "SET SESSION time_zone = '+00:00'",
            *statements,
            *(u for c in CASES for u in c.updates),
            database=db,
        )
        manifest, tables = recorder.extract({f"{db}.{c.table}": ["id"] for c in CASES})
        out = {}
        for case in CASES:
            name = f"{db}.{case.table}"
            specs, snapshot, zero = read_snapshot(mariadb, db, case.table)
            staged_rows = tables[name]
            newest = pc.max(staged_rows["_binlog_seq"]).as_py()
            assert newest is not None
            # The newest image of each id (the table's rows are never deleted here).
            order = staged_rows.sort_by([("id", "ascending"), ("_binlog_seq", "descending")])
            keep, seen = [], set()
            for index, key in enumerate(order["id"].to_pylist()):
                if key not in seen:
                    seen.add(key)
                    keep.append(index)
            names = [s["name"] for s in specs]
            binlog = order.take(keep).select(names)
            entry = manifest["tables"][name]
            out[case.table] = Staged(
                binlog=binlog,
                snapshot=snapshot,
                binlog_types=[binlog.schema.field(n).type for n in names],
                snapshot_types=[snapshot.schema.field(n).type for n in names],
                binlog_zero_dates=entry["zero_dates"],
                snapshot_zero_dates=zero,
                name=name,
                window_uri=str(recorder.staging / "test" / "window=1"),
            )
            assert entry["columns"] == specs
        yield out


@pytest.mark.parametrize("case", CASES, ids=[c.table for c in CASES])
def test_both_paths_stage_the_expected_values(case: Case, staged: dict[str, Staged]) -> None:
    got = staged[case.table]
    assert got.binlog_types == got.snapshot_types == [pa.int32(), *case.arrow]
    binlog_rows = [list(r.values()) for r in got.binlog.to_pylist()]
    snapshot_rows = [list(r.values()) for r in got.snapshot.to_pylist()]
    mismatches = [
        (row[0], index, value, other)
        for row, other_row in zip(binlog_rows, snapshot_rows, strict=True)
        for index, (value, other) in enumerate(zip(row, other_row, strict=True))
        if (type(value), value) != (type(other), other)
    ]
    assert mismatches == []
    assert exact(binlog_rows) == exact(case.expected)
    assert (got.snapshot_zero_dates, got.binlog_zero_dates) == case.zero_dates


def exact(value: Any) -> Any:
    """Return a form of ``value`` that compares types and representations, not only equality."""
    if isinstance(value, list | tuple):
        return [exact(v) for v in value]
    if isinstance(value, dt.datetime):  # Arrow gives zoneinfo's UTC, the expectations datetime's
        return ("datetime", value.isoformat())
    return (type(value).__name__, repr(value))


# --- values that are refused, character sets that no longer are --------------------------------------------


def test_undefined_bytes_are_refused_on_both_paths(
    connections: LocalMariaDB, source_db: str, tmp_path: Path
) -> None:
    # cp1250 has no character for 0x81 and ascii none for 0xC3; the server stores them anyway and a SELECT
    # returns '?', so both paths refuse the value instead of staging '?'.
    connections.execute(
        f"CREATE TABLE `{source_db}`.w (id INT PRIMARY KEY, v VARCHAR(5) CHARACTER SET cp1250,"
        " a VARCHAR(5) CHARACTER SET ascii)"
    )
    recorder = Recorder(tmp_path / "staging")
    recorder.mark()
    connections.execute(
        f"INSERT INTO `{source_db}`.w VALUES (1, 'ok', 'ok')",
        f"INSERT INTO `{source_db}`.w VALUES (2, X'4181', 'ok')",
    )
    gtid = str(connections.execute("SELECT @@gtid_binlog_pos")[0][0])
    file, end = connections.execute("SHOW MASTER STATUS")[0][:2]
    with pytest.raises(UndecodableValueError) as raised:
        recorder.extract({f"{source_db}.w": ["id"]})
    message = str(raised.value)
    assert isinstance(raised.value, AirflowFailException)
    assert f"pipeline 'test', window 1: cannot stage a value of column {source_db}.w.v (varchar(5)" in message
    assert "character set cp1250, at most 5 bytes" in message
    assert f"GTID {gtid})" in message
    # The row event of the second INSERT ends before its transaction's commit event, at most ~100 bytes earlier.
    event_pos = int(message.split(f"row event ending at {file}:", 1)[1].split(" ", 1)[0])
    assert end - 100 < event_pos < end
    assert "UnicodeDecodeError" in message
    assert "0x81" in message
    assert "docs/types.md" in message
    with pytest.raises(ValueError, match=r"column 'v' \(varchar\(5\), character set cp1250\).*0x81"):
        read_snapshot(connections, source_db, "w")


def test_the_charset_case_holds_every_character_set(mariadb: LocalMariaDB) -> None:
    offered = {str(row[0]) for row in mariadb.execute("SHOW CHARACTER SET")}
    assert set(CHARSET_TEXT) == offered - {"binary"}


@pytest.mark.parametrize("charset", ONCE_REFUSED)
def test_charsets_once_refused_decode_on_both_paths(
    charset: str, connections: LocalMariaDB, source_db: str, tmp_path: Path
) -> None:
    # Text and ENUM/SET member names (read from the table map) in the set, as the server converts them.
    text = CHARSET_TEXT[charset]
    connections.execute(
        f"CREATE TABLE `{source_db}`.r (id INT PRIMARY KEY, v VARCHAR(20) CHARACTER SET {charset},"
        f" e ENUM('{text}', 'b') CHARACTER SET {charset}, s SET('b', '{text}') CHARACTER SET {charset})"
    )
    recorder = Recorder(tmp_path / "staging")
    recorder.mark()
    connections.execute(
        f"INSERT INTO `{source_db}`.r VALUES (1, '{text}', '{text}', 'b,{text}'), (2, 'a', 'b', '')"
    )
    server = connections.execute(
        f"SELECT id, CONVERT(v USING utf8mb4), CONVERT(e USING utf8mb4), CONVERT(s USING utf8mb4)"
        f" FROM `{source_db}`.r ORDER BY id"
    )
    expected = [[1, text, text, f"b,{text}"], [2, "a", "b", ""]]
    assert [list(row) for row in server] == expected
    _, tables = recorder.extract({f"{source_db}.r": ["id"]})
    binlog = tables[f"{source_db}.r"].sort_by("id").select(["id", "v", "e", "s"])
    _, snapshot, _ = read_snapshot(connections, source_db, "r")
    assert [list(r.values()) for r in binlog.to_pylist()] == expected
    assert [list(r.values()) for r in snapshot.to_pylist()] == expected


# --- through the merge into Delta --------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["spark", "driver"])
def test_merged_target_reads_back_the_expected_values(
    staged: dict[str, Staged], spark: Any, tmp_path: Path, engine: str
) -> None:
    from airflow_provider_binlog.jobs.merge.job import merge_window
    from airflow_provider_binlog.target import read_table

    some = next(iter(staged.values()))
    limit = 0 if engine == "spark" else 10_000
    summary = merge_window(
        spark, some.window_uri, str(tmp_path / "target"), pipeline="test", driver_max_rows=limit
    )
    assert {t["engine"] for t in summary["tables"].values()} == {engine}
    for case in CASES:
        got = staged[case.table]
        table = read_table(str(tmp_path / "target"), got.name).sort_by("id")
        assert [f.type for f in table.schema] == [pa.int32(), *case.arrow], case.table
        rows = [list(r.values()) for r in table.to_pylist()]
        assert exact(rows) == exact(case.expected), case.table
