"""Map binlog column definitions to Arrow types and correct decoded values.

Column types and their binlog encodings are those of the MySQL source ``include/field_types.h`` and
the MySQL manual, "Data Types"; MariaDB uses the same codes. Values come decoded by mysql-replication;
:func:`converter` turns each into the exact value of its Arrow type and repairs the library's known
decoding defects (measured against MariaDB 10.11, see ``docs/types.md``):

* negative TIME with a fraction is off by ``1 - 2*fraction`` (``-838:59:58.999999`` decodes as
  ``-838:59:58.000001``);
* YEAR ``0000`` decodes as 1900 (1900 is outside YEAR's range 1901..2155, so it can only mean 0);
* the empty SET decodes as None like NULL (the library records why in ``none_sources``);
* ``BINARY(n)`` loses its trailing ``0x00`` padding, and empty binary strings come back as ``''``;
* zero dates come back as None (counted, stored as null); the zero TIMESTAMP (stored as 0 seconds)
  comes back as the epoch and is turned into a counted null here, like the zero DATE/DATETIME;
* BIT comes back as a ``'0101'`` string, SET as a Python set;
* text of a character set other than utf8/utf8mb3/utf8mb4, ascii and latin1 is decoded by the library
  with a codec that is not the server's (``utf16`` as little-endian): only bytes are accepted for those
  (:func:`converter` raises on the library's text), decoded by :func:`~.charsets.text_decoder`.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pymysqlreplication.constants import FIELD_TYPE

from airflow_provider_binlog.contract.columns import UTC, reserved_name_problem
from airflow_provider_binlog.extract.charsets import text_decoder

if TYPE_CHECKING:
    from airflow_provider_binlog.extract.events.tablemap import TableMapColumn

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=UTC)

_STRING_TYPES = {FIELD_TYPE.VARCHAR, FIELD_TYPE.VAR_STRING, FIELD_TYPE.STRING}
_BLOB_TYPES = {FIELD_TYPE.TINY_BLOB, FIELD_TYPE.MEDIUM_BLOB, FIELD_TYPE.LONG_BLOB, FIELD_TYPE.BLOB}
MAX_ARROW_DECIMAL_PRECISION = 38
"""DECIMAL(p>38) does not fit decimal128 (nor Spark/Delta decimals): such columns are staged as text."""
MAX_INT64_BITS = 63
"""BIT(n) with n <= 63 fits int64; BIT(64) is staged as decimal128(20,0), like BIGINT UNSIGNED."""
VECTOR = 242
"""MySQL 9.0's VECTOR binlog type code (``MYSQL_TYPE_VECTOR``): little-endian float32s, stored like a BLOB."""
_LIBRARY_CHARSETS = {"utf8": "utf8mb4", "cp1252": "latin1", "koi8_r": "koi8r", "koi8_u": "koi8u"}
"""mysql-replication's codec name (``character_set_name``) -> server character set, where they differ."""
_LIBRARY_EXACT = frozenset({"utf8mb4", "utf8mb3", "utf8", "ascii", "latin1"})
"""Character sets whose text, when mysql-replication decodes it without error, is the server's text."""


@dataclass(frozen=True)
class ColumnSpec:
    """One source column as staged.

    :param name: column name.
    :param mysql_type: readable MySQL type, e.g. ``bigint unsigned``, ``decimal(10,2)``, ``datetime(6)``.
    :param arrow_type: the Arrow type of its staged values.
    """

    name: str
    mysql_type: str
    arrow_type: pa.DataType

    def to_manifest(self) -> dict[str, str]:
        """Return the manifest form ``{"name", "mysql_type", "arrow_type"}``."""
        return {"name": self.name, "mysql_type": self.mysql_type, "arrow_type": str(self.arrow_type)}


def charset_of(column: TableMapColumn) -> str | None:
    """Return the server character set of a string/blob column of a table map, None when not known.

    Our table maps carry it as ``mysql_charset`` (:mod:`~airflow_provider_binlog.extract.events.tablemap`);
    a mysql-replication column (the reference decoder in tests) has only a codec name, None without
    ``binlog_row_metadata=FULL``, from which it is derived.
    """
    charset = getattr(column, "mysql_charset", None)
    if isinstance(charset, str):
        return charset.lower()
    name = getattr(column, "character_set_name", None)
    if not isinstance(name, str):
        return None
    return _LIBRARY_CHARSETS.get(name.lower(), name.lower())


