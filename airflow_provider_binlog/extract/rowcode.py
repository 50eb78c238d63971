"""Generate the Python source of a table layout's row-image decoders (used by :class:`~.decoder.RowDecoder`).

Byte formats follow the MySQL internals manual, "Rows Event" (row image = NULL bitmap over the
present columns, then the values of the present, non-NULL columns), its "Date and Time Data Type
Representation" and the server's ``Field_*::pack`` of each type, cited at each emitter below. MariaDB
writes the same formats (it adopted the MySQL 5.6 temporal formats, ``sql/compat56.cc``).

Per layout three functions are generated: ``rows(buf, pos, end)`` (WRITE/DELETE images back to back),
``updates(buf, pos, end)`` (before/after pairs) and ``image(buf, pos)`` (one image); each returns its
values, the end position and the zero dates it met. Each emitter below returns the statements decoding
one column's value. (The module is over 500 lines because every type's emitter, with the byte format
it reads, belongs beside the others and the generator that combines them.)
"""

from __future__ import annotations

import datetime as dt
import decimal
import struct
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from pymysqlreplication.constants import FIELD_TYPE

from airflow_provider_binlog.contract.columns import UTC
from airflow_provider_binlog.extract.charsets import text_decoder
from airflow_provider_binlog.extract.columns import (
    MAX_ARROW_DECIMAL_PRECISION,
    MAX_INT64_BITS,
    VECTOR,
    charset_of,
)
from airflow_provider_binlog.extract.decimals import decimal_groups
from airflow_provider_binlog.extract.json_binary import json_text

if TYPE_CHECKING:
    from airflow_provider_binlog.extract.events.tablemap import TableMapColumn

_INTEGERS = {
    FIELD_TYPE.TINY: 1,
    FIELD_TYPE.SHORT: 2,
    FIELD_TYPE.INT24: 3,
    FIELD_TYPE.LONG: 4,
    FIELD_TYPE.LONGLONG: 8,
}
_STRUCT_CODES = {
    (FIELD_TYPE.TINY, False): "b",
    (FIELD_TYPE.TINY, True): "B",
    (FIELD_TYPE.SHORT, False): "h",
    (FIELD_TYPE.SHORT, True): "H",
    (FIELD_TYPE.LONG, False): "i",
    (FIELD_TYPE.LONG, True): "I",
    (FIELD_TYPE.LONGLONG, False): "q",
    (FIELD_TYPE.LONGLONG, True): "Q",
}
_STRINGS = {FIELD_TYPE.VARCHAR, FIELD_TYPE.VAR_STRING, FIELD_TYPE.STRING}
_BLOBS = {FIELD_TYPE.TINY_BLOB, FIELD_TYPE.MEDIUM_BLOB, FIELD_TYPE.LONG_BLOB, FIELD_TYPE.BLOB}
_OTHERS = {
    FIELD_TYPE.NEWDECIMAL,
    FIELD_TYPE.FLOAT,
    FIELD_TYPE.DOUBLE,
    FIELD_TYPE.YEAR,
    FIELD_TYPE.DATE,
    FIELD_TYPE.DATETIME2,
    FIELD_TYPE.TIMESTAMP2,
    FIELD_TYPE.TIME2,
    FIELD_TYPE.ENUM,
    FIELD_TYPE.SET,
    FIELD_TYPE.BIT,
    FIELD_TYPE.GEOMETRY,
    FIELD_TYPE.JSON,
    VECTOR,
}
TEXT_TYPES = _STRINGS | _BLOBS
"""Binlog type codes of strings and blobs, whose values are bytes in the column's character set."""
SUPPORTED_TYPES = frozenset(_INTEGERS) | TEXT_TYPES | _OTHERS
"""Binlog column type codes :class:`~airflow_provider_binlog.extract.decoder.RowDecoder` decodes (the pre-5.6 temporal types are not among them)."""


def text_kind(column: TableMapColumn) -> str | None:
    """Return how a string/blob column's bytes become a value: ``binary``, ``utf-8`` or its charset name.

    ``utf-8`` is utf8mb4, decoded by ``bytes.decode``; a charset name is decoded by
    :func:`~.charsets.text_decoder` (utf8mb3 too: it refuses characters above U+FFFF). None when the
    character set is unknown (``binlog_row_metadata`` is not FULL, or a collation id nobody knows).
    """
    charset = charset_of(column)
    if charset is None:
        return None
    if charset in ("binary", "utf8mb4"):
        return "binary" if charset == "binary" else "utf-8"
    try:
        text_decoder(charset)
    except ValueError:
        return None
    return charset


