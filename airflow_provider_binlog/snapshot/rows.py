"""Rows of a plain ``SELECT`` as Arrow record batches staged exactly like the binlog extractor's.

A snapshot chunk is read with one ``SELECT`` over a pymysql connection with the default (tuple)
cursor. The session must use the character set ``utf8mb4`` (pymysql ``charset="utf8mb4"``) and have
run ``SET time_zone = '+00:00'``:

* with ``utf8mb4`` the server converts utf8mb3/utf8mb4 text columns to UTF-8 on the way out
  (``character_set_results``; MySQL manual, "Connection Character Sets and Collations"), so text
  arrives as ``str``. Text of any other character set is selected as ``CAST(col AS BINARY)`` (its
  stored bytes) and decoded by :func:`~airflow_provider_binlog.extract.charsets.text_decoder`, the
  decoding of the binlog path, which is the server's own conversion: the server would send ``?`` for
  bytes it has no character for, where both paths refuse the value;
* with ``time_zone = '+00:00'`` TIMESTAMP values, stored as seconds since the epoch, are converted to
  UTC on retrieval (MySQL manual, "MySQL Server Time Zone Support"), which is what the binlog carries.

:func:`describe_columns` reads the table's columns from ``information_schema.COLUMNS`` and gives
each the :class:`~airflow_provider_binlog.extract.columns.ColumnSpec` that
:func:`~airflow_provider_binlog.extract.columns.column_spec` gives the same column in a binlog table
map (same ``mysql_type`` text, same Arrow type) and the expression to select it with.
:func:`rows_to_batch` turns the fetched tuples into a record batch of those types and values, equal
to what the binlog path stages for the same rows (checked type by type against a real server by
``tests/integration/test_snapshot_rows.py``).

The text protocol sends every value as a string (MySQL Client/Server Protocol, "Text Resultset
Row"). Where that string is not the exact stored value, the ``SELECT`` expression fixes it:

* FLOAT is formatted with ``FLT_DIG`` = 6 significant digits (server ``Field_float::val_str``;
  measured on MariaDB 10.11: a stored ``1.2345678`` comes back as ``1.23457``), which loses bits of
  the single-precision value the binlog carries. It is selected as ``col + 0e0``: a DOUBLE holding
  exactly the stored value, formatted to round-trip (MySQL manual, "Floating-Point Types"), which
  the Arrow float32 cast turns back into the stored bits;
* MariaDB's INET4, INET6 and UUID are sent as text (``1.2.3.4``, ``::1``, ``123e4567-...``), while the
  binlog carries their 4 or 16 stored bytes (a ``BINARY(4)``/``BINARY(16)`` column in the table map)
  and the binlog path stages those as ``binary(4)``/``binary(16)``. They are selected as
  ``CAST(col AS BINARY(n))``, which returns the same bytes (MariaDB KB, "INET4", "INET6", "UUID Data
  Type"; measured on MariaDB 10.11 for v1, v4 and nil UUIDs, IPv4-mapped addresses and INET4).

The session's ``sql_mode`` must not contain ``PAD_CHAR_TO_FULL_LENGTH`` (CHAR values would come back
padded with spaces; the binlog carries them without, as a ``SELECT`` normally returns them: MySQL
manual, "The CHAR and VARCHAR Types").

Imports nothing from Airflow: this module runs inside Spark tasks.
"""

from __future__ import annotations

import datetime as dt
import decimal
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from airflow_provider_binlog.contract.columns import UTC
from airflow_provider_binlog.extract.charsets import UTF8, text_decoder
from airflow_provider_binlog.extract.columns import (
    MAX_ARROW_DECIMAL_PRECISION,
    ColumnSpec,
    bit_arrow_type,
)
from airflow_provider_binlog.source.schema import column_descriptions
from airflow_provider_binlog.source.sql import quote_identifier

