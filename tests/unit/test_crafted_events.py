"""Crafted binlog bytes: each defect a security review reproduced against the event reader, as a regression test.

The files are built here event by event (common header, body, CRC32: MySQL internals, "Binlog Event"), with a
MySQL 8.0 FORMAT_DESCRIPTION (:data:`MYSQL_80_POST_HEADERS`), plus real MariaDB binlogs of the session's private
server (``binlog_checksum=NONE`` is only there). Every failure must be one of the reader's named errors
(``extract/errors.py``) naming the file and offset; no loop may run without progress and no size read from
the bytes may be inflated or allocated before it is checked. ``docs/operating.md``, "Crafted and corrupt
binlogs", says what each error means to an operator.
"""

from __future__ import annotations

import itertools
import struct
import tracemalloc
import zlib
from collections.abc import Iterable, Iterator
from pathlib import Path

import pymysql
import pytest
import zstandard
from test_event_packets import _Channel, frame

from airflow_provider_binlog.extract.errors import (
    ChecksumMismatchError,
    CorruptBinlogError,
    UndecodableEventError,
)
from airflow_provider_binlog.extract.events import codes
from airflow_provider_binlog.extract.events.feeds import (
    MAGIC,
    Event,
    dump_events,
    read_binlog_file,
    read_binlog_socket,
)
from airflow_provider_binlog.extract.events.stream import EventReader
from airflow_provider_binlog.extract.wire import length_encoded
from airflow_provider_binlog.testing.mariadb import LocalMariaDB

MYSQL_80_POST_HEADERS = bytes(
    [
        0,
        13,
        0,
        8,
        0,
        0,
        0,
        0,
        4,
        0,
        4,
        0,
        0,
        0,
        98,
        0,
        4,
        26,
        8,
        0,
        0,
        0,
        8,
        8,
        8,
        2,
        0,
        0,
        0,
        10,
        10,
        10,
        42,
        42,
    ]
    + [0, 18, 52, 0, 10, 40, 0]
)
"""The post-header lengths a MySQL 8.0.32 FORMAT_DESCRIPTION lists (type code ``i`` at ``i - 1``)."""
_HEADER = struct.Struct("<IBIIIH")
NAME = "binlog.000001"


def with_crc(event: bytes) -> bytes:
    """Return ``event`` followed by its CRC32 (little-endian), as the server writes it."""
    return event + zlib.crc32(event).to_bytes(4, "little")


def recrc(event: bytes) -> bytes:
    """Return ``event`` (ending in a CRC32) with its CRC32 recomputed: a crafted event, not a corrupt one."""
    return with_crc(event[:-4])


def header(type_code: int, size: int, log_pos: int, flags: int = 0) -> bytes:
    """Return a v4 common header (timestamp, type, server id 1, size, end position, flags)."""
    return _HEADER.pack(1_700_000_000, type_code, 1, size, log_pos, flags)


def format_description(log_pos: int, *, algorithm: int = 1, in_use: bool = False) -> bytes:
    """Return a MySQL 8.0 FORMAT_DESCRIPTION ending at ``log_pos``; its CRC32 is written whatever ``algorithm``."""
    body = struct.pack("<H50sIB", 4, b"8.0.32-crafted", 0, 19) + MYSQL_80_POST_HEADERS + bytes([algorithm])
    return with_crc(header(codes.FORMAT_DESCRIPTION, 19 + len(body) + 4, log_pos, int(in_use)) + body)


def build(events: Iterable[tuple[int, bytes]], *, in_use: bool = False, algorithm: int = 1) -> bytes:
    """Return a binlog file: magic, a FORMAT_DESCRIPTION, then ``(type code, body)`` events with CRC32s."""
    fde = format_description(
        4 + 19 + 57 + len(MYSQL_80_POST_HEADERS) + 1 + 4, algorithm=algorithm, in_use=in_use
    )
    out = MAGIC + fde
    checksum = 4 if algorithm else 0
    for type_code, body in events:
        size = 19 + len(body) + checksum
        event = header(type_code, size, len(out) + size) + body
        out += with_crc(event) if checksum else event
    return out


