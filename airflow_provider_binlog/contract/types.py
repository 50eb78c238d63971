"""Staged Arrow types -> Delta storage types, and the type text recorded in target column metadata.

The MySQL -> Arrow step is the extractor's (``extract/columns.py`` for binlog rows, ``snapshot/rows.py``
for snapshot reads, both to the types of ``docs/adr/0006-exact-types.md``). This module takes over from the
staged Arrow type: how Delta stores it (:func:`storage_type`), which changes of it are lossless
(:func:`is_lossless_widening`), and how a target column remembers it (:data:`ARROW_TYPE_KEY`,
:func:`recorded_arrow_type`) so that readers cast back to it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import pyarrow as pa

from airflow_provider_binlog.contract import ContractError

ARROW_TYPE_KEY = "binlog.arrow_type"
"""Delta column metadata key: the Arrow type the column was staged with (``str(type)``)."""
MYSQL_TYPE_KEY = "binlog.mysql_type"
"""Delta column metadata key: the column's MySQL type (``int unsigned``, ``datetime(6)`` ...)."""

SPARK_SQL_CONF: Mapping[str, str] = {
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    "spark.sql.parquet.datetimeRebaseModeInRead": "CORRECTED",
    "spark.sql.parquet.datetimeRebaseModeInWrite": "CORRECTED",
    "spark.sql.parquet.int96RebaseModeInRead": "CORRECTED",
    "spark.sql.parquet.int96RebaseModeInWrite": "CORRECTED",
}
"""Spark SQL settings under which Spark reads and writes the storage types of :func:`storage_type` exactly
(UTC session, microsecond timestamps instead of INT96, no calendar rebasing). The jobs set them on their
session; the operators add them to a ``spark-submit`` conf."""


class TypeMapError(ContractError):
    """An Arrow type has no Delta storage type, or a type text cannot be parsed."""


_NAMED_TYPES: Mapping[str, pa.DataType] = {
    "bool": pa.bool_(),
    "int8": pa.int8(),
    "int16": pa.int16(),
    "int32": pa.int32(),
    "int64": pa.int64(),
    "uint8": pa.uint8(),
    "uint16": pa.uint16(),
    "uint32": pa.uint32(),
    "uint64": pa.uint64(),
    "float": pa.float32(),
    "float32": pa.float32(),
    "double": pa.float64(),
    "float64": pa.float64(),
    "string": pa.string(),
    "large_string": pa.large_string(),
    "binary": pa.binary(),
    "large_binary": pa.large_binary(),
    "date32": pa.date32(),
    "date32[day]": pa.date32(),
}
_DECIMAL_RE = re.compile(r"decimal(?:128|256)?\(\s*(\d+)\s*,\s*(-?\d+)\s*\)")
_TIMESTAMP_RE = re.compile(r"timestamp\[(s|ms|us|ns)(?:,\s*tz=([^\]]+))?\]")
_DURATION_RE = re.compile(r"duration\[(s|ms|us|ns)\]")
_INTEGER_DIGITS = {8: 3, 16: 5, 32: 10, 64: 19}


def parse_arrow_type(text: str) -> pa.DataType:
    """Parse an Arrow type as printed by pyarrow (``str(type)``), e.g. ``decimal128(20, 0)``.

    Only the types the staging contract uses are recognised.

    :param text: type text such as ``int64``, ``timestamp[us, tz=UTC]`` or ``duration[us]``.
    :raises TypeMapError: if the text is not a recognised type.
    """
    text = text.strip()
    if text in _NAMED_TYPES:
        return _NAMED_TYPES[text]
    if match := _DECIMAL_RE.fullmatch(text):
        precision, scale = int(match.group(1)), int(match.group(2))
        return pa.decimal128(precision, scale) if precision <= 38 else pa.decimal256(precision, scale)
    if match := _TIMESTAMP_RE.fullmatch(text):
        return pa.timestamp(match.group(1), tz=match.group(2))
    if match := _DURATION_RE.fullmatch(text):
        return pa.duration(match.group(1))
    raise TypeMapError(f"unrecognised Arrow type {text!r}")