# --- code generation -------------------------------------------------------------------------------
# Each emitter returns the statements that decode one non-NULL value of column ``i`` into ``v<i>`` from
# ``buf`` at ``pos`` and advance ``pos``. Temporaries (n, e, x, h) are reused across columns.


class _Namespace:
    """The globals of one generated decoder: shared helpers plus per-column constants."""

    def __init__(self) -> None:
        self.names: dict[str, Any] = {
            "FB": int.from_bytes,
            "D": decimal.Decimal,
            "DATE": dt.date,
            "DT": dt.datetime,
            "TD": dt.timedelta,
            "FROMTS": dt.datetime.fromtimestamp,
            "EPOCH": dt.datetime(1970, 1, 1, tzinfo=UTC),
            "UTC": UTC,
            "JT": json_text,
            "UNPACK": struct.unpack,
        }

    def add(self, name: str, value: Any) -> str:
        """Store a constant under ``name`` and return the name."""
        self.names[name] = value
        return name

    def unpacker(self, codes: str) -> str:
        """Return the name of a little-endian ``struct`` unpack_from for ``codes``."""
        name = f"ST_{codes}"
        if name not in self.names:
            self.names[name] = struct.Struct("<" + codes).unpack_from
        return name


def _little_endian(width: int, at: str = "pos") -> str:
    """Return an expression of the unsigned little-endian integer of ``width`` bytes at ``at``."""
    if width == 1:
        return f"buf[{at}]"
    if width == 4:
        return f"ST_I(buf, {at})[0]"
    return "(" + " | ".join(f"buf[{at} + {k}] << {8 * k}" if k else f"buf[{at}]" for k in range(width)) + ")"


def _emit_integer(v: str, column: TableMapColumn, ns: _Namespace) -> list[str]:
    """Integers are little-endian two's complement (MySQL internals, "Rows Event": ``Field_*::pack``)."""
    width, unsigned = _INTEGERS[column.type], bool(column.unsigned)
    if width in (4, 8):
        code = _STRUCT_CODES[(column.type, unsigned)]
        value = f"{ns.unpacker(code)}(buf, pos)[0]"
        if width == 8 and unsigned:
            value = f"D({value})"
        return [f"{v} = {value}", f"pos += {width}"]
    lines = [f"{v} = {_little_endian(width)}", f"pos += {width}"]
    if not unsigned:
        lines.append(f"if {v} > {(1 << (8 * width - 1)) - 1}: {v} -= {1 << (8 * width)}")
    return lines


def _emit_float(v: str, column: TableMapColumn, ns: _Namespace) -> list[str]:
    """FLOAT and DOUBLE are little-endian IEEE 754 (4 and 8 bytes)."""
    code, width = ("f", 4) if column.type == FIELD_TYPE.FLOAT else ("d", 8)
    return [f"{v} = {ns.unpacker(code)}(buf, pos)[0]", f"pos += {width}"]


def _emit_year(v: str, column: TableMapColumn, ns: _Namespace) -> list[str]:
    """YEAR is one byte, the year minus 1900, 0 for ``0000`` (MySQL manual, "The YEAR Type")."""
    return [f"{v} = buf[pos]", "pos += 1", f"if {v}: {v} += 1900"]


def _emit_decimal(v: str, column: TableMapColumn, ns: _Namespace) -> list[str]:
    """DECIMAL is ``decimal2bin``'s format (MySQL internals, "Decimal"; ``strings/decimal.cc``).

    Big-endian groups of 9 digits in 4 bytes, partial groups in fewer bytes, integer part first; the
    sign bit of the first byte is flipped, and a negative value has all its bytes inverted.
    """
    precision, scale = column.precision, column.decimals
    groups = decimal_groups(precision, scale)
    width = sum(size for size, _ in groups)
    top = 1 << (8 * width - 1)
    invert = ((1 << (8 * width)) - 1) ^ top
    expression = ""
    shift = 8 * width
    for size, digits in groups:
        shift -= 8 * size
        part = f"x >> {shift}" if shift else "x"
        if not expression:
            expression = part
        else:
            expression = f"({expression}) * {10**digits} + ({part} & {(1 << (8 * size)) - 1})"
    suffix = f" + 'E-{scale}'" if scale else ""
    text = f"str({v})" if precision > MAX_ARROW_DECIMAL_PRECISION else None
    lines = [
        f"x = FB(buf[pos:pos + {width}], 'big')",
        f"pos += {width}",
        f"if x & {top}:",
        f"    x ^= {top}",
        f"    {v} = D(str({expression}){suffix})",
        "else:",
        f"    x ^= {invert}",
        f"    {v} = D('-' + str({expression}){suffix})",
    ]
    if text:
        lines.append(f"{v} = {text}")
    return lines


