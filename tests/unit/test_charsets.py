"""The shipped character set tables and the decoders built from them, without a server.

The tables are data measured on MariaDB 10.11 (``scripts/charset_tables.py``;
``tests/integration/test_charset_tables.py`` measures them again). Here each decoder, with its fast path
through a Python codec, is compared with a reading of the table written out plainly in this file, on every
byte sequence a character of the set can have and on random texts.
"""

from __future__ import annotations

import functools
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from airflow_provider_binlog.extract.charsets import (
    FAST_CODECS,
    HOLE,
    CharsetTable,
    UnsupportedCharsetError,
    load_table,
    table_names,
    text_decoder,
)

MARIADB_TABLE_SETS = {
    *("armscii8", "ascii", "big5", "cp1250", "cp1251", "cp1256", "cp1257", "cp850", "cp852", "cp866"),
    *("cp932", "dec8", "eucjpms", "euckr", "gb2312", "gbk", "geostd8", "greek", "hebrew", "hp8", "keybcs2"),
    *("koi8r", "koi8u", "latin1", "latin2", "latin5", "latin7", "macce", "macroman", "sjis", "swe7"),
    *("tis620", "ujis"),
}
"""``SHOW CHARACTER SET`` of MariaDB 10.11 without binary and the Unicode sets (utf8mb3/4, ucs2, utf16, utf16le,
utf32)."""
TABLES = sorted(MARIADB_TABLE_SETS)


def reference(table: CharsetTable, raw: bytes) -> str | None:
    """Read ``raw`` with the table's characters from left to right (None where no character starts)."""
    chars, out, i = table.chars, [], 0
    while i < len(raw):
        length = next((n for n in (1, 2, 3) if raw[i : i + n] in chars), None)
        if length is None:
            return None
        out.append(chars[raw[i : i + length]])
        i += length
    return "".join(out)


@functools.cache
def characters(charset: str) -> list[bytes]:
    return sorted(load_table(charset).chars)


def decoded(charset: str, raw: bytes) -> str | None:
    try:
        return text_decoder(charset)(raw)
    except UnicodeDecodeError:
        return None


def test_every_mariadb_set_without_a_unicode_encoding_has_a_table() -> None:
    assert table_names() == MARIADB_TABLE_SETS


@pytest.mark.parametrize("charset", TABLES)
def test_tables_are_prefix_free_and_read_back_what_they_write(charset: str) -> None:
    table = load_table(charset)
    assert table.charset == charset
    assert table.server.startswith("10.11.")
    assert CharsetTable.from_file(table.to_file()) == table
    assert CharsetTable.from_chars(charset, table.chars, table.server) == table
    table.trie()  # raises when a character's bytes begin another's
    # Every set is ASCII-compatible on MariaDB, except swe7 (7-bit Swedish: 0x5B..0x60, 0x7B..0x7E are letters)
    ascii_bytes = [b for b in range(128) if table.chars.get(bytes([b])) != chr(b)]
    assert not ascii_bytes or charset == "swe7", ascii_bytes


@pytest.mark.parametrize("charset", TABLES)
def test_the_decoder_reads_every_sequence_as_the_table_does(charset: str) -> None:
    table = load_table(charset)
    sequences = [bytes([a]) for a in range(256)]
    if any(len(s) > 1 for s in table.chars):
        sequences += [bytes([a, b]) for a in range(256) for b in range(256)]
    if any(len(s) > 2 for s in table.chars):
        sequences += [bytes([0x8F, a, b]) for a in range(256) for b in range(256)]
    differences = [
        (s.hex(), want, got)
        for s in sequences
        if (want := reference(table, s)) != (got := decoded(charset, s))
    ]
    assert differences == []


@pytest.mark.parametrize("charset", sorted(FAST_CODECS))
@given(data=st.data())
def test_texts_of_characters_and_stray_bytes_decode_as_the_table_reads_them(
    charset: str, data: st.DataObject
) -> None:
    table = load_table(charset)
    pieces = data.draw(
        st.lists(
            st.one_of(st.sampled_from(characters(charset)), st.binary(min_size=1, max_size=2)),
            max_size=40,
        )
    )
    raw = b"".join(pieces)
    assert decoded(charset, raw) == reference(table, raw)