def is_binary(column: TableMapColumn) -> bool:
    """Return True when a string/blob column holds bytes (charset ``binary``), not text."""
    return charset_of(column) == "binary"


def bit_arrow_type(bits: int) -> pa.DataType:
    """Return the staged Arrow type of BIT(``bits``): int64 up to 63 bits, decimal128(20,0) for 64.

    BIT(n) holds unsigned values 0 .. 2**n - 1 (MySQL manual, "Bit-Value Type - BIT"); 2**63 and above
    do not fit int64.
    """
    return pa.int64() if bits <= MAX_INT64_BITS else pa.decimal128(20, 0)


def column_spec(column: TableMapColumn) -> ColumnSpec:
    """Return the staged spec of a table-map column (:class:`~.events.tablemap.TableMapColumn`).

    :raises ValueError: for a column type the extractor cannot stage.
    """
    name, code, unsigned = column.name, column.type, bool(getattr(column, "unsigned", False))
    sign = " unsigned" if unsigned else ""
    integer = {
        FIELD_TYPE.TINY: ("tinyint", pa.int16() if unsigned else pa.int8()),
        FIELD_TYPE.SHORT: ("smallint", pa.int32() if unsigned else pa.int16()),
        FIELD_TYPE.INT24: ("mediumint", pa.int32()),
        FIELD_TYPE.LONG: ("int", pa.int64() if unsigned else pa.int32()),
        FIELD_TYPE.LONGLONG: ("bigint", pa.decimal128(20, 0) if unsigned else pa.int64()),
    }
    if code in integer:
        label, arrow = integer[code]
        return ColumnSpec(name, label + sign, arrow)
    if code == FIELD_TYPE.NEWDECIMAL:
        label = f"decimal({column.precision},{column.decimals})"
        if column.precision > MAX_ARROW_DECIMAL_PRECISION:
            return ColumnSpec(name, label, pa.string())
        return ColumnSpec(name, label, pa.decimal128(column.precision, column.decimals))
    simple = {
        FIELD_TYPE.FLOAT: ("float", pa.float32()),
        FIELD_TYPE.DOUBLE: ("double", pa.float64()),
        FIELD_TYPE.YEAR: ("year", pa.int16()),
        FIELD_TYPE.DATE: ("date", pa.date32()),
        FIELD_TYPE.NEWDATE: ("date", pa.date32()),
        FIELD_TYPE.DATETIME: ("datetime", pa.timestamp("us")),
        FIELD_TYPE.TIMESTAMP: ("timestamp", pa.timestamp("us", tz="UTC")),
        FIELD_TYPE.TIME: ("time", pa.duration("us")),
        FIELD_TYPE.BIT: (f"bit({_bits(column)})", bit_arrow_type(_bits(column))),
        FIELD_TYPE.JSON: ("json", pa.string()),
        FIELD_TYPE.GEOMETRY: ("geometry", pa.binary()),
        FIELD_TYPE.ENUM: ("enum", pa.string()),
        FIELD_TYPE.SET: ("set", pa.string()),
    }
    if code in simple:
        label, arrow = simple[code]
        return ColumnSpec(name, label, arrow)
    fractional = {
        FIELD_TYPE.DATETIME2: ("datetime", pa.timestamp("us")),
        FIELD_TYPE.TIMESTAMP2: ("timestamp", pa.timestamp("us", tz="UTC")),
        FIELD_TYPE.TIME2: ("time", pa.duration("us")),
    }
    if code in fractional:
        label, arrow = fractional[code]
        fsp = int(getattr(column, "fsp", 0) or 0)
        return ColumnSpec(name, f"{label}({fsp})" if fsp else label, arrow)
    if code in _STRING_TYPES:
        binary = is_binary(column)
        fixed = code == FIELD_TYPE.STRING
        label = ("binary" if binary else "char") if fixed else ("varbinary" if binary else "varchar")
        return ColumnSpec(name, f"{label}({column.max_length})", pa.binary() if binary else pa.string())
    if code in _BLOB_TYPES:
        binary = is_binary(column)
        return ColumnSpec(name, "blob" if binary else "text", pa.binary() if binary else pa.string())
    if code == VECTOR:
        dims = getattr(column, "dimensions", None)
        return ColumnSpec(name, f"vector({dims})" if dims else "vector", pa.list_(pa.float32()))
    raise ValueError(f"column {name!r} has binlog type code {code}, which the extractor cannot stage")