def rotate(name: bytes, position: int = 4) -> tuple[int, bytes]:
    """Return a ROTATE event's ``(type code, body)``."""
    return codes.ROTATE, struct.pack("<Q", position) + name


STOP = (codes.STOP, b"")
QUERY = (codes.QUERY, struct.pack("<IIBHH", 7, 0, 1, 0, 0) + b"d\x00BEGIN")


def payload(data: bytes, *, stated: int | None, compression: int = 0) -> tuple[int, bytes]:
    """Return a TRANSACTION_PAYLOAD event's ``(type code, body)``: its header fields, then ``data`` as is.

    Fields (``Transaction_payload_event``): 1 compressed size, 2 compression type (0 zstd, 255 none),
    3 uncompressed size (``stated``; left out when None), each ``type, length, value`` packed; 0 ends them.
    """
    fields = [(1, len(data)), (2, compression), *([(3, stated)] if stated is not None else [])]
    body = (
        b"".join(
            bytes([kind]) + length_encoded(len(length_encoded(v))) + length_encoded(v) for kind, v in fields
        )
        + b"\x00"
    )
    return codes.TRANSACTION_PAYLOAD, body + data


def zstd(data: bytes) -> bytes:
    """Return ``data`` compressed as MySQL compresses a transaction (one zstd frame)."""
    return zstandard.ZstdCompressor().compress(data)


def inner(type_code: int, body: bytes, size: int | None = None) -> bytes:
    """Return an event as a TRANSACTION_PAYLOAD holds it: header and body, no checksum."""
    return header(type_code, 19 + len(body) if size is None else size, 0) + body


def write(tmp_path: Path, data: bytes, name: str = NAME) -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


def decode(path: Path, limit: int = 1000, **options: object) -> list[Event]:
    """Return at most ``limit`` decoded events of the file (a reader that loops forever stops here)."""
    reader = EventReader(**options)  # type: ignore[arg-type]
    return list(itertools.islice(reader.events(read_binlog_file(path)), limit))


# 1. A TRANSACTION_PAYLOAD whose inner event has size 0 looped forever.


def test_an_inner_event_of_size_0_is_refused_instead_of_read_forever(tmp_path: Path) -> None:
    looping = inner(codes.INTVAR, b"", size=0) + inner(codes.XID, b"\x01" * 8)
    path = write(tmp_path, build([payload(zstd(looping), stated=len(looping)), STOP]))
    with pytest.raises(
        CorruptBinlogError, match=rf"INTVAR in the payload at {NAME}:\d+: an inner event of 0 bytes"
    ):
        decode(path)


def test_an_inner_event_longer_than_the_rest_of_the_payload_is_refused(tmp_path: Path) -> None:
    long = inner(codes.XID, b"\x01" * 8, size=400)
    path = write(tmp_path, build([payload(long, stated=len(long), compression=255), STOP]))
    with pytest.raises(CorruptBinlogError, match="an inner event of 400 bytes at offset 0 of 27"):
        decode(path)


def test_a_payload_inside_a_payload_is_refused(tmp_path: Path) -> None:
    nested_body = payload(zstd(inner(codes.XID, b"\x01" * 8)), stated=27)[1]
    nested = inner(codes.TRANSACTION_PAYLOAD, nested_body)
    path = write(tmp_path, build([payload(zstd(nested), stated=len(nested)), STOP]))
    with pytest.raises(CorruptBinlogError, match="TRANSACTION_PAYLOAD in the payload at"):
        decode(path)


# 2. A small zstd payload was inflated to whatever it holds before its size was checked.


