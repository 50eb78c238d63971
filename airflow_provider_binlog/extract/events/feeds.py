"""Where raw binlog events come from: binlog files, or the replication socket.

A feed yields :class:`Event` s, each one event's header fields and bytes (common header to checksum) with the
file it is in and its start offset; :class:`~.stream.EventReader` does the rest, whatever the feed.

Binlog file layout: MySQL internals, "Binary Log Overview" / "Binlog File": the magic bytes
``fe 62 69 6e``, then events back to back from offset 4, each ``event_size`` bytes long as its common
header says. A file that ends with a ROTATE event continues in the file the ROTATE names.

The replication socket: MySQL internals, "COM_BINLOG_DUMP" (MariaDB KB, "COM_BINLOG_DUMP"): after the
login (pymysql's), the client sends the command (start position, flags, its server id, file name) and
the server answers with one packet per event, ``00`` then the event's bytes, until an EOF packet
(non-blocking dumps) or the connection's end. The server first sends an artificial ROTATE naming the file
(its ``log_pos`` is 0) and, from a position after 4, the file's FORMAT_DESCRIPTION with ``log_pos`` 0.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from airflow_provider_binlog.extract.errors import CorruptBinlogError
from airflow_provider_binlog.extract.events import codes
from airflow_provider_binlog.extract.events.integrity import (
    BINLOG_IN_USE,
    MAX_EVENT_SIZE,
    check_size,
    format_checksum,
    verify,
)
from airflow_provider_binlog.extract.events.integrity import where as _where
from airflow_provider_binlog.extract.events.parsers import HEADER
from airflow_provider_binlog.source.connect import PacketChannel

MAGIC = b"\xfebin"
"""The first 4 bytes of every binlog file."""
_SIZE = struct.Struct("<I")
_DUMP_SPECIAL = frozenset({codes.FORMAT_DESCRIPTION, codes.ROTATE, codes.HEARTBEAT, codes.HEARTBEAT_V2})
"""Events the dump feed reads (the checksum algorithm, the file's name) or drops (heartbeats: not in a file)."""
_READ_CHUNK = 1 << 20
COM_BINLOG_DUMP = 0x12
BINLOG_DUMP_NON_BLOCK = 0x01
"""COM_BINLOG_DUMP flag: end the dump with an EOF packet at the end of the binlog instead of waiting."""
BINLOG_SEND_ANNOTATE_ROWS_EVENT = 0x02
"""MariaDB COM_BINLOG_DUMP flag: send the ANNOTATE_ROWS events (the statements), as the files hold them."""
LOG_EVENT_ARTIFICIAL = 0x20
"""Header flag of events the dump thread makes up (the first ROTATE); they are not in any file."""
MARIADB_SLAVE_CAPABILITY_GTID = 4
"""``@mariadb_slave_capability``: the replica understands GTID events (older ones get BEGIN queries instead)."""


@dataclass(slots=True)
class Event:
    """One binlog event: its header fields, where it is, and its bytes or its parsed body.

    A feed yields each event with its header read and ``data`` holding its bytes (header, body and checksum
    when the server writes one); :meth:`.stream.EventReader.events` replaces ``data`` with the parsed body and
    yields the same object. One object per event instead of a raw one and a decoded one: on 600,000 OLTP
    events the second object and the second header unpack cost about 0.2 s of a 3 s extract.

    :param type_code: the event type (:mod:`.codes`). :param timestamp: header time, seconds since the epoch.
    :param server_id: the server that wrote it. :param end_pos: the header's ``log_pos``, the end of the
        event in its file (for events inside a TRANSACTION_PAYLOAD: the payload event's end).
    :param flags: the header's flags.
    :param file: the binlog file's name (no directory). :param start: the event's offset in the file (the
        payload's for inner events).
    :param in_payload: the event came out of a TRANSACTION_PAYLOAD event.
    :param data: as a feed yields it, the event's bytes; once decoded, the parsed body (a dataclass of
        :mod:`.parsers`, a :class:`.TableMap`, a :class:`.stream.RowsEvent`) or None for events the extractor
        does not act on.
    """

    type_code: int
    timestamp: int
    server_id: int
    end_pos: int
    flags: int
    file: str
    start: int
    in_payload: bool
    data: Any

    @property
    def name(self) -> str:
        """Return the type's name (``WRITE_ROWS_V2``, ``GTID_TAGGED``, ...)."""
        return codes.NAMES.get(self.type_code, f"type {self.type_code}")


def raw_event(file: str, start: int, data: bytes) -> Event:
    """Return the undecoded event of ``data`` (one event's bytes) at ``start`` in ``file``: its header read."""
    timestamp, type_code, server_id, _, end_pos, flags = HEADER.unpack_from(data)
    return Event(type_code, timestamp, server_id, end_pos, flags, file, start, False, data)


def read_binlog_file(
    path: str | os.PathLike[str],
    start: int = 4,
    *,
    follow_rotations: bool = True,
    active_file: str | None = None,
    max_event_size: int = MAX_EVENT_SIZE,
) -> Iterator[Event]:
    """Yield the events of the binlog file ``path`` from offset ``start``, then of the files it rotates to.

    A file that ends with a ROTATE event is followed by the file the ROTATE names, in the same
    directory, from the ROTATE's position, while that file exists and is another file (a relay log's
    ROTATEs in the middle of a file are the source's and are not followed).

    From a ``start`` after 4, the file's FORMAT_DESCRIPTION (at 4) is yielded first, as the dump thread
    sends it over the socket: the events after it cannot be decoded without it.

    A finished binlog file ends with a ROTATE (the server moved on to the next file) or a STOP (it shut down)
    and the server has cleared the in-use flag of its FORMAT_DESCRIPTION (MySQL ``sql/binlog.cc``, MariaDB
    ``sql/log.cc``: ``LOG_EVENT_BINLOG_IN_USE_F``, set when the file is opened, cleared when it is closed). A
    file that ends after another event is the server's active file (its in-use flag is set, or the caller names
    it ``active_file``) or a file cut short, which is an error: cut exactly at an event boundary it would
    otherwise read as complete. The events this function reads itself, the FORMAT_DESCRIPTION at 4 and the
    ROTATE or STOP that ends a file, are verified (:mod:`.integrity`) before it reads them;
    :class:`~.stream.EventReader` verifies every event.

    :param start: an event boundary (4 = the first event, the FORMAT_DESCRIPTION).
    :param active_file: the name of the server's active binlog file when the caller knows it (the last file
        ``SHOW BINARY LOGS`` lists), or of a file the server stopped writing in a crash (it starts the next
        file without a ROTATE; MySQL's crash recovery also clears the in-use flag): it may end after any event.
    :param max_event_size: the largest event accepted, in bytes (:data:`.integrity.MAX_EVENT_SIZE`).
    :raises CorruptBinlogError: when the file does not start with the binlog magic bytes and a verified
        FORMAT_DESCRIPTION, holds an event size out of bounds, ends inside an event (a truncated file, or one
        the server is writing: read it up to a position the server reported instead), ends early as above, or
        a ROTATE names a file name no server writes or a file already read.
    :raises ChecksumMismatchError: when the FORMAT_DESCRIPTION's checksum, or that of the ROTATE or STOP
        ending the file, is wrong.
    :raises ValueError: for a ``start`` before 4.
    """
    if start < 4:
        raise ValueError(f"a binlog file's events start at offset 4, not {start}")
    current = Path(path)
    read = {current.name}
    while True:
        with open(current, "rb") as handle:
            rotate = yield from events_of_file(
                handle, str(current), start, active=current.name == active_file, max_event_size=max_event_size
            )
        if not follow_rotations or rotate is None:
            return
        following = current.with_name(rotate[0])
        if following == current or not following.exists():
            return
        if following.name in read:
            raise CorruptBinlogError(
                f"the ROTATE at the end of {current} names {following.name}, which this read has already read: "
                f"a server never rotates back; the file is corrupt"
            )
        read.add(following.name)
        current, start = following, rotate[1]


_FILE_ENDS = frozenset({codes.ROTATE, codes.STOP})
"""The events a finished binlog file ends with: the file feed verifies the last one, then reads it."""


def events_of_file(
    handle: BinaryIO, path: str, start: int, *, active: bool = False, max_event_size: int = MAX_EVENT_SIZE
) -> Generator[Event, None, tuple[str, int] | None]:
    """Yield the events of one binlog file from ``start``; return the ROTATE's ``(file, position)`` that ends it.

    Returns None when the file ends otherwise (a STOP, or the end of an active file). The checks are
    :func:`read_binlog_file`'s, for one file.

    :param handle: the file opened for binary reading, seekable (a local file, a store's input stream).
    :param path: where it is, for messages; its last component is the binlog file's name.
    :param active: the caller says the file may end after any event (see :func:`read_binlog_file`).
    :raises: as :func:`read_binlog_file`.
    """
    name = path.rstrip("/").rsplit("/", 1)[-1]
    if handle.read(4) != MAGIC:
        raise CorruptBinlogError(f"{path} is not a binlog file (it does not start with fe 62 69 6e)")
    fde = _read_event(handle, name, 4, max_event_size)
    if fde is None or fde[4] != codes.FORMAT_DESCRIPTION:
        raise CorruptBinlogError(f"{path} has no FORMAT_DESCRIPTION event at offset 4")
    checksum = format_checksum(fde, name, 4)
    active = active or bool(fde[17] & BINLOG_IN_USE)
    if start > 4:
        yield raw_event(name, 4, fde)
    handle.seek(start)
    buffer = b""  # the bytes read but not yet yielded, starting at ``offset``
    offset = start
    event: Event | None = None
    need = _READ_CHUNK
    unpack_size = _SIZE.unpack_from
    while chunk := handle.read(need):
        buffer += chunk
        pos = 0
        need = _READ_CHUNK
        while len(buffer) - pos >= 19:
            size = unpack_size(buffer, pos + 9)[0]
            if size < 19 or size > max_event_size:
                check_size(size, name, offset, max_event_size)
            if len(buffer) - pos < size:
                need = max(need, size - len(buffer) + pos)  # a large event is read in one more call
                break
            event = raw_event(name, offset, buffer[pos : pos + size])
            yield event
            pos += size
            offset += size
        buffer = buffer[pos:]
    if buffer:
        raise CorruptBinlogError(
            f"{name} ends inside an event at offset {offset} ({len(buffer)} bytes left): the file is cut short "
            f"(copy it again from the server), or the server is writing it (read it up to a position the "
            f"server reported)"
        )
    if event is None:  # nothing from ``start`` on: a read that starts at the file's end
        return None
    if event.type_code in _FILE_ENDS:
        # Only the last event tells how the file ends: read again (the consumer replaced its ``data``),
        # verified with the checksum of the file's FORMAT_DESCRIPTION (a relay log's own ROTATE follows
        # its source's FORMAT_DESCRIPTIONs, which the file's first one heads), then read.
        handle.seek(event.start)
        data = handle.read(offset - event.start)
        if checksum:
            verify(data, name, event.start)
        return _rotation(data, checksum, name, event.start) if data[4] == codes.ROTATE else None
    if not active:
        raise CorruptBinlogError(
            f"{name} ends at offset {offset} after a {event.name} event, without the ROTATE or STOP event a "
            f"finished binlog file ends with, and its FORMAT_DESCRIPTION says the server no longer writes it "
            f"(the in-use flag is cleared): the file is cut short; copy it again from the server. If the server "
            f"stopped writing it in a crash, pass active_file={name!r} to read it as it is"
        )
    return None


def _read_event(handle: BinaryIO, name: str, offset: int, max_event_size: int) -> bytes | None:
    """Return the event at the handle's position (``offset`` in the file ``name``); None at the file's end.

    :raises CorruptBinlogError: for a size out of bounds, or a file that ends inside the event.
    """
    header = handle.read(19)
    if not header:
        return None
    if len(header) == 19:
        size = _SIZE.unpack_from(header, 9)[0]
        check_size(size, name, offset, max_event_size)
        data = header + handle.read(size - 19)
        if len(data) == size:
            return data
    raise CorruptBinlogError(f"{name} ends inside the event at offset {offset}: the file is cut short")


def _rotation(data: bytes, checksum: int, file: str, start: int) -> tuple[str, int]:
    """Return ``(next file, position)`` of a verified ROTATE event's bytes (``checksum``: its checksum's size).

    :raises CorruptBinlogError: when the body is too short, the name is not UTF-8 or not a plain file name
        (empty, ``.``, ``..``, a path separator or a NUL), or the position is before 4.
    """
    at = _where(codes.ROTATE, file, start)
    if len(data) < 27 + checksum:
        raise CorruptBinlogError(f"{at}: {len(data)} bytes, too short for a ROTATE event")
    try:
        name = data[27 : len(data) - checksum].decode("utf-8")
    except UnicodeDecodeError as err:
        raise CorruptBinlogError(
            f"{at}: the next file's name is not UTF-8 ({err}); the bytes are corrupt"
        ) from err
    position = struct.unpack_from("<Q", data, 19)[0]
    if name in ("", ".", "..") or any(c in name for c in "/\\\0") or position < 4:
        raise CorruptBinlogError(
            f"{at}: names the next file {name!r} at position {position}, which no server writes; the bytes are "
            f"corrupt"
        )
    return name, position


def read_binlog_socket(
    connection: Any,
    *,
    server_id: int,
    file: str,
    position: int = 4,
    flavor: str = "mariadb",
    blocking: bool = False,
    annotate_rows: bool = True,
    heartbeat_seconds: float | None = None,
    gtid_position: str | None = None,
) -> Iterator[Event]:
    """Yield the events a COM_BINLOG_DUMP from ``(file, position)`` streams over ``connection``.

    Events are yielded as they are in the files: the artificial ROTATE only tells the file name,
    heartbeats are dropped, and a FORMAT_DESCRIPTION sent with ``log_pos`` 0 is yielded at its place in
    the file (4). Later ROTATEs move the file name on.

    :param connection: an open pymysql connection of a user with REPLICATION SLAVE; it serves nothing else
        until the dump ends (close it to stop a blocking dump).
    :param server_id: this reader's id on the source (unique among its replicas; 0 for a non-blocking reader
        that other readers of the same id must not end: the source ends an older dump of the same id).
    :param flavor: ``mariadb`` or ``mysql``: MariaDB is asked for GTID events (``@mariadb_slave_capability``).
    :param blocking: wait for new events at the end of the binlog instead of ending there.
    :param annotate_rows: ask MariaDB for the ANNOTATE_ROWS events (as its files hold them); False gets the
        events the window read stages from (whose ``stats.events`` counts them, ADR 0018).
    :param heartbeat_seconds: ask the source for a HEARTBEAT event after each period in which it has nothing
        to send (``@master_heartbeat_period``, in nanoseconds; MySQL manual, "CHANGE REPLICATION SOURCE TO":
        ``SOURCE_HEARTBEAT_PERIOD``), so that a read timeout longer than the period tells a quiet source from
        a dead connection; None: no heartbeats.
    :param gtid_position: MariaDB only: start after this GTID position instead of at ``(file, position)``,
        which are then ignored (``@slave_connect_state``, strict: MariaDB KB, "GTID", "Using
        current_pos vs. slave_pos"; ``sql/sql_repl.cc``). The server starts in the file whose GTID_LIST
        precedes the position and sends none of the event groups up to it; the first GTID event it sends is
        the first transaction after it.
    :raises pymysql.err.OperationalError: for the server's errors (a purged file, a bad position, a GTID
        position the binlog does not hold: 1236, ...).
    :raises ValueError: for ``gtid_position`` with ``flavor`` ``mysql`` (its GTID dump is another command).
    """
    if gtid_position is not None and flavor != "mariadb":
        raise ValueError("a dump from a GTID position is MariaDB's here (MySQL's is COM_BINLOG_DUMP_GTID)")
    with connection.cursor() as cur:
        cur.execute("SELECT @@global.binlog_checksum")
        checksum = 0 if str(cur.fetchone()[0]).upper() == "NONE" else 4
        cur.execute("SET @master_binlog_checksum = @@global.binlog_checksum")
        if heartbeat_seconds is not None:
            cur.execute("SET @master_heartbeat_period = %s", (int(heartbeat_seconds * 1_000_000_000),))
        if flavor == "mariadb":
            cur.execute(f"SET @mariadb_slave_capability = {MARIADB_SLAVE_CAPABILITY_GTID}")
        if gtid_position is not None:
            cur.execute("SET @slave_connect_state = %s", (gtid_position,))
            cur.execute("SET @slave_gtid_strict_mode = 1")
            cur.execute("SET @slave_gtid_ignore_duplicates = 0")
            file, position = "", 4
    flags = 0 if blocking else BINLOG_DUMP_NON_BLOCK
    if flavor == "mariadb" and annotate_rows:
        flags |= BINLOG_SEND_ANNOTATE_ROWS_EVENT
    channel = PacketChannel(connection)
    channel.send_command(struct.pack("<BIHI", COM_BINLOG_DUMP, position, flags, server_id) + file.encode())
    yield from dump_events(channel, file=file, checksum=checksum)


def dump_events(
    channel: PacketChannel, *, file: str, checksum: int, max_event_size: int = MAX_EVENT_SIZE
) -> Iterator[Event]:
    """Yield the events of a COM_BINLOG_DUMP already sent on ``channel``.

    Each packet must hold one whole event (its header's size is the packet's); the FORMAT_DESCRIPTION and
    ROTATE events this function reads (checksum algorithm, file names) are verified first (:mod:`.integrity`).

    :param file: the file the dump starts in (the artificial ROTATE names it again).
    :param checksum: 4 when the events carry a CRC32 (``@master_binlog_checksum`` was set and the source's
        ``binlog_checksum`` is CRC32), else 0: the ROTATE events' file names end before it. Each
        FORMAT_DESCRIPTION the dump sends sets it for the events after it, as the dump thread does.
    :param max_event_size: the largest event accepted, in bytes (:data:`.integrity.MAX_EVENT_SIZE`).
    :raises CorruptBinlogError: for a packet too short for an event, or whose header's sizes disagree with it.
    :raises ChecksumMismatchError: when a FORMAT_DESCRIPTION or ROTATE event's checksum is wrong.
    """
    current, after = file, 0  # ``after``: the end of the last event of the file, for error messages
    unpack, special = HEADER.unpack_from, _DUMP_SPECIAL
    for batch in packet_batches(channel, max_payload=max_event_size + 1):
        for data in batch:
            if len(data) < 20 or data[0]:
                if data and data[0]:
                    if data[0] == 0xFE and len(data) < 9:  # EOF: the end of a non-blocking dump
                        return
                    continue  # not an event (what the library's stream skips too)
                raise CorruptBinlogError(
                    f"the dump of {current} sent after position {after} a packet of {len(data)} bytes: too short for "
                    f"an event; the stream is corrupt"
                )
            event = data[1:]
            timestamp, kind, server_id, size, end, flags = unpack(event)
            if size != len(event) or end < size and end:
                raise CorruptBinlogError(
                    f"the dump of {current} sent after position {after} a {len(event)}-byte event whose header says "
                    f"{size} bytes ending at {end}: the stream is corrupt"
                )
            if kind in special:
                if kind == codes.FORMAT_DESCRIPTION:
                    checksum = format_checksum(event, current, end - size if end else 4)
                elif kind == codes.ROTATE:
                    at = end - size if end else 0
                    if checksum:
                        verify(event, current, at)
                    next_file = _rotation(event, checksum, current, at)[0]
                    if flags & LOG_EVENT_ARTIFICIAL or end == 0:
                        current, after = next_file, 0
                        continue
                    yield Event(kind, timestamp, server_id, end, flags, current, at, False, event)
                    current, after = next_file, 0
                    continue
                else:  # a heartbeat
                    continue
            if end == 0:  # the FORMAT_DESCRIPTION re-sent for a start after 4 (or another made-up event)
                if kind == codes.FORMAT_DESCRIPTION:
                    yield Event(kind, timestamp, server_id, end, flags, current, 4, False, event)
                continue
            after = end
            yield Event(kind, timestamp, server_id, end, flags, current, end - size, False, event)


_MAX_PACKET = 0xFFFFFF
"""A packet payload this long continues in the next packet (MySQL internals, "Sending More Than 16 MB")."""


def packet_batches(channel: PacketChannel, *, max_payload: int = MAX_EVENT_SIZE + 1) -> Iterator[list[bytes]]:
    """Yield the payloads of the packets that follow on ``channel``, a list of them at a time.

    The first packet is read by pymysql (which sets the socket's read timeout); the rest are framed here
    (3-byte length, sequence id, payload; payloads of 16 MiB - 1 continue in the next packet) out of chunks of
    up to :data:`_CHUNK` bytes read off the connection's buffered socket file, without building a
    ``MysqlPacket`` per event (about a tenth of the extract) or calling pymysql's ``_read_bytes`` twice per
    packet (about another twentieth, most events being a few hundred bytes). Each list holds the packets
    complete in the bytes read so far (a 64 KiB chunk holds some hundreds of OLTP events), so the consumer
    resumes this generator once per chunk, not once per event. The chunks may hold bytes of packets after
    those yielded: the connection serves nothing else while a dump runs, and it is closed when the dump is
    abandoned.

    Errors are pymysql's, raised after the packets before the failing one were yielded: a lost connection or a
    timeout raises ``OperationalError`` 2013 (as ``_read_bytes`` does), a wrong sequence id ``InternalError``
    (``OperationalError`` 2013 for MariaDB's shutdown packet, sequence id 0), an error packet the server's
    error.

    :param max_payload: the longest payload accepted (one event and its ``00`` byte): a payload over 16 MiB is
        put together from packets, and no longer one than this.
    :raises pymysql.err.MySQLError: as above.
    :raises CorruptBinlogError: when a payload is longer than ``max_payload`` (raised before it is put
        together).
    """
    import pymysql
    from pymysql.constants import CR

    yield [channel.read_packet()]
    rfile = channel.socket_file
    buffer, pos = b"", 0
    expected = channel.sequence_id
    parts: list[bytes] = []  # the payload so far of a packet that continues in the next
    parts_size = 0
    unpack_header = _SIZE.unpack_from

    while True:
        batch: list[bytes] = []
        size = len(buffer)
        wrong_number = error = None
        need = 4 - size + pos
        while need <= 0:
            header = unpack_header(buffer, pos)[0]  # the 3-byte length and the sequence id in one call
            length = header & _MAX_PACKET
            if header >> 24 != expected:
                wrong_number = header >> 24
                break
            end = pos + 4 + length
            if end > size:
                need = end - size
                break
            expected = (expected + 1) & 0xFF
            payload = buffer[pos + 4 : end]
            pos = end
            need = 4 - size + pos
            if length == _MAX_PACKET:
                parts.append(payload)
                parts_size += length
                if parts_size > max_payload:
                    _too_long(channel, parts_size, max_payload)
                continue
            if parts:
                if parts_size + length > max_payload:
                    _too_long(channel, parts_size + length, max_payload)
                payload, parts, parts_size = b"".join([*parts, payload]), [], 0
            if payload and payload[0] == 0xFF:
                error = payload
                break
            batch.append(payload)
        channel.sequence_id = expected
        if batch:
            yield batch
        if error is not None:
            pymysql.err.raise_mysql_exception(error)
        if wrong_number is not None:
            channel.force_close()
            if wrong_number == 0:
                raise pymysql.err.OperationalError(
                    CR.CR_SERVER_LOST, "Lost connection to MySQL server during query"
                )
            raise pymysql.err.InternalError(
                f"Packet sequence number wrong - got {wrong_number} expected {expected}"
            )
        buffer, pos = buffer[pos:] + _receive(channel, rfile, need), 0


def _too_long(channel: PacketChannel, size: int, max_payload: int) -> None:
    """Close ``channel`` and raise: the server sends a payload of at least ``size`` bytes, over ``max_payload``.

    :raises CorruptBinlogError: always.
    """
    channel.force_close()
    raise CorruptBinlogError(
        f"the server sent a packet of at least {size} bytes, more than the {max_payload} the reader accepts "
        f"(max_event_size): the stream is corrupt, or raise max_event_size if the server wrote such an event"
    )


_CHUNK = 1 << 16
"""Bytes asked of the socket file at a time when the packet being framed needs fewer."""


def _receive(channel: PacketChannel, rfile: Any, needed: int) -> bytes:
    """Return at least ``needed`` more bytes of ``channel`` (up to :data:`_CHUNK` more when fewer are needed).

    :raises pymysql.err.OperationalError: 2013 when the connection breaks, times out or ends first (the
        connection is closed then, as pymysql's ``_read_bytes`` does).
    """
    import pymysql
    from pymysql.constants import CR

    try:
        if needed >= _CHUNK:
            data = rfile.read(needed)
        else:
            data = rfile.read1(_CHUNK)
            while data and len(data) < needed:
                chunk = rfile.read1(_CHUNK)
                if not chunk:
                    break
                data += chunk
    except OSError as err:
        channel.force_close()
        raise pymysql.err.OperationalError(
            CR.CR_SERVER_LOST, f"Lost connection to MySQL server during query ({err})"
        ) from err
    if len(data) < needed:
        channel.force_close()
        raise pymysql.err.OperationalError(CR.CR_SERVER_LOST, "Lost connection to MySQL server during query")
    return data
