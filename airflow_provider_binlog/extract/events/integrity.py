"""What the event reader checks before it trusts a byte: sizes, CRC32 checksums, the checksum algorithm.

Every event is verified before anything in it is interpreted (its type's parser, a ROTATE's file name, a
FORMAT_DESCRIPTION's checksum algorithm), and no size read from the bytes is allocated or inflated before it
is checked against :data:`MAX_EVENT_SIZE`.

Checksums: MySQL ``libs/mysql/binlog/event/binlog_event.cpp`` ``Log_event_footer::event_checksum_test`` and
MariaDB ``sql/log_event.cc`` (same name): the CRC-32 (``zlib.crc32``) of the event without its last 4 bytes,
stored little-endian in those 4 bytes; a FORMAT_DESCRIPTION's is computed with its
``LOG_EVENT_BINLOG_IN_USE_F`` header flag cleared (the server clears the flag in place when it closes the
file, without rewriting the checksum).

The checksum algorithm of the events after a FORMAT_DESCRIPTION is the FORMAT_DESCRIPTION's byte before its
last 4 (0 OFF, 1 CRC32). The servers read it before they verify anything and skip verification when it says
OFF, so one flipped byte there would switch verification off for the rest of a file. Here the
FORMAT_DESCRIPTION itself is always verified, whatever that byte says: MySQL and MariaDB
``Format_description_log_event::write`` (``sql/log_event.cc``; MySQL 5.6.1+, MariaDB 5.3+: "FD of
checksum-aware server is always checksum-equipped, (V) is in, regardless of @@global.binlog_checksum
policy") set the algorithm to CRC32 while they write the event and back to OFF after, so the 4 bytes are the
event's real CRC-32 with ``binlog_checksum=NONE`` too (measured on MariaDB:
``tests/unit/test_crafted_events.py``). A flipped algorithm byte therefore fails the FORMAT_DESCRIPTION's own
checksum, and a byte that is neither 0 nor 1 is refused outright. The one FORMAT_DESCRIPTION that cannot be
verified with the algorithm OFF is the one a dump re-sends with ``log_pos`` 0 for a start after 4: the dump
thread zeroes its ``log_pos`` (MariaDB its ``created`` too) and recomputes the checksum only when checksums
are on (MySQL ``sql/rpl_binlog_sender.cc`` ``Binlog_sender::send_format_description_event``, MariaDB
``sql/sql_repl.cc`` ``send_format_descr_event``); that event comes from the server reading its own file over
a connection the reader opened, not from bytes at rest.
"""

from __future__ import annotations

import struct
import zlib

from airflow_provider_binlog.extract.errors import ChecksumMismatchError, CorruptBinlogError
from airflow_provider_binlog.extract.events import codes

MAX_EVENT_SIZE = 1 << 30
"""The largest event, and the largest inflated TRANSACTION_PAYLOAD, the reader accepts, in bytes (1 GiB).

The one place the bound is set: :func:`~.feeds.read_binlog_file`, :func:`~.feeds.dump_events`,
:func:`~.feeds.packet_batches` and :class:`~.stream.EventReader` take it as their ``max_event_size``
default. 1 GiB is the ceiling of ``max_allowed_packet`` and ``replica_max_allowed_packet`` /
``slave_max_allowed_packet`` on both servers (MySQL manual and MariaDB KB, "Server System Variables"): a
source cannot ship a larger event to a replica either."""

CHECKSUM_SIZE = 4
ALG_OFF = 0
ALG_CRC32 = 1
CRC32_RESIDUE = 0x2144DF1C
"""The CRC-32 of any bytes followed by their own CRC-32 (little-endian): an event whose checksum is right
has this CRC-32 over all its bytes, so checking it needs no slice of the event without its checksum."""
BINLOG_IN_USE = 0x1
"""FORMAT_DESCRIPTION flag set while the server writes the file (``LOG_EVENT_BINLOG_IN_USE_F``); the server
clears it when it closes the file (rotation or shutdown), and its checksum is computed without it."""
_FDE_FIXED = 19 + 2 + 50 + 4 + 1
"""Header, binlog version, server version, created, header length: the FORMAT_DESCRIPTION's fixed part."""
_FDE_MIN = _FDE_FIXED + 1 + CHECKSUM_SIZE
"""... then post-header lengths and the checksum algorithm byte and the checksum of a checksum-aware server."""
_U32 = struct.Struct("<I")