_INTEGERS: dict[str, tuple[pa.DataType, pa.DataType]] = {
    "tinyint": (pa.int8(), pa.int16()),
    "smallint": (pa.int16(), pa.int32()),
    "mediumint": (pa.int32(), pa.int32()),
    "int": (pa.int32(), pa.int64()),
    "bigint": (pa.int64(), pa.decimal128(20, 0)),
}
"""DATA_TYPE -> (signed, unsigned) Arrow type, as ``column_spec`` maps the binlog integer codes."""
_SIMPLE: dict[str, pa.DataType] = {
    "float": pa.float32(),
    "double": pa.float64(),
    "year": pa.int16(),
    "date": pa.date32(),
    "json": pa.string(),
    "enum": pa.string(),
    "set": pa.string(),
}
_TEMPORAL: dict[str, pa.DataType] = {
    "datetime": pa.timestamp("us"),
    "timestamp": pa.timestamp("us", tz="UTC"),
    "time": pa.duration("us"),
}
_TEXTS = frozenset({"tinytext", "text", "mediumtext", "longtext"})
"""Staged as ``text``: the binlog table map has one BLOB code for all of them (MariaDB's JSON is a LONGTEXT)."""
_BLOBS = frozenset({"tinyblob", "blob", "mediumblob", "longblob"})
_GEOMETRIES = frozenset(
    {
        "geometry",
        "point",
        "linestring",
        "polygon",
        "multipoint",
        "multilinestring",
        "multipolygon",
        "geometrycollection",
        "geomcollection",
    }
)
"""Spatial types: one GEOMETRY code in the binlog, the value is the stored SRID + WKB bytes."""
_FIXED_BINARY = {"inet4": 4, "inet6": 16, "uuid": 16}
"""MariaDB types the binlog carries as their stored bytes, labelled ``binary(n)`` there."""


@dataclass(frozen=True)
class SourceColumn:
    """One source column as a snapshot reads and stages it.

    :param name: column name.
    :param spec: the staged spec; the same name, ``mysql_type`` and ``arrow_type`` the binlog path
        gives this column (:func:`~airflow_provider_binlog.extract.columns.column_spec`).
    :param select_expr: the SQL expression to put in the ``SELECT`` list: the backquoted name, or a
        cast where the text protocol would not return the exact stored value (FLOAT, INET4, INET6, UUID,
        text of a character set other than utf8mb3/utf8mb4).
    :param charset: the character set of a text column selected as its stored bytes, decoded here.
    :raises ValueError: when ``charset`` cannot be decoded exactly.
    """

    name: str
    spec: ColumnSpec
    select_expr: str
    charset: str | None = None
    _convert: Callable[[Any], Any] | None = field(init=False, repr=False, compare=False)
    _zero_dates: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        convert, zero_dates = _value_converter(self.spec)
        if self.charset is not None:
            convert = _stored_text(self.charset)
        object.__setattr__(self, "_convert", convert)
        object.__setattr__(self, "_zero_dates", zero_dates)

    def convert(self, value: Any) -> Any:
        """Return the staged value of one value pymysql returned for this column (None stays None).

        A DATE/DATETIME that is not a calendar date (``0000-00-00``, ``2024-00-10``, ``2015-02-30``) and
        the zero TIMESTAMP, which pymysql return as ``str``, become None (counted as zero dates).
        """
        if value is None or self._convert is None:
            return value
        return self._convert(value)


def describe_columns(cur: Any, db: str, table: str) -> list[SourceColumn]:
    """Return the columns of ``db.table`` in ordinal order, each with its staged spec and select expression.

    Reads ``information_schema.COLUMNS`` (DATA_TYPE, COLUMN_TYPE, NUMERIC_PRECISION, NUMERIC_SCALE,
    DATETIME_PRECISION, CHARACTER_SET_NAME, CHARACTER_OCTET_LENGTH), which lists only the columns the
    user has a privilege on. Generated and invisible columns are included: the binlog's full row
    images carry them too.

    :param cur: a pymysql cursor (default cursor: rows are tuples; a dict cursor also works).
    :param db: database (schema) name.
    :param table: table name.
    :returns: one :class:`SourceColumn` per column.
    :raises ValueError: when the table has no visible columns (it does not exist), or for a column
        whose type the extractor cannot stage (the message names the column).
    """
    columns = [_source_column(db, table, row) for row in column_descriptions(cur, db, table)]
    if not columns:
        raise ValueError(f"table `{db}`.`{table}` has no columns visible to this user (does it exist?)")
    return columns


