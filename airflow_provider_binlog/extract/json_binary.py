"""MySQL's binary JSON (the value of a JSON column in row events) as JSON text.

Format: MySQL source ``sql-common/json_binary.cc`` (header comment "JSON binary format"): a type byte,
then the value. Objects and arrays (small: 2-byte counts and offsets; large: 4-byte) hold an element
count, their size, key entries (offset, 2-byte length) for objects, then value entries (type byte and an
offset, or the value itself for literals and 16-bit integers, and in large containers 32-bit integers);
strings are a variable-length size (7 bits per byte, high bit = more) and UTF-8 bytes; opaque values are
a field type byte, a variable-length size and the field's bytes.

The text is what ``json.dumps(value, ensure_ascii=False)`` writes (``", "`` and ``": "`` separators,
keys in stored order), which is how the extractor has always staged JSON. Opaque values are written as
MySQL's ``JSON_EXTRACT`` prints them (``sql-common/json_dom.cc``, ``Json_wrapper::to_string``): DECIMAL as
a number, DATE as ``"YYYY-MM-DD"``, DATETIME/TIMESTAMP as ``"YYYY-MM-DD hh:mm:ss.ffffff"``, TIME as
``"[-]h:mm:ss.ffffff"`` (hours beyond 24 kept), other types as ``"base64:type<code>:<base64>"``.
"""

from __future__ import annotations

import base64
import json
import struct
from collections.abc import Callable

from pymysqlreplication.constants import FIELD_TYPE

from airflow_provider_binlog.extract.decimals import decode_decimal

_SMALL_OBJECT, _LARGE_OBJECT, _SMALL_ARRAY, _LARGE_ARRAY = 0, 1, 2, 3
_LITERAL, _INT16, _UINT16, _INT32, _UINT32, _INT64, _UINT64, _DOUBLE, _STRING = range(4, 13)
_OPAQUE = 15
_LITERALS = {0: "null", 1: "true", 2: "false"}
_dumps_string: Callable[[str], str] = json.JSONEncoder(ensure_ascii=False).encode


def json_text(data: bytes) -> str:
    """Return the JSON text of one binary JSON value (its type byte first).

    An empty value (MySQL writes none for JSON NULL-equivalent empty documents) is the JSON ``null``.

    :raises ValueError: for an unknown type byte, or bytes that do not decode (UTF-8 of strings and keys).
    """
    if not data:
        return "null"
    return _value(data[0], data, 1, len(data))


def _value(kind: int, buf: bytes, start: int, end: int) -> str:
    """Return the text of a value of type ``kind`` stored at ``buf[start:end]``."""
    if kind in (_SMALL_OBJECT, _LARGE_OBJECT, _SMALL_ARRAY, _LARGE_ARRAY):
        return _container(kind, buf, start)
    if kind == _LITERAL:
        return _LITERALS[buf[start]]
    if kind == _INT16:
        return str(struct.unpack_from("<h", buf, start)[0])
    if kind == _UINT16:
        return str(struct.unpack_from("<H", buf, start)[0])
    if kind == _INT32:
        return str(struct.unpack_from("<i", buf, start)[0])
    if kind == _UINT32:
        return str(struct.unpack_from("<I", buf, start)[0])
    if kind == _INT64:
        return str(struct.unpack_from("<q", buf, start)[0])
    if kind == _UINT64:
        return str(struct.unpack_from("<Q", buf, start)[0])
    if kind == _DOUBLE:
        return json.dumps(struct.unpack_from("<d", buf, start)[0])
    if kind == _STRING:
        length, pos = _varlen(buf, start)
        return _dumps_string(bytes(buf[pos : pos + length]).decode("utf-8"))
    if kind == _OPAQUE:
        field_type = buf[start]
        length, pos = _varlen(buf, start + 1)
        return _opaque(field_type, bytes(buf[pos : pos + length]))
    raise ValueError(f"unknown binary JSON type {kind}")


def _container(kind: int, buf: bytes, start: int) -> str:
    large = kind in (_LARGE_OBJECT, _LARGE_ARRAY)
    is_object = kind in (_SMALL_OBJECT, _LARGE_OBJECT)
    width = 4 if large else 2
    code = "<I" if large else "<H"
    count = struct.unpack_from(code, buf, start)[0]
    pos = start + 2 * width
    keys = []
    if is_object:
        for _ in range(count):
            offset = struct.unpack_from(code, buf, pos)[0]
            length = struct.unpack_from("<H", buf, pos + width)[0]
            keys.append(bytes(buf[start + offset : start + offset + length]).decode("utf-8"))
            pos += width + 2
    values = []
    for _ in range(count):
        value_type = buf[pos]
        inline = value_type in (_LITERAL, _INT16, _UINT16) or (large and value_type in (_INT32, _UINT32))
        if inline:
            values.append(_value(value_type, buf, pos + 1, pos + 1 + width))
        else:
            offset = struct.unpack_from(code, buf, pos + 1)[0]
            values.append(_value(value_type, buf, start + offset, len(buf)))
        pos += 1 + width
    if is_object:
        return "{" + ", ".join(f"{_dumps_string(k)}: {v}" for k, v in zip(keys, values, strict=True)) + "}"
    return "[" + ", ".join(values) + "]"


def _varlen(buf: bytes, pos: int) -> tuple[int, int]:
    """Read a binary-JSON length: 7 bits per byte, low bits first, high bit set while more follow."""
    value = shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7


def _opaque(field_type: int, data: bytes) -> str:
    if field_type == FIELD_TYPE.NEWDECIMAL:
        return str(decode_decimal(data[2:], data[0], data[1]))
    if field_type in (FIELD_TYPE.DATE, FIELD_TYPE.DATETIME, FIELD_TYPE.TIMESTAMP, FIELD_TYPE.TIME):
        packed = struct.unpack_from("<q", data)[0]
        if field_type == FIELD_TYPE.TIME:
            return _dumps_string(_packed_time(packed))
        return _dumps_string(_packed_datetime(packed, date_only=field_type == FIELD_TYPE.DATE))
    return _dumps_string(f"base64:type{field_type}:{base64.b64encode(data).decode('ascii')}")


def _packed_datetime(packed: int, *, date_only: bool) -> str:
    """Format MySQL's packed DATETIME (``TIME_to_longlong_datetime_packed``).

    ``ymdhms << 24 | micro``, ``ymdhms = ((year * 13 + month) << 5 | day) << 17 | hour << 12 | minute << 6 |
    second``.
    """
    sign = "-" if packed < 0 else ""
    packed = abs(packed)
    micro = packed & 0xFFFFFF
    ymdhms = packed >> 24
    ymd, hms = ymdhms >> 17, ymdhms & 0x1FFFF
    year_month = ymd >> 5
    date = f"{sign}{year_month // 13:04d}-{year_month % 13:02d}-{ymd & 31:02d}"
    if date_only:
        return date
    return f"{date} {hms >> 12:02d}:{hms >> 6 & 63:02d}:{hms & 63:02d}.{micro:06d}"


def _packed_time(packed: int) -> str:
    """Format MySQL's packed TIME (``TIME_to_longlong_time_packed``).

    Sign, then ``hour << 12 | minute << 6 | second`` above 24 bits of microseconds; hours run to 838.
    """
    sign = "-" if packed < 0 else ""
    packed = abs(packed)
    micro = packed & 0xFFFFFF
    hms = packed >> 24
    return f"{sign}{hms >> 12 & 1023:02d}:{hms >> 6 & 63:02d}:{hms & 63:02d}.{micro:06d}"
