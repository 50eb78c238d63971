"""Every character of every character set MariaDB offers stages as the server converts it, on both paths.

One private MariaDB for the module. For each set ``SHOW CHARACTER SET`` lists there is a table whose rows
hold, :data:`ROW_CHARS` characters a row, every character of the set: for the Unicode sets every scalar
value (the BMP without surrogates for ucs2 and utf8mb3), for the others every byte sequence of the shipped
table (``tests/integration/test_charset_tables.py`` shows the table holds every character the server has).
The rows are inserted as their bytes (``_cs X'...'``) in one window, which is extracted once through the
binlog path; each table is read once through the snapshot path. Both must equal the server's own
``CONVERT(v USING utf8mb4)`` of the stored value, character for character.

Bytes the server cannot convert (it returns ``?``, U+FFFD or ill-formed UTF-8 for them) are refused on
both paths: :func:`test_bytes_the_server_cannot_convert_are_refused_on_both_paths`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pytest
from test_snapshot_rows import Recorder, read_snapshot

from airflow_provider_binlog.exceptions import UndecodableValueError
from airflow_provider_binlog.extract.charsets import UNICODE, load_table
from airflow_provider_binlog.testing.mariadb import LocalMariaDB

pytestmark = pytest.mark.integration

MARIADB_SETS = (
    *("armscii8", "ascii", "big5", "binary", "cp1250", "cp1251", "cp1256", "cp1257", "cp850", "cp852"),
    *("cp866", "cp932", "dec8", "eucjpms", "euckr", "gb2312", "gbk", "geostd8", "greek", "hebrew", "hp8"),
    *("keybcs2", "koi8r", "koi8u", "latin1", "latin2", "latin5", "latin7", "macce", "macroman", "sjis"),
    *("swe7", "tis620", "ucs2", "ujis", "utf16", "utf16le", "utf32", "utf8mb3", "utf8mb4"),
)
"""``SHOW CHARACTER SET`` of MariaDB 10.11 (checked by :func:`test_the_matrix_is_every_character_set_of_the_server`)."""
TEXT_SETS = [cs for cs in MARIADB_SETS if cs != "binary"]
ROW_CHARS = 4096
"""Characters per row: 272 rows for utf32's 1,112,064."""
STATEMENT_BYTES = 4 << 20
"""At most this much SQL per INSERT (the server's max_allowed_packet is 16 MiB)."""


def characters(charset: str) -> list[bytes]:
    """Return the bytes of every character of ``charset``, in code order."""
    if charset == "binary":
        return [bytes([b]) for b in range(256)]
    if charset in UNICODE:
        top = 0x10000 if charset in ("ucs2", "utf8mb3") else 0x110000
        codec = UNICODE[charset]
        return [chr(cp).encode(codec) for cp in range(top) if not 0xD800 <= cp <= 0xDFFF]
    return sorted(load_table(charset).chars)


def rows_of(charset: str) -> list[bytes]:
    """Return the value of each row: :data:`ROW_CHARS` characters of the set, concatenated."""
    chars = characters(charset)
    return [b"".join(chars[at : at + ROW_CHARS]) for at in range(0, len(chars), ROW_CHARS)]


def inserts(table: str, charset: str, values: list[bytes]) -> Iterator[str]:
    """Yield ``INSERT`` statements of ``values`` (ids from 1) of at most :data:`STATEMENT_BYTES` each."""
    introducer = "" if charset == "binary" else f"_{charset} "
    batch: list[str] = []
    size = 0
    for row_id, value in enumerate(values, 1):
        literal = f"({row_id}, {introducer}X'{value.hex()}')"
        if batch and size + len(literal) > STATEMENT_BYTES:
            yield f"INSERT INTO `{table}` VALUES {', '.join(batch)}"
            batch, size = [], 0
        batch.append(literal)
        size += len(literal)
    if batch:
        yield f"INSERT INTO `{table}` VALUES {', '.join(batch)}"


@dataclass
class Matrix:
    """The module's database, the server's text of every row, and what the binlog path staged."""

    db: str
    server: dict[str, list[str | bytes]]
    """Per set, the server's ``CONVERT(v USING utf8mb4)`` of each row in id order (binary: the bytes)."""
    characters: dict[str, int]
    """Per set, the characters the server counts in its rows (``CHAR_LENGTH``)."""
    binlog: dict[str, pa.Table]
    """Per set, the rows the binlog path staged."""


@pytest.fixture(scope="module")
def mariadb() -> Iterator[LocalMariaDB]:
    """A private server for this module (overrides the session's ``mariadb``)."""
    with LocalMariaDB() as server:
        yield server


