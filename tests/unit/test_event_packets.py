"""The socket feed's packet framing (``feeds.packet_batches``) on hand-built packet bytes served in awkward chunks."""

from __future__ import annotations

import io
import struct
from collections.abc import Iterator

import pymysql
import pytest

from airflow_provider_binlog.extract.events.feeds import packet_batches


def frame(payload: bytes, seq: int) -> bytes:
    """Return one protocol packet: 3-byte length, sequence id, payload."""
    return struct.pack("<I", len(payload))[:3] + bytes([seq]) + payload


class _Trickle(io.RawIOBase):
    """A socket that hands out at most ``step`` bytes per read, as a busy network does."""

    def __init__(self, data: bytes, step: int) -> None:
        self.data, self.pos, self.step = data, 0, step

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: bytearray) -> int:  # type: ignore[override]
        chunk = self.data[self.pos : self.pos + min(self.step, len(buffer))]
        buffer[: len(chunk)] = chunk
        self.pos += len(chunk)
        return len(chunk)


class _Channel:
    """What ``packet_batches`` uses of a connection's packet layer: the first packet, then the socket file."""

    def __init__(self, first: bytes, rest: bytes, step: int) -> None:
        self.first = first
        self.socket_file = io.BufferedReader(_Trickle(rest, step))
        self.sequence_id = 2
        self.closed = False

    def read_packet(self) -> bytes:
        return self.first

    def force_close(self) -> None:
        self.closed = True


def packets(channel: _Channel) -> Iterator[bytes]:
    """Yield the payloads ``packet_batches`` frames, one at a time."""
    for batch in packet_batches(channel):  # type: ignore[arg-type]
        yield from batch


@pytest.mark.parametrize(("step", "continued"), [(1, False), (7, False), (4099, True)])
def test_packets_are_framed_across_reads_and_continuations(step: int, continued: bool) -> None:
    # A payload of 16 MiB - 1 bytes continues in the next packet; sequence ids wrap at 256 (300 packets).
    big = bytes(range(256)) * (0xFFFFFF // 256) + b"\x00" * (0xFFFFFF % 256) if continued else b""
    payloads = [b"\x00event-one", b"\x00" + b"x" * 300, *([big] if continued else []), b"\x00tail"]
    payloads += [b"\x00" + bytes([n % 256]) * n for n in range(300)]
    expected = [b"\x00event-one", b"\x00" + b"x" * 300, (big + b"\x00tail") if continued else b"\x00tail"]
    expected += payloads[-300:]
    seq, stream = 2, b""
    for payload in payloads:
        stream += frame(payload, seq & 0xFF)
        seq += 1
    conn = _Channel(b"\x00first", stream, step)
    assert _take(packets(conn), len(expected) + 1) == [b"\x00first", *expected]
    assert conn.sequence_id == seq & 0xFF


def _take(iterator: object, count: int) -> list[bytes]:
    return [next(iterator) for _ in range(count)]  # type: ignore[call-overload]


def test_a_packet_out_of_sequence_fails_and_closes() -> None:
    conn = _Channel(b"\x00first", frame(b"\x00a", 2) + frame(b"\x00b", 9), 5)
    stream = packets(conn)
    assert _take(stream, 2) == [b"\x00first", b"\x00a"]
    with pytest.raises(pymysql.err.InternalError, match="got 9 expected 3"):
        next(stream)
    assert conn.closed


@pytest.mark.parametrize(
    "rest",
    [frame(b"\xff\x35\x05", 0), frame(b"\x00" + b"y" * 100, 2)[:50]],
    ids=["MariaDB's shutdown packet (sequence id 0)", "the stream ends inside a packet"],
)
def test_lost_connections_fail_with_2013_and_close(rest: bytes) -> None:
    conn = _Channel(b"\x00first", rest, 8)
    stream = packets(conn)
    next(stream)
    with pytest.raises(pymysql.err.OperationalError) as lost:
        next(stream)
    assert lost.value.args[0] == 2013
    assert conn.closed


def test_an_error_packet_raises_the_server_error() -> None:
    error = b"\xff" + struct.pack("<H", 1236) + b"#HY000" + b"Could not find first log file name"
    stream = packets(_Channel(b"\x00first", frame(error, 2), 3))
    next(stream)
    with pytest.raises(pymysql.err.OperationalError, match="Could not find first log"):
        next(stream)
