"""Copying a source's binlog files byte for byte into an archive folder, over the replication protocol.

:func:`archive_binlogs` reads each binlog file the source lists (``SHOW BINARY LOGS``) with a non-blocking
COM_BINLOG_DUMP of its own (:func:`~airflow_provider_binlog.extract.connections.open_dump`, the ANNOTATE_ROWS
events included, as the files hold them) from where the archive's copy of the file ends, and writes what it
receives, as ``mysqlbinlog --read-from-remote-server --raw`` does. A dump from offset 4 sends the file's
events as the file holds them, except that the dump thread clears the in-use flag of the FORMAT_DESCRIPTION
(MariaDB ``sql/sql_repl.cc``, ``send_format_descriptor_event``; checked against the server's files on MariaDB
10.11: that flag is the only byte that differs). The copy keeps the flag set while the file is unfinished
and clears it when it finishes the file, as the server does when it closes one, so a finished copy is the
server's finished file byte for byte, and each of the file's CRC32 checksums holds (the server computes the
FORMAT_DESCRIPTION's without the flag).

An archive folder holds the files of one source server:

* ``<file>.part-<start>-<end>``: the bytes ``[start, end)`` of a file not finished yet (offsets zero-padded to
  :data:`OFFSET_DIGITS` digits; the first part starts at 0 with the magic bytes). Each part is written whole
  under a temporary name and renamed (:func:`~airflow_provider_binlog.contract.uris.atomic_output`), so a
  reader never sees a torn event; a part ends at an event boundary.
* ``<file>``: a finished file, assembled from its parts once the copy has passed the file's ROTATE or STOP
  event (or, for a file the server stopped writing in a crash, its last byte), every event checked on the way
  (sizes, the checksum of each event when the server writes checksums).
* ``<file>.json``: what the archive records of a finished file (:class:`ArchivedFile`), written after the file:
  its presence marks the file finished, and its parts are deleted after it.
* ``archive.json``: the identity of the server whose files the folder holds (:meth:`BinlogArchive.claim`): files
  of two servers never share a folder (a replica promoted in a failover writes files of the same names).

Two archivers of one source write the same bytes under the same names (a part's name is its range), so they
never corrupt each other's work; a killed archiver leaves whole parts (or a temporary file, which nothing
reads), and the next run continues from the end of the longest run of parts from offset 0.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import pyarrow.fs as pafs

from airflow_provider_binlog.contract.positions import BinlogPosition, file_index
from airflow_provider_binlog.contract.uris import StorageOptions, atomic_output, filesystem_for, join_uri
from airflow_provider_binlog.contract.uris import read_json as read_json_document
from airflow_provider_binlog.contract.uris import write_json as write_json_document
from airflow_provider_binlog.extract.connections import open_dump
from airflow_provider_binlog.extract.errors import CorruptBinlogError
from airflow_provider_binlog.extract.events import codes
from airflow_provider_binlog.extract.events.feeds import MAGIC, events_of_file
from airflow_provider_binlog.extract.events.integrity import BINLOG_IN_USE, format_checksum, verify
from airflow_provider_binlog.extract.events.parsers import HEADER, parse_gtid_list, parse_mariadb_gtid

log = logging.getLogger(__name__)

OFFSET_DIGITS = 12
"""Digits of the zero-padded offsets in a part's name (a binlog file is at most 1 GiB: ten digits would do)."""
PART_BYTES = 64 << 20
"""A copy writes a part each time it holds this many bytes (and one at the end of each file's dump)."""
_PART = re.compile(rf"^(?P<file>.+)\.part-(?P<start>\d{{{OFFSET_DIGITS}}})-(?P<end>\d{{{OFFSET_DIGITS}}})$")
_FILE_ENDS = frozenset({codes.ROTATE, codes.STOP})
_FLAGS_AT = 4 + 17
"""File offset of the FORMAT_DESCRIPTION's flags (its header starts at 4; the flags are header bytes 17-18)."""


class ArchiveError(CorruptBinlogError):
    """The archive's copy of a binlog file is not the server's: a gap, a bad event, a checksum that fails."""


class ArchiveOwnerError(ValueError):
    """The archive folder holds the binlog files of another server than the one being archived."""


