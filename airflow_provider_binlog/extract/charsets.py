"""Decode the bytes of a text column exactly as the server converts them to Unicode.

A ``SELECT`` on a ``utf8mb4`` session returns the server's conversion of the stored bytes; the binlog
carries the stored bytes. Both paths stage the text :func:`text_decoder` gives for the stored bytes,
so they agree, and it is the text the server returns.

Where the decoding comes from:

- **Unicode encodings** (utf8mb4, utf8mb3, ucs2, utf16, utf16le, utf32, :data:`UNICODE`): Python's codec of
  the same encoding; ucs2 and utf8mb3 hold the Basic Multilingual Plane only, so a character above U+FFFF
  (a utf16 surrogate pair in ucs2, a 4-byte sequence in utf8mb3) is refused as the server refuses it.
- **Every other character set MariaDB offers**: the server's own table, :class:`CharsetTable`, shipped in
  ``charset_tables/<charset>.json.gz`` beside this module. ``scripts/charset_tables.py`` made each one by
  converting every byte sequence a character of the set can have (every byte, every two bytes, and for
  ujis/eucjpms every ``0x8F`` + two bytes) with ``CONVERT(CONVERT(bytes USING cs) USING utf8mb4)`` on
  MariaDB 10.11 (the server's tables are its ``strings/ctype-*.c``);
  ``tests/integration/test_charset_tables.py`` measures them again on a private server and compares.
  A single-byte set decodes through its 256-character table (``codecs.charmap_decode``); a multi-byte
  set through Python's codec of the same family (:data:`FAST_CODECS`) where that codec provably agrees
  with the table, and through the table (:func:`_walker`) for a value holding anything they disagree on.
- **gb18030** (MySQL 5.7+ only, MariaDB does not offer it): Python's ``gb18030`` codec, not measured.

A byte sequence the server has no character for is refused (:class:`UnicodeDecodeError`), never staged as
a guess: the server returns ``?`` for it, or U+FFFD (big5's duplicate code points 0xA2CC and 0xA2CE,
tis620's unassigned bytes), or ill-formed UTF-8 (a lone surrogate in ucs2/utf16/utf8mb3/utf8mb4).

Imports nothing from Airflow: this module runs inside Spark tasks (the tables are read with
:mod:`importlib.resources`, which also reads them from the zip shipped to Spark workers).
"""

from __future__ import annotations

import codecs
import functools
import gzip
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Union

HOLE = "\ufffe"
"""A table row's entry for a byte that ends no character (``codecs.charmap_decode`` refuses it)."""

TABLES = "charset_tables"
"""The folder of the shipped tables, beside this module (package data)."""

TABLE_FORMAT = 1
"""The version of the table file format (:meth:`CharsetTable.to_file`)."""

UNICODE: Mapping[str, str] = {
    "utf8mb4": "utf-8",
    "utf8mb3": "utf-8",
    "utf8": "utf-8",
    # MySQL manual, "The ucs2/utf16/utf16le/utf32 Character Set": big-endian except utf16le, no BOM.
    "ucs2": "utf-16-be",
    "utf16": "utf-16-be",
    "utf16le": "utf-16-le",
    "utf32": "utf-32-be",
}
"""Unicode character sets and the Python codec of their encoding (no table: the encodings are Unicode's)."""

BMP_ONLY = frozenset({"ucs2", "utf8mb3", "utf8"})
"""Unicode character sets whose characters stop at U+FFFF (MySQL manual, "The utf8mb3 Character Set")."""

MYSQL_ONLY: Mapping[str, str] = {"gb18030": "gb18030"}
"""Character sets only MySQL offers, decoded by a Python codec of the same standard without a table."""

FAST_CODECS: Mapping[str, str] = {
    "big5": "big5",
    "cp932": "cp932",
    "eucjpms": "euc_jp",
    "euckr": "cp949",  # MariaDB/MySQL euckr includes the cp949 (Unified Hangul Code) extension
    "gb2312": "gb2312",
    "gbk": "gbk",
    "sjis": "shift_jis",
    "ujis": "euc_jp",
}
"""Python codecs tried first for multi-byte tables: a speed-up only, used where they agree with the table."""

