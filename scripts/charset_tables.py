"""Measure how a server converts every character of every character set; write the shipped tables.

    python scripts/charset_tables.py            # a private MariaDB (LocalMariaDB); the tables are rewritten
    python scripts/charset_tables.py --check    # compare with the shipped tables and the decoders, write nothing
    python scripts/charset_tables.py --report   # also print how Python's codecs differ from the server
    python scripts/charset_tables.py --uri mysql://user:password@host:3306   # measure a running server

For each character set ``SHOW CHARACTER SET`` lists, byte sequences (:func:`probes`) are converted by the
server with ``CONVERT(CONVERT(bytes USING cs) USING utf8mb4)``, in bulk: the numbers come from a recursive
CTE, the results are fetched with mysqlclient.

- Sets that are not Unicode: every byte sequence a character can have. A sequence the server converts
  to exactly one character is a character of the set (:func:`server_char`); ``?`` (unless the sequence is
  the set's own ``?``), U+FFFD, ill-formed UTF-8 and several characters are not. These are the tables
  written to ``airflow_provider_binlog/extract/charset_tables/``
  (:class:`~airflow_provider_binlog.extract.charsets.CharsetTable`).
- Unicode sets (no table: their encodings are Unicode's): the encoding of every code point of the set,
  compared with the decoder in chunks of :data:`CHUNK`, and the sequences the server must refuse (lone
  surrogates, overlong and out-of-range UTF-8, code points above U+10FFFF, characters above U+FFFF in the
  BMP-only sets), one by one.

Every probe is also decoded with :func:`~airflow_provider_binlog.extract.charsets.text_decoder` and
compared with the server (:func:`check_charset`); ``tests/integration/test_charset_tables.py`` runs the
same check. Measured on MariaDB 10.11; the SQL also runs on MySQL 8, which has not been measured.
"""

from __future__ import annotations

import argparse
import sys
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import MySQLdb

from airflow_provider_binlog.extract.charsets import (
    FAST_CODECS,
    TABLES,
    UNICODE,
    CharsetTable,
    UnsupportedCharsetError,
    load_table,
    table_names,
    text_decoder,
)
from airflow_provider_binlog.testing.mariadb import LocalMariaDB

TABLE_DIR = Path(__file__).resolve().parent.parent / "airflow_provider_binlog" / "extract" / TABLES
CHUNK = 4096
"""Characters of a code point probe decoded at once (the decoder is compared with the server per chunk)."""
NOT_MEASURED = {"binary": "bytes, not text", "gb18030": "MySQL only: Python's gb18030 codec, not measured"}


@dataclass(frozen=True)
class Probe:
    """Byte sequences to convert: ``sql`` (an expression of ``k``) for each ``k`` in ``0..count-1`` where ``where``.

    :param characters: every sequence is one character of the set by definition (a code point's encoding):
        compared with the decoder a chunk at a time. Otherwise each sequence is compared by itself.
    """

    what: str
    count: int
    sql: str
    where: str = "TRUE"
    characters: bool = False


def _utf8(cp: str) -> str:
    """Return SQL for the UTF-8 bytes of the code point ``cp`` (an SQL expression); RFC 3629."""
    c = f"({cp})"
    return (
        f"CASE WHEN {c} < 128 THEN CHAR({c} USING binary)"
        f" WHEN {c} < 2048 THEN CHAR(192 + ({c} >> 6), 128 + ({c} & 63) USING binary)"
        f" WHEN {c} < 65536 THEN CHAR(224 + ({c} >> 12), 128 + (({c} >> 6) & 63), 128 + ({c} & 63) USING binary)"
        f" ELSE CHAR(240 + ({c} >> 18), 128 + (({c} >> 12) & 63), 128 + (({c} >> 6) & 63), 128 + ({c} & 63)"
        " USING binary) END"
    )


def _utf16(cp: str, little: bool) -> str:
    """Return SQL for the UTF-16 bytes of the code point ``cp``, big- or little-endian; RFC 2781."""

    def unit(u: str) -> str:
        return f"({u}) & 255, ({u}) >> 8" if little else f"({u}) >> 8, ({u}) & 255"

    c = f"({cp})"
    high, low = f"55296 + (({c} - 65536) >> 10)", f"56320 + (({c} - 65536) & 1023)"
    return f"CASE WHEN {c} < 65536 THEN CHAR({unit(c)} USING binary) ELSE CHAR({unit(high)}, {unit(low)} USING binary) END"


