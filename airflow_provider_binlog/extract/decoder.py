"""Decode the row images of binlog rows events straight from their body bytes.

mysql-replication decodes each row into dicts with one method call per value, which costs about
half of the extractor's time. :class:`RowDecoder` reads the rest of a rows event's body at once and
decodes it with one function generated (and compiled once) per table layout: straight-line code per
column, no per-value calls or attribute lookups, fixed-width numeric runs unpacked by one
``struct`` call when the row has no NULLs.

Byte formats follow the MySQL internals manual, "Rows Event" (row image = NULL bitmap over the
present columns, then the values of the present, non-NULL columns), its "Date and Time Data Type
Representation" and the server's ``Field_*::pack`` of each type, cited at each emitter below. MariaDB
writes the same formats (it adopted the MySQL 5.6 temporal formats, ``sql/compat56.cc``).

The values produced are the staged values of :func:`columns.converter` for the library's output,
with these intended differences (the library is wrong or fails there):

* text of every character set is decoded as the server converts it (:mod:`.charsets`: latin1 is
  cp1252 whose five unused bytes map to the C1 controls U+0081..., utf16 is big-endian, ...); the
  library's cp1252 codec raises on those five bytes and it decodes utf16 as little-endian;
* a DATE that is not a calendar date (``2015-02-30`` under ``ALLOW_INVALID_DATES``) becomes None and
  is counted as a zero date; the library raises;
* TIMESTAMP seconds are read unsigned (MariaDB 11.5+ stores up to 2106); the library reads them signed.

Like the converter path, DECIMAL(p>38) becomes ``str(Decimal)`` (a zero of scale 30 is ``'0E-30'``),
the zero TIMESTAMP (stored as 0) None counted as a zero date, BIT(64) a ``Decimal``, and MySQL's binary
JSON the converter's JSON text.

A value that cannot be staged exactly (bytes its character set has no character for, ...) raises
:class:`~airflow_provider_binlog.extract.columns.ValueConversionError` naming the column; the window
reader adds the event's coordinates and GTID.
"""

from __future__ import annotations

import datetime as dt
import decimal
import struct
from collections.abc import Callable, Sequence
from typing import Any

from pymysqlreplication.constants import FIELD_TYPE

from airflow_provider_binlog.contract.columns import UTC
from airflow_provider_binlog.exceptions import UnsupportedEventError
from airflow_provider_binlog.extract.charsets import UTF8, text_decoder
from airflow_provider_binlog.extract.columns import (
    MAX_ARROW_DECIMAL_PRECISION,
    MAX_INT64_BITS,
    VECTOR,
    ValueConversionError,
    charset_of,
    describe_column,
)
from airflow_provider_binlog.extract.decimals import decimal_groups
from airflow_provider_binlog.extract.json_binary import json_text

PARTIAL_UPDATE_ROWS_EVENT = 39
"""MySQL 8.0 ``PARTIAL_UPDATE_ROWS_EVENT`` (``binlog_row_value_options=PARTIAL_JSON``)."""

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
SUPPORTED_TYPES = frozenset(_INTEGERS) | _STRINGS | _BLOBS | _OTHERS
"""Binlog column type codes :class:`RowDecoder` decodes (the pre-5.6 temporal types are not among them)."""


def text_kind(column: Any) -> str | None:
    """Return how a string/blob column's bytes become a value: ``binary``, ``utf-8`` or its charset name.

    None when the character set is unknown (``binlog_row_metadata`` is not FULL) or no codec decodes it
    exactly (:data:`.charsets.REFUSED`).
    """
    charset = charset_of(column)
    if charset is None:
        return None
    if charset in ("binary", *UTF8):
        return "binary" if charset == "binary" else "utf-8"
    try:
        text_decoder(charset)
    except ValueError:
        return None
    return charset


def unsupported_reason(columns: Sequence[Any]) -> str | None:
    """Return why :class:`RowDecoder` cannot decode this layout, or None when it can."""
    for column in columns:
        reason = _column_problem(column)
        if reason:
            return f"column {getattr(column, 'name', None)!r}: {reason}"
    return None