def _bomb(size: int) -> bytes:
    """Return a zstd frame of ``size`` zero bytes, compressed piecewise (a few KiB of input)."""
    compressor = zstandard.ZstdCompressor().compressobj()
    chunk = bytes(1 << 20)
    return b"".join([*(compressor.compress(chunk) for _ in range(size >> 20)), compressor.flush()])


def _peak_while(path: Path, **options: object) -> tuple[int, Exception | None]:
    """Return the peak of Python's allocations while the file is decoded, and the error decoding raised."""
    tracemalloc.start()
    try:
        decode(path, **options)
    except Exception as err:  # returned for the caller's assertions
        return tracemalloc.get_traced_memory()[1], err
    finally:
        tracemalloc.stop()
    return 0, None


def test_a_payload_inflating_past_its_stated_size_stops_at_that_size(tmp_path: Path) -> None:
    path = write(tmp_path, build([payload(_bomb(64 << 20), stated=1000), STOP]))
    peak, err = _peak_while(path)
    assert peak < 4 << 20  # the 64 MiB are never inflated
    assert isinstance(err, CorruptBinlogError)
    assert f"TRANSACTION_PAYLOAD at {NAME}:" in str(err)
    assert "its header says 1000" in str(err)


def test_a_payload_without_a_stated_size_stops_at_the_maximum(tmp_path: Path) -> None:
    path = write(tmp_path, build([payload(_bomb(64 << 20), stated=None), STOP]))
    peak, err = _peak_while(path, max_event_size=1 << 20)
    assert peak < 6 << 20
    assert isinstance(err, CorruptBinlogError)
    assert "the reader accepts 1048576 (max_event_size)" in str(err)


def test_a_stated_size_over_the_maximum_is_refused_before_inflating(tmp_path: Path) -> None:
    path = write(tmp_path, build([payload(zstd(b"x"), stated=2 << 30), STOP]))
    with pytest.raises(CorruptBinlogError, match="inflates to 2147483648 bytes, more than the 1073741824"):
        decode(path)


def test_a_payload_that_is_not_zstd_or_inflates_short_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, build([payload(b"not zstd at all", stated=10), STOP]))
    with pytest.raises(CorruptBinlogError, match="does not inflate"):
        decode(path)
    short = inner(codes.XID, b"\x01" * 8)
    path = write(tmp_path, build([payload(zstd(short), stated=len(short) + 5), STOP]))
    with pytest.raises(CorruptBinlogError, match="inflates to 27 bytes, its header says 32"):
        decode(path)


# 3. A truncated inner header raised a bare struct.error.


def test_an_inner_header_cut_short_is_a_named_error(tmp_path: Path) -> None:
    cut = inner(codes.XID, b"\x01" * 8) + b"\x00" * 10
    path = write(tmp_path, build([payload(zstd(cut), stated=len(cut)), STOP]))
    with pytest.raises(CorruptBinlogError, match="10 bytes at offset 27 of 37 inflated bytes, too few"):
        decode(path)


# 4. ROTATE and FORMAT_DESCRIPTION were read before they were verified.


def test_a_rotate_with_a_bad_checksum_is_not_read_by_the_file_feed(tmp_path: Path) -> None:
    for name in (b"binlog.\xff\xfe0002", b"binlog.000002"):  # not UTF-8 (read, it raised); a name it follows
        data = bytearray(build([QUERY, rotate(name)]))
        data[-1] ^= 0x01  # the ROTATE's CRC32
        path = write(tmp_path, bytes(data))
        with pytest.raises(ChecksumMismatchError, match=rf"ROTATE at {NAME}:\d+"):
            list(read_binlog_file(path))  # the feed alone: it reads the name itself


def test_a_verified_rotate_naming_no_plain_file_is_refused(tmp_path: Path) -> None:
    for name in (b"../etc/passwd", b"..", b"bin\x00log", b"\xff"):
        path = write(tmp_path, build([QUERY, rotate(name)]))
        with pytest.raises(CorruptBinlogError, match=f"ROTATE at {NAME}:"):
            list(read_binlog_file(path))