@pytest.mark.parametrize(
    ("charset", "raw", "text"),
    [
        ("latin1", b"\x80\x81", "€\x81"),  # cp1252 with its five holes filled (strings/ctype-latin1.c)
        ("big5", bytes.fromhex("f9d6a4a4"), "碁中"),  # ETEN extension, not in Python's big5
        ("sjis", bytes.fromhex("815f"), "\\"),  # Python's shift_jis gives U+FF3C
        ("ujis", bytes.fromhex("a1c0f5a1"), "\\\ue000"),  # the user-defined area is the private use area
        ("eucjpms", bytes.fromhex("ada1a1c1"), "①～"),  # NEC row 13; U+FF5E where euc_jp gives U+301C
        ("cp866", b"\xfc\xfd", "ⁿ²"),
        ("swe7", b"}{", "åä"),
        ("armscii8", bytes.fromhex("b2b3"), "Աա"),
        ("geostd8", bytes.fromhex("c0"), "ა"),
        ("keybcs2", bytes.fromhex("80"), "Č"),
        ("utf16", b"\xfe\xff\x00A", "\ufeffA"),  # big-endian, a leading U+FEFF is text
        ("utf16", b"\xd8\x3d\xde\x00", "😀"),
        ("utf8mb3", "é€".encode(), "é€"),
    ],
)
def test_bytes_decode_to_the_servers_text(charset: str, raw: bytes, text: str) -> None:
    assert text_decoder(charset)(raw) == text


@pytest.mark.parametrize(
    ("charset", "raw", "message"),
    [
        ("cp1250", b"A\x81", "byte 0x81 in position 1"),  # cp1250 has no character there
        ("cp932", b"\xa0", "0xa0"),  # cp932 gives U+F8F0; MariaDB's cp932 has no character
        ("big5", bytes.fromhex("41a2cc"), "position 1-2: the server has no character for 0xa2cc"),  # U+FFFD
        ("big5", bytes.fromhex("a4"), "no character for 0xa4"),  # the first byte of a character only
        ("tis620", b"\xdb", "0xdb"),  # the server returns U+FFFD
        ("ucs2", b"\0A\xd8\x3d\xde\x00", r"position 2-5: ucs2 has no character above U\+FFFF \(U\+1F600\)"),
        ("utf8mb3", "é😀".encode(), r"position 2-5: utf8mb3 has no character above U\+FFFF"),
        ("utf8mb4", b"\xed\xa0\x80", "0xed"),  # a surrogate: the server passes it on, ill-formed
        ("utf32", b"\x00\x11\x00\x00", "position 0-3"),
    ],
)
def test_bytes_the_server_has_no_character_for_are_refused(charset: str, raw: bytes, message: str) -> None:
    with pytest.raises(UnicodeDecodeError, match=message):
        text_decoder(charset)(raw)


def test_unknown_character_sets_are_errors() -> None:
    with pytest.raises(UnsupportedCharsetError, match="'collation 3400'.*not a character set"):
        text_decoder("collation 3400")
    with pytest.raises(UnsupportedCharsetError, match="no table of the character set 'koi9'"):
        load_table("koi9")
    assert text_decoder("GB18030")("中".encode("gb18030")) == "中"  # MySQL only: Python's codec


def test_a_table_whose_character_begins_another_is_refused() -> None:
    with pytest.raises(ValueError, match="a character begins 0x81, which begins others"):
        CharsetTable.from_chars("x", {b"\x81": "a", b"\x81\x40": "b"}, "test")
    with pytest.raises(ValueError, match="not one character"):
        CharsetTable.from_chars("x", {b"\x81": HOLE}, "test")


def test_tables_load_from_the_zip_shipped_to_spark_workers(tmp_path: Path) -> None:
    from airflow_provider_binlog.jobs.shipping import provider_archive

    archive = provider_archive(tmp_path)
    code = (
        f"import sys; sys.path.insert(0, {str(archive)!r})\n"
        "from airflow_provider_binlog.extract import charsets\n"
        f"assert charsets.__file__.startswith({str(archive)!r}), charsets.__file__\n"
        "print(len(charsets.table_names()), charsets.text_decoder('big5')(bytes.fromhex('f9d6')))\n"
    )
    # -S: no site, so the provider installed here cannot be imported, only the archive's copy
    done = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert done.stderr == ""
    assert done.stdout.split() == [str(len(MARIADB_TABLE_SETS)), "碁"]
