"""Where raw binlog events come from: binlog files (and, later, the replication socket).

A feed yields :class:`RawEvent` s, each one event's bytes (common header to checksum) with the file it
is in and its start offset; :class:`~.stream.EventReader` does the rest, whatever the feed.

Binlog file layout: MySQL internals, "Binary Log Overview" / "Binlog File": the magic bytes
``fe 62 69 6e``, then events back to back from offset 4, each ``event_size`` bytes long as its common
header says. A file that ends with a ROTATE event continues in the file the ROTATE names.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from airflow_provider_binlog.exceptions import UnsupportedEventError
from airflow_provider_binlog.extract.events import codes

MAGIC = b"\xfebin"
"""The first 4 bytes of every binlog file."""
_SIZE = struct.Struct("<I")
_READ_CHUNK = 1 << 20


@dataclass(frozen=True, slots=True)
class RawEvent:
    """One event's bytes and where it is.

    :param file: the binlog file's name (no directory). :param start: its offset in the file.
    :param data: header, body and checksum (when the server writes one).
    """

    file: str
    start: int
    data: bytes


def read_binlog_file(
    path: str | os.PathLike[str], start: int = 4, *, follow_rotations: bool = True
) -> Iterator[RawEvent]:
    """Yield the events of the binlog file ``path`` from offset ``start``, then of the files it rotates to.

    A file that ends with a ROTATE event is followed by the file the ROTATE names, in the same
    directory, from the ROTATE's position, while that file exists and is another file (a relay log's
    ROTATEs in the middle of a file are the source's and are not followed).

    :param start: an event boundary (4 = the first event, the FORMAT_DESCRIPTION).
    :raises UnsupportedEventError: when the file does not start with the binlog magic bytes, or ends
        inside an event (a file being written is read up to its last complete event only when that is its
        end: a truncated event is an error).
    """
    current = Path(path)
    while True:
        rotate: tuple[str, int] | None = None
        checksum = 0
        for event in _events_of(current, start):
            yield event
            kind = event.data[4]
            if kind == codes.FORMAT_DESCRIPTION:
                checksum = 4 if event.data[-5] else 0
            rotate = _rotation(event.data, checksum) if kind == codes.ROTATE else None
        if not follow_rotations or rotate is None:
            return
        following = current.with_name(rotate[0])
        if following == current or not following.exists():
            return
        current, start = following, rotate[1]


def _rotation(data: bytes, checksum: int) -> tuple[str, int]:
    """Return ``(next file, position)`` of a ROTATE event's bytes (``checksum``: its checksum's size)."""
    return data[27 : len(data) - checksum].decode("utf-8"), struct.unpack_from("<Q", data, 19)[0]


def _events_of(path: Path, start: int) -> Iterator[RawEvent]:
    name = path.name
    with open(path, "rb") as handle:
        if handle.read(4) != MAGIC:
            raise UnsupportedEventError(f"{path} is not a binlog file (it does not start with fe 62 69 6e)")
        handle.seek(start)
        buffer = b""  # the bytes read but not yet yielded, starting at ``offset``
        offset = start
        while chunk := handle.read(_READ_CHUNK):
            buffer += chunk
            pos = 0
            while len(buffer) - pos >= 19:
                size = _SIZE.unpack_from(buffer, pos + 9)[0]
                if size < 19:
                    raise UnsupportedEventError(
                        f"{name}:{offset} holds an event of {size} bytes: not a binlog event"
                    )
                if len(buffer) - pos < size:
                    break
                yield RawEvent(name, offset, buffer[pos : pos + size])
                pos += size
                offset += size
            buffer = buffer[pos:]
        if buffer:
            raise UnsupportedEventError(
                f"{name} ends inside an event at offset {offset} ({len(buffer)} bytes left)"
            )
