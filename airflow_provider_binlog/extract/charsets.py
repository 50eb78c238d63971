"""Decode the bytes of a text column exactly as the server converts them to Unicode.

A ``SELECT`` on a ``utf8mb4`` session returns the server's conversion of the stored bytes; the binlog
carries the stored bytes. Both paths stage the text :func:`text_decoder` gives for the stored bytes,
so they agree, and it is the text the server returns.

Each character set maps to a Python codec from the standard library (``codecs``, "Standard
Encodings") plus, where the server's table differs from the codec, the differences measured on
MariaDB 10.11 by converting every single byte (and every two-byte sequence with a lead byte
0x81..0xFE) with ``CONVERT(CONVERT(bytes USING cs) USING utf8mb4)``; the server's tables are in its
``strings/ctype-*.c``. A byte sequence the server has no character for (it returns ``?`` or U+FFFD)
is refused, never staged as a guess. Character sets no codec decodes exactly are refused by name
(:data:`REFUSED`); ``tests/integration/test_type_fidelity.py`` checks every supported one against
the server's own conversion.

Imports nothing from Airflow: this module runs inside Spark tasks.
"""

from __future__ import annotations

import codecs
import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

UNDEFINED = "\ufffe"
"""The ``codecs.charmap_decode`` table entry of a byte with no character (decoding it raises)."""


@dataclass(frozen=True)
class ServerCharset:
    """How one server character set decodes: a Python codec and the server's differences from it.

    :param codec: the Python codec name.
    :param extra: single bytes the codec refuses that the server maps to a character.
    :param replace: characters the codec gives where the server gives another one.
    :param refuse: characters the codec gives for bytes the server has no character for.
    """

    codec: str
    extra: Mapping[int, str] = field(default_factory=dict)
    replace: Mapping[str, str] = field(default_factory=dict)
    refuse: frozenset[str] = frozenset()


SINGLE_BYTE: Mapping[str, ServerCharset] = {
    # MySQL manual, "West European Character Sets": latin1 is cp1252 whose five undefined bytes map to
    # the C1 controls of the same value (strings/ctype-latin1.c, cs_to_uni).
    "latin1": ServerCharset("cp1252", extra={b: chr(b) for b in (0x81, 0x8D, 0x8F, 0x90, 0x9D)}),
    "latin2": ServerCharset("iso8859_2"),
    "latin5": ServerCharset("iso8859_9"),
    "latin7": ServerCharset("iso8859_13"),
    "ascii": ServerCharset("ascii"),
    "hebrew": ServerCharset("iso8859_8", replace={"\u00af": "\u203e"}),
    "greek": ServerCharset(
        "iso8859_7",
        replace={"\u2018": "\u02bd", "\u2019": "\u02bc"},
        refuse=frozenset("\u037a\u20ac\u20af"),
    ),
    "tis620": ServerCharset("tis_620"),
    "koi8r": ServerCharset("koi8_r"),
    "koi8u": ServerCharset("koi8_u", replace={"\u2219": "\u2022"}),
    "cp850": ServerCharset("cp850"),
    "cp852": ServerCharset("cp852"),
    "cp866": ServerCharset("cp866", replace={"\u2116": "\u207f", "\u00a4": "\u00b2"}),
    "cp1250": ServerCharset("cp1250"),
    "cp1251": ServerCharset("cp1251"),
    "cp1256": ServerCharset("cp1256", refuse=frozenset("\u0679\u0688\u0691\u06a9\u06ba\u06be\u06c1\u06d2")),
    "cp1257": ServerCharset("cp1257"),
    "macce": ServerCharset("mac_latin2"),
    "macroman": ServerCharset("mac_roman"),
}
"""Single-byte character sets: decoded through a 256-entry table built from the codec."""

