"""Parse TABLE_MAP events: the column layout of the rows events that follow, with optional metadata.

Format: MySQL internals, "TABLE_MAP_EVENT" (``libs/mysql/binlog/event/rows_event.h``,
``Table_map_event``): post-header table id (6 bytes; 4 when the post-header is 6 bytes long) and flags
(2); body: schema and table names (length byte, bytes, NUL), the column count (packed), one type byte
per column, the packed length of the per-column metadata block, that block, the NULL-ability bitmap, then
the optional metadata fields as ``type (1 byte), length (packed), value`` (``binlog_row_metadata``:
MINIMAL writes SIGNEDNESS, the charsets, GEOMETRY_TYPE, VECTOR_DIMENSIONALITY; FULL adds COLUMN_NAME,
SET/ENUM_STR_VALUE, the primary key and COLUMN_VISIBILITY).

:class:`TableMapParser` parses each distinct event body once: the body identifies the definition
completely (an ALTER changes the table id and the metadata), so a cached definition is never stale.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, TypeVar

from pymysqlreplication.constants import FIELD_TYPE

from airflow_provider_binlog.contract.names import qualified_name
from airflow_provider_binlog.extract.columns import VECTOR
from airflow_provider_binlog.extract.errors import UndecodableEventError
from airflow_provider_binlog.extract.tablemaps import collation_charset, redecode_members
from airflow_provider_binlog.extract.wire import packed_bytes, packed_integer

if TYPE_CHECKING:
    from airflow_provider_binlog.extract.decoder import RowDecoder

MAX_CACHED_DEFINITIONS = 4096
"""Distinct table-map bodies kept parsed; the cache is cleared when it holds more."""

_NUMERIC = frozenset(
    {
        FIELD_TYPE.DECIMAL,
        FIELD_TYPE.TINY,
        FIELD_TYPE.SHORT,
        FIELD_TYPE.LONG,
        FIELD_TYPE.FLOAT,
        FIELD_TYPE.DOUBLE,
        FIELD_TYPE.LONGLONG,
        FIELD_TYPE.INT24,
        FIELD_TYPE.NEWDECIMAL,
        FIELD_TYPE.YEAR,
    }
)
"""Columns the SIGNEDNESS bitmap has a bit for (``Table_map_event``, ``is_numeric_type``). YEAR is among
them: MariaDB 10.11 sets its bit (YEAR is an unsigned one-byte integer), as measured against
mysql-replication, which counts it too (``tests/integration/test_event_reader.py``)."""
_CHARACTER = frozenset(
    {FIELD_TYPE.STRING, FIELD_TYPE.VAR_STRING, FIELD_TYPE.VARCHAR, FIELD_TYPE.BLOB, VECTOR}
)
"""Columns the (DEFAULT_/COLUMN_)CHARSET fields list (``is_character_type``, which counts MySQL 9's
VECTOR as a binary string; MariaDB adds GEOMETRY)."""
_ENUM_SET = frozenset({FIELD_TYPE.ENUM, FIELD_TYPE.SET})
_ONE_BYTE_METADATA = frozenset(
    {
        FIELD_TYPE.FLOAT,
        FIELD_TYPE.DOUBLE,
        FIELD_TYPE.BLOB,
        FIELD_TYPE.TINY_BLOB,
        FIELD_TYPE.MEDIUM_BLOB,
        FIELD_TYPE.LONG_BLOB,
        FIELD_TYPE.GEOMETRY,
        FIELD_TYPE.JSON,
        FIELD_TYPE.TIME2,
        FIELD_TYPE.DATETIME2,
        FIELD_TYPE.TIMESTAMP2,
        VECTOR,
    }
)

# Optional metadata field types (``Table_map_event::Optional_metadata_field_type``).
SIGNEDNESS = 1
DEFAULT_CHARSET = 2
COLUMN_CHARSET = 3
COLUMN_NAME = 4
SET_STR_VALUE = 5
ENUM_STR_VALUE = 6
GEOMETRY_TYPE = 7
SIMPLE_PRIMARY_KEY = 8
PRIMARY_KEY_WITH_PREFIX = 9
ENUM_AND_SET_DEFAULT_CHARSET = 10
ENUM_AND_SET_COLUMN_CHARSET = 11
COLUMN_VISIBILITY = 12
VECTOR_DIMENSIONALITY = 13


class TableMapColumn(Protocol):
    """A table-map column as the staging and decoding functions read it: ours or mysql-replication's.

    :class:`Column` is one (also as :func:`~airflow_provider_binlog.extract.ddl.record_column` rebuilds it
    from the manifest's schema history); so is mysql-replication's ``pymysqlreplication.column.Column``, which
    tests pass to :mod:`~airflow_provider_binlog.extract.columns`, :mod:`~airflow_provider_binlog.extract.ddl`
    and :class:`~airflow_provider_binlog.extract.decoder.RowDecoder` as the reference.

    These are the attributes those functions read by name (see :class:`Column` for their meaning). A
    mysql-replication column has the type-specific ones only for its type (``max_length`` for strings,
    ``precision`` and ``decimals`` for DECIMAL, ...) and no ``members_problem``: each is read where the type
    says it is there, or after a ``getattr`` found it. The functions also read ``mysql_charset``,
    ``character_set_name``, ``length_size``, ``nullable`` and ``dimensions`` with ``getattr`` and a default
    (mysql-replication's columns lack some of them), so they are not named here.
    """

    type: int
    name: str
    unsigned: bool
    max_length: int
    precision: int
    decimals: int
    fsp: int
    bits: int
    size: int
    enum_values: list[str] | None
    set_values: list[str] | None
    members_problem: str | None


@dataclass(eq=False)
class Column:
    """One column of a table map.

    Its attributes are those :class:`~..decoder.RowDecoder` and :func:`~..columns.column_spec` read, by
    the names mysql-replication's ``Column`` uses.

    :param type: binlog type code (``STRING`` resolved to ``ENUM``/``SET`` when its metadata says so).
    :param name: column name; ``UNKNOWN_COL<i>`` without ``binlog_row_metadata=FULL``.
    :param unsigned: from SIGNEDNESS (False when the table map has no such field).
    :param max_length: bytes of CHAR/VARCHAR values at most.
    :param length_size: bytes of the length prefix of BLOB/TEXT/GEOMETRY/JSON/VECTOR values.
    :param precision: DECIMAL precision. :param decimals: DECIMAL scale.
    :param fsp: fractional second digits of TIME2/DATETIME2/TIMESTAMP2.
    :param bits: BIT(n)'s n. :param bytes: bytes of a BIT value.
    :param size: bytes of an ENUM/SET value (or of FLOAT/DOUBLE).
    :param mysql_charset: server character set of text, ENUM and SET columns, when the table map has it.
    :param enum_values: ENUM members, ``''`` (the error value, index 0) first. :param set_values: SET members.
    :param nullable: from the NULL-ability bitmap.
    :param visible: False for an INVISIBLE column (COLUMN_VISIBILITY; True when absent).
    :param geometry_type: GEOMETRY_TYPE's code (0 = GEOMETRY, 1 = POINT, ...), when present.
    :param dimensions: VECTOR(n)'s n, when VECTOR_DIMENSIONALITY is present.
    """

    type: int
    name: str
    nullable: bool = True
    unsigned: bool = False
    max_length: int = 0
    length_size: int = 0
    precision: int = 0
    decimals: int = 0
    fsp: int = 0
    bits: int = 0
    bytes: int = 0
    size: int = 0
    character_set_name: str | None = None
    mysql_charset: str | None = None
    enum_values: list[str] | None = None
    set_values: list[str] | None = None
    members_problem: str | None = None
    visible: bool = True
    geometry_type: int | None = None
    dimensions: int | None = None


@dataclass(eq=False)
class TableMap:
    """A parsed TABLE_MAP event.

    :param table_id: the id the rows events name (valid until the next table map of the same id).
    :param schema: database name. :param table: table name.
    :param columns: the columns in table order.
    :param primary_key: column names of SIMPLE_PRIMARY_KEY / PRIMARY_KEY_WITH_PREFIX (empty without FULL).
    :param flags: the event's flags.
    :param metadata: optional metadata field types present (for tests and error messages).
    """

    table_id: int
    schema: str
    table: str
    columns: list[Column]
    primary_key: list[str] = field(default_factory=list)
    flags: int = 0
    metadata: frozenset[int] = frozenset()
    decoder: RowDecoder | None = None
    """The row decoder of this layout, set by the reader on first use."""

    @functools.cached_property
    def name(self) -> str:
        """Return ``db.table`` (built once: the window reader asks for it per rows event)."""
        return qualified_name(self.schema, self.table)


class TableMapParser:
    """Parse TABLE_MAP bodies, each distinct body once.

    :param flavor: ``mysql`` or ``mariadb`` (collation ids above 245 differ).
    :param table_id_size: 6, or 4 for a post-header of 6 bytes (MySQL 5.0 and older).
    """

    def __init__(self, flavor: str, table_id_size: int = 6) -> None:
        self.flavor = flavor
        self.table_id_size = table_id_size
        self._cache: dict[bytes, TableMap] = {}

    def parse(self, body: bytes) -> TableMap:
        """Return the table map of ``body`` (post-header + body, checksum excluded).

        :raises UndecodableEventError: when the body is malformed.
        """
        cached = self._cache.get(body)
        if cached is not None:
            return cached
        try:
            table_map = self._parse(body)
        except (IndexError, ValueError) as err:
            raise UndecodableEventError(f"TABLE_MAP event cannot be parsed: {err}") from err
        if len(self._cache) >= MAX_CACHED_DEFINITIONS:
            self._cache.clear()
        self._cache[body] = table_map
        return table_map

    def _parse(self, body: bytes) -> TableMap:
        width = self.table_id_size
        table_id = int.from_bytes(body[:width], "little")
        flags = int.from_bytes(body[width : width + 2], "little")
        pos = width + 2
        schema = body[pos + 1 : pos + 1 + body[pos]].decode("utf-8")
        pos += body[pos] + 2
        table = body[pos + 1 : pos + 1 + body[pos]].decode("utf-8")
        pos += body[pos] + 2
        count, pos = packed_integer(body, pos)
        types = list(body[pos : pos + count])
        pos += count
        meta_length, pos = packed_integer(body, pos)
        columns = _columns(types, body[pos : pos + meta_length])
        pos += meta_length
        nullable = int.from_bytes(body[pos : pos + (count + 7) // 8], "little")
        pos += (count + 7) // 8
        for index, column in enumerate(columns):
            column.nullable = bool(nullable >> index & 1)
        fields: dict[int, bytes] = {}
        while pos < len(body):
            kind = body[pos]
            length, pos = packed_integer(body, pos + 1)
            fields[kind] = bytes(body[pos : pos + length])
            pos += length
        primary_key = self._apply_metadata(columns, fields)
        return TableMap(table_id, schema, table, columns, primary_key, flags, frozenset(fields))

    def _apply_metadata(self, columns: list[Column], fields: dict[int, bytes]) -> list[str]:
        """Set what the optional metadata fields say on ``columns``; return the primary key's names."""
        if SIGNEDNESS in fields:
            numeric = [c for c in columns if c.type in _NUMERIC]
            for column, unsigned in zip(
                numeric, _bits_msb_first(fields[SIGNEDNESS], len(numeric)), strict=True
            ):
                column.unsigned = unsigned
        if COLUMN_NAME in fields:
            names = _strings(fields[COLUMN_NAME])
            for column, name in zip(columns, names, strict=True):
                column.name = name.decode("utf-8")
        character = [
            c
            for c in columns
            if c.type in _CHARACTER or (c.type == FIELD_TYPE.GEOMETRY and self.flavor == "mariadb")
        ]
        self._charsets(character, fields.get(DEFAULT_CHARSET), fields.get(COLUMN_CHARSET))
        enum_set = [c for c in columns if c.type in _ENUM_SET]
        self._charsets(
            enum_set, fields.get(ENUM_AND_SET_DEFAULT_CHARSET), fields.get(ENUM_AND_SET_COLUMN_CHARSET)
        )
        for kind, code in ((ENUM_STR_VALUE, FIELD_TYPE.ENUM), (SET_STR_VALUE, FIELD_TYPE.SET)):
            if kind not in fields:
                continue
            owners = [c for c in columns if c.type == code]
            for column, raw_members in zip(owners, _member_lists(fields[kind]), strict=True):
                member_names = [m.decode("utf-8", "surrogateescape") for m in raw_members]
                if code == FIELD_TYPE.ENUM:
                    column.enum_values = ["", *member_names]
                else:
                    column.set_values = member_names
                redecode_members(column)
        if COLUMN_VISIBILITY in fields:
            for column, visible in zip(
                columns, _bits_msb_first(fields[COLUMN_VISIBILITY], len(columns)), strict=True
            ):
                column.visible = visible
        if GEOMETRY_TYPE in fields:
            for column, code in zip(
                [c for c in columns if c.type == FIELD_TYPE.GEOMETRY],
                _integers(fields[GEOMETRY_TYPE]),
                strict=True,
            ):
                column.geometry_type = code
        if VECTOR_DIMENSIONALITY in fields:
            for column, dims in zip(
                [c for c in columns if c.type == VECTOR],
                _integers(fields[VECTOR_DIMENSIONALITY]),
                strict=True,
            ):
                column.dimensions = dims
        if SIMPLE_PRIMARY_KEY in fields:
            return [columns[i].name for i in _integers(fields[SIMPLE_PRIMARY_KEY])]
        if PRIMARY_KEY_WITH_PREFIX in fields:
            pairs = _integers(fields[PRIMARY_KEY_WITH_PREFIX])
            return [columns[i].name for i in pairs[::2]]
        return []

    def _charsets(self, columns: list[Column], default: bytes | None, per_column: bytes | None) -> None:
        """Set ``mysql_charset`` of ``columns`` from their charset fields.

        A DEFAULT_CHARSET-style field holds the default collation, then ``(index among these columns,
        collation)`` pairs for the others; a COLUMN_CHARSET-style field one collation per column.
        """
        if per_column is not None:
            ids = _integers(per_column)
        elif default is not None:
            numbers = _integers(default)
            ids = [numbers[0]] * len(columns)
            for index, collation in zip(numbers[1::2], numbers[2::2], strict=True):
                ids[index] = collation
        else:
            return
        if len(ids) != len(columns):
            raise ValueError(f"{len(ids)} collations for {len(columns)} columns")
        for column, collation in zip(columns, ids, strict=True):
            column.mysql_charset = collation_charset(collation, self.flavor)


def _columns(types: list[int], meta: bytes) -> list[Column]:
    """Return the columns of the type bytes and the per-column metadata block.

    ``Table_map_event``, "field metadata": 1 byte for FLOAT/DOUBLE, BLOB/GEOMETRY/JSON/VECTOR (length
    bytes) and the fractional temporals (fsp); 2 bytes for VARCHAR (maximum length), BIT (bits % 8,
    bytes), NEWDECIMAL (precision, scale) and STRING (real type, length), none for the others.
    """
    columns = []
    pos = 0
    for index, code in enumerate(types):
        column = Column(code, f"UNKNOWN_COL{index}")
        if code in _ONE_BYTE_METADATA:
            value = meta[pos]
            pos += 1
            if code in (FIELD_TYPE.FLOAT, FIELD_TYPE.DOUBLE):
                column.size = value
            elif code in (FIELD_TYPE.TIME2, FIELD_TYPE.DATETIME2, FIELD_TYPE.TIMESTAMP2):
                column.fsp = value
            else:
                column.length_size = value
        elif code in (FIELD_TYPE.VARCHAR, FIELD_TYPE.VAR_STRING):
            column.max_length = int.from_bytes(meta[pos : pos + 2], "little")
            pos += 2
        elif code == FIELD_TYPE.BIT:
            column.bits = meta[pos + 1] * 8 + meta[pos]
            column.bytes = (column.bits + 7) // 8
            pos += 2
        elif code == FIELD_TYPE.NEWDECIMAL:
            column.precision, column.decimals = meta[pos], meta[pos + 1]
            pos += 2
        elif code in (FIELD_TYPE.STRING, FIELD_TYPE.ENUM, FIELD_TYPE.SET):
            real, low = meta[pos], meta[pos + 1]
            pos += 2
            if real in (FIELD_TYPE.ENUM, FIELD_TYPE.SET):
                column.type, column.size = real, low
            else:  # CHAR: the length's two high bits are stored inverted in bits 4-5 of the real type
                column.max_length = (((real & 0x30) ^ 0x30) << 4) | low
        columns.append(column)
    if pos != len(meta):
        raise ValueError(f"column metadata is {len(meta)} bytes, the column types use {pos}")
    return columns


def _bits_msb_first(raw: bytes, count: int) -> list[bool]:
    """Return ``count`` flags of a bitmap whose first flag is the high bit of its first byte."""
    return [bool(raw[i // 8] >> (7 - i % 8) & 1) for i in range(count)]


_T = TypeVar("_T")


def _all(raw: bytes, read: Callable[[bytes, int], tuple[_T, int]]) -> list[_T]:
    """Return every item of ``raw`` read back to back with ``read(raw, pos) -> (item, next pos)``."""
    out, pos = [], 0
    while pos < len(raw):
        item, pos = read(raw, pos)
        out.append(item)
    return out


def _integers(raw: bytes) -> list[int]:
    """Return the packed integers of an optional metadata field."""
    return _all(raw, packed_integer)


def _strings(raw: bytes) -> list[bytes]:
    """Return the packed strings of an optional metadata field."""
    return _all(raw, packed_bytes)


def _members(raw: bytes, pos: int) -> tuple[list[bytes], int]:
    count, pos = packed_integer(raw, pos)
    names = []
    for _ in range(count):
        name, pos = packed_bytes(raw, pos)
        names.append(name)
    return names, pos


def _member_lists(raw: bytes) -> list[list[bytes]]:
    """Return the ENUM/SET member names per column: a packed count, then that many packed strings."""
    return _all(raw, _members)