def where(type_code: int, file: str, start: int, in_payload: bool = False) -> str:
    """Return ``TYPE at file:offset`` (``in the payload at`` for events inside a TRANSACTION_PAYLOAD)."""
    name = codes.NAMES.get(type_code, f"event type {type_code}")
    return f"{name} {'in the payload ' if in_payload else ''}at {file}:{start}"


def check_size(size: int, file: str, start: int, max_event_size: int) -> None:
    """Check an event size read from a common header: at least the 19-byte header, at most ``max_event_size``.

    :raises CorruptBinlogError: naming ``file``, ``start`` and the size, when it is out of bounds.
    """
    if size < 19:
        raise CorruptBinlogError(
            f"{file}:{start}: an event of {size} bytes is shorter than its 19-byte header: the bytes there are "
            f"not a binlog event (a corrupt file, or a start position that is not an event boundary)"
        )
    if size > max_event_size:
        raise CorruptBinlogError(
            f"{file}:{start}: an event of {size} bytes is larger than the {max_event_size} bytes the reader "
            f"accepts (max_event_size; no server writes events over 1 GiB): the bytes are corrupt, or raise "
            f"max_event_size if the server is known to have written it"
        )


def verify(data: bytes, file: str, start: int, in_payload: bool = False) -> None:
    """Check the CRC32 of one event's bytes ``data`` (header to checksum) at ``start`` in ``file``.

    :raises ChecksumMismatchError: when the checksum does not match the bytes.
    """
    if zlib.crc32(data) != CRC32_RESIDUE:
        raise ChecksumMismatchError(
            f"{where(data[4], file, start, in_payload)}: CRC32 checksum mismatch; the binlog bytes are corrupt "
            f"(copy the file again from the server, or read it over the replication connection)"
        )


def format_checksum(data: bytes, file: str, start: int) -> int:
    """Verify a FORMAT_DESCRIPTION's bytes ``data``; return the size of the checksum of the events after it.

    The algorithm byte must be 0 (OFF: returns 0) or 1 (CRC32: returns 4), and the event's own CRC-32
    (computed without the in-use flag) must match, whatever the byte says, except for an event with
    ``log_pos`` 0 and the algorithm OFF, which a dump re-sends with a checksum it does not recompute (see
    the module's documentation for the sources).

    :raises CorruptBinlogError: for an event too short to hold the algorithm and checksum (also what a
        server before MySQL 5.6.1 / MariaDB 5.3 writes, which this reader does not read), or an algorithm byte
        that is neither 0 nor 1.
    :raises ChecksumMismatchError: when the checksum does not match.
    """
    at = where(codes.FORMAT_DESCRIPTION, file, start)
    if len(data) < _FDE_MIN:
        raise CorruptBinlogError(
            f"{at}: {len(data)} bytes, too short for a FORMAT_DESCRIPTION with a checksum algorithm (at least "
            f"{_FDE_MIN}): the file is corrupt or was written by a server older than MySQL 5.6.1 / MariaDB 5.3"
        )
    algorithm = data[-CHECKSUM_SIZE - 1]
    if algorithm not in (ALG_OFF, ALG_CRC32):
        raise CorruptBinlogError(
            f"{at}: checksum algorithm {algorithm} is neither 0 (OFF) nor 1 (CRC32): the binlog bytes are "
            f"corrupt (copy the file again from the server)"
        )
    log_pos = _U32.unpack_from(data, 13)[0]
    if algorithm == ALG_CRC32 or log_pos != 0:
        stored = _U32.unpack_from(data, len(data) - CHECKSUM_SIZE)[0]
        computed = zlib.crc32(memoryview(data)[:-CHECKSUM_SIZE])
        if computed != stored and data[17] & BINLOG_IN_USE:  # written before the in-use flag was set
            cleared = bytearray(data[:-CHECKSUM_SIZE])
            cleared[17] &= ~BINLOG_IN_USE & 0xFF
            computed = zlib.crc32(cleared)
        if computed != stored:
            raise ChecksumMismatchError(
                f"{at}: CRC32 checksum mismatch (the FORMAT_DESCRIPTION is verified whatever its checksum "
                f"algorithm byte says); the binlog bytes are corrupt (copy the file again from the server)"
            )
    return CHECKSUM_SIZE if algorithm == ALG_CRC32 else 0
