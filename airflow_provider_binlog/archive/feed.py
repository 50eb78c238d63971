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

import functools
from collections.abc import Callable, Container, Generator, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass

from airflow_provider_binlog.archive.copy import ArchivedFile, ArchiveError, BinlogArchive
from airflow_provider_binlog.contract.positions import BinlogPosition, file_index
from airflow_provider_binlog.extract.events import codes
from airflow_provider_binlog.extract.events.feeds import Event, events_of_file
from airflow_provider_binlog.extract.events.integrity import MAX_EVENT_SIZE


def read_archive(
    archive: BinlogArchive,
    start: BinlogPosition,
    *,
    stop_before: Container[str] = frozenset(),
    max_event_size: int = MAX_EVENT_SIZE,
) -> Generator[Event, None, BinlogPosition | None]:
    """Yield the archived events from ``start`` through the files its ROTATEs name, to the end of the archive.

    From a ``start`` after 4 the file's FORMAT_DESCRIPTION comes first, as from a dump. The read ends where the
    archive does: after a file whose ROTATE names a file the archive holds nothing of, or at the end of the
    parts of the file the server was writing when they were copied; or before a file of ``stop_before``.

    :param start: an event boundary in a file the archive holds (finished or in parts).
    :param stop_before: file names not to read from the archive (those the source still has).
    :returns: where the binlog goes on after the last event yielded when a ROTATE named a file of
        ``stop_before`` (its start, 4); None at the end of the archive.
    :raises ArchiveError: when the archive holds nothing of ``start``'s file.
    :raises CorruptBinlogError: when an archived file is not a binlog file or ends inside an event
        (:func:`~airflow_provider_binlog.extract.events.feeds.events_of_file`).
    """
    name, at = start.file, start.pos
    while True:
        handle, active = archive.open(name)
        with handle:
            rotate = yield from events_of_file(
                handle, f"{archive.uri}/{name}", at, active=active, max_event_size=max_event_size
            )
        if rotate is None:
            return None
        if rotate[0] in stop_before:
            return BinlogPosition(*rotate)
        if not archive.holds(rotate[0]):
            return None
        name, at = rotate


@dataclass(frozen=True)
class ArchiveFeed:
    """The archive as the window extract and the purge-risk check read it.

    It is the binlog archive's :class:`~airflow_provider_binlog.extract.window.ArchivedBinlog`. Its record of the
    finished files is read once (:attr:`finished`): one task's or one measurement's view of the archive.

    :param archive: the archive folder of the pipeline's source.
    """

    archive: BinlogArchive

    @functools.cached_property
    def finished(self) -> dict[str, ArchivedFile]:
        """Return the archive's finished files by name (:meth:`BinlogArchive.finished_files`), read once."""
        return self.archive.finished_files()

    def gap(self, start_file: str, server_files: Sequence[tuple[str, int]]) -> str | None:
        """Return what the archive and the source together lack of the binlog from ``start_file`` on; None if nothing.

        ``start_file`` and every file after it that the source no longer lists must be finished in the archive (a
        file the archive holds only in part was purged before its copy ended).

        :param server_files: the source's binlog files as ``SHOW BINARY LOGS`` lists them.
        """
        listed = [name for name, _ in server_files]
        if start_file in listed:
            return None
        if not listed:
            return "the source lists no binary log"
        base, digits = start_file.rsplit(".", 1)
        for number in range(int(digits), file_index(listed[0])):
            name = f"{base}.{number:0{len(digits)}d}"
            if name not in self.finished:
                held = "holds only part of" if self.archive.parts(name) else "does not hold"
                return (
                    f"the binlog archive at {self.archive.uri} {held} {name}, which is gone from the source"
                )
        return None

    @contextmanager
    def events(
        self,
        start: BinlogPosition,
        server_files: Sequence[tuple[str, int]],
        dump: Callable[[BinlogPosition], AbstractContextManager[Iterator[Event]]],
        *,
        annotate_rows: bool = True,
    ) -> Iterator[Iterator[Event]]:
        """Yield the binlog's events from ``start``: from the archive while the source lacks their file, then its own.

        The dump (``dump(position)``, e.g. :func:`~airflow_provider_binlog.extract.connections.pipeline_dump`) is
        opened only when a reader gets past the archived files, at the start of the first file the source lists;
        events come with the same coordinates and bytes either way, so the reader stages the same rows. Without
        ``annotate_rows`` the archive's ANNOTATE_ROWS events are left out, as a MariaDB dump leaves them out
        unless asked (``BINLOG_SEND_ANNOTATE_ROWS_EVENT``), so the window's event counts are a dump's too.

        :raises ArchiveError: when the archive ends before the first file the source still has (check
            :meth:`gap` first).
        """
        listed = {name for name, _ in server_files}
        archive = self.archive

        def archived() -> Generator[Event, None, BinlogPosition | None]:
            reading = read_archive(archive, start, stop_before=listed)
            while True:
                try:
                    event = next(reading)
                except StopIteration as stop:
                    return stop.value  # type: ignore[no-any-return]
                if annotate_rows or event.type_code != codes.MARIADB_ANNOTATE_ROWS:
                    yield event

        def events() -> Generator[Event, None, None]:
            resume = yield from archived()
            if resume is None:
                raise ArchiveError(
                    f"the binlog archive at {archive.uri} ends before the oldest binlog file the source still has "
                    f"({min(listed, default='none')}): the binlog between them is in neither"
                )
            with dump(resume) as dumped:
                yield from dumped

        feed = events()
        try:
            yield feed
        finally:
            feed.close()

    def first_needed(self, start: BinlogPosition, server_files: Sequence[tuple[str, int]]) -> BinlogPosition:
        """Return where the source's own binlog is still needed from, for a read from ``start``.

        ``start`` while the archive has not finished its file; else the start of the first file from there on
        that the source lists and the archive has not finished (the last one, the source's active file, at
        the latest). Assumes :meth:`gap` found none.
        """
        listed = [name for name, _ in server_files]
        if start.file in listed and start.file not in self.finished:
            return start
        later = [n for n in listed if file_index(n) > file_index(start.file) and n not in self.finished]
        return BinlogPosition(later[0], 4) if later else start

    def files_with(self, server_files: Sequence[tuple[str, int]]) -> list[tuple[str, int]]:
        """Return ``(name, size)`` of the files only the archive has, then of the source's ``server_files``."""
        listed = {name for name, _ in server_files}
        return [*((n, r.size) for n, r in self.finished.items() if n not in listed), *server_files]
