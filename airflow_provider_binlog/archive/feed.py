"""Reading the archived binlog: the archive's events from a position on, as the file feed yields a server's files.

:func:`read_archive` yields the same :class:`~airflow_provider_binlog.extract.events.feeds.Event` s, with the same
file names, offsets and bytes, as a dump from the source over the same range (a test compares the two): finished
files are read as they are, the file the archive holds in parts (the server was writing it) as one file up to the
last part's end, and the files follow each other by their ROTATE events, as
:func:`~airflow_provider_binlog.extract.events.feeds.read_binlog_file` follows a server's files. Every event is
then checked by the reader that consumes them (:class:`~airflow_provider_binlog.extract.events.stream.EventReader`:
sizes, checksums), as it checks a dump's.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow.fs as pafs

from airflow_provider_binlog.archive.copy import ArchiveError, BinlogArchive, Part
from airflow_provider_binlog.contract.positions import BinlogPosition
from airflow_provider_binlog.extract.events.feeds import Event, events_of_file
from airflow_provider_binlog.extract.events.integrity import MAX_EVENT_SIZE


def read_archive(
    archive: BinlogArchive, start: BinlogPosition, *, max_event_size: int = MAX_EVENT_SIZE
) -> Iterator[Event]:
    """Yield the archived events from ``start`` through the files its ROTATEs name, to the end of the archive.

    From a ``start`` after 4 the file's FORMAT_DESCRIPTION comes first, as from a dump. The read ends where the
    archive does: after a file whose ROTATE names a file the archive holds nothing of, or at the end of the
    parts of the file the server was writing when they were copied.

    :param start: an event boundary in a file the archive holds (finished or in parts).
    :raises ArchiveError: when the archive holds nothing of ``start``'s file.
    :raises CorruptBinlogError: when an archived file is not a binlog file or ends inside an event
        (:func:`~airflow_provider_binlog.extract.events.feeds.events_of_file`).
    """
    name, at = start.file, start.pos
    while True:
        handle, active = _open(archive, name)
        with handle:
            rotate = yield from events_of_file(
                handle, f"{archive.uri}/{name}", at, active=active, max_event_size=max_event_size
            )
        if rotate is None or not _holds(archive, rotate[0]):
            return
        name, at = rotate


def _holds(archive: BinlogArchive, name: str) -> bool:
    return archive.fs.get_file_info(f"{archive.root}/{name}.json").type == pafs.FileType.File or bool(
        archive.parts(name)
    )


def _open(archive: BinlogArchive, name: str) -> tuple[Any, bool]:
    """Return ``(seekable binary handle, still being written)`` of the archive's copy of ``name``."""
    if archive.fs.get_file_info(f"{archive.root}/{name}.json").type == pafs.FileType.File:
        return archive.fs.open_input_file(f"{archive.root}/{name}"), False
    chain = archive.parts(name)
    if not chain:
        raise ArchiveError(f"the binlog archive at {archive.uri} holds nothing of {name}")
    return PartsReader(archive.fs, chain), True


class PartsReader:
    """The parts of a file the archive holds unfinished, read as one seekable file of ``chain[-1].end`` bytes.

    :param fs: the archive's filesystem.
    :param chain: the file's parts from offset 0, each starting where the one before ends
        (:meth:`~airflow_provider_binlog.archive.copy.BinlogArchive.parts`).
    """

    def __init__(self, fs: pafs.FileSystem, chain: Sequence[Part]) -> None:
        self.fs, self.chain = fs, list(chain)
        self.position = 0
        self._open: tuple[int, Any] | None = None  # (index in chain, its opened file)

    def __enter__(self) -> PartsReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the part opened last."""
        if self._open is not None:
            self._open[1].close()
            self._open = None

    def seek(self, position: int) -> int:
        """Move to ``position`` (bytes from the file's start); return it."""
        self.position = position
        return position

    def tell(self) -> int:
        """Return the position."""
        return self.position

    def read(self, size: int = -1) -> bytes:
        """Read ``size`` bytes (all that is left when negative) from the position; fewer at the end."""
        end = self.chain[-1].end if self.chain else 0
        want = end - self.position if size < 0 else min(size, max(end - self.position, 0))
        out = bytearray()
        while len(out) < want:
            index = next(i for i, p in enumerate(self.chain) if p.start <= self.position < p.end)
            part = self.chain[index]
            if self._open is None or self._open[0] != index:
                self.close()
                self._open = (index, self.fs.open_input_file(part.path))
            count = min(want - len(out), part.end - self.position)
            out += self._open[1].read_at(count, self.position - part.start)
            self.position += count
        return bytes(out)