def _fraction(fsp: int) -> tuple[int, str]:
    """Return (bytes, expression of microseconds from ``x``) of a fractional part of ``fsp`` digits.

    MySQL internals, "Date and Time Data Type Representation": ``(fsp + 1) // 2`` big-endian bytes
    holding the fraction in units of ``10**-(2*bytes)`` s; an odd fsp keeps its last digit zero.
    """
    width = (fsp + 1) // 2
    if not width:
        return 0, "0"
    raw = f"(x & {(1 << (8 * width)) - 1})"
    scale = 10 ** (6 - fsp)
    if fsp % 2:
        return width, f"{raw} // 10 * {scale}"
    return width, f"{raw} * {scale}" if scale != 1 else raw


def _emit_date(v: str, column: TableMapColumn, ns: _Namespace) -> list[str]:
    """DATE is 3 bytes little-endian: day (5 bits), month (4), year (15) from the low bits up."""
    return [
        f"x = {_little_endian(3)}",
        "pos += 3",
        "try:",
        f"    {v} = DATE(x >> 9, x >> 5 & 15, x & 31)",
        "except ValueError:",
        f"    {v} = None",
        "    zero += 1",
    ]


def _emit_datetime2(v: str, column: TableMapColumn, ns: _Namespace) -> list[str]:
    """DATETIME2 is 5 bytes big-endian + fraction (MySQL internals, "Date and Time Data Type ...").

    From the top: sign (1 bit, 1 = non-negative), year*13+month (17), day (5), hour (5), minute (6),
    second (6).
    """
    width, micro = _fraction(getattr(column, "fsp", 0) or 0)
    shift = 8 * width
    return [
        f"x = FB(buf[pos:pos + {5 + width}], 'big')",
        f"pos += {5 + width}",
        f"h = x >> {shift}" if shift else "h = x",
        "n = h >> 22 & 131071",
        "try:",
        f"    {v} = DT(n // 13, n % 13, h >> 17 & 31, h >> 12 & 31, h >> 6 & 63, h & 63, {micro})",
        "except ValueError:",
        f"    {v} = None",
        "    zero += 1",
    ]


def _emit_timestamp2(v: str, column: TableMapColumn, ns: _Namespace) -> list[str]:
    """TIMESTAMP2 is 4 bytes big-endian seconds since the epoch (UTC) + fraction.

    0 is the zero TIMESTAMP ``0000-00-00 00:00:00`` (the range starts at 1 s; MySQL manual, "The DATE,
    DATETIME, and TIMESTAMP Types"): None, counted as a zero date.
    """
    width, micro = _fraction(getattr(column, "fsp", 0) or 0)
    shift = 8 * width
    seconds = f"x >> {shift}" if shift else "x"
    lines = [
        f"x = FB(buf[pos:pos + {4 + width}], 'big')",
        f"pos += {4 + width}",
        "if not x:",
        f"    {v} = None",
        "    zero += 1",
    ]
    if not width:
        return [*lines, "else:", f"    {v} = FROMTS(x, UTC)"]
    return [
        *lines,
        f"elif x & {(1 << shift) - 1}:",
        f"    {v} = EPOCH + TD(0, {seconds}, {micro})",
        "else:",
        f"    {v} = FROMTS({seconds}, UTC)",
    ]


