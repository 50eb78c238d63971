"""Rows of a plain ``SELECT`` as Arrow record batches staged exactly like the binlog extractor's.

A snapshot chunk is read with one ``SELECT`` over a pymysql connection with the default (tuple)
cursor. The session must use the character set ``utf8mb4`` (pymysql ``charset="utf8mb4"``) and have
run ``SET time_zone = '+00:00'``:

* with ``utf8mb4`` the server converts every text column to UTF-8 on the way out
  (``character_set_results``; MySQL manual, "Connection Character Sets and Collations"), so text
  arrives as ``str`` whatever the column's charset (MySQL/MariaDB ``latin1`` is cp1252 with the five
  undefined bytes mapped to U+0081..., which is also how the binlog path decodes it);
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
* MariaDB's INET6 and UUID are sent as text (``::1``, ``123e4567-...``), while the binlog carries
  their 16 stored bytes and the binlog path stages those as ``binary(16)``. They are selected as
  ``CAST(col AS BINARY(16))``, which returns the same bytes (MariaDB KB, "INET6", "UUID Data Type";
  measured on MariaDB 10.11 for v1, v4 and nil UUIDs and for IPv4-mapped addresses).

The session's ``sql_mode`` must not contain ``PAD_CHAR_TO_FULL_LENGTH`` (CHAR values would come back
padded with spaces; the binlog carries them without, as a ``SELECT`` normally returns them: MySQL
manual, "The CHAR and VARCHAR Types").

Imports nothing from Airflow: this module runs inside Spark tasks.
"""

from __future__ import annotations

import datetime as dt
import decimal
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from airflow_provider_binlog.extract.columns import MAX_ARROW_DECIMAL_PRECISION, ColumnSpec
from airflow_provider_binlog.snapshot.plan import quote

UTC = dt.timezone.utc
EPOCH = dt.datetime(1970, 1, 1, tzinfo=UTC)
"""The staged value of the zero TIMESTAMP (stored as 0 seconds since the epoch), as in the binlog path."""

_COLUMN_FIELDS = (
    "COLUMN_NAME",
    "DATA_TYPE",
    "COLUMN_TYPE",
    "NUMERIC_PRECISION",
    "NUMERIC_SCALE",
    "DATETIME_PRECISION",
    "CHARACTER_SET_NAME",
    "CHARACTER_OCTET_LENGTH",
)
COLUMNS_QUERY = (
    f"SELECT {', '.join(_COLUMN_FIELDS)}"
    " FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s"
    " ORDER BY ORDINAL_POSITION"
)
"""The column descriptions :func:`describe_columns` reads (MySQL manual, "The INFORMATION_SCHEMA
COLUMNS Table"; MariaDB KB, "Information Schema COLUMNS Table")."""

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
_FIXED_BINARY_16 = frozenset({"inet6", "uuid"})
"""MariaDB types the binlog carries as their 16 stored bytes, labelled ``binary(16)`` there."""