NOT_SURROGATE = "k NOT BETWEEN 55296 AND 57343"
SURROGATES = "k BETWEEN 55296 AND 57343"
BYTES = Probe("every byte", 256, "CHAR(k USING binary)")
TWO_BYTES = Probe("every two bytes", 65536, "CHAR(k >> 8, k & 255 USING binary)")
# strings/ctype-ujis.c, ctype-eucjpms.c: 0x8F (SS3) leads the three-byte JIS X 0212 characters.
SS3 = Probe("0x8F and every two bytes", 65536, "CHAR(143, k >> 8, k & 255 USING binary)")
UTF8_INVALID = [
    Probe("bytes 0x80..0xFF alone", 256, "CHAR(k USING binary)", "k >= 128"),
    Probe("overlong two bytes", 128, "CHAR(192 + (k >> 6), 128 + (k & 63) USING binary)"),
    Probe("overlong three bytes", 2048, "CHAR(224, 128 + (k >> 6), 128 + (k & 63) USING binary)"),
    Probe("surrogates", 65536, _utf8("k"), SURROGATES),
    Probe(
        "overlong four bytes",
        65536,
        "CHAR(240, 128 + (k >> 12), 128 + ((k >> 6) & 63), 128 + (k & 63) USING binary)",
    ),
    Probe(
        "above U+10FFFF",
        48 << 12,
        "CHAR(244, 144 + (k >> 12), 128 + ((k >> 6) & 63), 128 + (k & 63) USING binary)",
    ),
    Probe("leads 0xF5..0xFF", 11, "CHAR(245 + k, 128, 128, 128 USING binary)"),
]
UNICODE_PROBES: dict[str, list[Probe]] = {
    "utf8mb4": [Probe("every code point", 0x110000, _utf8("k"), NOT_SURROGATE, True), *UTF8_INVALID],
    "utf8mb3": [
        Probe("every code point", 0x10000, _utf8("k"), NOT_SURROGATE, True),
        *UTF8_INVALID,
        Probe("every 17th code point above U+FFFF", 0xF0000 // 17, _utf8("65536 + k * 17")),
    ],
    "ucs2": [
        Probe("every code point", 0x10000, "CHAR(k >> 8, k & 255 USING binary)", NOT_SURROGATE, True),
        Probe("surrogates", 0x10000, "CHAR(k >> 8, k & 255 USING binary)", SURROGATES),
        Probe(  # each high surrogate with the first and the last low surrogate
            "surrogate pairs",
            2048,
            "CHAR(216 + (k >> 9), (k >> 1) & 255, 220 + (k & 1) * 3, (k & 1) * 255 USING binary)",
        ),
    ],
    "utf16": [
        Probe("every code point", 0x110000, _utf16("k", little=False), NOT_SURROGATE, True),
        Probe("surrogates", 0x10000, "CHAR(k >> 8, k & 255 USING binary)", SURROGATES),
    ],
    "utf16le": [
        Probe("every code point", 0x110000, _utf16("k", little=True), NOT_SURROGATE, True),
        Probe("surrogates", 0x10000, "CHAR(k & 255, k >> 8 USING binary)", SURROGATES),
    ],
    "utf32": [
        Probe(
            "every code point",
            0x110000,
            "CHAR(0, k >> 16, (k >> 8) & 255, k & 255 USING binary)",
            NOT_SURROGATE,
            True,
        ),
        Probe("surrogates", 0x10000, "CHAR(0, 0, k >> 8, k & 255 USING binary)", SURROGATES),
        Probe(
            "U+110000..U+11FFFF",
            0x120000,
            "CHAR(0, k >> 16, (k >> 8) & 255, k & 255 USING binary)",
            "k >= 1114112",
        ),
    ],
}
"""Probes of the Unicode sets: every code point's encoding, and what the server must refuse."""


def probes(charset: str, maxlen: int) -> list[Probe]:
    """Return the byte sequences to convert for ``charset`` (``maxlen``: bytes per character at most).

    Sets that are not Unicode: every byte; for ``maxlen`` 2 (big5, cp932, euckr, gb2312, gbk, sjis) also
    every two bytes; ujis and eucjpms also 0x8F and every two bytes (MariaDB's ``strings/ctype-*.c``).

    :raises ValueError: for a set whose byte structure this script does not know.
    """
    if charset in UNICODE_PROBES:
        return UNICODE_PROBES[charset]
    if maxlen == 1:
        return [BYTES]
    if maxlen == 2:
        return [BYTES, TWO_BYTES]
    if charset in ("ujis", "eucjpms"):
        return [BYTES, TWO_BYTES, SS3]
    raise ValueError(f"no probes for {charset} (maxlen {maxlen}): add its byte structure to probes()")


def character_sets(cursor: Any) -> dict[str, int]:
    """Return ``SHOW CHARACTER SET`` as name -> maximum bytes per character."""
    cursor.execute("SHOW CHARACTER SET")
    return {str(row[0]): int(row[3]) for row in cursor.fetchall()}


def server_char(charset: str, probe: bytes, text: str | None, question: bytes) -> str | None:
    """Return the one character the server converted ``probe`` to, or None when it is not one character.

    :param text: the server's conversion (``utf8mb4`` decoded with ``surrogatepass``), None if ill-formed.
    :param question: the server's bytes of ``?`` in ``charset`` (the one probe whose ``?`` is a character).
    """
    if text is None or len(text) != 1 or 0xD800 <= ord(text) <= 0xDFFF:
        return None
    if text == "?" and probe != question:
        return None
    if text == "\ufffd" and charset not in UNICODE:  # big5, tis620: the server's table has no character
        return None
    return text


def measure(cursor: Any, charset: str, probe: Probe) -> list[tuple[bytes, bytes]]:
    """Return each sequence of ``probe`` with the server's ``utf8mb4`` bytes for it, in no particular order.

    :param cursor: a cursor of a ``utf8mb4`` session (mysqlclient, which fetches a million rows in a second).
    """
    high = (probe.count - 1) >> 16
    cursor.execute(
        "WITH RECURSIVE b(n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM b WHERE n < 255)"
        f" SELECT c, CAST(CONVERT(CONVERT(c USING {charset}) USING utf8mb4) AS BINARY) FROM"
        f" (SELECT k, {probe.sql} AS c FROM"
        f" (SELECT x.n * 65536 + y.n * 256 + z.n AS k FROM b AS x, b AS y, b AS z WHERE x.n <= {high}) AS n"
        f" WHERE k < {probe.count} AND ({probe.where})) AS p"
    )
    return [(bytes(c), bytes(u)) for c, u in cursor.fetchall()]


def _text(converted: bytes) -> str | None:
    try:
        return converted.decode("utf-8", "surrogatepass")  # the server passes lone surrogates on
    except UnicodeDecodeError:
        return None


@dataclass
class Measured:
    """What :func:`check_charset` found for one character set."""

    charset: str
    probes: int = 0
    """Byte sequences converted by the server."""
    characters: int = 0
    """Of them, characters of the set."""
    table: CharsetTable | None = None
    """The server's table (sets that are not Unicode)."""
    differences: list[tuple[bytes, str | None, str | None]] = field(default_factory=list)
    """Where the decoder differs from the server: ``(bytes, server's text, decoder's text or None)``."""


def check_charset(cursor: Any, charset: str, maxlen: int) -> Measured:
    """Convert every probe of ``charset`` with the server; build its table and compare the decoder with it.

    A probe the server converts to one character must decode to it; any other probe must be refused by the
    decoder, or decode to exactly the server's text (several characters, as ``AB``). A chunk of code points
    must decode to the server's text of the chunk.
    """
    cursor.execute(f"SELECT HEX(CONVERT('?' USING {charset})), @@version")
    question_hex, version = cursor.fetchone()
    question = bytes.fromhex(question_hex)
    try:
        decode = text_decoder(charset)
    except UnsupportedCharsetError:  # no table shipped yet: every probe is a difference
        decode = _refuse_all
    found = Measured(charset)
    chars: dict[bytes, str] = {}
    for probe in probes(charset, maxlen):
        results = measure(cursor, charset, probe)
        found.probes += len(results)
        if probe.characters:  # each is one character: compared CHUNK characters at a time
            found.characters += len(results)
            for at in range(0, len(results), CHUNK):
                chunk = results[at : at + CHUNK]
                raw, text = b"".join(c for c, _ in chunk), _text(b"".join(u for _, u in chunk))
                decoded = _decoded(decode, raw)
                if decoded != text:  # name the characters, or the chunk when each alone agrees
                    each = [(c, _text(u), _decoded(decode, c)) for c, u in chunk]
                    found.differences += [d for d in each if d[1] != d[2]] or [(raw, text, decoded)]
            continue
        for raw, converted in results:
            text = _text(converted)
            char = server_char(charset, raw, text, question)
            decoded = _decoded(decode, raw)
            if char is not None:
                chars[raw] = char
                found.characters += 1
            # A probe of several characters (``AB``) decodes to the server's text; any other probe that is not
            # one character of the set must be refused.
            several = char is None and decoded is not None and decoded == text and len(decoded) > 1
            if char != decoded and not several:
                found.differences.append((raw, text, decoded))
    if charset not in UNICODE:
        found.table = CharsetTable.from_chars(charset, chars, str(version))
    return found


def _refuse_all(raw: bytes) -> str:
    raise UnicodeDecodeError("none", raw, 0, len(raw), "no decoder")


def _decoded(decode: Any, raw: bytes) -> str | None:
    try:
        return str(decode(raw))
    except UnicodeDecodeError:
        return None


def codec_differences(table: CharsetTable, codec: str) -> dict[str, list[tuple[str, str | None, str | None]]]:
    """Return how Python's ``codec`` differs from the server's table, by kind, as ``(hex, server, codec)``.

    Kinds: ``other character`` (both decode the bytes, to different characters), ``server only`` (the codec
    refuses bytes the server converts), ``codec only`` (the server has no character for bytes the codec
    decodes to one character). Sequences compared: the table's, every byte, every two bytes led by
    0x80..0xFF, and for ujis/eucjpms every 0x8F + two bytes.
    """
    kinds: dict[str, list[tuple[str, str | None, str | None]]] = {
        "other character": [],
        "server only": [],
        "codec only": [],
    }
    sequences = set(table.chars) | {bytes([b]) for b in range(256)}
    sequences |= {bytes([a, b]) for a in range(128, 256) for b in range(256)}
    if table.charset in ("ujis", "eucjpms"):
        sequences |= {bytes([0x8F, a, b]) for a in range(256) for b in range(256)}
    for raw in sorted(sequences):
        try:
            decoded: str | None = raw.decode(codec)
        except UnicodeDecodeError:
            decoded = None
        if decoded is not None and len(decoded) != 1:
            continue
        server = table.chars.get(raw)
        if decoded != server:
            kind = "other character" if decoded and server else "server only" if server else "codec only"
            kinds[kind].append((raw.hex(), server, decoded))
    return kinds


REPORT_CODECS = {
    **FAST_CODECS,
    "latin1": "cp1252",
    "latin2": "iso8859_2",
    "latin5": "iso8859_9",
    "latin7": "iso8859_13",
    "ascii": "ascii",
    "hebrew": "iso8859_8",
    "greek": "iso8859_7",
    "tis620": "tis_620",
    "koi8r": "koi8_r",
    "koi8u": "koi8_u",
    "cp850": "cp850",
    "cp852": "cp852",
    "cp866": "cp866",
    "cp1250": "cp1250",
    "cp1251": "cp1251",
    "cp1256": "cp1256",
    "cp1257": "cp1257",
    "macce": "mac_latin2",
    "macroman": "mac_roman",
}
"""The Python codec nearest to each set, for ``--report`` (the tables decode the single-byte sets)."""


def _connect(uri: str | None, stack: ExitStack) -> Any:
    if uri is None:
        server = stack.enter_context(LocalMariaDB())
        return MySQLdb.connect(**server.connection_kwargs(charset="utf8mb4"))
    parts = urlsplit(uri)
    return MySQLdb.connect(
        host=parts.hostname or "127.0.0.1",
        port=parts.port or 3306,
        user=unquote(parts.username or "root"),
        password=unquote(parts.password or ""),
        charset="utf8mb4",
        autocommit=True,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n", 1)[0])
    parser.add_argument(
        "--uri", help="mysql://user:password@host:port of a running server (default: a private MariaDB)"
    )
    parser.add_argument("--check", action="store_true", help="compare with the shipped tables; write nothing")
    parser.add_argument(
        "--report", action="store_true", help="print how Python's codecs differ from the server"
    )
    parser.add_argument("--output", type=Path, default=TABLE_DIR, help="where to write the tables")
    args = parser.parse_args(argv)
    failures = 0
    with ExitStack() as stack:
        conn = _connect(args.uri, stack)
        stack.callback(conn.close)
        cursor = conn.cursor()
        for charset, maxlen in sorted(character_sets(cursor).items()):
            if charset in NOT_MEASURED:
                print(f"{charset}: not measured ({NOT_MEASURED[charset]})")
                continue
            found = check_charset(cursor, charset, maxlen)
            print(
                f"{charset}: {found.probes} probes, {found.characters} characters,"
                f" the decoder differs on {len(found.differences)}: {found.differences[:3]}"
            )
            failures += bool(found.differences)
            if found.table is None:
                continue
            if args.report and charset in REPORT_CODECS:
                for kind, items in codec_differences(found.table, REPORT_CODECS[charset]).items():
                    if items:
                        print(f"    {REPORT_CODECS[charset]}, {kind}: {len(items)}, e.g. {items[:6]}")
            if args.check:
                shipped = load_table(charset).chars if charset in table_names() else {}
                if shipped != found.table.chars:
                    changed = sorted(set(shipped.items()) ^ set(found.table.chars.items()))
                    print(f"    differs from the shipped table in {len(changed)} entries, e.g. {changed[:5]}")
                    failures += 1
            else:
                args.output.mkdir(parents=True, exist_ok=True)
                (args.output / f"{charset}.json.gz").write_bytes(found.table.to_file())
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