def _emit_time2(v: str, column: TableMapColumn, ns: _Namespace) -> list[str]:
    """TIME2 is 3 bytes + fraction, big-endian, offset binary (``my_time_packed_to_binary``).

    The whole stored number minus ``0x800000 << 8*fraction_bytes`` is the signed packed time (two's
    complement across the fraction too, so negative fractions come out exact); its magnitude holds
    hour (10 bits), minute (6), second (6), then the fraction.
    """
    fsp = getattr(column, "fsp", 0) or 0
    width = (fsp + 1) // 2
    shift = 8 * width
    micro = f"(x & {(1 << shift) - 1}) * {10 ** (6 - 2 * width)}" if width else "0"
    seconds = f"(x >> {shift + 12} & 1023) * 3600 + (x >> {shift + 6} & 63) * 60 + (x >> {shift} & 63)"
    return [
        f"x = FB(buf[pos:pos + {3 + width}], 'big') - {0x800000 << shift}",
        f"pos += {3 + width}",
        "if x < 0:",
        "    x = -x",
        f"    {v} = -TD(0, {seconds}, {micro})",
        "else:",
        f"    {v} = TD(0, {seconds}, {micro})",
    ]


def _text_value(v: str, column: TableMapColumn, ns: _Namespace, start: str) -> str:
    """Return the expression turning bytes ``buf[start:e]`` into the column's staged value."""
    raw = f"buf[{start}:e]"
    kind = text_kind(column)
    if kind == "binary":
        width = column.max_length if column.type == FIELD_TYPE.STRING else 0
        return f"{raw}.ljust({width}, b'\\x00')" if width else raw
    if kind == "utf-8" or kind is None:
        return f"{raw}.decode()"
    return f"{ns.add(f'TEXT_{v}', text_decoder(kind))}({raw})"


def _emit_string(v: str, column: TableMapColumn, ns: _Namespace) -> list[str]:
    """CHAR/VARCHAR: length (1 byte if the maximum is <= 255 bytes, else 2), then the bytes.

    CHAR drops its trailing pad (spaces, or 0x00 for BINARY(n): padded back to n bytes here), as a
    SELECT returns it.
    """
    width = 1 if column.max_length <= 255 else 2
    return [
        f"e = pos + {width} + {_little_endian(width)}",
        f"{v} = {_text_value(v, column, ns, f'pos + {width}')}",
        "pos = e",
    ]


def _length_size(column: TableMapColumn) -> int:
    size = getattr(column, "length_size", None)
    if size:
        return int(size)
    return {FIELD_TYPE.TINY_BLOB: 1, FIELD_TYPE.MEDIUM_BLOB: 3, FIELD_TYPE.LONG_BLOB: 4}.get(column.type, 2)


def _emit_blob(v: str, column: TableMapColumn, ns: _Namespace) -> list[str]:
    """BLOB/TEXT (and MariaDB's JSON, a LONGTEXT): a ``length_size``-byte little-endian length, the bytes."""
    width = _length_size(column)
    return [
        f"e = pos + {width} + {_little_endian(width)}",
        f"{v} = {_text_value(v, column, ns, f'pos + {width}')}",
        "pos = e",
    ]


def _emit_geometry(v: str, column: TableMapColumn, ns: _Namespace) -> list[str]:
    """GEOMETRY is stored like a BLOB: length, then the SRID-prefixed WKB."""
    width = _length_size(column)
    return [f"e = pos + {width} + {_little_endian(width)}", f"{v} = buf[pos + {width}:e]", "pos = e"]


def _emit_json(v: str, column: TableMapColumn, ns: _Namespace) -> list[str]:
    """MySQL JSON is a BLOB of binary JSON (MySQL source ``sql-common/json_binary.cc``).

    :func:`~airflow_provider_binlog.extract.json_binary.json_text` makes it the text
    :func:`columns.converter` writes; an empty value is None, as the library decodes it.
    """
    width = _length_size(column)
    return [
        f"n = {_little_endian(width)}",
        f"e = pos + {width} + n",
        f"{v} = JT(buf[pos + {width}:e]) if n else None",
        "pos = e",
    ]


def _emit_vector(v: str, column: TableMapColumn, ns: _Namespace) -> list[str]:
    """MySQL 9 VECTOR is stored like a BLOB: a length, then little-endian float32s (``Field_vector``)."""
    width = _length_size(column)
    return [
        f"e = pos + {width} + {_little_endian(width)}",
        f"{v} = list(UNPACK('<%df' % ((e - pos - {width}) // 4), buf[pos + {width}:e]))",
        "pos = e",
    ]


