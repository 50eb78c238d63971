"""Rows of a plain ``SELECT`` as Arrow record batches staged exactly like the binlog extractor's.

A snapshot chunk is read with one ``SELECT`` over a :class:`RowReader`: an unbuffered cursor that
returns every value as the bytes the server sent, staged column by column by :func:`rows_to_batch`.
The session uses the character set ``utf8mb4`` and has run ``SET time_zone = '+00:00'``:

* with ``utf8mb4`` the server converts utf8mb3/utf8mb4 text columns to UTF-8 on the way out
  (``character_set_results``; MySQL manual, "Connection Character Sets and Collations"), so text
  arrives as UTF-8. Text of any other character set is selected as ``CAST(col AS BINARY)`` (its
  stored bytes) and decoded by :func:`~airflow_provider_binlog.extract.charsets.text_decoder`, the
  decoding of the binlog path, which is the server's own conversion: the server would send ``?`` for
  bytes it has no character for, where both paths refuse the value;
* with ``time_zone = '+00:00'`` TIMESTAMP values, stored as seconds since the epoch, are converted to
  UTC on retrieval (MySQL manual, "MySQL Server Time Zone Support"), which is what the binlog carries.

:func:`describe_columns` reads the table's columns from ``information_schema.COLUMNS`` and gives
each the :class:`~airflow_provider_binlog.extract.columns.ColumnSpec` that
:func:`~airflow_provider_binlog.extract.columns.column_spec` gives the same column in a binlog table
map (same ``mysql_type`` text, same Arrow type) and the expression to select it with.
:func:`rows_to_batch` turns the fetched rows into a record batch of those types and values, equal
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
import gc
import importlib.util
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from pymysql.converters import convert_date, convert_datetime, convert_timedelta

from airflow_provider_binlog.contract.columns import UTC, reserved_name_problem
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
    :raises ValueError: when ``charset`` is not a character set the extractor knows (an unknown collation).
    """

    name: str
    spec: ColumnSpec
    select_expr: str
    charset: str | None = None
    _stage: Callable[[Sequence[bytes | None]], tuple[pa.Array, int]] = field(
        init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        decode = _stored_text(self.charset) if self.charset is not None else None
        object.__setattr__(self, "_stage", _stager(self.spec, decode))

    def stage(self, values: Sequence[bytes | None]) -> tuple[pa.Array, int]:
        """Return the staged array of this column's raw text-protocol values, and the zero dates nulled.

        :param values: the column's values as the server sent them (MySQL Client/Server Protocol, "Text
            Resultset Row"): ``bytes``, or None for NULL. Text arrives in ``utf8mb4``.
        :returns: ``(array of spec.arrow_type, zero_dates)``: a DATE/DATETIME that is not a calendar date
            (``0000-00-00``, ``2024-00-10``, ``2015-02-30``) and the zero TIMESTAMP become null and are
            counted.
        :raises ValueError: when a value cannot be staged exactly (it does not fit the Arrow type, text
            bytes its character set has no character for); the message names the column.
        """
        try:
            return self._stage(values)
        except Exception as err:  # any failure of a conversion is a value that cannot be staged
            raise ValueError(
                f"column {self.name!r} ({self.spec.mysql_type}"
                f"{f', character set {self.charset}' if self.charset else ''}): a value cannot be staged "
                f"as {self.spec.arrow_type}: {type(err).__name__}: {err}"
            ) from err


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
        whose type the extractor cannot stage or whose name takes the reserved prefix (the message names the
        column).
    """
    columns = [_source_column(db, table, row) for row in column_descriptions(cur, db, table)]
    if not columns:
        raise ValueError(f"table `{db}`.`{table}` has no columns visible to this user (does it exist?)")
    return columns


def rows_to_batch(
    columns: Sequence[SourceColumn], rows: Sequence[Sequence[bytes | None]]
) -> tuple[pa.RecordBatch, int]:
    """Return raw text-protocol rows as one record batch of the source columns, and the zero dates nulled.

    The rows are transposed into columns (``zip``, in C) and each column is staged at once
    (:meth:`SourceColumn.stage`): Arrow parses integers, DOUBLE, FLOAT, DECIMAL(p<=38) and YEAR from their
    text and validates UTF-8 text, Python converts the rest.

    :param columns: the columns the rows hold, in ``SELECT`` order (from :func:`describe_columns`).
    :param rows: tuples as :class:`RowReader` fetches them for ``SELECT <select_expr, ...>`` (one ``bytes``
        or None per column, in column order).
    :returns: ``(batch, zero_dates)``: a batch of ``len(rows)`` rows with one field per column, named
        after it and typed ``spec.arrow_type`` (no ``_binlog_*`` columns), and how many DATE/DATETIME/
        TIMESTAMP values were zero dates stored as null (the binlog path's ``zero_dates`` count).
    :raises ValueError: when a row's width differs from ``len(columns)``, or a value cannot be staged
        exactly; the message names the column.
    """
    # strict zips: rows of different widths, or of a width other than len(columns), raise ValueError
    values = list(zip(*rows, strict=True)) if rows else [() for _ in columns]
    arrays = []
    zero_dates = 0
    for column, column_values in zip(columns, values, strict=True):
        array, zeros = column.stage(column_values)
        arrays.append(array)
        zero_dates += zeros
    schema = pa.schema([pa.field(c.name, c.spec.arrow_type) for c in columns])
    return pa.RecordBatch.from_arrays(arrays, schema=schema), zero_dates


def default_driver(source: dict[str, Any]) -> str:
    """Return the :class:`RowReader` driver for ``source``: mysqlclient where it honours the TLS mode, else pymysql.

    mysqlclient reads ``disabled`` and ``preferred`` without TLS files (:data:`MYSQLCLIENT_TLS_MODES`); a
    source without ``tls_mode`` counts as ``preferred`` (pymysql's default). pymysql reads the other modes,
    TLS files, and in a Python without mysqlclient.
    """
    mode = source.get("tls_mode") or "preferred"
    if mode not in MYSQLCLIENT_TLS_MODES or source.get("ssl") or importlib.util.find_spec("MySQLdb") is None:
        return "pymysql"
    return "mysqlclient"


MYSQLCLIENT_TLS_MODES = ("disabled", "preferred")
"""The TLS modes a chunk's rows are read in with mysqlclient (without TLS files), the others with pymysql.

mysqlclient 2.3 emulates ``ssl_mode`` on MariaDB Connector/C with ``MYSQL_OPT_SSL_ENFORCE`` and
``MYSQL_OPT_SSL_VERIFY_SERVER_CERT`` (its ``_mysql.c``), and Connector/C 3.3 (Debian 12's libmariadb) does not
enforce: measured against MariaDB 10.11, ``ssl_mode="PREFERRED"`` (and ``ssl={}``) never negotiates TLS,
``ssl_mode="REQUIRED"`` negotiates it with a server that offers it and logs in in plaintext to one that does
not (``Ssl_cipher`` empty), and ``VERIFY_CA`` checks the host name too. So ``required`` and the verifying modes
cannot be trusted to it, and ``preferred`` is read with ``ssl_mode="REQUIRED"`` (unverified TLS when offered)
and, where the client library does enforce it (MySQL's libmysqlclient, Connector/C 3.4) and the server offers
no TLS (2026), again in plaintext: what preferred means (:func:`_mysqlclient_connect`)."""


def _mysqlclient_connect(source: dict[str, Any]) -> Any:
    """Return a raw-mode mysqlclient connection of ``source`` in its TLS mode (``disabled`` or ``preferred``).

    :raises ValueError: for another mode or TLS files (:data:`MYSQLCLIENT_TLS_MODES`).
    :raises MySQLdb.OperationalError: when the login fails.
    """
    import MySQLdb

    mode = source.get("tls_mode") or "preferred"
    if mode not in MYSQLCLIENT_TLS_MODES or source.get("ssl"):
        raise ValueError(f"the mysqlclient driver cannot read in TLS mode {mode} with TLS files: use pymysql")
    settings = {key: source[key] for key in _MYSQLCLIENT_SETTINGS if source.get(key) is not None}
    raw = {
        "charset": "utf8mb4",
        "use_unicode": False,
        "autocommit": True,
        "conv": _encoders("MySQLdb.converters"),
    }
    if mode == "preferred":
        try:
            return MySQLdb.connect(**settings, **raw, ssl_mode="REQUIRED")
        except MySQLdb.OperationalError as err:
            if not err.args or err.args[0] != _CR_SSL_CONNECTION_ERROR:
                raise
    return MySQLdb.connect(**settings, **raw, ssl_mode="DISABLED")


_CR_SSL_CONNECTION_ERROR = 2026
"""The client error of a TLS that could not be set up (MySQL manual, "Client Error Message Reference")."""


class RowReader:
    """The connection a chunk's ``SELECT`` is read over, returning every value as the bytes the server sent.

    The session uses ``utf8mb4``, autocommit and ``time_zone = '+00:00'`` (see the module docstring), and
    the rows are streamed (``mysql_use_result``: an unbuffered cursor), so a batch's rows are all a read
    holds in memory. The driver is mysqlclient (``MySQLdb``: libmariadb/libmysqlclient parses the rows in
    C; ``benchmarks/snapshot_row_paths.py`` measures it against the alternatives) with no field converters
    and ``use_unicode=False``: every value is ``bytes`` or None, and :func:`rows_to_batch` stages them
    column by column. A source whose TLS mode is neither ``disabled`` nor ``preferred``, or that has TLS
    files (:data:`MYSQLCLIENT_TLS_MODES`), or a Python without mysqlclient (a Spark side the provider's code was shipped to, ``jobs/shipping.py``: a C
    extension cannot be shipped in a zip), is read with pymysql in the same raw mode instead (both drivers
    stage the same values: ``tests/integration/test_snapshot_rows.py``), slower (``docs/benchmarks.md``,
    "Snapshot row paths"), over a :class:`~airflow_provider_binlog.source.connect.LoginTimeoutConnection`
    that applies the TLS mode as every other connection does and ``connect_timeout`` to the whole login.

    :param source: :class:`~airflow_provider_binlog.source.connect.LoginTimeoutConnection` keyword arguments
        (``host``, ``port``, ``user``, ``password``, ``connect_timeout``, ``read_timeout``,
        ``write_timeout``, ``tls_mode``, ``ssl``); ``charset`` and ``autocommit`` are set here.
    :param driver: ``mysqlclient`` or ``pymysql``; None picks as described above (:func:`default_driver`).
    :raises ValueError: for an unknown driver, or mysqlclient for a TLS mode it cannot honour.
    :raises ~airflow_provider_binlog.source.connect.TlsConnectionError: when TLS fails (pymysql).
    :raises MySQLdb.OperationalError, pymysql.err.OperationalError: when the login fails.
    """

    def __init__(self, source: dict[str, Any], driver: str | None = None) -> None:
        self.driver = driver or default_driver(source)
        if self.driver == "mysqlclient":
            import MySQLdb.cursors

            self.connection = _mysqlclient_connect(source)
            self._cursor_class: Any = MySQLdb.cursors.SSCursor
        elif self.driver == "pymysql":
            import pymysql.cursors

            from airflow_provider_binlog.source.connect import LoginTimeoutConnection

            settings = {**source, "charset": "utf8mb4", "use_unicode": False, "autocommit": True}
            self.connection = LoginTimeoutConnection(**settings, conv=_encoders("pymysql.converters"))
            self._cursor_class = pymysql.cursors.SSCursor
        else:
            raise ValueError(f"unknown driver {driver!r}: use mysqlclient or pymysql")
        try:
            with self.connection.cursor() as cur:
                cur.execute("SET time_zone = '+00:00'")
        except BaseException:
            self.connection.close()
            raise

    def batches(
        self, sql: str, params: Sequence[Any], columns: Sequence[SourceColumn], batch_rows: int
    ) -> Iterator[tuple[pa.RecordBatch, int]]:
        """Run ``sql`` (selecting ``columns``' ``select_expr`` in order) and yield its rows as record batches.

        :param batch_rows: rows fetched per round of the driver and per batch.
        :returns: an iterator of :func:`rows_to_batch` results, ``batch_rows`` rows each but the last.
        :raises ValueError: as :func:`rows_to_batch`.
        """
        cur = self.connection.cursor(self._cursor_class)
        try:
            cur.execute(sql, tuple(params))
            while (batch := _fetch_batch(cur, batch_rows, columns)) is not None:
                yield batch
        finally:
            cur.close()

    def close(self) -> None:
        """Close the connection."""
        self.connection.close()


def _fetch_batch(cur: Any, count: int, columns: Sequence[SourceColumn]) -> tuple[pa.RecordBatch, int] | None:
    """Return the next ``count`` rows (fewer at the end) as :func:`rows_to_batch` does, None after the last.

    Python's cyclic garbage collector is paused meanwhile: every row is a new tuple the collector tracks,
    so fetching and transposing them starts collections that walk all the rows still held (py-spy: 37%
    of a 1M-row read). Rows of bytes hold no reference cycles.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        rows = cur.fetchmany(count)
        return rows_to_batch(columns, rows) if rows else None
    finally:
        if enabled:
            gc.enable()


def _encoders(module: str) -> dict[Any, Any]:
    """Return a driver's parameter encoders (its ``conversions`` entries keyed by Python type), no decoders."""
    import importlib

    conversions = importlib.import_module(module).conversions
    return {key: value for key, value in conversions.items() if not isinstance(key, int)}


_MYSQLCLIENT_SETTINGS = (
    "host",
    "port",
    "user",
    "password",
    "connect_timeout",
    "read_timeout",
    "write_timeout",
)
"""The ``pymysql.connect()`` arguments that mean the same to ``MySQLdb.connect()``."""


# --- column descriptions ---------------------------------------------------------------------------


def _text(value: Any) -> str:
    """Return an information_schema text value as ``str`` (some servers send it as bytes)."""
    return value.decode() if isinstance(value, bytes | bytearray) else str(value or "")


def _source_column(db: str, table: str, row: tuple[Any, ...]) -> SourceColumn:
    """Return the :class:`SourceColumn` of one information_schema.COLUMNS row."""
    name = _text(row[0])
    reserved = reserved_name_problem(name)
    if reserved:
        raise ValueError(f"column {name!r} of `{db}`.`{table}`: {reserved}")
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


_ARROW_PARSED = (pa.types.is_integer, pa.types.is_floating, pa.types.is_decimal)
"""Staged types Arrow parses from the text the server sends (``cast`` from binary: strict, raises on any
character or range it does not accept): integers, YEAR, DOUBLE, FLOAT (selected as DOUBLE, then cast to
float32: the value is a float32, so the cast is exact), BIGINT UNSIGNED and DECIMAL(p<=38) (decimal128,
rescaled to the column's scale; a value needing more digits raises)."""


def _stager(
    spec: ColumnSpec, decode_text: Callable[[bytes], str] | None
) -> Callable[[Sequence[bytes | None]], tuple[pa.Array, int]]:
    """Return the function staging one column's raw values: ``values -> (array, zero dates)``.

    Arrow stages the common types column-wise: the types of :data:`_ARROW_PARSED`, utf8mb3/utf8mb4 text
    (UTF-8 validated) and binary strings (as sent; BINARY(n) keeps its 0x00 padding: MySQL manual, "The
    BINARY and VARBINARY Types"). The rest is converted value by value in Python: temporal types with
    pymysql's text-protocol decoders (``pymysql.converters``: TIME negative and beyond 24 hours, fractions
    exact; a DATE/DATETIME/TIMESTAMP that is no calendar date stays text and becomes null), BIT,
    DECIMAL(p>38) and text of other character sets (``decode_text``).
    """
    label, arrow = spec.mysql_type, spec.arrow_type
    base = label.split("(", 1)[0]
    if decode_text is not None:
        return _python_stager(arrow, decode_text)
    if base == "bit":
        return _python_stager(arrow, _bit if pa.types.is_integer(arrow) else _bit_decimal)
    if base == "decimal" and pa.types.is_string(arrow):
        return _python_stager(arrow, _decimal_text)
    if base in ("timestamp", "datetime", "date", "time"):
        return _python_stager(arrow, _TEMPORAL_DECODERS[base], zero_dates=base != "time")
    if pa.types.is_string(arrow):
        return lambda values: (pa.array(values, pa.binary()).cast(pa.string()), 0)
    if pa.types.is_binary(arrow):
        return lambda values: (pa.array(values, pa.binary()), 0)
    if any(is_type(arrow) for is_type in _ARROW_PARSED):
        parsed = pa.float64() if pa.types.is_float32(arrow) else arrow
        return lambda values: (pa.array(values, pa.binary()).cast(parsed).cast(arrow), 0)
    raise ValueError(f"no staging of {label} as {arrow}")  # describe_columns gives no other spec


def _python_stager(
    arrow: pa.DataType, convert: Callable[[bytes], Any], zero_dates: bool = False
) -> Callable[[Sequence[bytes | None]], tuple[pa.Array, int]]:
    """Return a stager converting each non-null value with ``convert``.

    With ``zero_dates``, the values ``convert`` turned into None are counted as zero dates.
    """

    def stage(values: Sequence[bytes | None]) -> tuple[pa.Array, int]:
        converted = [None if value is None else convert(value) for value in values]
        zeros = 0
        if zero_dates:
            zeros = sum(1 for value in converted if value is None) - sum(
                1 for value in values if value is None
            )
        return pa.array(converted, type=arrow), zeros

    return stage


def _decimal_text(value: bytes) -> str:
    """Return a DECIMAL(p>38) as ``str(Decimal)``, as the binlog path stages it (zero of scale 30: ``0E-30``)."""
    return str(decimal.Decimal(value.decode("ascii")))


def _timestamp(value: bytes) -> dt.datetime | None:
    """Return a TIMESTAMP read in a ``+00:00`` session as UTC, the zero TIMESTAMP as None.

    The binlog stores a TIMESTAMP as seconds since the epoch, the zero one as 0 (MySQL internals,
    "Date and Time Data Type Representation"), and the binlog path stages that as None, counted as a
    zero date like the zero DATE/DATETIME.
    """
    parsed = convert_datetime(value)
    return parsed.replace(tzinfo=UTC) if isinstance(parsed, dt.datetime) else None


def _calendar(convert: Callable[[bytes], Any]) -> Callable[[bytes], Any]:
    """Return ``convert`` with the text it leaves for no calendar date (``0000-00-00``) as None."""
    return lambda value: None if isinstance(parsed := convert(value), str) else parsed


def _time(value: bytes) -> dt.timedelta:
    """Return a TIME (``[-]HHH:MM:SS[.ffffff]``) as ``timedelta``.

    :raises ValueError: when the text is no TIME (pymysql leaves it as text).
    """
    parsed = convert_timedelta(value)
    if not isinstance(parsed, dt.timedelta):
        raise ValueError(f"{value!r} is not a TIME")
    return parsed


_TEMPORAL_DECODERS: dict[str, Callable[[bytes], Any]] = {
    "timestamp": _timestamp,
    "datetime": _calendar(convert_datetime),
    "date": _calendar(convert_date),
    "time": _time,
}


def _bit_decimal(value: bytes) -> decimal.Decimal:
    """Return BIT(64) as ``Decimal``: it is staged as decimal128(20,0) (int64 stops at 2**63-1)."""
    return decimal.Decimal(_bit(value))


def _stored_text(charset: str) -> Callable[[bytes], str]:
    """Return the decoding of a text column's stored bytes (``CAST(col AS BINARY)``), as the binlog path's.

    :raises ValueError: when ``charset`` is not a character set the extractor knows (an unknown collation).
    """
    decode = text_decoder(charset)
    return lambda value: decode(bytes(value))


def _bit(value: bytes) -> int:
    """Return BIT(n) as an int: it is sent as ``(n + 7) // 8`` bytes, big-endian (MySQL manual, "Bit-Value Type - BIT")."""
    return int.from_bytes(value, "big")