def _column_problem(column: Any) -> str | None:
    code = getattr(column, "type", None)
    if code not in SUPPORTED_TYPES:
        return f"binlog type code {code} is not decoded by RowDecoder"
    if code in _STRINGS or code in _BLOBS:
        if text_kind(column) is None:
            return (
                f"character set {getattr(column, 'character_set_name', None)!r} is not decoded by RowDecoder"
            )
    if getattr(column, "members_problem", None):
        return str(column.members_problem)
    if code == FIELD_TYPE.ENUM and not getattr(column, "enum_values", None):
        return "ENUM values unknown (binlog_row_metadata is not FULL)"
    if code == FIELD_TYPE.SET and not getattr(column, "set_values", None):
        return "SET members unknown (binlog_row_metadata is not FULL)"
    if code in (FIELD_TYPE.ENUM, FIELD_TYPE.SET) and getattr(column, "size", 0) not in range(1, 9):
        return f"unexpected storage size {getattr(column, 'size', None)}"
    if code == FIELD_TYPE.NEWDECIMAL and not 0 <= column.decimals <= column.precision:
        return f"unexpected DECIMAL({column.precision},{column.decimals})"
    return None


LAYOUT_ATTRIBUTES = (
    "type",
    "name",
    "unsigned",
    "max_length",
    "length_size",
    "precision",
    "decimals",
    "fsp",
    "bits",
    "bytes",
    "size",
    "character_set_name",
    "mysql_charset",
    "members_problem",
)
"""Column attributes of a table map that the staged specs and the decoding depend on (see :func:`layout_key`)."""


def layout_key(columns: Sequence[Any]) -> tuple[Any, ...]:
    """Return a hashable key of everything the staged specs and the decoding of ``columns`` depend on.

    Two table maps with equal keys decode alike; a key of names and types only is not enough (an ALTER
    from VARCHAR(10) to VARCHAR(300) changes the length prefix, one to DATETIME(6) the fraction bytes).
    """
    return tuple(
        tuple(getattr(c, attr, None) for attr in LAYOUT_ATTRIBUTES)
        + (tuple(getattr(c, "enum_values", None) or ()), tuple(getattr(c, "set_values", None) or ()))
        for c in columns
    )