def _emit_enum(v: str, column: TableMapColumn, ns: _Namespace) -> list[str]:
    """ENUM is its 1-based member index in ``size`` bytes, little-endian; 0 is the invalid value ``''``."""
    # Never None here: RowDecoder refuses an ENUM/SET column without its members (decoder._column_problem).
    members = ns.add(f"ENUM_{v}", tuple(column.enum_values))  # type: ignore[arg-type]
    size = column.size
    return [f"{v} = {members}[{_little_endian(size)}]", f"pos += {size}"]


def _set_text(members: Sequence[str]) -> Callable[[int], str]:
    """Return ``mask -> 'a,c'`` for a SET: members in definition order, ``''`` for the empty set."""
    cache: dict[int, str] = {}

    def text(mask: int) -> str:
        value = cache.get(mask)
        if value is None:
            if len(cache) > 65536:
                cache.clear()
            value = cache[mask] = ",".join(m for k, m in enumerate(members) if mask >> k & 1)
        return value

    return text


def _emit_set(v: str, column: TableMapColumn, ns: _Namespace) -> list[str]:
    """SET is a bit mask of its members in ``size`` bytes, little-endian, bit 0 = first member."""
    size, members = column.size, list(column.set_values)  # type: ignore[arg-type]  # as in _emit_enum
    text = _set_text(members)
    if size == 1:
        table = ns.add(f"SET_{v}", tuple(text(mask) for mask in range(256)))
        return [f"{v} = {table}[buf[pos]]", "pos += 1"]
    function = ns.add(f"SET_{v}", text)
    return [f"{v} = {function}({_little_endian(size)})", f"pos += {size}"]


def _emit_bit(v: str, column: TableMapColumn, ns: _Namespace) -> list[str]:
    """BIT(n) is ``(n + 7) // 8`` bytes, big-endian; BIT(64) becomes a ``Decimal`` (see ``columns.bit_arrow_type``)."""
    bits = int(getattr(column, "bits", 64) or 64)
    width = (bits + 7) // 8
    mask = (1 << bits) - 1
    value = "buf[pos]" if width == 1 else f"FB(buf[pos:pos + {width}], 'big')"
    if bits > MAX_INT64_BITS:  # staged as decimal128(20,0): 2**63 and above do not fit int64
        return [f"{v} = D({value} & {mask})", f"pos += {width}"]
    return [f"{v} = {value} & {mask}", f"pos += {width}"]


_EMITTERS: dict[int, Callable[[str, Any, _Namespace], list[str]]] = {
    **dict.fromkeys(_INTEGERS, _emit_integer),
    FIELD_TYPE.FLOAT: _emit_float,
    FIELD_TYPE.DOUBLE: _emit_float,
    FIELD_TYPE.YEAR: _emit_year,
    FIELD_TYPE.NEWDECIMAL: _emit_decimal,
    FIELD_TYPE.DATE: _emit_date,
    FIELD_TYPE.DATETIME2: _emit_datetime2,
    FIELD_TYPE.TIMESTAMP2: _emit_timestamp2,
    FIELD_TYPE.TIME2: _emit_time2,
    **dict.fromkeys(_STRINGS, _emit_string),
    **dict.fromkeys(_BLOBS, _emit_blob),
    FIELD_TYPE.GEOMETRY: _emit_geometry,
    FIELD_TYPE.JSON: _emit_json,
    VECTOR: _emit_vector,
    FIELD_TYPE.ENUM: _emit_enum,
    FIELD_TYPE.SET: _emit_set,
    FIELD_TYPE.BIT: _emit_bit,
}


def _struct_code(column: TableMapColumn) -> tuple[str, list[str]] | None:
    """Return (struct code, fix-up statements on ``v``) when one ``struct`` code reads the column."""
    code = column.type
    if code in (FIELD_TYPE.FLOAT, FIELD_TYPE.DOUBLE):
        return ("f" if code == FIELD_TYPE.FLOAT else "d"), []
    if code == FIELD_TYPE.YEAR:
        return "B", ["if {v}: {v} += 1900"]
    unsigned = bool(getattr(column, "unsigned", False))
    letter = _STRUCT_CODES.get((code, unsigned))
    if letter is None:
        return None
    return letter, (["{v} = D({v})"] if letter == "Q" else [])