def test_a_rotation_back_to_a_file_already_read_is_refused(tmp_path: Path) -> None:
    write(tmp_path, build([QUERY, rotate(b"binlog.000002")]))
    write(tmp_path, build([QUERY, rotate(NAME.encode())]), "binlog.000002")
    with pytest.raises(CorruptBinlogError, match="names binlog.000001, which this read has already read"):
        decode(tmp_path / NAME)


@pytest.mark.parametrize("feed", ["file", "dump"])
def test_a_flipped_checksum_algorithm_byte_fails_the_format_descriptions_own_checksum(
    tmp_path: Path, feed: str
) -> None:
    """CRC32 -> OFF would switch verification off for the whole file: the FDE is verified whatever it says."""
    data = bytearray(build([QUERY, STOP]))
    fde_end = struct.unpack_from("<I", data, 4 + 13)[0]
    data[fde_end - 5] = 0
    with pytest.raises(ChecksumMismatchError, match=f"FORMAT_DESCRIPTION at {NAME}:4"):
        list(EventReader().events(_feed(tmp_path, bytes(data), feed)))


@pytest.mark.parametrize("feed", ["file", "dump"])
def test_a_checksum_algorithm_neither_off_nor_crc32_is_refused(tmp_path: Path, feed: str) -> None:
    data = bytearray(build([QUERY, STOP]))
    fde_end = struct.unpack_from("<I", data, 4 + 13)[0]
    data[fde_end - 5] = 2
    data[4:fde_end] = recrc(bytes(data[4:fde_end]))
    with pytest.raises(CorruptBinlogError, match="checksum algorithm 2 is neither 0 .OFF. nor 1 .CRC32."):
        list(EventReader().events(_feed(tmp_path, bytes(data), feed)))


def _feed(tmp_path: Path, data: bytes, feed: str) -> Iterator[Event]:
    """Return the raw events of the file bytes ``data``: read as a file, or sent as a dump from position 4."""
    if feed == "file":
        return read_binlog_file(write(tmp_path, data))
    return dump_events(dump_channel(data), file=NAME, checksum=4)  # type: ignore[arg-type]


def file_events(data: bytes) -> list[bytes]:
    """Return the events of binlog file bytes, back to back from offset 4 (no check of anything)."""
    events, pos = [], 4
    while pos + 19 <= len(data):
        size = max(19, struct.unpack_from("<I", data, pos + 9)[0])
        events.append(data[pos : pos + size])
        pos += size
    return events


def dump_channel(data: bytes, *, events: list[bytes] | None = None) -> _Channel:
    """Return a channel serving a dump of the binlog file bytes ``data`` (or of ``events``): one ``00`` +
    event packet each, then the EOF packet, as a non-blocking COM_BINLOG_DUMP from position 4 sends them."""
    payloads = [b"\x00" + event for event in (file_events(data) if events is None else events)]
    payloads.append(b"\xfe\x00\x00\x02\x00")
    stream = b"".join(frame(p, (i + 2) & 0xFF) for i, p in enumerate(payloads[1:]))
    return _Channel(payloads[0], stream, 1 << 16)


def test_the_dump_feed_refuses_packets_that_hold_no_event() -> None:
    good = file_events(build([QUERY, STOP]))
    for broken in ([*good[:1], b"", *good[1:]], [*good[:1], b"\x00" * 5, *good[1:]]):
        channel = _Channel(
            b"\x00" + broken[0], b"".join(frame(b"\x00" + e, i + 2) for i, e in enumerate(broken[1:])), 9
        )
        with pytest.raises(CorruptBinlogError, match="too short for an event"):
            list(dump_events(channel, file=NAME, checksum=4))  # type: ignore[arg-type]
    wrong_size = [good[0], good[1] + b"extra", good[2]]
    with pytest.raises(CorruptBinlogError, match="whose header says"):
        list(dump_events(dump_channel(b"", events=wrong_size), file=NAME, checksum=4))  # type: ignore[arg-type]