def storage_type(arrow_type: pa.DataType, column: str) -> pa.DataType:
    """Return the Arrow type a staged column is stored as in Delta (Delta has no TIME or unsigned types).

    Unsigned integers widen to the next signed type (``uint64`` to ``decimal128(20, 0)``), durations
    (MySQL TIME) are stored as ``int64`` counts of their unit, timestamps as microseconds (UTC for
    zoned ones), large and view variants as their plain type.

    :param arrow_type: staged Arrow type.
    :param column: column name, for the error message.
    :raises TypeMapError: if the type cannot be stored.
    """
    t = arrow_type
    unsigned = {8: pa.int16(), 16: pa.int32(), 32: pa.int64(), 64: pa.decimal128(20, 0)}
    if pa.types.is_boolean(t) or pa.types.is_signed_integer(t) or pa.types.is_date32(t):
        return t
    if pa.types.is_float32(t) or pa.types.is_float64(t):
        return t
    if pa.types.is_unsigned_integer(t):
        return unsigned[t.bit_width]
    if pa.types.is_decimal(t) and t.precision <= 38:
        return pa.decimal128(t.precision, t.scale)
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return pa.string()
    if (
        pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_binary_view(t)
        or pa.types.is_fixed_size_binary(t)
    ):
        return pa.binary()
    if pa.types.is_date64(t):
        return pa.date32()
    if pa.types.is_timestamp(t) and t.unit != "ns":
        return pa.timestamp("us", tz=None if t.tz is None else "UTC")
    if pa.types.is_duration(t):
        return pa.int64()
    raise TypeMapError(
        f"column {column!r} has Arrow type {t} which the merge cannot store in Delta; stage it as one of "
        "int8/16/32/64, decimal128(p<=38, s), float32/64, string, binary, date32, timestamp[us] "
        "(with or without tz=UTC), duration[us] or bool"
    )


def is_lossless_widening(narrow: pa.DataType, wide: pa.DataType) -> bool:
    """Return whether every value of ``narrow`` converts exactly to ``wide``.

    Integers widen to wider integers, to decimals with enough integer digits and to floats whose
    significand holds them (up to 16 bits to ``float32``, 32 bits to ``float64``); ``float32`` widens to
    ``float64``; decimals widen when neither integer nor fraction digits shrink; ``date32`` widens to a
    timestamp without time zone (midnight, as MySQL converts DATE to DATETIME).

    :param narrow: the narrower type.
    :param wide: the wider type.
    """
    if narrow.equals(wide):
        return True
    if pa.types.is_signed_integer(narrow):
        if pa.types.is_signed_integer(wide):
            return bool(wide.bit_width >= narrow.bit_width)
        if pa.types.is_decimal(wide):
            return bool(wide.precision - wide.scale >= _INTEGER_DIGITS[narrow.bit_width])
        if pa.types.is_floating(wide):
            return bool(narrow.bit_width <= {32: 16, 64: 32}.get(wide.bit_width, 0))
        return False
    if pa.types.is_float32(narrow):
        return bool(pa.types.is_float64(wide))
    if pa.types.is_decimal(narrow) and pa.types.is_decimal(wide):
        return bool(
            wide.scale >= narrow.scale and wide.precision - wide.scale >= narrow.precision - narrow.scale
        )
    if pa.types.is_date32(narrow):
        return bool(pa.types.is_timestamp(wide) and wide.tz is None)
    return False


def text_metadata(f: pa.Field) -> dict[str, str]:
    """Return a field's metadata with keys and values decoded to ``str``."""
    return {
        (k.decode() if isinstance(k, bytes) else k): (v.decode() if isinstance(v, bytes) else v)
        for k, v in (f.metadata or {}).items()
    }


def recorded_arrow_type(stored: pa.Field) -> pa.DataType:
    """Return the staged Arrow type a target column records in its metadata (:data:`ARROW_TYPE_KEY`).

    Columns without the record (or with one this version cannot parse) give their stored type.

    :param stored: a field of a Delta table's schema (as Arrow, with metadata).
    """
    raw = text_metadata(stored).get(ARROW_TYPE_KEY)
    if raw is None:
        return stored.type
    try:
        return parse_arrow_type(raw)
    except TypeMapError:
        return stored.type