def _bits(column: TableMapColumn) -> int:
    return int(getattr(column, "bits", 64) or 64)


Converter = Callable[[Any, str | None], Any]


class ValueConversionError(ValueError):
    """A column value could not be converted to its staged type exactly.

    Raised by the decoder, the converters and the batch builder with what they know; the window
    reader adds the pipeline, the event's coordinates and GTID and raises
    :class:`~airflow_provider_binlog.exceptions.UndecodableValueError`.

    :param column: ``db.table.column (type and metadata)``, see :func:`describe_column`.
    :param cause: the error of the conversion.
    :param file: binlog file of the row's event, when known.
    :param pos: end position of the row's event, when known.
    :param gtid: GTID of the row's transaction, when known.
    """

    def __init__(
        self,
        column: str,
        cause: BaseException,
        *,
        file: str | None = None,
        pos: int | None = None,
        gtid: str | None = None,
    ) -> None:
        super().__init__(f"{column}: {type(cause).__name__}: {cause}")
        self.column = column
        self.cause = cause
        self.table: str | None = None
        """``db.table``, set by the window reader where the failing layout is known."""
        self.file = file
        self.pos = pos
        self.gtid = gtid


def describe_column(table: str, column: TableMapColumn) -> str:
    """Return ``db.table.column (mysql type, metadata)`` of a table-map column, for error messages.

    The metadata are those of the table map that decide the decoding: character set and maximum
    length in bytes of strings, bits of BIT, precision/scale of DECIMAL, fractional digits of
    temporal types, signedness, and the binlog type code.
    """
    try:
        label = column_spec(column).mysql_type
    except ValueError:
        label = "unknown type"
    details = [label, f"binlog type code {getattr(column, 'type', '?')}"]
    if getattr(column, "type", None) in _STRING_TYPES | _BLOB_TYPES:
        details.append(f"character set {charset_of(column) or 'unknown'}")
        if getattr(column, "max_length", None):
            details.append(f"at most {column.max_length} bytes")
    for attribute in ("precision", "decimals", "fsp", "bits"):
        value = getattr(column, attribute, None)
        if value:
            details.append(f"{attribute} {value}")
    return f"{table}.{getattr(column, 'name', '?')} ({', '.join(details)})"


def check_stageable(column: TableMapColumn) -> None:
    """Raise when a table-map column cannot be staged exactly, whatever its values.

    :raises ValueError: for a name with the reserved prefix
        (:func:`~airflow_provider_binlog.contract.columns.reserved_name_problem`), a type :func:`column_spec`
        does not know, ENUM/SET member names that could not be read (``members_problem``, see :func:`~airflow_provider_binlog.extract.tablemaps.redecode_members`),
        or text in a character set the extractor does not know (an unknown collation id)
        (:class:`~airflow_provider_binlog.extract.charsets.UnsupportedCharsetError`).
    """
    spec = column_spec(column)
    problem = reserved_name_problem(column.name) or getattr(column, "members_problem", None)
    if problem:
        raise ValueError(problem)
    text_types = (FIELD_TYPE.NEWDECIMAL, FIELD_TYPE.SET, FIELD_TYPE.JSON)
    if pa.types.is_string(spec.arrow_type) and column.type not in text_types:
        text_decoder(charset_of(column) or "utf8mb4")