UTF8 = frozenset({"utf8mb4", "utf8mb3", "utf8"})
"""Character sets whose text the server sends to a ``utf8mb4`` session unchanged."""

Trie = list[Union[str, "Trie", None]]
"""A table as a tree of 256-entry lists: a byte leads to a character, to the next byte's list, or nowhere."""

_NON_BMP = re.compile("[\U00010000-\U0010ffff]")


class UnsupportedCharsetError(ValueError):
    """A character set this extractor has no decoding for."""


@dataclass(frozen=True)
class CharsetTable:
    """The server's conversion of one character set: every byte sequence it converts to one character.

    The table is prefix-free (no character's bytes begin another character's bytes), as the server's
    ``mb_wc`` functions read a character's length from its first bytes; a text is the characters of its
    bytes read from left to right.

    :param charset: the character set's name (``SHOW CHARACTER SET``).
    :param rows: byte prefix -> a row of 256 characters: entry ``b`` is the character of ``prefix + b``, or
        :data:`HOLE` when ``prefix + b`` is no character (the server returns ``?`` or U+FFFD for it, or it
        begins a longer character, whose row is then present).
    :param server: ``@@version`` of the server measured.
    """

    charset: str
    rows: Mapping[bytes, str]
    server: str

    @classmethod
    def from_chars(cls, charset: str, chars: Mapping[bytes, str], server: str) -> CharsetTable:
        """Return the table of ``chars`` (byte sequence -> the one character the server converts it to).

        :raises ValueError: when a character is :data:`HOLE` or not one character, or the table is not
            prefix-free.
        """
        rows: dict[bytes, list[str]] = {}
        for sequence, char in sorted(chars.items()):
            if len(char) != 1 or char == HOLE or not sequence:
                raise ValueError(f"{charset}: {sequence.hex()} -> {char!r} is not one character")
            rows.setdefault(sequence[:-1], [HOLE] * 256)[sequence[-1]] = char
        table = cls(charset, {prefix: "".join(row) for prefix, row in sorted(rows.items())}, server)
        table.trie()  # checks that the table is prefix-free
        return table

    @functools.cached_property
    def chars(self) -> dict[bytes, str]:
        """Return byte sequence -> character, for every character of the table."""
        return {
            prefix + bytes([byte]): char
            for prefix, row in self.rows.items()
            for byte, char in enumerate(row)
            if char != HOLE
        }

    def to_file(self) -> bytes:
        """Return the table file: gzip (mtime 0) of JSON ``{"charset", "format", "rows", "server"}``.

        ``rows`` maps each prefix in hex to its row; the same table gives the same bytes.
        """
        document = {
            "charset": self.charset,
            "format": TABLE_FORMAT,
            "rows": {prefix.hex(): row for prefix, row in sorted(self.rows.items())},
            "server": self.server,
        }
        text = json.dumps(document, ensure_ascii=False, sort_keys=True, separators=(",", ":"), indent=0)
        return gzip.compress(text.encode("utf-8"), compresslevel=9, mtime=0)

    @classmethod
    def from_file(cls, data: bytes) -> CharsetTable:
        """Read a table file written by :meth:`to_file`.

        :raises ValueError: for another format version or a row that is not 256 characters.
        """
        document = json.loads(gzip.decompress(data).decode("utf-8"))
        if document.get("format") != TABLE_FORMAT:
            raise ValueError(f"charset table format {document.get('format')!r}, expected {TABLE_FORMAT}")
        rows = {bytes.fromhex(prefix): row for prefix, row in document["rows"].items()}
        for prefix, row in rows.items():
            if len(row) != 256:
                raise ValueError(
                    f"{document['charset']}: row {prefix.hex()!r} has {len(row)} entries, not 256"
                )
        return cls(document["charset"], rows, document["server"])

    def trie(self) -> Trie:
        """Return the table as a :data:`Trie` (its root is the row of single bytes).

        :raises ValueError: when the table is not prefix-free (a row's prefix is a character).
        """
        root: Trie = [None] * 256
        for prefix, row in sorted(self.rows.items(), key=lambda item: len(item[0])):
            node = root
            for byte in prefix:
                child = node[byte]
                if child is None:
                    child = node[byte] = [None] * 256
                if isinstance(child, str):
                    raise ValueError(
                        f"{self.charset}: a character begins 0x{prefix.hex()}, which begins others"
                    )
                node = child
            for byte, char in enumerate(row):
                if char != HOLE:
                    if node[byte] is not None:
                        raise ValueError(
                            f"{self.charset}: 0x{(prefix + bytes([byte])).hex()} begins other characters"
                        )
                    node[byte] = char
        return root