MULTI_BYTE: Mapping[str, ServerCharset] = {
    "utf8mb4": ServerCharset("utf-8"),
    "utf8mb3": ServerCharset("utf-8"),
    "utf8": ServerCharset("utf-8"),
    # MySQL manual, "The ucs2/utf16/utf16le/utf32 Character Set": big-endian except utf16le, no BOM.
    "ucs2": ServerCharset("utf-16-be"),
    "utf16": ServerCharset("utf-16-be"),
    "utf16le": ServerCharset("utf-16-le"),
    "utf32": ServerCharset("utf-32-be"),
    "sjis": ServerCharset("shift_jis", replace={"\uff3c": "\\"}),
    "cp932": ServerCharset("cp932", refuse=frozenset("\x80\uf8f0\uf8f1\uf8f2\uf8f3")),
    "gbk": ServerCharset("gbk"),
    "gb2312": ServerCharset("gb2312"),
    # MySQL 5.7+ only (not offered by MariaDB); the same GB 18030-2005 standard as Python's codec.
    "gb18030": ServerCharset("gb18030"),
    # MariaDB/MySQL euckr includes the cp949 (Unified Hangul Code) extension.
    "euckr": ServerCharset("cp949"),
}
"""Multi-byte character sets: decoded by the codec, then the server's differences applied."""

REFUSED: Mapping[str, str] = {
    "big5": "the server's big5 table differs from Python's big5 and cp950 on duplicate code points",
    "ujis": "the server maps the EUC-JP user-defined area and 0xA1C0 differently from Python's euc_jp",
    "eucjpms": "the server's eucjpms (Microsoft variants) matches no Python codec",
    "dec8": "Python has no dec8 codec",
    "hp8": "Python has no hp8 codec",
    "swe7": "Python has no swe7 codec",
    "armscii8": "Python has no armscii8 codec",
    "keybcs2": "Python has no keybcs2 codec",
    "geostd8": "Python has no geostd8 codec",
}
"""Character sets refused with the reason (no Python codec decodes them as the server does)."""

UTF8 = frozenset({"utf8mb4", "utf8mb3", "utf8"})
"""Character sets whose text the server sends to a ``utf8mb4`` session unchanged."""


class UnsupportedCharsetError(ValueError):
    """A character set no codec decodes exactly as the server does."""


def text_decoder(charset: str) -> Callable[[bytes], str]:
    """Return ``decode(stored bytes) -> text`` of the server character set ``charset``.

    The function raises :class:`UnicodeDecodeError` (a :class:`ValueError`) for bytes the server has no
    character for.

    :param charset: the MySQL/MariaDB character set name (``SHOW CHARACTER SET``), e.g. ``utf16``.
    :raises UnsupportedCharsetError: when the character set is refused or unknown.
    """
    return _decoder(charset.lower())


@functools.cache
def _decoder(charset: str) -> Callable[[bytes], str]:
    if charset in SINGLE_BYTE:
        table = _single_byte_table(SINGLE_BYTE[charset])
        return lambda raw: codecs.charmap_decode(raw, "strict", table)[0]
    if charset in MULTI_BYTE:
        return _multi_byte(MULTI_BYTE[charset])
    reason = REFUSED.get(charset, "it is not a character set this extractor knows")
    raise UnsupportedCharsetError(f"character set {charset!r} cannot be decoded exactly: {reason}")


def _single_byte_table(spec: ServerCharset) -> str:
    """Return the 256-character ``charmap_decode`` table of a single-byte character set."""
    chars = []
    for code in range(256):
        try:
            char = bytes([code]).decode(spec.codec)
        except UnicodeDecodeError:
            char = spec.extra.get(code, UNDEFINED)
        if char in spec.refuse:
            char = UNDEFINED
        chars.append(spec.replace.get(char, char))
    return "".join(chars)


def _multi_byte(spec: ServerCharset) -> Callable[[bytes], str]:
    codec = codecs.lookup(spec.codec).decode
    if not spec.replace and not spec.refuse:
        return lambda raw: codec(raw, "strict")[0]
    translation = str.maketrans(dict(spec.replace))
    refused = spec.refuse

    def decode(raw: bytes) -> str:
        text = codec(raw, "strict")[0]
        if refused and not refused.isdisjoint(text):
            bad = next(c for c in text if c in refused)
            raise UnicodeDecodeError(spec.codec, raw, 0, len(raw), f"the server has no character for {bad!r}")
        return text.translate(translation) if translation else text

    return decode
