"""Parse the bodies of the binlog events the extractor acts on, for both flavors.

Each parser takes the event's bytes after the 19-byte common header, checksum excluded, and returns a
small frozen dataclass. Formats: MySQL source ``libs/mysql/binlog/event/`` (``control_events.h``,
``statement_events.h``, ``rows_event.h``) and the MySQL internals manual ("Binlog Event" pages); MariaDB KB,
"Replication Protocol" (GTID_EVENT, GTID_LIST_EVENT, ANNOTATE_ROWS_EVENT).

Over 500 lines because each event type's parser sits beside the others with the byte layout it reads;
they share the length-encoded integer and string readers and nothing else.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from airflow_provider_binlog.extract.errors import UndecodableEventError
from airflow_provider_binlog.extract.wire import (
    cstring,
    packed_integer,
    uuid_text,
    varlen_signed,
    varlen_unsigned,
)

HEADER = struct.Struct("<IBIIIH")
"""The v4 common header: timestamp (s), type code, server id, event size, end position, flags."""
HEADER_SIZE = HEADER.size


@dataclass(frozen=True)
class FormatDescription:
    """FORMAT_DESCRIPTION_EVENT: how the following events are laid out.

    :param binlog_version: 4. :param server_version: the server's version string.
    :param created: creation time (s since the epoch; 0 after the first file).
    :param header_length: 19. :param post_header_lengths: the post-header length of type code ``i`` at ``i - 1``.
    :param checksum: ``binlog_checksum``: 0 none, 1 CRC32.
    """

    binlog_version: int
    server_version: str
    created: int
    header_length: int
    post_header_lengths: bytes
    checksum: int

    @property
    def flavor(self) -> str:
        """Return ``mariadb`` or ``mysql`` (from the version string)."""
        return "mariadb" if "mariadb" in self.server_version.lower() else "mysql"

    def post_header_length(self, type_code: int) -> int:
        """Return the post-header length of events of ``type_code`` (0 when the FDE does not list it)."""
        if 0 < type_code <= len(self.post_header_lengths):
            return self.post_header_lengths[type_code - 1]
        return 0


def parse_format_description(body: bytes) -> FormatDescription:
    """Parse a FORMAT_DESCRIPTION body (checksum bytes included: its own length decides them).

    After the post-header lengths come the checksum algorithm byte and 4 checksum bytes (servers since
    MySQL 5.6.1 and MariaDB 5.3 write them whatever the algorithm).
    """
    version, created, header_length = struct.unpack_from("<H", body)[0], *struct.unpack_from("<IB", body, 52)
    server = body[2:52].split(b"\0", 1)[0].decode("ascii", "replace")
    if version != 4 or header_length != HEADER_SIZE:
        raise UndecodableEventError(
            f"binlog version {version} with {header_length}-byte headers is not read (v4 only)"
        )
    return FormatDescription(version, server, created, header_length, bytes(body[57:-5]), body[-5])


@dataclass(frozen=True)
class Rotate:
    """ROTATE_EVENT: the next events are in ``next_file`` from ``position``."""

    position: int
    next_file: str


def parse_rotate(body: bytes) -> Rotate:
    """Parse a ROTATE body: position (8 bytes), then the file name to the end."""
    return Rotate(struct.unpack_from("<Q", body)[0], bytes(body[8:]).decode("utf-8"))


@dataclass(frozen=True)
class QueryStatus:
    """The status variables of a QUERY event this reader reads (``Query_event``, "status vars").

    :param flags2: ``Q_FLAGS2_CODE`` (autocommit, foreign key checks, ...), None when absent.
    :param sql_mode: ``Q_SQL_MODE_CODE``, the session's sql_mode bits, None when absent.
    :param catalog: ``Q_CATALOG_NZ_CODE``. :param time_zone: ``Q_TIME_ZONE_CODE``.
    :param charset: ``Q_CHARSET_CODE`` (character_set_client, collation_connection, collation_server).
    :param updated_db_names: ``Q_UPDATED_DB_NAMES`` (MySQL; None when absent or over 16 databases).
    :param microseconds: ``Q_MICROSECONDS`` (MySQL; the statement's start, fraction of the header's second).
    :param ddl_xid: ``Q_DDL_LOGGED_WITH_XID`` (MySQL 8: the DDL's XID, atomic DDL).
    :param unknown: the first status code this reader does not know (the rest are not read), or None.
    """

    flags2: int | None = None
    sql_mode: int | None = None
    catalog: str | None = None
    time_zone: str | None = None
    charset: tuple[int, int, int] | None = None
    updated_db_names: tuple[str, ...] | None = None
    microseconds: int | None = None
    ddl_xid: int | None = None
    unknown: int | None = None


_FIXED_STATUS = {3: 4, 7: 2, 8: 2, 9: 8, 10: 4, 16: 1, 18: 2, 19: 1, 20: 1, 128: 3, 129: 8, 130: 1}
"""Status codes with a fixed width this reader skips: AUTO_INCREMENT, LC_TIME_NAMES, CHARSET_DATABASE,
TABLE_MAP_FOR_UPDATE, MASTER_DATA_WRITTEN, EXPLICIT_DEFAULTS_FOR_TIMESTAMP, DEFAULT_COLLATION_FOR_UTF8MB4,
SQL_REQUIRE_PRIMARY_KEY, DEFAULT_TABLE_ENCRYPTION; MariaDB HRNOW, XID, GTID_FLAGS3."""


def parse_query_status(raw: bytes) -> QueryStatus:
    """Parse the status variables block of a QUERY event: ``code (1 byte), value`` pairs.

    A code this reader does not know stops the parse (its width is unknown); the statement is still
    found, because the block's length is in the post-header.
    """
    found: dict[str, object] = {}
    pos = 0
    while pos < len(raw):
        code = raw[pos]
        pos += 1
        if code == 0:
            found["flags2"] = struct.unpack_from("<I", raw, pos)[0]
            pos += 4
        elif code == 1:
            found["sql_mode"] = struct.unpack_from("<Q", raw, pos)[0]
            pos += 8
        elif code == 2:  # Q_CATALOG_CODE (5.0.0-5.0.3): length, bytes, NUL
            pos += raw[pos] + 2
        elif code == 4:
            found["charset"] = struct.unpack_from("<HHH", raw, pos)
            pos += 6
        elif code in (5, 6):
            text = bytes(raw[pos + 1 : pos + 1 + raw[pos]]).decode("utf-8", "replace")
            found["time_zone" if code == 5 else "catalog"] = text
            pos += raw[pos] + 1
        elif code == 11:  # Q_INVOKER: user and host, each a length byte and bytes
            pos += raw[pos] + 1
            pos += raw[pos] + 1
        elif code == 12:
            count = raw[pos]
            pos += 1
            names = []
            if count != 254:  # OVER_MAX_DBS_IN_EVENT_MTS: no names follow
                for _ in range(count):
                    name, pos = cstring(raw, pos)
                    names.append(name.decode("utf-8", "replace"))
                found["updated_db_names"] = tuple(names)
        elif code == 13:
            found["microseconds"] = int.from_bytes(raw[pos : pos + 3], "little")
            pos += 3
        elif code == 17:
            found["ddl_xid"] = struct.unpack_from("<Q", raw, pos)[0]
            pos += 8
        elif code in _FIXED_STATUS:
            pos += _FIXED_STATUS[code]
        else:
            found["unknown"] = code
            break
    return QueryStatus(**found)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Query:
    """QUERY_EVENT: a statement (DDL, BEGIN, COMMIT, statement-based DML, ...).

    :param schema: the default database. :param error_code: the statement's error on the source.
    :param exec_time: seconds it ran. :param query: the statement text (UTF-8, undecodable bytes replaced).
    """

    thread_id: int
    exec_time: int
    schema: str
    error_code: int
    status: QueryStatus
    query: str


def parse_query(body: bytes, post_header_length: int) -> Query:
    """Parse a QUERY body.

    Post-header (thread id 4, exec time 4, schema length 1, error code 2, status length 2), status
    variables, schema, NUL, statement.
    """
    thread_id, exec_time, schema_length, error_code, status_length = struct.unpack_from("<IIBHH", body)
    pos = post_header_length
    status = parse_query_status(body[pos : pos + status_length])
    pos += status_length
    schema = bytes(body[pos : pos + schema_length]).decode("utf-8", "replace")
    query = bytes(body[pos + schema_length + 1 :]).decode("utf-8", "replace")
    return Query(thread_id, exec_time, schema, error_code, status, query)


@dataclass(frozen=True)
class Xid:
    """XID_EVENT: the commit of a transactional event group."""

    xid: int


@dataclass(frozen=True)
class XaPrepare:
    """XA_PREPARE_LOG_EVENT (MySQL): the end of an XA PREPARE'd (or one-phase committed) event group."""

    one_phase: bool
    xid: bytes


def parse_xa_prepare(body: bytes) -> XaPrepare:
    """Parse an XA_PREPARE body: one_phase (1), format id (4), gtrid length (4), bqual length (4), data."""
    one_phase, _, gtrid, bqual = struct.unpack_from("<BiII", body)
    return XaPrepare(bool(one_phase), bytes(body[13 : 13 + gtrid + bqual]))


@dataclass(frozen=True)
class Gtid:
    """A MySQL GTID, ANONYMOUS_GTID or GTID_TAGGED event: the start of a transaction.

    :param gtid: ``uuid:gno`` or ``uuid:tag:gno``; None for an anonymous transaction (``gtid_mode=OFF``).
    :param immediate_commit_us: commit time on the server that wrote this binlog, microseconds since the
        epoch (MySQL 8.0.1+; None before). :param original_commit_us: commit time on the originating server.
    :param last_committed: :param sequence_number: the logical clock of parallel replication.
    :param transaction_length: bytes of the transaction, this event included (0 when not written).
    :param flags: bit 0 = may contain statement-based changes.
    """

    gtid: str | None
    flags: int
    last_committed: int = 0
    sequence_number: int = 0
    immediate_commit_us: int | None = None
    original_commit_us: int | None = None
    transaction_length: int = 0
    immediate_server_version: int | None = None
    original_server_version: int | None = None
    tag: str | None = None


def parse_gtid(body: bytes, anonymous: bool) -> Gtid:
    """Parse a GTID / ANONYMOUS_GTID body (``Gtid_event``).

    Flags (1), uuid (16), gno (8), then since 5.7 logical-clock type 2 + last_committed (8) +
    sequence_number (8), since 8.0.1 the immediate commit timestamp (7; its top bit says the original one
    follows, 7 more), the packed transaction length, and the immediate server version (4; top bit: the
    original one follows, 4 more).
    """
    flags = body[0]
    gno = struct.unpack_from("<q", body, 17)[0]
    gtid = None if anonymous else f"{uuid_text(body[1:17])}:{gno}"
    pos = 25
    if pos >= len(body) or body[pos] != 2:
        return Gtid(gtid, flags)
    last_committed, sequence_number = struct.unpack_from("<qq", body, pos + 1)
    pos += 17
    immediate = original = None
    length = 0
    immediate_version = original_version = None
    if pos + 7 <= len(body):
        immediate = int.from_bytes(body[pos : pos + 7], "little")
        pos += 7
        if immediate & 1 << 55:
            immediate &= ~(1 << 55)
            original = int.from_bytes(body[pos : pos + 7], "little")
            pos += 7
        else:
            original = immediate
        if pos < len(body):
            length, pos = packed_integer(body, pos)
        if pos + 4 <= len(body):
            immediate_version = struct.unpack_from("<I", body, pos)[0]
            pos += 4
            if immediate_version & 1 << 31:
                immediate_version &= ~(1 << 31)
                original_version = struct.unpack_from("<I", body, pos)[0]
            else:
                original_version = immediate_version
    return Gtid(
        gtid,
        flags,
        last_committed,
        sequence_number,
        immediate,
        original,
        length,
        immediate_version,
        original_version,
    )


_TAGGED_FIELDS = (
    "flags",
    "uuid",
    "gno",
    "tag",
    "last_committed",
    "sequence_number",
    "immediate_commit_us",
    "original_commit_us",
    "transaction_length",
    "immediate_server_version",
    "original_server_version",
    "commit_group_ticket",
)
"""Field ids 0..11 of GTID_TAGGED_LOG_EVENT (``Gtid_event`` serialization, ``control_events.h``)."""
_TAGGED_SIGNED = frozenset({"gno", "last_committed", "sequence_number"})


def parse_gtid_tagged(body: bytes) -> Gtid:
    """Parse a GTID_TAGGED_LOG_EVENT body (MySQL 8.4+, the MySQL serialization library's format).

    A format version byte (2), then the message: its size (varlen, counting from the version byte), the
    last non-ignorable field id (varlen), then ``field id (varlen), value`` pairs: the uuid as 16 varlen
    bytes, the tag as a varlen length and bytes, integers as varlen (zig-zag for signed ones).

    :raises UndecodableEventError: for another format version, or a field this reader does not know that
        the writer marked non-ignorable.
    """
    if body[0] != 2:
        raise UndecodableEventError(f"GTID_TAGGED_LOG_EVENT of serialization version {body[0]} is not read")
    size, pos = varlen_unsigned(body, 1)
    last_needed, pos = varlen_unsigned(body, pos)
    end = min(size, len(body))
    values: dict[str, object] = {}
    while pos < end:
        field_id, pos = varlen_unsigned(body, pos)
        if field_id >= len(_TAGGED_FIELDS):
            if field_id <= last_needed:
                raise UndecodableEventError(
                    f"GTID_TAGGED_LOG_EVENT has field {field_id}, which this reader does not know"
                )
            break
        name = _TAGGED_FIELDS[field_id]
        if name == "uuid":
            raw = bytearray()
            for _ in range(16):
                byte, pos = varlen_unsigned(body, pos)
                raw.append(byte)
            values[name] = uuid_text(bytes(raw))
        elif name == "tag":
            length, pos = varlen_unsigned(body, pos)
            values[name] = bytes(body[pos : pos + length]).decode("ascii")
            pos += length
        else:
            values[name], pos = (varlen_signed if name in _TAGGED_SIGNED else varlen_unsigned)(body, pos)
    immediate = values.get("immediate_commit_us")
    version = values.get("immediate_server_version")
    tag = values.get("tag") or None
    gtid = (
        f"{values.get('uuid')}:{tag}:{values.get('gno')}"
        if tag
        else f"{values.get('uuid')}:{values.get('gno')}"
    )
    return Gtid(
        gtid,
        int(values.get("flags", 0)),  # type: ignore[call-overload]
        int(values.get("last_committed", 0)),  # type: ignore[call-overload]
        int(values.get("sequence_number", 0)),  # type: ignore[call-overload]
        immediate,  # type: ignore[arg-type]
        values.get("original_commit_us", immediate),  # type: ignore[arg-type]
        int(values.get("transaction_length", 0)),  # type: ignore[call-overload]
        version,  # type: ignore[arg-type]
        values.get("original_server_version", version),  # type: ignore[arg-type]
        tag,  # type: ignore[arg-type]
    )


@dataclass(frozen=True)
class GtidInterval:
    """The transactions ``uuid[:tag]:start-end`` (inclusive) of a GTID set."""

    uuid: str
    tag: str | None
    start: int
    end: int


@dataclass(frozen=True)
class PreviousGtids:
    """PREVIOUS_GTIDS_EVENT: the GTID set written before this file.

    :param intervals: per uuid (and tag) in stored order, inclusive intervals.
    """

    intervals: tuple[GtidInterval, ...]

    @property
    def gtid_set(self) -> str:
        """Return the set as MySQL writes it, one ``uuid[:tag]:a-b[:c-d]`` per uuid and tag, comma-separated."""
        parts: dict[tuple[str, str | None], list[str]] = {}
        for interval in self.intervals:
            text = (
                str(interval.start) if interval.start == interval.end else f"{interval.start}-{interval.end}"
            )
            parts.setdefault((interval.uuid, interval.tag), []).append(text)
        return ",".join(
            ":".join([uuid, *([tag] if tag else []), *ranges]) for (uuid, tag), ranges in parts.items()
        )


def parse_previous_gtids(body: bytes) -> PreviousGtids:
    """Parse a PREVIOUS_GTIDS body (``Gtid_set::encode``), untagged or tagged.

    A little-endian u64 whose top byte is the format (0 untagged: the rest is the uuid count; 1 tagged:
    the count is in bits 8..55), then per uuid: the uuid (16), in the tagged format the tag (varlen length
    + bytes), the interval count (8) and the intervals (start, end exclusive; 8 bytes each).
    """
    head = struct.unpack_from("<Q", body)[0]
    tagged = head >> 56 != 0
    count = (head >> 8) & ((1 << 48) - 1) if tagged else head & ((1 << 56) - 1)
    pos = 8
    intervals = []
    for _ in range(count):
        uuid = uuid_text(body[pos : pos + 16])
        pos += 16
        tag = None
        if tagged:
            length, pos = varlen_unsigned(body, pos)
            tag = bytes(body[pos : pos + length]).decode("ascii") or None
            pos += length
        n = struct.unpack_from("<Q", body, pos)[0]
        pos += 8
        for _ in range(n):
            start, end = struct.unpack_from("<qq", body, pos)
            pos += 16
            intervals.append(GtidInterval(uuid, tag, start, end - 1))
    return PreviousGtids(tuple(intervals))


@dataclass(frozen=True)
class MariadbGtid:
    """MariaDB GTID_EVENT: the start of an event group.

    :param standalone: FL_STANDALONE: no COMMIT/XID ends the group (DDL, non-transactional statements).
    :param commit_id: the group commit id when FL_GROUP_COMMIT_ID is set.
    :param xa: FL_PREPARED_XA / FL_COMPLETED_XA are set: the group is an XA PREPARE or its XA COMMIT/ROLLBACK.
    """

    domain: int
    server_id: int
    seq: int
    flags: int
    commit_id: int | None = None

    @property
    def gtid(self) -> str:
        """Return ``domain-server-seq``."""
        return f"{self.domain}-{self.server_id}-{self.seq}"

    @property
    def standalone(self) -> bool:
        """Return whether the group has no terminating COMMIT (FL_STANDALONE)."""
        return bool(self.flags & 1)

    @property
    def xa(self) -> bool:
        """Return whether the group is part of an XA transaction (FL_PREPARED_XA or FL_COMPLETED_XA)."""
        return bool(self.flags & (64 | 128))


def parse_mariadb_gtid(body: bytes, server_id: int) -> MariadbGtid:
    """Parse a MariaDB GTID body: seq (8), domain (4), flags (1), commit id (8) if FL_GROUP_COMMIT_ID."""
    seq, domain, flags = struct.unpack_from("<QIB", body)
    commit_id = struct.unpack_from("<Q", body, 13)[0] if flags & 2 else None
    return MariadbGtid(domain, server_id, seq, flags, commit_id)


@dataclass(frozen=True)
class GtidList:
    """MariaDB GTID_LIST_EVENT: the last GTID of each domain before this file."""

    gtids: tuple[str, ...]
    flags: int

    @property
    def gtid_set(self) -> str:
        """Return the list as ``@@gtid_binlog_pos`` writes it (comma-separated)."""
        return ",".join(self.gtids)


def parse_gtid_list(body: bytes) -> GtidList:
    """Parse a GTID_LIST body: count (4; the top 4 bits are flags), then (domain 4, server 4, seq 8) each."""
    head = struct.unpack_from("<I", body)[0]
    count, flags = head & 0x0FFFFFFF, head >> 28
    gtids = tuple("{}-{}-{}".format(*struct.unpack_from("<IIQ", body, 4 + 16 * i)) for i in range(count))
    return GtidList(gtids, flags)


class RowsQuery:
    """ROWS_QUERY (MySQL) or ANNOTATE_ROWS (MariaDB): the statement of the rows events that follow.

    Written with ``binlog_rows_query_log_events`` (MySQL) or ``binlog_annotate_row_events`` (MariaDB). The
    text is decoded each time :attr:`query` is read: the extract reads none of them, and a MariaDB binlog holds
    one per rows event (read from a file, or over a dump that asks for them, ``feeds.read_binlog_socket``).

    :param body: the event's body (no header, no checksum).
    :param mariadb: an ANNOTATE_ROWS body (the text); else ROWS_QUERY's (a length byte, then the text).
    """

    __slots__ = ("_body", "_mariadb")

    def __init__(self, body: bytes, mariadb: bool) -> None:
        self._body = body
        self._mariadb = mariadb

    @property
    def query(self) -> str:
        """Return the statement's text (UTF-8, undecodable bytes replaced; ROWS_QUERY's length byte is ignored).

        The length byte is ignored because the text may be longer than it can say.
        """
        return bytes(self._body if self._mariadb else self._body[1:]).decode("utf-8", "replace")

    def __repr__(self) -> str:
        return f"RowsQuery(query={self.query!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RowsQuery) and other.query == self.query

    def __hash__(self) -> int:
        return hash(self.query)


@dataclass(frozen=True)
class TransactionPayload:
    """TRANSACTION_PAYLOAD_EVENT (MySQL 8.0.20+, ``binlog_transaction_compression=ON``).

    :param compression: ``zstd`` or ``none``. :param compressed_size: :param uncompressed_size: bytes.
    :param payload: the events of the transaction, compressed.
    """

    compression: str
    compressed_size: int
    uncompressed_size: int
    payload: bytes = field(repr=False)


_COMPRESSIONS = {0: "zstd", 255: "none"}


def parse_transaction_payload(body: bytes) -> TransactionPayload:
    """Parse a TRANSACTION_PAYLOAD body (``Transaction_payload_event``).

    Header fields as ``type (packed), length (packed), value (packed integer)`` up to the end mark (type
    0): 1 compressed size, 2 compression type (0 zstd, 255 none), 3 uncompressed size; then the payload.
    """
    values: dict[int, int] = {}
    pos = 0
    while pos < len(body):
        kind, pos = packed_integer(body, pos)
        if kind == 0:
            break
        length, pos = packed_integer(body, pos)
        values[kind] = packed_integer(body, pos)[0]
        pos += length
    compression = _COMPRESSIONS.get(values.get(2, 0))
    if compression is None:
        raise UndecodableEventError(
            f"TRANSACTION_PAYLOAD_EVENT with compression type {values[2]} is not read"
        )
    return TransactionPayload(
        compression, values.get(1, len(body) - pos), values.get(3, 0), bytes(body[pos:])
    )