IDENTITY_FILE = "archive.json"
"""The document at the archive folder's root naming the server whose files it holds."""


@dataclass(frozen=True)
class ArchivedFile:
    """What the archive records of a finished binlog file (``<file>.json``).

    :param name: the file's name on the server (``mariadb-bin.000042``).
    :param size: its size in bytes.
    :param sha256: the SHA-256 of its bytes (hex).
    :param server_id: the ``server_id`` in its FORMAT_DESCRIPTION's header: the server that wrote it.
    :param events: how many events it holds.
    :param first_timestamp: the header time of its first event, seconds since the epoch (UTC).
    :param last_timestamp: the header time of its last event.
    :param gtid_list: MariaDB: the GTID position before its first transaction (its GTID_LIST event); None on MySQL.
    :param last_gtid: MariaDB: the GTID of its last transaction; None when it holds none (or on MySQL).
    :param checksums: whether its events carry CRC32 checksums (each was verified).
    """

    name: str
    size: int
    sha256: str
    server_id: int
    events: int
    first_timestamp: int
    last_timestamp: int
    gtid_list: str | None = None
    last_gtid: str | None = None
    checksums: bool = False

    @classmethod
    def from_dict(cls, document: Mapping[str, Any]) -> ArchivedFile:
        """Return the record of a ``<file>.json`` document."""
        return cls(**{k: document[k] for k in cls.__dataclass_fields__ if k in document})


@dataclass
class ArchiveRun:
    """What one :func:`archive_binlogs` call did.

    :param copied_bytes: binlog bytes copied from the server in this run.
    :param finished: the files this run finished (assembled, verified and recorded), in order.
    :param unfinished: ``{file: bytes archived}`` of the files still being written on the server.
    """

    copied_bytes: int = 0
    finished: list[str] = field(default_factory=list)
    unfinished: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Part:
    """A part of an unfinished file in the archive: its bytes ``[start, end)``, at ``path`` in the store."""

    file: str
    start: int
    end: int
    path: str