def test_the_dump_feed_verifies_a_rotate_before_it_reads_its_name() -> None:
    events = file_events(build([QUERY, rotate(b"binlog.\xff0002")]))
    events[-1] = events[-1][:-1] + bytes([events[-1][-1] ^ 1])
    with pytest.raises(ChecksumMismatchError, match=rf"ROTATE at {NAME}:\d+"):
        list(dump_events(dump_channel(b"", events=events), file=NAME, checksum=4))  # type: ignore[arg-type]


def test_a_payload_over_the_maximum_is_refused_before_it_is_put_together() -> None:
    fde = file_events(build([]))[0]
    big = b"\x00" + b"x" * (0xFFFFFF * 2)  # three packets: 16 MiB - 1, 16 MiB - 1, 2 bytes
    parts = [big[:0xFFFFFF], big[0xFFFFFF : 2 * 0xFFFFFF], big[2 * 0xFFFFFF :]]
    channel = _Channel(b"\x00" + fde, b"".join(frame(part, 2 + i) for i, part in enumerate(parts)), 1 << 20)
    with pytest.raises(CorruptBinlogError, match="more than the 1048577 the reader accepts"):
        list(dump_events(channel, file=NAME, checksum=4, max_event_size=1 << 20))  # type: ignore[arg-type]
    assert channel.closed


# 5. A finished file cut exactly at an event boundary read as complete.


def test_a_finished_file_cut_at_an_event_boundary_is_an_error_naming_file_and_offset(tmp_path: Path) -> None:
    whole = build([QUERY, QUERY, rotate(b"binlog.000002")])
    cut = whole[: len(whole) - len(file_events(whole)[-1])]  # without the ROTATE
    path = write(tmp_path, cut)
    with pytest.raises(CorruptBinlogError, match=rf"{NAME} ends at offset {len(cut)} after a QUERY event"):
        decode(path)
    assert len(decode(write(tmp_path, whole))) == 4  # the whole file: FDE, 2 QUERY, ROTATE
    assert len(decode(write(tmp_path, build([QUERY, STOP])))) == 3  # a STOP ends a file too


def test_the_servers_active_file_may_end_after_any_event(tmp_path: Path) -> None:
    assert len(decode(write(tmp_path, build([QUERY, QUERY], in_use=True)))) == 3  # the in-use flag says so
    path = write(tmp_path, build([QUERY, QUERY]))
    events = list(EventReader().events(read_binlog_file(path, active_file=NAME)))  # the caller says so
    assert [e.name for e in events] == ["FORMAT_DESCRIPTION", "QUERY", "QUERY"]


def test_a_file_cut_inside_an_event_or_with_a_size_out_of_bounds_is_an_error(tmp_path: Path) -> None:
    whole = build([QUERY, STOP], in_use=True)
    with pytest.raises(CorruptBinlogError, match=f"{NAME} ends inside an event at offset"):
        decode(write(tmp_path, whole[:-3]))
    fde_end = struct.unpack_from("<I", whole, 4 + 13)[0]
    for size in (0, 18, 2**31):
        data = bytearray(whole)
        struct.pack_into("<I", data, fde_end + 9, size)
        with pytest.raises(CorruptBinlogError, match=rf"{NAME}:{fde_end}: an event of {size} bytes"):
            decode(write(tmp_path, bytes(data)))


# The same rules on real MariaDB binlogs.


def _events_file(server: LocalMariaDB, *statements: str) -> Path:
    """Run ``statements`` in a binlog file of their own on ``server``; return the finished file."""
    server.execute("FLUSH BINARY LOGS")
    name = server.execute("SHOW MASTER STATUS")[0][0]
    server.execute(*statements)
    server.execute("FLUSH BINARY LOGS")
    return server.datadir / name