def _indent(lines: list[str], depth: int) -> list[str]:
    return ["    " * depth + line for line in lines]


def _no_null_body(columns: Sequence[TableMapColumn], ns: _Namespace) -> list[str]:
    """Return statements decoding every column of a row without NULLs; numeric runs use one struct."""
    lines: list[str] = []
    index = 0
    while index < len(columns):
        run: list[tuple[str, list[str]]] = []
        while index + len(run) < len(columns):
            found = _struct_code(columns[index + len(run)])
            if found is None:
                break
            run.append(found)
        if len(run) < 2:
            lines += _EMITTERS[columns[index].type](f"v{index}", columns[index], ns)
            index += 1
            continue
        codes = "".join(code for code, _ in run)
        names = [f"v{index + k}" for k in range(len(run))]
        lines += [
            f"{', '.join(names)} = {ns.unpacker(codes)}(buf, pos)",
            f"pos += {struct.calcsize('<' + codes)}",
        ]
        for name, (_, fixes) in zip(names, run, strict=True):
            lines += [fix.format(v=name) for fix in fixes]
        index += len(run)
    return lines


def _null_aware_body(columns: Sequence[TableMapColumn], ns: _Namespace, trace: bool = False) -> list[str]:
    """Return statements decoding every column, each guarded by its NULL bit.

    :param trace: also store each column's index in ``where[0]`` before decoding it.
    """
    lines: list[str] = []
    for index, column in enumerate(columns):
        if trace:
            lines.append(f"where[0] = {index}")
        lines += [f"if nulls & {1 << index}:", f"    v{index} = None", "else:"]
        lines += _indent(_EMITTERS[column.type](f"v{index}", column, ns), 1)
    return lines


def _image_body(columns: Sequence[TableMapColumn], ns: _Namespace) -> list[str]:
    """Return statements decoding one row image (NULL bitmap, then values) into ``v0..v<n-1>``.

    MySQL internals, "Rows Event": the NULL bitmap has one bit per present column, bit 0 of byte 0
    first, ``(present + 7) // 8`` bytes.
    """
    width = (len(columns) + 7) // 8
    nulls = _little_endian(width) if width <= 2 else f"FB(buf[pos:pos + {width}], 'little')"
    return [
        f"nulls = {nulls}",
        f"pos += {width}",
        "if not nulls:",
        *_indent(_no_null_body(columns, ns), 1),
        "else:",
        *_indent(_null_aware_body(columns, ns), 1),
    ]


def generate(columns: Sequence[TableMapColumn], trace: bool = False) -> tuple[str, dict[str, Any]]:
    """Return the source of the layout's ``rows``, ``updates`` and ``image`` functions and their globals.

    :param trace: generate only ``image(buf, pos, where)``, which records in ``where[0]`` the index of
        the column it is decoding (to name the column of a value that fails).
    """
    ns = _Namespace()
    ns.unpacker("I")
    if trace:
        width = (len(columns) + 7) // 8
        lines = [f"nulls = FB(buf[pos:pos + {width}], 'little')", f"pos += {width}"]
        lines += _null_aware_body(columns, ns, trace=True)
        values = "[" + ", ".join(f"v{i}" for i in range(len(columns))) + "]"
        source = [
            "def image(buf, pos, where):",
            "    zero = 0",
            *_indent(lines, 1),
            f"    return {values}, pos, zero",
        ]
        return "\n".join(source), ns.names
    body = _image_body(columns, ns)
    values = "[" + ", ".join(f"v{i}" for i in range(len(columns))) + "]"
    source = [
        "def rows(buf, pos, end):",
        "    out = []",
        "    append = out.append",
        "    zero = 0",
        "    while pos < end:",
        *_indent(body, 2),
        f"        append({values})",
        "    return out, pos, zero",
        "",
        "def updates(buf, pos, end):",
        "    out = []",
        "    append = out.append",
        "    zero = 0",
        "    while pos < end:",
        *_indent(body, 2),
        f"        before = {values}",
        *_indent(body, 2),
        f"        append((before, {values}))",
        "    return out, pos, zero",
        "",
        "def image(buf, pos):",
        "    zero = 0",
        *_indent(body, 1),
        f"    return {values}, pos, zero",
        "",
    ]
    return "\n".join(source), ns.names