class RowDecoder:
    """Decode the row images of one table-map layout into staged values, in column order.

    Build one per layout (see :func:`layout_key`) when :meth:`supports` is True; a decoder holds one
    generated function per layout, so building costs about a millisecond and decoding a row a few
    microseconds.

    :param columns: the table map's mysql-replication ``Column`` objects (``event.columns``).
    :raises ValueError: when :meth:`supports` is False for ``columns``.
    """

    def __init__(self, columns: Sequence[Any]) -> None:
        reason = unsupported_reason(columns)
        if reason:
            raise ValueError(f"RowDecoder cannot decode this layout: {reason}")
        self.columns = list(columns)
        self.zero_dates = 0
        """Zero or invalid DATE/DATETIME values decoded (as None) so far; the caller may reset it."""
        self._present = (1 << len(self.columns)) - 1
        self.full_bitmap = self._present.to_bytes((len(self.columns) + 7) // 8, "little")
        """The columns-present bitmap of a full image (every column present)."""
        self.source, namespace = _generate(self.columns)
        exec(compile(self.source, f"<RowDecoder {len(self.columns)} columns>", "exec"), namespace)
        self._rows: Callable[[bytes, int, int], tuple[list[list[Any]], int, int]] = namespace["rows"]
        self._updates: Callable[[bytes, int, int], tuple[list[tuple[list[Any], list[Any]]], int, int]] = (
            namespace["updates"]
        )
        self._image: Callable[[bytes, int], tuple[list[Any], int, int]] = namespace["image"]

    @staticmethod
    def supports(columns: Sequence[Any]) -> bool:
        """Return True when every column of the layout has a type and charset this decoder handles."""
        return unsupported_reason(columns) is None

    def decode(self, event: Any) -> list[list[Any]]:
        """Return the rows of a WRITE or DELETE rows event, one list of staged values per row.

        Reads the rest of the event's body from its packet: call once per event, and do not touch
        ``event.rows`` afterwards.

        :raises UnsupportedEventError: when the event lacks columns (``binlog_row_image`` is not FULL)
            or its row data does not match the layout.
        """
        if hasattr(event, "columns_present_bitmap2"):
            raise TypeError("decode() is for WRITE/DELETE rows events; use decode_updates() for UPDATE")
        self._check_image(event, event.columns_present_bitmap)
        return self._decode_rows(_remaining_body(event), event)

    def decode_updates(self, event: Any) -> list[tuple[list[Any], list[Any]]]:
        """Return the rows of an UPDATE rows event as ``(before, after)`` lists of staged values.

        Reads the rest of the event's body like :meth:`decode`.

        :raises UnsupportedEventError: when an image lacks columns (``binlog_row_image`` is not FULL),
            the event holds partial JSON updates, or its row data does not match the layout.
        """
        self._check_image(event, event.columns_present_bitmap)
        self._check_image(event, event.columns_present_bitmap2)
        partial = getattr(event, "event_type", None) == PARTIAL_UPDATE_ROWS_EVENT
        return self._decode_updates(_remaining_body(event), partial, event)

    def decode_rows_bytes(self, body: bytes, event: Any = None) -> list[list[Any]]:
        """Return the rows encoded in ``body``: full row images back to back, as in a WRITE/DELETE event.

        :param event: what errors name: an object with ``where`` (the event's description), or None.
        :raises UnsupportedEventError: when ``body`` does not decode with this layout.
        """
        return self._decode_rows(body, event)

    def decode_updates_bytes(
        self, body: bytes, *, partial: bool = False, event: Any = None
    ) -> list[tuple[list[Any], list[Any]]]:
        """Return the ``(before, after)`` rows encoded in ``body``: pairs of full row images.

        :param partial: the body is a ``PARTIAL_UPDATE_ROWS_EVENT``'s (each after image starts with
            its ``binlog_row_value_options``).
        :param event: what errors name (see :meth:`decode_rows_bytes`).
        :raises UnsupportedEventError: when ``body`` does not decode with this layout, or holds JSON diffs.
        """
        return self._decode_updates(body, partial, event)

    def _decode_rows(self, body: bytes, event: Any) -> list[list[Any]]:
        return self._checked(lambda: self._rows(body, 0, len(body)), body, event)

    def _decode_updates(self, body: bytes, partial: bool, event: Any) -> list[tuple[list[Any], list[Any]]]:
        if partial:
            return self._checked(lambda: self._partial_updates(body, event), body, event, partial=True)
        return self._checked(lambda: self._updates(body, 0, len(body)), body, event)

    def _checked(
        self, decode: Callable[[], tuple[Any, int, int]], body: bytes, event: Any, partial: bool = False
    ) -> Any:
        """Run ``decode`` (``-> (rows, end position, zero dates)``), check it used all of ``body``, count zero dates.

        :raises UnsupportedEventError: when the body does not decode with this layout.
        :raises ValueConversionError: when a value cannot be staged exactly (names its column).
        """
        try:
            rows, pos, zero = decode()
        except (IndexError, struct.error) as err:
            raise _undecodable(event, err) from err
        except UnsupportedEventError:
            raise
        except Exception as err:  # a value that cannot be staged: name its column
            raise self._value_error(body, event, err, partial) from err
        _check_end(pos, len(body), event)
        self.zero_dates += zero
        return rows

    def _value_error(self, body: bytes, event: Any, err: Exception, partial: bool) -> Exception:
        """Return the error of a value the generated decoder could not stage, naming its column.

        Decodes ``body`` again, image by image, with a slower function that records the column it is
        at (built only on this path, so the generated decoder carries no bookkeeping).
        """
        source, namespace = _generate(self.columns, trace=True)
        exec(compile(source, "<RowDecoder trace>", "exec"), namespace)
        trace: Callable[[bytes, int, list[int]], tuple[list[Any], int, int]] = namespace["image"]
        where = [0]
        pos, end = 0, len(body)
        try:
            while pos < end:
                if partial and pos:  # after images start with value options: only the first image is traced
                    break
                _, pos, _ = trace(body, pos, where)
        except Exception:  # the same failure, now with its column index in ``where``
            table = f"{getattr(event, 'schema', '?')}.{getattr(event, 'table', '?')}"
            return ValueConversionError(describe_column(table, self.columns[where[0]]), err)
        return _undecodable(event, err)

    def _partial_updates(self, body: bytes, event: Any) -> tuple[list[tuple[list[Any], list[Any]]], int, int]:
        """Decode a PARTIAL_UPDATE_ROWS_EVENT body whose after images carry whole values only.

        MySQL source ``libbinlogevents``, "Rows_event": after the before image, an after image starts
        with ``value_options`` (packed integer); bit 0 (PARTIAL_JSON_UPDATES) is followed by one bit per
        JSON column telling whether that column holds a JSON diff instead of a value.
        """
        rows: list[tuple[list[Any], list[Any]]] = []
        width = (sum(1 for c in self.columns if c.type == FIELD_TYPE.JSON) + 7) // 8
        pos, zero, end = 0, 0, len(body)
        while pos < end:
            before, pos, zero_before = self._image(body, pos)
            options, pos = _packed_integer(body, pos)
            if options & 1:
                if int.from_bytes(body[pos : pos + width], "little"):
                    raise UnsupportedEventError(
                        f"{_where(event)}: partial JSON updates (binlog_row_value_options=PARTIAL_JSON) "
                        f"carry diffs, not values; set binlog_row_value_options='' on the source"
                    )
                pos += width
            after, pos, zero_after = self._image(body, pos)
            zero += zero_before + zero_after
            rows.append((before, after))
        return rows, pos, zero

    def _check_image(self, event: Any, bitmap: bytes) -> None:
        """Refuse an event whose image lacks columns, or whose column count differs from the layout."""
        self.check_image(getattr(event, "number_of_columns", len(self.columns)), bitmap, _where(event))

    def check_image(self, count: int, bitmap: bytes, where: str) -> None:
        """Refuse a rows event of ``count`` columns whose image lacks columns or whose count differs.

        :param bitmap: the event's columns-present bitmap (bit ``i`` of byte ``i // 8``, low bit first).
        :param where: the event, for the message.
        :raises UnsupportedEventError: naming the missing columns and ``binlog_row_image=FULL``.
        """
        if count != len(self.columns):
            raise UnsupportedEventError(
                f"{where}: the event has {count} columns, its table map {len(self.columns)}"
            )
        present = int.from_bytes(bitmap, "little") & self._present
        if present != self._present:
            missing = [c.name for i, c in enumerate(self.columns) if not present >> i & 1]
            raise UnsupportedEventError(
                f"{where}: the row image lacks columns {missing}; the extractor needs full row "
                f"images (binlog_row_image=FULL)"
            )


def _remaining_body(event: Any) -> bytes:
    """Read the event's row data: the body after the header the library parsed, checksum excluded."""
    packet = event.packet
    return bytes(packet.read(event.event_size - packet.read_bytes))


def _where(event: Any) -> str:
    """Return where an event is, for error messages ("row data" when decoding bare bytes)."""
    if event is None:
        return "row data"
    if isinstance(getattr(event, "where", None), str):  # the event reader's events describe themselves
        return str(event.where)
    table = f"{getattr(event, 'schema', '?')}.{getattr(event, 'table', '?')}"
    return f"{type(event).__name__} on {table} ending at {getattr(event.packet, 'log_pos', '?')}"


def _undecodable(event: Any, err: Exception) -> UnsupportedEventError:
    return UnsupportedEventError(f"{_where(event)}: row data cannot be decoded with its table map ({err})")


def _check_end(pos: int, end: int, event: Any) -> None:
    if pos != end:
        raise UnsupportedEventError(
            f"{_where(event)}: row data ends at byte {pos} of {end}; it does not match the table map"
        )


def _packed_integer(body: bytes, pos: int) -> tuple[int, int]:
    """Read a length-encoded integer (MySQL internals, "Binary Protocol: Length-Encoded Integer")."""
    first = body[pos]
    widths = {252: 2, 253: 3, 254: 8}
    if first < 251:
        return first, pos + 1
    width = widths.get(first)
    if width is None:
        raise UnsupportedEventError(f"invalid length-encoded integer prefix {first}")
    return int.from_bytes(body[pos + 1 : pos + 1 + width], "little"), pos + 1 + width


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


def _emit_integer(v: str, column: Any, ns: _Namespace) -> list[str]:
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


def _emit_float(v: str, column: Any, ns: _Namespace) -> list[str]:
    """FLOAT and DOUBLE are little-endian IEEE 754 (4 and 8 bytes)."""
    code, width = ("f", 4) if column.type == FIELD_TYPE.FLOAT else ("d", 8)
    return [f"{v} = {ns.unpacker(code)}(buf, pos)[0]", f"pos += {width}"]


def _emit_year(v: str, column: Any, ns: _Namespace) -> list[str]:
    """YEAR is one byte, the year minus 1900, 0 for ``0000`` (MySQL manual, "The YEAR Type")."""
    return [f"{v} = buf[pos]", "pos += 1", f"if {v}: {v} += 1900"]


def _emit_decimal(v: str, column: Any, ns: _Namespace) -> list[str]:
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


def _emit_date(v: str, column: Any, ns: _Namespace) -> list[str]:
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


def _emit_datetime2(v: str, column: Any, ns: _Namespace) -> list[str]:
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


def _emit_timestamp2(v: str, column: Any, ns: _Namespace) -> list[str]:
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


def _emit_time2(v: str, column: Any, ns: _Namespace) -> list[str]:
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


def _text_value(v: str, column: Any, ns: _Namespace, start: str) -> str:
    """Return the expression turning bytes ``buf[start:e]`` into the column's staged value."""
    raw = f"buf[{start}:e]"
    kind = text_kind(column)
    if kind == "binary":
        width = column.max_length if column.type == FIELD_TYPE.STRING else 0
        return f"{raw}.ljust({width}, b'\\x00')" if width else raw
    if kind == "utf-8" or kind is None:
        return f"{raw}.decode()"
    return f"{ns.add(f'TEXT_{v}', text_decoder(kind))}({raw})"


def _emit_string(v: str, column: Any, ns: _Namespace) -> list[str]:
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


def _length_size(column: Any) -> int:
    size = getattr(column, "length_size", None)
    if size:
        return int(size)
    return {FIELD_TYPE.TINY_BLOB: 1, FIELD_TYPE.MEDIUM_BLOB: 3, FIELD_TYPE.LONG_BLOB: 4}.get(column.type, 2)


def _emit_blob(v: str, column: Any, ns: _Namespace) -> list[str]:
    """BLOB/TEXT (and MariaDB's JSON, a LONGTEXT): a ``length_size``-byte little-endian length, the bytes."""
    width = _length_size(column)
    return [
        f"e = pos + {width} + {_little_endian(width)}",
        f"{v} = {_text_value(v, column, ns, f'pos + {width}')}",
        "pos = e",
    ]


def _emit_geometry(v: str, column: Any, ns: _Namespace) -> list[str]:
    """GEOMETRY is stored like a BLOB: length, then the SRID-prefixed WKB."""
    width = _length_size(column)
    return [f"e = pos + {width} + {_little_endian(width)}", f"{v} = buf[pos + {width}:e]", "pos = e"]


def _emit_json(v: str, column: Any, ns: _Namespace) -> list[str]:
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


def _emit_vector(v: str, column: Any, ns: _Namespace) -> list[str]:
    """MySQL 9 VECTOR is stored like a BLOB: a length, then little-endian float32s (``Field_vector``)."""
    width = _length_size(column)
    return [
        f"e = pos + {width} + {_little_endian(width)}",
        f"{v} = list(UNPACK('<%df' % ((e - pos - {width}) // 4), buf[pos + {width}:e]))",
        "pos = e",
    ]


def _emit_enum(v: str, column: Any, ns: _Namespace) -> list[str]:
    """ENUM is its 1-based member index in ``size`` bytes, little-endian; 0 is the invalid value ``''``."""
    members = ns.add(f"ENUM_{v}", tuple(column.enum_values))
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


def _emit_set(v: str, column: Any, ns: _Namespace) -> list[str]:
    """SET is a bit mask of its members in ``size`` bytes, little-endian, bit 0 = first member."""
    size, members = column.size, list(column.set_values)
    text = _set_text(members)
    if size == 1:
        table = ns.add(f"SET_{v}", tuple(text(mask) for mask in range(256)))
        return [f"{v} = {table}[buf[pos]]", "pos += 1"]
    function = ns.add(f"SET_{v}", text)
    return [f"{v} = {function}({_little_endian(size)})", f"pos += {size}"]


def _emit_bit(v: str, column: Any, ns: _Namespace) -> list[str]:
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


def _struct_code(column: Any) -> tuple[str, list[str]] | None:
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


def _no_null_body(columns: Sequence[Any], ns: _Namespace) -> list[str]:
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


def _null_aware_body(columns: Sequence[Any], ns: _Namespace, trace: bool = False) -> list[str]:
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


def _image_body(columns: Sequence[Any], ns: _Namespace) -> list[str]:
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


def _generate(columns: Sequence[Any], trace: bool = False) -> tuple[str, dict[str, Any]]:
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