class BinlogArchive:
    """The archive folder of one source server at ``uri`` (a local path or a URI the staging supports).

    :param uri: the folder.
    :param storage_options: deltalake-style storage options (``s3://`` only, as the staging's).
    """

    def __init__(self, uri: str, storage_options: StorageOptions | None = None) -> None:
        self.uri, self.storage_options = uri, storage_options
        self.fs, self.root = filesystem_for(uri, storage_options)

    def _listing(self) -> list[str]:
        try:
            infos = self.fs.get_file_info(pafs.FileSelector(self.root, allow_not_found=True))
        except FileNotFoundError:
            return []
        return [i.base_name for i in infos if i.type == pafs.FileType.File]

    def claim(self, server_identity: str, flavor: str) -> None:
        """Record that the folder holds the files of ``server_identity``, or check that it does.

        :raises ArchiveOwnerError: when the folder holds another server's files.
        """
        uri = join_uri(self.uri, IDENTITY_FILE)
        document = read_json_document(uri, self.storage_options)
        if document is None:
            write_json_document(
                uri, {"server_identity": server_identity, "flavor": flavor}, self.storage_options
            )
        elif document.get("server_identity") != server_identity:
            raise ArchiveOwnerError(
                f"the binlog archive at {self.uri} holds the files of server {document.get('server_identity')!r}, "
                f"not of {server_identity!r} (a failover to another server, or a connection now pointing elsewhere): "
                "give each server an archive folder of its own"
            )

    def gaps(self, files: Sequence[tuple[str, int]]) -> list[str]:
        """Return the binlog files the archive lacks for good: the source purged them before they were copied whole.

        :param files: the source's binlog files as ``SHOW BINARY LOGS`` lists them now.
        """
        listed = {name for name, _ in files}
        finished = set(self.finished_files())
        parts = {m["file"] for n in self._listing() if (m := _PART.match(n))}
        lost = parts - finished - listed  # copied in part, then purged
        archived = finished | parts
        if archived and files:
            oldest = files[0][0]
            base, digits = oldest.rsplit(".", 1)
            numbers = {file_index(n) for n in archived}
            # the files after the archive's first one and before the source's oldest
            never = range(min(numbers), file_index(oldest))
            lost |= {f"{base}.{n:0{len(digits)}d}" for n in never if n not in numbers}
        return sorted(lost, key=file_index)

    def finished_files(self) -> dict[str, ArchivedFile]:
        """Return the record of every finished file, by name, in name order."""
        names = sorted(
            n[: -len(".json")] for n in self._listing() if n.endswith(".json") and n != IDENTITY_FILE
        )
        records = {}
        for name in names:
            document = read_json_document(join_uri(self.uri, f"{name}.json"), self.storage_options)
            if document is not None:
                records[name] = ArchivedFile.from_dict(document)
        return records

    def parts(self, file: str) -> list[Part]:
        """Return the chain of parts of ``file`` from offset 0, each starting where the one before ends.

        Of parts with the same start (two archivers, or a run killed after its part), the longest is taken;
        parts off the chain are left alone.
        """
        by_start: dict[int, Part] = {}
        for name in self._listing():
            found = _PART.match(name)
            if found is None or found["file"] != file:
                continue
            part = Part(file, int(found["start"]), int(found["end"]), f"{self.root}/{name}")
            if part.end > by_start.get(part.start, part).end or part.start not in by_start:
                by_start[part.start] = part
        chain, at = [], 0
        while at in by_start:
            chain.append(by_start[at])
            at = by_start[at].end
        return chain

    def holds(self, file: str) -> bool:
        """Return whether the archive holds ``file``, finished or in parts."""
        return self._finished(file) or bool(self.parts(file))

    def open(self, file: str) -> tuple[Any, bool]:
        """Return ``(seekable binary handle, still being written)`` of the archive's copy of ``file``.

        A finished file is opened as it is; an unfinished one as its parts read as one (:class:`PartsReader`).

        :raises ArchiveError: when the archive holds nothing of ``file``.
        """
        if self._finished(file):
            return self.fs.open_input_file(f"{self.root}/{file}"), False
        chain = self.parts(file)
        if not chain:
            raise ArchiveError(f"the binlog archive at {self.uri} holds nothing of {file}")
        return PartsReader(self.fs, chain), True

    def _finished(self, file: str) -> bool:
        return bool(self.fs.get_file_info(f"{self.root}/{file}.json").type == pafs.FileType.File)

    def copied_end(self, file: str) -> int:
        """Return how many bytes of ``file`` the archive holds in parts (0: none)."""
        chain = self.parts(file)
        return chain[-1].end if chain else 0

    def write_part(self, file: str, start: int, data: bytes) -> None:
        """Write ``data``, the bytes of ``file`` from ``start``, as a part (atomically)."""
        name = f"{file}.part-{start:0{OFFSET_DIGITS}d}-{start + len(data):0{OFFSET_DIGITS}d}"
        with atomic_output(join_uri(self.uri, name), self.storage_options) as out:
            out.write(data)

    def finish(self, file: str, size: int) -> ArchivedFile:
        """Assemble ``file`` (``size`` bytes) from its parts, checking every event, record it and delete the parts.

        When another archiver finished the file meanwhile (and deleted the parts this one was reading), its record
        is returned. Nothing is written unless the parts hold the whole file.

        :raises ArchiveError: when the parts do not hold the whole binlog file: no magic bytes or
            FORMAT_DESCRIPTION at its start, an event cut short or of an impossible size, a failed checksum, or
            fewer than ``size`` bytes.
        """
        chain = self.parts(file)
        end = chain[-1].end if chain else 0
        digest = hashlib.sha256()
        summary = _FileSummary(file)
        try:
            if end != size:
                raise ArchiveError(
                    f"the archive's copy of {file} ends at offset {end} where the file is {size} bytes long: a part "
                    f"is missing"
                )
            with (
                PartsReader(self.fs, chain) as handle,
                atomic_output(join_uri(self.uri, file), self.storage_options) as out,
            ):
                for chunk in _finished_bytes(f"{self.uri}/{file}", handle, summary):
                    digest.update(chunk)
                    out.write(chunk)
        except (CorruptBinlogError, FileNotFoundError) as err:
            done = self.finished_files().get(file)
            if done is not None:  # another archiver finished it and deleted the parts meanwhile
                self.drop_parts([file])
                return done
            raise ArchiveError(
                f"{str(err).split(';')[0]}; the archive's copy at {self.uri} is not the server's file: delete the "
                f"parts of {file} ({file}.part-*) and run the archiver again while the server still has the file"
            ) from err
        record = summary.record(digest.hexdigest())
        write_json_document(join_uri(self.uri, f"{file}.json"), asdict(record), self.storage_options)
        self.drop_parts([file])
        return record

    def drop_parts(self, files: Iterable[str]) -> None:
        """Delete every part of ``files`` (those of finished files: left by a second archiver, or a killed finish)."""
        names = set(files)
        for name in self._listing():
            found = _PART.match(name)
            if found is not None and found["file"] in names:
                with contextlib.suppress(FileNotFoundError):  # another archiver deleted it
                    self.fs.delete_file(f"{self.root}/{name}")