def converter(column: TableMapColumn) -> Converter:
    """Return ``convert(value, none_source) -> staged value`` for one column.

    ``none_source`` is mysql-replication's reason for a None value (``null``, ``empty set``, ``out of
    date range``, ...); None otherwise. The converter raises :class:`ValueError` (or another error of
    the conversion) for a value it cannot stage exactly; the caller names the column and event.

    :raises ValueError: when the column's character set is unknown (an unknown collation id)
        (:class:`~airflow_provider_binlog.extract.charsets.UnsupportedCharsetError`), or its ENUM/SET
        member names could not be read (``members_problem``, see
        :func:`~airflow_provider_binlog.extract.tablemaps.redecode_members`).
    """
    check_stageable(column)
    code = column.type
    spec = column_spec(column)
    if code == FIELD_TYPE.LONGLONG and getattr(column, "unsigned", False):
        return _none_safe(lambda v: decimal.Decimal(int(v)))
    if code == FIELD_TYPE.NEWDECIMAL and pa.types.is_string(spec.arrow_type):
        return _none_safe(str)
    if code == FIELD_TYPE.YEAR:
        return _none_safe(lambda v: 0 if v == 1900 else int(v))
    if code in (FIELD_TYPE.TIME, FIELD_TYPE.TIME2):
        return _none_safe(fix_negative_time if code == FIELD_TYPE.TIME2 else (lambda v: v))
    if code in (FIELD_TYPE.TIMESTAMP, FIELD_TYPE.TIMESTAMP2):
        return _none_safe(_timestamp)
    if code == FIELD_TYPE.SET:
        order = list(getattr(column, "set_values", None) or [])
        return _set_converter(order)
    if code == FIELD_TYPE.BIT:
        if _bits(column) > MAX_INT64_BITS:
            return _none_safe(lambda v: decimal.Decimal(_bit_int(v)))
        return _none_safe(_bit_int)
    if code == FIELD_TYPE.JSON:
        return _none_safe(
            lambda v: v if isinstance(v, str) else json.dumps(_json_text(v), ensure_ascii=False)
        )
    if pa.types.is_binary(spec.arrow_type):
        width = column.max_length if code == FIELD_TYPE.STRING else 0
        return _none_safe(lambda v: _to_bytes(v).ljust(width, b"\0"))
    if pa.types.is_string(spec.arrow_type):
        return _none_safe(_text_converter(charset_of(column)))
    return _none_safe(lambda v: v)


def _text_converter(charset: str | None) -> Callable[[Any], str]:
    """Return the conversion of one text value: bytes decoded as the server does, library text checked.

    :raises ValueError: when ``charset`` is not a character set the extractor knows.
    """
    decode = text_decoder(charset or "utf8mb4")
    library_exact = charset is None or charset in _LIBRARY_EXACT

    def convert(value: Any) -> str:
        if isinstance(value, bytes):
            return decode(value)
        if library_exact:
            return str(value)
        raise ValueError(
            f"mysql-replication decoded this {charset} text with a codec that is not the server's; only "
            f"the stored bytes can be staged exactly"
        )

    return convert


def _bit_int(value: Any) -> int:
    """Return a BIT value (the library's ``'0101'`` text, or an int) as an int."""
    return int(value, 2) if isinstance(value, str) else int(value)


def _timestamp(value: dt.datetime) -> dt.datetime | None:
    """Return a TIMESTAMP as UTC, None for the zero TIMESTAMP (stored as 0 seconds since the epoch).

    TIMESTAMP's range starts at ``1970-01-01 00:00:01`` UTC, so a stored 0 is always the zero value
    ``0000-00-00 00:00:00`` (MySQL manual, "The DATE, DATETIME, and TIMESTAMP Types").
    """
    value = value.replace(tzinfo=UTC)
    return None if value == _EPOCH else value


def _none_safe(convert: Callable[[Any], Any]) -> Converter:
    def wrapped(value: Any, none_source: str | None) -> Any:
        return None if value is None else convert(value)

    return wrapped


def _set_converter(order: list[str]) -> Converter:
    def convert(value: Any, none_source: str | None) -> Any:
        if value is None:
            return "" if none_source == "empty set" else None
        return ",".join(member for member in order if member in value) if order else ",".join(sorted(value))

    return convert


def _to_bytes(value: Any) -> bytes:
    if isinstance(value, bytes):
        return value
    return str(value).encode("latin-1")


def _json_text(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode("utf-8", "surrogateescape")
    if isinstance(value, dict):
        return {_json_text(k): _json_text(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_text(v) for v in value]
    return value


def fix_negative_time(value: dt.timedelta) -> dt.timedelta:
    """Repair mysql-replication's decoding of a negative TIME2 with a fraction.

    The library returns ``-(whole + (1 - fraction))`` for the true value ``-(whole + fraction)``
    (MySQL internals, "Date and Time Data Type Representation": TIME2 stores negatives as two's
    complement of the packed value, fraction included).
    """
    if value >= dt.timedelta(0) or value.microseconds == 0:
        return value
    magnitude = -value
    whole = dt.timedelta(days=magnitude.days, seconds=magnitude.seconds)
    wrong_fraction = magnitude - whole
    return -(whole + (dt.timedelta(seconds=1) - wrong_fraction))