@functools.cache
def table_names() -> frozenset[str]:
    """Return the character sets that have a shipped table (``charset_tables/<name>.json.gz``)."""
    folder = resources.files(__package__).joinpath(TABLES)
    return frozenset(
        entry.name.split(".")[0] for entry in folder.iterdir() if entry.name.endswith(".json.gz")
    )


@functools.cache
def load_table(charset: str) -> CharsetTable:
    """Return the shipped table of ``charset`` (measured on MariaDB 10.11 by ``scripts/charset_tables.py``).

    :raises UnsupportedCharsetError: when no table is shipped for ``charset``.
    """
    if charset not in table_names():
        raise UnsupportedCharsetError(f"no table of the character set {charset!r} is shipped")
    return CharsetTable.from_file(
        resources.files(__package__).joinpath(TABLES).joinpath(f"{charset}.json.gz").read_bytes()
    )


def text_decoder(charset: str) -> Callable[[bytes], str]:
    """Return ``decode(stored bytes) -> text`` of the server character set ``charset``.

    The text is what ``CONVERT(value USING utf8mb4)`` returns for the stored bytes on MariaDB 10.11 (the
    module docstring says where each set's decoding comes from). The function raises
    :class:`UnicodeDecodeError` (a :class:`ValueError`) for bytes the server has no character for (it
    returns ``?`` or U+FFFD for them, or ill-formed UTF-8); the error names the bytes and their position.

    :param charset: the MySQL/MariaDB character set name (``SHOW CHARACTER SET``), e.g. ``utf16``.
    :raises UnsupportedCharsetError: when the character set is unknown (a collation id nobody knows).
    """
    return _decoder(charset.lower())


@functools.cache
def _decoder(charset: str) -> Callable[[bytes], str]:
    if charset in UNICODE:
        return _unicode_decoder(charset)
    if charset in MYSQL_ONLY:
        codec = codecs.lookup(MYSQL_ONLY[charset]).decode
        return lambda raw: codec(raw, "strict")[0]
    if charset not in table_names():
        raise UnsupportedCharsetError(
            f"character set {charset!r} cannot be decoded: it is not a character set this extractor knows"
        )
    table = load_table(charset)
    root = table.trie()
    if all(node is None or isinstance(node, str) for node in root):
        row = table.rows[b""]
        return lambda raw: codecs.charmap_decode(raw, "strict", row)[0]
    walk = _walker(charset, root)
    if charset not in FAST_CODECS:
        return walk
    disagreeing = _disagreements(root, FAST_CODECS[charset])
    if disagreeing is None:
        return walk
    return _fast(codecs.lookup(FAST_CODECS[charset]).decode, disagreeing, walk)


def _unicode_decoder(charset: str) -> Callable[[bytes], str]:
    codec = codecs.lookup(UNICODE[charset])
    decode_codec = codec.decode
    if charset not in BMP_ONLY:
        return lambda raw: decode_codec(raw, "strict")[0]

    def decode(raw: bytes) -> str:
        text: str = decode_codec(raw, "strict")[0]
        if not text.isascii() and (found := _NON_BMP.search(text)):
            start = len(codec.encode(text[: found.start()])[0])
            raise UnicodeDecodeError(
                charset,
                bytes(raw),
                start,
                start + len(codec.encode(found[0])[0]),
                f"{charset} has no character above U+FFFF (U+{ord(found[0]):X})",
            )
        return text

    return decode