def archive_binlogs(
    archive: BinlogArchive,
    settings: Mapping[str, Any],
    files: Sequence[tuple[str, int]],
    *,
    server_id: int,
    flavor: str,
    part_bytes: int = PART_BYTES,
    stop_after_bytes: int | None = None,
) -> ArchiveRun:
    """Copy the source's binlog files ``files`` into ``archive``, from where its copies end; return what was done.

    Finished files already recorded are skipped. A file the dump passes the end of (its ROTATE or STOP, or for
    a file before the last one, the size the server lists for it) is finished
    (:meth:`BinlogArchive.finish`); the last file is copied up to its current end, to be continued next time.

    :param settings: ``pymysql.connect()`` keyword arguments of a user with REPLICATION SLAVE.
    :param files: ``(name, size)`` of the source's binlog files, in order, as ``SHOW BINARY LOGS`` lists them.
    :param server_id: the archiver's id on the source, unique among its replicas.
    :param flavor: ``mariadb`` or ``mysql``.
    :param part_bytes: a part is written each time the copy holds this many bytes.
    :param stop_after_bytes: stop after copying about this many bytes (the rest is left to the next run).
    :raises ArchiveError: when the dump's events do not follow each other in the file, or a file's copy is not a
        whole binlog file when it is finished.
    :raises pymysql.err.OperationalError: for the server's refusals (a file purged meanwhile: 1236).
    """
    run = ArchiveRun()
    finished = archive.finished_files()
    archive.drop_parts(finished)
    last = files[-1][0] if files else None
    for name, size in files:
        if name in finished:
            continue
        if stop_after_bytes is not None and run.copied_bytes >= stop_after_bytes:
            break
        copied, ended = _copy_file(archive, settings, name, server_id=server_id, flavor=flavor,
                                   part_bytes=part_bytes, stop_after_bytes=stop_after_bytes, run=run)  # fmt: skip
        if ended or (name != last and copied >= size):
            record = archive.finish(name, copied)
            run.finished.append(name)
            log.info("archived %s: %d bytes, %d events", name, record.size, record.events)
        else:
            run.unfinished[name] = copied
    return run


def _copy_file(
    archive: BinlogArchive,
    settings: Mapping[str, Any],
    name: str,
    *,
    server_id: int,
    flavor: str,
    part_bytes: int,
    stop_after_bytes: int | None,
    run: ArchiveRun,
) -> tuple[int, bool]:
    """Copy ``name`` from the archive's end of it to the dump's end; return ``(bytes archived, file ended)``."""
    start = archive.copied_end(name)
    at = max(start, 4)
    buffer = bytearray(MAGIC if start == 0 else b"")
    part_start, ended = start, False
    with open_dump(settings, server_id=server_id, start=BinlogPosition(name, at), flavor=flavor,
                   annotate_rows=True) as events:  # fmt: skip
        for event in events:
            if event.file != name:
                break
            if event.start < at:
                continue  # the FORMAT_DESCRIPTION a dump from after 4 sends first: the archive has it
            if event.start != at:
                raise ArchiveError(
                    f"the dump of {name} sent an event at offset {event.start} where the copy ends at {at}: the "
                    f"events do not follow each other; nothing after offset {at} was archived"
                )
            data = bytes(event.data)
            if event.type_code == codes.FORMAT_DESCRIPTION and event.start == 4:
                data = _with_in_use_flag(data, True)  # unfinished copies are flagged as the server's file is
            buffer += data
            at += len(data)
            run.copied_bytes += len(data)
            if event.type_code in _FILE_ENDS:
                ended = True
                break
            if len(buffer) >= part_bytes or (
                stop_after_bytes is not None and run.copied_bytes >= stop_after_bytes
            ):
                archive.write_part(name, part_start, bytes(buffer))
                part_start, buffer = part_start + len(buffer), bytearray()
                if stop_after_bytes is not None and run.copied_bytes >= stop_after_bytes:
                    return part_start, False
    if buffer and (len(buffer) > 4 or start > 0):
        archive.write_part(name, part_start, bytes(buffer))
        part_start += len(buffer)
    return part_start, ended