@pytest.fixture(scope="module")
def matrix(mariadb: LocalMariaDB, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Matrix]:
    """Write every set's table in one window, extract it once, and read the server's text of each row."""
    with pytest.MonkeyPatch.context() as patch, mariadb.scratch_database("charsets") as db:
        patch.setenv("AIRFLOW_CONN_BINLOG_DEFAULT", mariadb.uri())
        mariadb.execute(
            *(
                f"CREATE TABLE `{db}`.`t_{cs}` (id INT PRIMARY KEY, v {'MEDIUMBLOB' if cs == 'binary' else f'MEDIUMTEXT CHARACTER SET {cs}'})"
                for cs in MARIADB_SETS
            )
        )
        recorder = Recorder(Path(tmp_path_factory.mktemp("charsets")) / "staging")
        recorder.mark()
        for cs in MARIADB_SETS:
            mariadb.execute(*inserts(f"t_{cs}", cs, rows_of(cs)), database=db)
        _, binlog = recorder.extract({f"{db}.t_{cs}": ["id"] for cs in MARIADB_SETS})
        server: dict[str, list[str | bytes]] = {}
        counts = {}
        for cs in MARIADB_SETS:
            if cs == "binary":
                server[cs] = [
                    bytes(v) for (v,) in mariadb.execute(f"SELECT v FROM `{db}`.t_binary ORDER BY id")
                ]
                counts[cs] = sum(len(v) for v in server[cs])
                continue
            # The server's text as bytes, decoded strictly here: ill-formed UTF-8 from the server fails the test.
            converted = mariadb.execute(
                f"SELECT CAST(CONVERT(v USING utf8mb4) AS BINARY), CHAR_LENGTH(v) FROM `{db}`.`t_{cs}` ORDER BY id"
            )
            server[cs] = [bytes(text).decode("utf-8") for text, _ in converted]
            counts[cs] = sum(int(n) for _, n in converted)
        yield Matrix(db, server, counts, {name.split(".t_", 1)[1]: table for name, table in binlog.items()})


def test_the_matrix_is_every_character_set_of_the_server(mariadb: LocalMariaDB) -> None:
    assert sorted(str(row[0]) for row in mariadb.execute("SHOW CHARACTER SET")) == sorted(MARIADB_SETS)


@pytest.mark.parametrize("charset", MARIADB_SETS)
def test_every_character_stages_as_the_server_converts_it(
    charset: str, matrix: Matrix, mariadb: LocalMariaDB
) -> None:
    expected = matrix.server[charset]
    # Every character of the set is in the table, and the server has no '?' or U+FFFD for any of them.
    assert matrix.characters[charset] == len(characters(charset))
    assert sum(len(text) for text in expected) == len(characters(charset))
    binlog = matrix.binlog[charset].sort_by("id")
    assert binlog["id"].to_pylist() == list(range(1, len(expected) + 1))
    _, snapshot, _ = read_snapshot(mariadb, matrix.db, f"t_{charset}")
    for path, staged in (("binlog", binlog["v"].to_pylist()), ("snapshot", snapshot["v"].to_pylist())):
        assert len(staged) == len(expected), path
        for row_id, (got, want) in enumerate(zip(staged, expected, strict=True), 1):
            assert got == want, f"{path}, {charset} row {row_id}: {first_difference(got, want)}"


def first_difference(got: str | bytes, want: str | bytes) -> str:
    """Describe where ``got`` first differs from ``want`` (the rows are too long to print whole)."""
    at = next(
        (i for i, (a, b) in enumerate(zip(got, want, strict=False)) if a != b), min(len(got), len(want))
    )
    return f"at {at}: staged {got[at : at + 5]!r}, server {want[at : at + 5]!r} (lengths {len(got)}, {len(want)})"


REFUSED = [
    ("big5", "A2CC"),  # a duplicate code point: the server's table gives U+FFFD
    ("tis620", "DB"),  # unassigned: U+FFFD
    ("swe7", "80"),  # 7-bit: '?'
    ("cp1256", "8A"),  # cp1256 has U+0679 here, MariaDB's table none: '?'
    ("gbk", "A1A0"),  # '?'
    ("sjis", "F040"),  # user-defined area, not in MariaDB's sjis: '?'
    ("eucjpms", "8FA1A1"),  # '?'
    ("ucs2", "D83DDE00"),  # a surrogate pair is two surrogates in ucs2: ill-formed UTF-8
    ("utf32", "0000D800"),  # a surrogate: ill-formed UTF-8
]


@pytest.mark.parametrize(("charset", "stored"), REFUSED, ids=[cs for cs, _ in REFUSED])
def test_bytes_the_server_cannot_convert_are_refused_on_both_paths(
    charset: str, stored: str, mariadb: LocalMariaDB, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_BINLOG_DEFAULT", mariadb.uri())
    with mariadb.scratch_database("refused") as db:
        mariadb.execute(f"CREATE TABLE `{db}`.r (id INT PRIMARY KEY, v VARCHAR(5) CHARACTER SET {charset})")
        recorder = Recorder(tmp_path / "staging")
        recorder.mark()
        # A session that does not check stores the bytes as they are.
        mariadb.execute("SET SESSION sql_mode = ''", f"INSERT INTO r VALUES (1, X'{stored}')", database=db)
        ((raw, converted),) = mariadb.execute(
            f"SELECT HEX(v), CAST(CONVERT(v USING utf8mb4) AS BINARY) FROM `{db}`.r"
        )
        assert raw == stored
        try:
            text: str | None = bytes(converted).decode("utf-8")
        except UnicodeDecodeError:
            text = None  # ill-formed UTF-8 (a surrogate passed on)
        assert text in (None, "?", "\ufffd")  # the premise: the server cannot convert these bytes
        with pytest.raises(
            UndecodableValueError, match=rf"{db}\.r\.v .*character set {charset}.*UnicodeDecodeError"
        ):
            recorder.extract({f"{db}.r": ["id"]})
        with pytest.raises(
            ValueError, match=rf"column 'v' \(varchar\(\d+\), character set {charset}\).*UnicodeDecodeError"
        ):
            read_snapshot(mariadb, db, "r")