def _walker(charset: str, root: Trie) -> Callable[[bytes], str]:
    """Return the decoding of bytes by walking the table from left to right, as the server's ``mb_wc`` reads."""

    def decode(raw: bytes) -> str:
        out = []
        i, end = 0, len(raw)
        while i < end:
            node = root[raw[i]]
            j = i + 1
            while isinstance(node, list):
                if j == end:
                    node = None
                    break
                node = node[raw[j]]
                j += 1
            if node is None:
                raise UnicodeDecodeError(
                    charset, bytes(raw), i, j, f"the server has no character for 0x{bytes(raw[i:j]).hex()}"
                )
            out.append(node)
            i = j
        return "".join(out)

    return decode


def _fast(
    codec: Callable[[bytes, str], tuple[str, int]], disagreeing: frozenset[str], walk: Callable[[bytes], str]
) -> Callable[[bytes], str]:
    """Return the codec's decoding, or the table's for a value the codec refuses or decodes to a disputed character."""
    suspect = (
        re.compile("[" + "".join(re.escape(c) for c in sorted(disagreeing)) + "]") if disagreeing else None
    )
    # str.isascii() reads a flag of the string (constant time): ASCII text cannot hold a non-ASCII suspect.
    ascii_is_safe = not any(c.isascii() for c in disagreeing)

    def decode(raw: bytes) -> str:
        try:
            text = codec(raw, "strict")[0]
        except UnicodeDecodeError:
            return walk(raw)
        if suspect is not None and not (ascii_is_safe and text.isascii()) and suspect.search(text):
            return walk(raw)
        return text

    return decode


def _disagreements(root: Trie, codec_name: str) -> frozenset[str] | None:
    """Return the characters ``codec_name`` gives where the table gives another or none; None if unusable.

    Every unit the codec reads (a byte sequence it decodes to one character) is enumerated: every byte,
    and the continuations of every sequence the codec finds incomplete. A unit whose character differs from
    the table's character for the same bytes (or that the table does not have) puts the codec's character
    in the result. When the codec decodes a value without error and gives none of these characters, each
    of its units is a character of the table with the same text, so the table (prefix-free) reads the same
    units: the codec's text is the server's. A value the codec refuses goes to the table.

    Assumes a stateless codec (Python's CJK codecs other than the ISO-2022 family are). None when a unit
    decodes to more than one character (the argument above would not hold). Takes 0.05-0.5 s per codec,
    once per process.
    """
    decode = codecs.lookup(codec_name).decode
    incremental = codecs.getincrementaldecoder(codec_name)()
    disagreeing: set[str] = set()
    todo: list[bytes] = [b""]
    while todo:
        prefix = todo.pop()
        for byte in range(256):
            unit = prefix + bytes([byte])
            try:
                text = decode(unit, "strict")[0]
            except UnicodeDecodeError as err:
                # An incomplete unit's error runs to its end (CPython's multibytecodec.c, MBERR_TOOFEW): only
                # then can it be the beginning of a longer unit, which the incremental decoder tells.
                if err.end == len(unit) and _incomplete(incremental, unit):
                    todo.append(unit)
                continue
            if len(text) != 1:
                return None
            if _lookup(root, unit) != text:
                disagreeing.add(text)
    return frozenset(disagreeing)


def _incomplete(incremental: codecs.IncrementalDecoder, unit: bytes) -> bool:
    """Return whether a codec's incremental decoder waits for more bytes after ``unit``."""
    try:
        return incremental.decode(unit, final=False) == ""
    except UnicodeDecodeError:
        return False
    finally:
        incremental.reset()


def _lookup(root: Trie, unit: bytes) -> str | None:
    """Return the table's character for exactly the bytes ``unit``, or None."""
    node: str | Trie | None = root
    for byte in unit:
        if not isinstance(node, list):
            return None
        node = node[byte]
    return node if isinstance(node, str) else None