def rows_to_batch(
    columns: Sequence[SourceColumn], rows: Sequence[tuple[Any, ...]]
) -> tuple[pa.RecordBatch, int]:
    """Return the rows as one record batch of the source columns, and the number of zero dates nulled.

    :param columns: the columns the rows hold, in ``SELECT`` order (from :func:`describe_columns`).
    :param rows: tuples as pymysql returns them for ``SELECT <select_expr, ...>`` (one value per
        column, in column order) on a session with ``charset utf8mb4`` and ``time_zone '+00:00'``.
    :returns: ``(batch, zero_dates)``: a batch of ``len(rows)`` rows with one field per column, named
        after it and typed ``spec.arrow_type`` (no ``_binlog_*`` columns), and how many DATE/DATETIME/
        TIMESTAMP values were zero dates stored as null (the binlog path's ``zero_dates`` count).
    :raises ValueError: when a row's width differs from ``len(columns)``, or a value cannot be staged
        exactly (text bytes its character set has no character for, a value that does not fit its Arrow
        type); the message names the column.
    """
    width = len(columns)
    for row in rows:
        if len(row) != width:
            raise ValueError(f"a row has {len(row)} values for {width} columns")
    arrays = []
    zero_dates = 0
    for index, column in enumerate(columns):
        values = [row[index] for row in rows]
        if column._zero_dates:
            zero_dates += sum(1 for value in values if isinstance(value, str))
        convert = column._convert
        try:
            if convert is not None:
                values = [None if value is None else convert(value) for value in values]
            arrays.append(pa.array(values, type=column.spec.arrow_type))
        except Exception as err:  # any failure of a conversion is a value that cannot be staged
            raise ValueError(
                f"column {column.name!r} ({column.spec.mysql_type}"
                f"{f', character set {column.charset}' if column.charset else ''}): a value cannot be staged "
                f"as {column.spec.arrow_type}: {type(err).__name__}: {err}"
            ) from err
    schema = pa.schema([pa.field(c.name, c.spec.arrow_type) for c in columns])
    return pa.RecordBatch.from_arrays(arrays, schema=schema), zero_dates


# --- column descriptions ---------------------------------------------------------------------------


def _text(value: Any) -> str:
    """Return an information_schema text value as ``str`` (some servers send it as bytes)."""
    return value.decode() if isinstance(value, bytes | bytearray) else str(value or "")


def _source_column(db: str, table: str, row: tuple[Any, ...]) -> SourceColumn:
    """Return the :class:`SourceColumn` of one information_schema.COLUMNS row."""
    name = _text(row[0])
    data_type, column_type = _text(row[1]).lower(), _text(row[2]).lower()
    precision, scale, fsp, charset, octets = row[3:8]
    expr = quote_identifier(name)

    def spec(label: str, arrow: pa.DataType, select: str = expr) -> SourceColumn:
        return SourceColumn(name, ColumnSpec(name, label, arrow), select)

    def text(label: str) -> SourceColumn:
        """Return a text column: as sent when utf8mb3/utf8mb4, else its stored bytes decoded here."""
        cs = _text(charset).lower()
        if cs in UTF8:
            return spec(label, pa.string())
        try:
            return SourceColumn(name, ColumnSpec(name, label, pa.string()), f"CAST({expr} AS BINARY)", cs)
        except ValueError as err:
            raise ValueError(f"column {name!r} of `{db}`.`{table}`: {err}") from err

    if data_type in _INTEGERS:
        unsigned = "unsigned" in column_type.split()
        signed_type, unsigned_type = _INTEGERS[data_type]
        return spec(data_type + (" unsigned" if unsigned else ""), unsigned_type if unsigned else signed_type)
    if data_type == "decimal":
        label = f"decimal({int(precision)},{int(scale)})"
        if int(precision) > MAX_ARROW_DECIMAL_PRECISION:
            return spec(label, pa.string())
        return spec(label, pa.decimal128(int(precision), int(scale)))
    if data_type == "float":
        return spec("float", pa.float32(), f"{expr} + 0e0")
    if data_type in _SIMPLE:
        return spec(data_type, _SIMPLE[data_type])
    if data_type in _TEMPORAL:
        digits = int(fsp or 0)
        return spec(f"{data_type}({digits})" if digits else data_type, _TEMPORAL[data_type])
    if data_type == "bit":
        return spec(f"bit({int(precision)})", bit_arrow_type(int(precision)))
    binary = _text(charset).lower() == "binary"
    if data_type in ("char", "varchar", "binary", "varbinary"):
        binary = binary or data_type in ("binary", "varbinary")
        fixed = data_type in ("char", "binary")
        label = ("binary" if binary else "char") if fixed else ("varbinary" if binary else "varchar")
        return spec(f"{label}({int(octets)})", pa.binary()) if binary else text(f"{label}({int(octets)})")
    if data_type in _TEXTS:
        return spec("blob", pa.binary()) if binary else text("text")
    if data_type in _BLOBS:
        return spec("blob", pa.binary())
    if data_type in _GEOMETRIES:
        return spec("geometry", pa.binary())
    if data_type in _FIXED_BINARY:
        width = _FIXED_BINARY[data_type]
        return spec(f"binary({width})", pa.binary(), f"CAST({expr} AS BINARY({width}))")
    raise ValueError(
        f"column {name!r} of `{db}`.`{table}` has type {column_type or data_type!r}, which the extractor "
        f"cannot stage"
    )