def _with_in_use_flag(fde: bytes, in_use: bool) -> bytes:
    """Return a FORMAT_DESCRIPTION's bytes with its in-use flag set or cleared (its checksum leaves the flag out)."""
    flags = fde[17] | BINLOG_IN_USE if in_use else fde[17] & ~BINLOG_IN_USE & 0xFF
    return fde[:17] + bytes([flags]) + fde[18:]


class _FileSummary:
    """What :func:`_finished_bytes` learns of a file's events, for its :class:`ArchivedFile`."""

    def __init__(self, name: str) -> None:
        self.name, self.size, self.events, self.server_id = name, 0, 0, 0
        self.first_timestamp = self.last_timestamp = 0
        self.checksum = 0
        self.gtid_list: str | None = None
        self.last_gtid: str | None = None

    def add(self, data: bytes) -> None:
        timestamp, kind, server_id = HEADER.unpack_from(data)[:3]
        if not self.events:
            self.first_timestamp, self.server_id = timestamp, server_id
        self.events += 1
        self.last_timestamp = timestamp
        body = data[19 : len(data) - self.checksum]
        if kind == codes.MARIADB_GTID_LIST and self.gtid_list is None:
            self.gtid_list = parse_gtid_list(body).gtid_set
        elif kind == codes.MARIADB_GTID:
            self.last_gtid = parse_mariadb_gtid(body, server_id).gtid

    def record(self, sha256: str) -> ArchivedFile:
        return ArchivedFile(
            name=self.name, size=self.size, sha256=sha256, server_id=self.server_id, events=self.events,
            first_timestamp=self.first_timestamp, last_timestamp=self.last_timestamp, gtid_list=self.gtid_list,
            last_gtid=self.last_gtid, checksums=bool(self.checksum),
        )  # fmt: skip


def _finished_bytes(path: str, handle: Any, summary: _FileSummary) -> Iterator[bytes]:
    """Yield the bytes of a finished file read from its parts' ``handle`` (:class:`PartsReader`), checking each event.

    The file feed walks the events (:func:`~airflow_provider_binlog.extract.events.feeds.events_of_file`: magic
    bytes, a FORMAT_DESCRIPTION at 4, event sizes, no event cut short); each event's checksum is verified here when
    the server writes them, and the FORMAT_DESCRIPTION's in-use flag is cleared (the server clears it when it
    closes the file).

    :param path: where the file is, for messages.
    :raises CorruptBinlogError: see :meth:`BinlogArchive.finish`.
    """
    yield MAGIC  # checked by the feed before its first event
    for event in events_of_file(
        handle, path, 4, active=True
    ):  # a crashed server's file ends without a ROTATE
        data = bytes(event.data)
        if event.start == 4:
            data = _with_in_use_flag(data, False)
            summary.checksum = format_checksum(data, summary.name, 4)
        elif summary.checksum:
            verify(data, summary.name, event.start)
        summary.add(data)
        summary.size = event.start + len(data)
        yield data


class PartsReader:
    """The parts of a file the archive holds unfinished, read as one seekable file of ``chain[-1].end`` bytes.

    :param fs: the archive's filesystem.
    :param chain: the file's parts from offset 0, each starting where the one before ends
        (:meth:`BinlogArchive.parts`).
    :raises ArchiveError: from :meth:`read`, when a part holds fewer bytes than its name says.
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
            got = self._open[1].read_at(count, self.position - part.start)
            if len(got) != count:
                raise ArchiveError(
                    f"{part.path} holds fewer bytes than its name says ({part.end - part.start}): the part is "
                    f"corrupt; delete it and run the archiver again"
                )
            out += got
            self.position += count
        return bytes(out)