def test_mariadb_writes_a_real_crc32_in_a_format_description_with_checksums_off(
    mariadb: LocalMariaDB, tmp_path: Path
) -> None:
    """What verifying every FORMAT_DESCRIPTION relies on, measured: with binlog_checksum=NONE the FDE says OFF
    and still ends with its CRC32 (``Format_description_log_event::write``); the other events carry none."""
    mariadb.execute("SET GLOBAL binlog_checksum = NONE")
    try:
        with mariadb.scratch_database("crafted") as db:
            path = _events_file(
                mariadb, f"CREATE TABLE {db}.t (id INT PRIMARY KEY)", f"INSERT INTO {db}.t VALUES (1)"
            )
            start = mariadb.execute("SHOW MASTER STATUS")[0]
            mariadb.execute(f"INSERT INTO {db}.t VALUES (2)")
            whole = path.read_bytes()
            fde = file_events(whole)[0]
            assert fde[-5] == 0
            assert zlib.crc32(fde[:-4]) == int.from_bytes(fde[-4:], "little")
            events = list(EventReader().events(read_binlog_file(path, follow_rotations=False)))
            assert sum(1 for e in events if e.name == "WRITE_ROWS_V1") == 1
            flipped = bytearray(whole)
            flipped[4 + len(fde) - 5] = 1  # OFF -> CRC32: the events after it would then be read wrong
            with pytest.raises(ChecksumMismatchError, match="FORMAT_DESCRIPTION at"):
                list(read_binlog_file(write(tmp_path, bytes(flipped), path.name)))
            version = bytearray(whole)
            version[4 + 19 + 3] ^= 0x20  # a byte of the server version, the algorithm left OFF
            with pytest.raises(ChecksumMismatchError, match="FORMAT_DESCRIPTION at"):
                list(read_binlog_file(write(tmp_path, bytes(version), path.name)))
            # Over the socket: from 4, and from a later position, where the FDE comes with log_pos 0 and a
            # checksum the server does not recompute with checksums off (the one FDE that is not verified).
            for file, position in ((path.name, 4), start[:2]):
                with pymysql.connect(**mariadb.connection_kwargs()) as conn:
                    raw = read_binlog_socket(conn, server_id=33_001, file=file, position=position)
                    names = [e.name for e in EventReader().events(raw)]
                assert names[0] == "FORMAT_DESCRIPTION"
                assert "WRITE_ROWS_V1" in names
    finally:
        mariadb.execute("SET GLOBAL binlog_checksum = CRC32")


def test_a_real_finished_file_cut_at_an_event_boundary_is_an_error(
    mariadb: LocalMariaDB, tmp_path: Path
) -> None:
    with mariadb.scratch_database("crafted") as db:
        path = _events_file(
            mariadb, f"CREATE TABLE {db}.t (id INT PRIMARY KEY)", f"INSERT INTO {db}.t VALUES (1)"
        )
    whole = path.read_bytes()
    events = file_events(whole)
    assert events[-1][4] == codes.ROTATE  # a finished file: it ends with a ROTATE ...
    assert not events[0][17] & 1  # ... and its in-use flag is cleared
    for cut in (len(whole) - len(events[-1]), len(whole) - len(events[-1]) - len(events[-2])):
        with pytest.raises(CorruptBinlogError, match=rf"{path.name} ends at offset {cut} after a \w+ event"):
            list(read_binlog_file(write(tmp_path, whole[:cut], path.name)))
        assert list(read_binlog_file(write(tmp_path, whole[:cut], path.name), active_file=path.name))


def test_every_named_error_is_an_undecodable_event_error() -> None:
    """What the window reader turns into the provider's UnsupportedEventError (``extract/reader.py``)."""
    assert issubclass(ChecksumMismatchError, CorruptBinlogError)
    assert issubclass(CorruptBinlogError, UndecodableEventError)