@dataclass(frozen=True)
class SourceColumn:
    """One source column as a snapshot reads and stages it.

    :param name: column name.
    :param spec: the staged spec; the same name, ``mysql_type`` and ``arrow_type`` the binlog path
        gives this column (:func:`~airflow_provider_binlog.extract.columns.column_spec`).
    :param select_expr: the SQL expression to put in the ``SELECT`` list: the backquoted name, or a
        cast where the text protocol would not return the exact stored value (FLOAT, INET6, UUID).
    """

    name: str
    spec: ColumnSpec
    select_expr: str
    _convert: Callable[[Any], Any] | None = field(init=False, repr=False, compare=False)
    _zero_dates: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        convert, zero_dates = _value_converter(self.spec)
        object.__setattr__(self, "_convert", convert)
        object.__setattr__(self, "_zero_dates", zero_dates)

    def convert(self, value: Any) -> Any:
        """Return the staged value of one value pymysql returned for this column (None stays None).

        A DATE/DATETIME that is not a calendar date (``0000-00-00``, ``2024-00-10``, ``2015-02-30``),
        which pymysql returns as ``str``, becomes None; the zero TIMESTAMP becomes the epoch.
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
    cur.execute(COLUMNS_QUERY, (db, table))
    columns = [_source_column(db, table, _as_tuple(row)) for row in cur.fetchall()]
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
        after it and typed ``spec.arrow_type`` (no ``_binlog_*`` columns), and how many DATE/DATETIME
        values were zero dates stored as null (the binlog path's ``zero_dates`` count).
    :raises ValueError: when a row's width differs from ``len(columns)``, or a value does not fit its
        Arrow type (e.g. a BIT(64) value of 2**63 or more does not fit int64); the message names the
        column.
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
        if convert is not None:
            values = [None if value is None else convert(value) for value in values]
        try:
            arrays.append(pa.array(values, type=column.spec.arrow_type))
        except (pa.ArrowException, OverflowError, TypeError) as err:
            raise ValueError(
                f"column {column.name!r} ({column.spec.mysql_type}): a value does not fit "
                f"{column.spec.arrow_type}: {err}"
            ) from err
    schema = pa.schema([pa.field(c.name, c.spec.arrow_type) for c in columns])
    return pa.RecordBatch.from_arrays(arrays, schema=schema), zero_dates


# --- column descriptions ---------------------------------------------------------------------------


def _as_tuple(row: Any) -> tuple[Any, ...]:
    """Return an information_schema row as a tuple in :data:`COLUMNS_QUERY` order (dict cursors too)."""
    if isinstance(row, Mapping):
        upper = {str(k).upper(): v for k, v in row.items()}
        return tuple(upper[name] for name in _COLUMN_FIELDS)
    return tuple(row)


def _text(value: Any) -> str:
    """Return an information_schema text value as ``str`` (some servers send it as bytes)."""
    return value.decode() if isinstance(value, bytes | bytearray) else str(value or "")


def _source_column(db: str, table: str, row: tuple[Any, ...]) -> SourceColumn:
    """Return the :class:`SourceColumn` of one information_schema.COLUMNS row."""
    name = _text(row[0])
    data_type, column_type = _text(row[1]).lower(), _text(row[2]).lower()
    precision, scale, fsp, charset, octets = row[3:8]
    expr = quote(name)

    def spec(label: str, arrow: pa.DataType, select: str = expr) -> SourceColumn:
        return SourceColumn(name, ColumnSpec(name, label, arrow), select)

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
        return spec(f"bit({int(precision)})", pa.int64())
    binary = _text(charset).lower() == "binary"
    if data_type in ("char", "varchar", "binary", "varbinary"):
        binary = binary or data_type in ("binary", "varbinary")
        fixed = data_type in ("char", "binary")
        label = ("binary" if binary else "char") if fixed else ("varbinary" if binary else "varchar")
        return spec(f"{label}({int(octets)})", pa.binary() if binary else pa.string())
    if data_type in _TEXTS:
        return spec("blob", pa.binary()) if binary else spec("text", pa.string())
    if data_type in _BLOBS:
        return spec("blob", pa.binary())
    if data_type in _GEOMETRIES:
        return spec("geometry", pa.binary())
    if data_type in _FIXED_BINARY_16:
        return spec("binary(16)", pa.binary(), f"CAST({expr} AS BINARY(16))")
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
        return _timestamp, False
    if base in ("date", "datetime"):
        return _calendar_date, True
    if base == "bit":
        return _bit, False
    return None, False


def _bigint_unsigned(value: Any) -> decimal.Decimal:
    """Return a BIGINT UNSIGNED as ``Decimal``: it is staged as decimal128(20,0) (int64 stops at 2**63-1)."""
    return decimal.Decimal(int(value))


def _decimal_text(value: Any) -> str:
    """Return a DECIMAL(p>38) as ``str(Decimal)``, as the binlog path stages it (zero of scale 30: ``0E-30``)."""
    return str(value if isinstance(value, decimal.Decimal) else decimal.Decimal(value))


def _timestamp(value: Any) -> dt.datetime:
    """Return a TIMESTAMP read in a ``+00:00`` session as UTC, the zero TIMESTAMP (a ``str``) as the epoch.

    The binlog stores a TIMESTAMP as seconds since the epoch, the zero one as 0 (MySQL internals,
    "Date and Time Data Type Representation"), and the binlog path stages that as the epoch.
    """
    if isinstance(value, str):
        return EPOCH
    return value.replace(tzinfo=UTC) if isinstance(value, dt.datetime) else value


def _calendar_date(value: Any) -> Any:
    """Return None for a DATE/DATETIME that is no calendar date (pymysql returns it as ``str``)."""
    return None if isinstance(value, str) else value


def _bit(value: Any) -> int:
    """Return BIT(n) as an int: it is sent as ``(n + 7) // 8`` bytes, big-endian (MySQL manual, "Bit-Value Type - BIT")."""
    if isinstance(value, bytes | bytearray):
        return int.from_bytes(value, "big")
    return int(value)
