"""A table-map cache for mysql-replication: parse each distinct TABLE_MAP_EVENT body once.

Every row-based transaction starts with a TABLE_MAP_EVENT per table it touches (MySQL internals,
"TABLE_MAP_EVENT"); mysql-replication parses it (columns, optional metadata) every time, which is
most of its cost on small OLTP transactions. The body bytes identify the definition completely (an
ALTER TABLE changes the table id and the column metadata, so a stale definition cannot be served),
so :class:`CachedTableMapEvent` keys its cache by them.

The library picks event classes from a map in ``BinLogPacketWrapper`` and drops events whose class is
not in the stream's allowed set; :func:`table_map_cache` installs the subclass in that map for the
duration of one read, and :data:`CACHED_TABLE_MAP_EVENTS` must be added to ``only_events`` (otherwise
the library would silently skip table maps and then drop the rows that need them).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, ClassVar

from pymysqlreplication.constants import CHARSET, FIELD_TYPE
from pymysqlreplication.constants.BINLOG import TABLE_MAP_EVENT
from pymysqlreplication.event import BinLogEvent
from pymysqlreplication.packet import BinLogPacketWrapper
from pymysqlreplication.row_event import TableMapEvent

from airflow_provider_binlog.extract.charsets import text_decoder

MAX_CACHED_DEFINITIONS = 4096
_PER_EVENT_FIELDS = frozenset({"packet", "table_map", "timestamp", "_ctl_connection"})
UCA1400_CHARSETS = ("utf8mb3", "utf8mb4", "ucs2", "utf16", "utf32")
"""Character sets of MariaDB 10.10+'s UCA 14.0.0 collations, whose ids are ``2048 + 256 * index + n``
(MariaDB ``strings/ctype-uca1400.h``; ``utf8mb3_uca1400_ai_ci`` is 2048, ``utf8mb4_...`` 2304, ``ucs2_...``
2560, ``utf16_...`` 2816, ``utf32_...`` 3072); mysql-replication does not know them."""


class CachedTableMapEvent(TableMapEvent):
    """A TableMapEvent that reuses the parsed definition of an identical, earlier event body."""

    _cache: ClassVar[dict[bytes, dict[str, Any]]] = {}

    def __init__(
        self, from_packet: Any, event_size: int, table_map: Any, ctl_connection: Any, **kwargs: Any
    ) -> None:
        raw = from_packet.packet
        body = bytes(raw._data[raw._position : raw._position + event_size])
        cached = self._cache.get(body)
        if cached is not None:
            BinLogEvent.__init__(self, from_packet, event_size, table_map, ctl_connection, **kwargs)
            self.__dict__.update(cached)
            return
        super().__init__(from_packet, event_size, table_map, ctl_connection, **kwargs)
        if self._processed:
            attach_charsets(self)
            if len(self._cache) >= MAX_CACHED_DEFINITIONS:
                self._cache.clear()
            self._cache[body] = {k: v for k, v in self.__dict__.items() if k not in _PER_EVENT_FIELDS}

    def _read_type_values(self, length: int) -> list[list[str]] | None:
        """Read the ENUM/SET member names of the optional metadata, keeping every byte.

        The same format as the library reads (MySQL internals, "TABLE_MAP_EVENT", ``ENUM_STR_VALUE`` /
        ``SET_STR_VALUE``: per column a packed count, then packed-length strings), but a name is decoded
        as UTF-8 with ``surrogateescape`` (its bytes come back with ``.encode("utf-8", "surrogateescape")``)
        instead of becoming ``''`` when it is not UTF-8; :func:`redecode_members` decodes it in the
        column's character set.
        """
        packet = self.packet
        read_until = packet.read_bytes + length
        if packet.read_bytes >= read_until:
            return None
        result = []
        while packet.read_bytes < read_until:
            count = packet.read_length_coded_binary()
            result.append(
                [
                    packet.read_variable_length_string().decode("utf-8", "surrogateescape")
                    for _ in range(count)
                ]
            )
        return result


CACHED_TABLE_MAP_EVENTS = [CachedTableMapEvent]

_EVENT_MAP_ATTRIBUTE = "_BinLogPacketWrapper__event_map"


@contextmanager
def table_map_cache() -> Iterator[None]:
    """Make mysql-replication build :class:`CachedTableMapEvent` for table maps inside the block.

    :raises RuntimeError: when the library's event map is not where this module expects it (a
        library upgrade changed it); the extractor then refuses to run rather than lose rows.
    """
    event_map = getattr(BinLogPacketWrapper, _EVENT_MAP_ATTRIBUTE, None)
    if not isinstance(event_map, dict) or event_map.get(TABLE_MAP_EVENT) not in (
        TableMapEvent,
        CachedTableMapEvent,
    ):
        raise RuntimeError("mysql-replication's event map changed; the table-map cache cannot be installed")
    previous = event_map[TABLE_MAP_EVENT]
    event_map[TABLE_MAP_EVENT] = CachedTableMapEvent
    try:
        yield
    finally:
        event_map[TABLE_MAP_EVENT] = previous


def collation_charset(collation_id: int, dbms: str) -> str:
    """Return the character set name of a collation id of a table map, or ``collation <id>`` when unknown.

    :param collation_id: the collation id (MySQL internals, "TABLE_MAP_EVENT" optional metadata
        ``DEFAULT_CHARSET`` / ``COLUMN_CHARSET``).
    :param dbms: ``mysql`` or ``mariadb`` (their ids above 245 differ).
    """
    if 2048 <= collation_id < 2048 + 256 * len(UCA1400_CHARSETS):
        return UCA1400_CHARSETS[(collation_id - 2048) // 256]
    charset = CHARSET.charset_by_id(collation_id, dbms)
    return str(charset.name) if charset is not None else f"collation {collation_id}"


def attach_charsets(event: TableMapEvent) -> None:
    """Set ``mysql_charset`` (the server's character set name) on each text, ENUM and SET column of a table map.

    mysql-replication keeps only a codec name per column (``character_set_name``: ``utf8`` for both
    utf8mb3 and utf8mb4, ``cp1252`` for latin1) and turns a collation id it does not know into ``utf8``;
    the column's collation id is in the event's optional metadata, in column order among the text
    columns and among the ENUM/SET columns (MySQL internals, "TABLE_MAP_EVENT"; mysql-replication
    ``TableMapEvent._sync_column_info``). ENUM/SET member names are decoded in their character set
    (see :func:`redecode_members`).
    """
    metadata = getattr(event, "optional_metadata", None)
    dbms = getattr(event, "dbms", None) or "mysql"
    groups = (
        (event._is_character_column, getattr(metadata, "charset_collation_list", None)),
        (event._is_enum_or_set_column, getattr(metadata, "enum_and_set_collation_list", None)),
    )
    for belongs, ids in groups:
        columns = [c for c in event.columns if belongs(c.type, dbms=dbms)]
        if not ids or len(ids) != len(columns):
            continue
        for column, collation_id in zip(columns, ids, strict=True):
            column.mysql_charset = collation_charset(int(collation_id), dbms)
            if column.type in (FIELD_TYPE.ENUM, FIELD_TYPE.SET):
                redecode_members(column)


def redecode_members(column: Any) -> None:
    """Decode an ENUM/SET column's member names in the column's character set, or record why not.

    The table map holds the names in the column's character set; :class:`CachedTableMapEvent` reads
    them as UTF-8 with ``surrogateescape``, which gives their bytes back exactly, and they are decoded
    here with the server's table (:func:`~airflow_provider_binlog.extract.charsets.text_decoder`). When
    that fails, ``members_problem`` says why and the column is refused.
    """
    charset = getattr(column, "mysql_charset", None)
    if not isinstance(charset, str) or charset == "binary":
        return
    is_enum = column.type == FIELD_TYPE.ENUM
    members = list((column.enum_values if is_enum else column.set_values) or [])
    names = members[1:] if is_enum else members  # the library puts '' (index 0, the error value) first
    try:
        decode = text_decoder(charset)
        decoded = [decode(name.encode("utf-8", "surrogateescape")) for name in names]
    except ValueError as err:
        column.members_problem = f"ENUM/SET member names cannot be decoded exactly: {err}"
        return
    if is_enum:
        column.enum_values = ["", *decoded]
    else:
        column.set_values = decoded