# --- value conversion --------------------------------------------------------------------------------


def _value_converter(spec: ColumnSpec) -> tuple[Callable[[Any], Any] | None, bool]:
    """Return (converter of non-None pymysql values or None for as-is, whether zero dates can occur).

    pymysql's text-protocol decoders (``pymysql.converters.decoders``) already give the staged value
    for integers, DOUBLE (and FLOAT selected as DOUBLE), DECIMAL(p<=38) (``Decimal``), YEAR (int, 0
    for ``0000``), TIME (``timedelta``, negative values and fractions exact), text (``str``), ENUM
    and SET (``str``, SET members in definition order, ``''`` for the empty set: MySQL manual, "The
    SET Type") and binary strings (``bytes``; BINARY(n) comes back with its 0x00 padding, MySQL
    manual, "The BINARY and VARBINARY Types").
    """
    label, arrow = spec.mysql_type, spec.arrow_type
    base = label.split("(", 1)[0]
    if label == "bigint unsigned":
        return _bigint_unsigned, False
    if base == "decimal" and pa.types.is_string(arrow):
        return _decimal_text, False
    if base == "timestamp":
        return _timestamp, True
    if base in ("date", "datetime"):
        return _calendar_date, True
    if base == "bit":
        return (_bit if pa.types.is_integer(arrow) else _bit_decimal), False
    return None, False


def _bigint_unsigned(value: Any) -> decimal.Decimal:
    """Return a BIGINT UNSIGNED as ``Decimal``: it is staged as decimal128(20,0) (int64 stops at 2**63-1)."""
    return decimal.Decimal(int(value))


def _decimal_text(value: Any) -> str:
    """Return a DECIMAL(p>38) as ``str(Decimal)``, as the binlog path stages it (zero of scale 30: ``0E-30``)."""
    return str(value if isinstance(value, decimal.Decimal) else decimal.Decimal(value))


def _timestamp(value: Any) -> dt.datetime | None:
    """Return a TIMESTAMP read in a ``+00:00`` session as UTC, the zero TIMESTAMP (a ``str``) as None.

    The binlog stores a TIMESTAMP as seconds since the epoch, the zero one as 0 (MySQL internals,
    "Date and Time Data Type Representation"), and the binlog path stages that as None, counted as a
    zero date like the zero DATE/DATETIME.
    """
    if isinstance(value, str):
        return None
    return value.replace(tzinfo=UTC) if isinstance(value, dt.datetime) else value


def _calendar_date(value: Any) -> Any:
    """Return None for a DATE/DATETIME that is no calendar date (pymysql returns it as ``str``)."""
    return None if isinstance(value, str) else value


def _bit_decimal(value: Any) -> decimal.Decimal:
    """Return BIT(64) as ``Decimal``: it is staged as decimal128(20,0) (int64 stops at 2**63-1)."""
    return decimal.Decimal(_bit(value))


def _stored_text(charset: str) -> Callable[[Any], str]:
    """Return the decoding of a text column's stored bytes (``CAST(col AS BINARY)``), as the binlog path's.

    :raises ValueError: when ``charset`` cannot be decoded exactly.
    """
    decode = text_decoder(charset)
    return lambda value: decode(bytes(value))


def _bit(value: Any) -> int:
    """Return BIT(n) as an int: it is sent as ``(n + 7) // 8`` bytes, big-endian (MySQL manual, "Bit-Value Type - BIT")."""
    if isinstance(value, bytes | bytearray):
        return int.from_bytes(value, "big")
    return int(value)
