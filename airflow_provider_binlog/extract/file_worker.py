"""What a worker process of a parallel read does: read binlog files of a window into a spool (ADR 0025).

The task process plans the read and replays the spool (:mod:`~airflow_provider_binlog.extract.parallel`). A
worker, a fork of it (:func:`detach`), runs :func:`work` over its list of :class:`FileJob` s. For each file,
:func:`read_file` reads the file's part of the window with the serial reader
(:class:`~airflow_provider_binlog.extract.reader.WindowReader`) and :class:`WorkerFileHooks` (which stop it at a
statement whose effect depends on earlier files and record its commits and spills) from the window start's state, writes the committed batches
to Arrow IPC files (:class:`Spool`, one :class:`Segment` per table and schema, read back with
:func:`read_segment`) and returns a :class:`FileResult`, which :func:`park` pickles beside them for the task
process (:func:`unpark`).

**Connections.** Workers read over their own connection with a non-blocking COM_BINLOG_DUMP under
``server_id`` 0: the source kills older dumps of a non-zero ``server_id`` (``kill_zombie_dump_threads``), and
exempts 0 (ADR 0025), so the workers register nothing and disturb no replica or other pipeline.
"""

from __future__ import annotations

import ctypes
import logging
import os
import pickle
import signal
import sys
import traceback
from array import array
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import pyarrow as pa

from airflow_provider_binlog.contract.positions import BinlogPosition
from airflow_provider_binlog.exceptions import ReplicationConnectionLostError
from airflow_provider_binlog.extract.columns import ColumnSpec
from airflow_provider_binlog.extract.connections import open_dump
from airflow_provider_binlog.extract.events.stream import EventReader
from airflow_provider_binlog.extract.heap import freeze_for_good
from airflow_provider_binlog.extract.reader import (
    ExtractStats,
    ReaderState,
    SnapshotCover,
    TableTarget,
    WindowReader,
)
from airflow_provider_binlog.extract.targets import keep_statements

if TYPE_CHECKING:
    from airflow_provider_binlog.extract.events.tablemap import Column
    from airflow_provider_binlog.extract.transaction import Layout

SPOOL_COMPRESSION: Literal["lz4", "zstd"] | None = None
"""Compression of the workers' Arrow IPC spool files: none. The spool is read back once, on the same machine,
and the read is CPU-bound on every core: LZ4 cost 0.06-0.12 s of a 2.6-2.8 s read of 4 files (4 pairs, every
one slower with it) to shrink a 64 MiB OLTP binlog file's spool from 30.5 to 19.0 MiB."""


@dataclass(frozen=True)
class FileRange:
    """The part ``(start, end]`` of a window that lies in one binlog file.

    :param start: the window start (first file) or ``(file, 4)``.
    :param end: ``(next file, 4)``, where the ROTATE that ends the file moves the reader, or the window end.
    """

    start: BinlogPosition
    end: BinlogPosition


@dataclass(frozen=True)
class FileJob:
    """One worker's file: where to read it and the window start's reader state.

    :param settings: pymysql keyword arguments of the source (``passwd``, timeouts); never logged.
    :param columns: the schema history at the window start (table-map columns per table).
    :param spool: the folder the worker writes its Arrow IPC files to.
    :param case_sensitive_names: whether the source compares table names case-sensitively
        (:attr:`~airflow_provider_binlog.source.server.ServerState.case_sensitive_names`).
    """

    index: int
    range: FileRange
    settings: dict[str, Any]
    flavor: str
    tables: dict[str, TableTarget]
    covers: dict[str, SnapshotCover]
    window: int
    pipeline: str
    columns: dict[str, list[Column]]
    spool: str
    case_sensitive_names: bool = True


@dataclass(frozen=True)
class Segment:
    """Batches of one table of one file with one schema, in an Arrow IPC stream file, in the order staged."""

    table: str
    path: str
    specs: list[ColumnSpec]
    primary_key: list[str]
    rows: list[int] = field(default_factory=list)
    """The rows of each batch (one entry per batch, appended as written)."""


@dataclass
class FileResult:
    """What a worker read of its file.

    :param seq: the ``_binlog_seq`` values it used (its images are numbered 1..seq).
    :param columns: the table-map columns of the tables whose row events it read (the others kept the start's).
    :param serial_from: why the file needs the serial reader (its segments are then not replayed), else None.
    :param trace: per table, what the file did to the serial reader's batch builder of the table, in order:
        the rows a commit added (>= 0) or a spill (-1), which hands the rows held to the sink.
    :param statements: the statement entries of its committed transactions (:attr:`ReaderState.statements`).
    """

    index: int
    segments: list[Segment]
    seq: int
    stats: ExtractStats
    zero_dates: Counter[str]
    committed_tables: set[str]
    columns: dict[str, list[Column]]
    last_commit_us: int | None
    serial_from: str | None = None
    trace: dict[str, array[int]] = field(default_factory=dict)
    statements: list[pa.RecordBatch] = field(default_factory=list)


class NeedsSerialRead(Exception):
    """The file holds a statement whose effect depends on what earlier files did (see the module)."""


class WorkerFileHooks:
    """The hooks of a worker's reader of one file: it stops at the statements whose effect depends on earlier files.

    It records per table what each commit and spill does to the table's batch builder (:attr:`trace`, see
    :class:`FileResult`): one entry per table a transaction touched.
    """

    def __init__(self) -> None:
        self.trace: dict[str, array[int]] = {}

    def statement_with_effect(self, what: str) -> None:
        """Stop the read: the statement's effect depends on earlier files (see the module).

        :raises NeedsSerialRead: always.
        """
        raise NeedsSerialRead(what)

    def committing(self, touched: Iterable[Layout]) -> None:
        """Record the rows each touched table's builder gets committed."""
        # Once per transaction, so kept lean: a list of pairs and a second loop took 0.09 s of 240,000 OLTP rows.
        trace = self.trace
        for layout in touched:
            counts = trace.get(layout.table)
            if counts is None:
                counts = trace[layout.table] = array("i")
            counts.append(len(layout.builder.ops) - layout.builder.committed)

    def spilling(self, touched: Iterable[Layout]) -> None:
        """Record a spill (-1) for each touched table: it hands the table's committed rows to the sink."""
        for layout in touched:
            self.trace.setdefault(layout.table, array("i")).append(-1)


class Spool:
    """The sink of a worker: each table's batches to Arrow IPC stream files (a new one per schema)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.segments: list[Segment] = []
        self._open: dict[str, tuple[pa.ipc.RecordBatchStreamWriter, pa.Schema, Segment]] = {}
        self._options = pa.ipc.IpcWriteOptions(compression=SPOOL_COMPRESSION)

    def __call__(self, table: str, batch: pa.RecordBatch, specs: list[ColumnSpec], key: list[str]) -> None:
        """Append ``batch`` of ``table`` (the :data:`~.reader.Sink` signature)."""
        current = self._open.get(table)
        if current is None or not current[1].equals(batch.schema):
            if current is not None:
                current[0].close()
            path = self.folder / f"{len(self.segments):05d}.arrow"
            segment = Segment(table, str(path), list(specs), list(key))
            self.segments.append(segment)
            writer = pa.ipc.new_stream(str(path), batch.schema, options=self._options)
            current = self._open[table] = (writer, batch.schema, segment)
        current[0].write_batch(batch)
        current[2].rows.append(batch.num_rows)

    def close(self) -> None:
        """Close every open file."""
        for writer, _, _ in self._open.values():
            writer.close()
        self._open.clear()


def read_segment(segment: Segment) -> Iterator[pa.RecordBatch]:
    """Yield the batches of a spooled ``segment`` in the order written; delete its file once read."""
    with pa.OSFile(segment.path) as source:
        yield from pa.ipc.open_stream(source)
    os.unlink(segment.path)


def read_file(job: FileJob) -> FileResult:
    """Read one file of the window (a worker's work): stage its batches in ``job.spool``; return what it read.

    :raises ReplicationConnectionLostError: when the connection breaks (retryable).
    :raises UnsupportedEventError, UndecodableValueError: as the serial reader.
    :raises pymysql.err.MySQLError: the server's errors (a denied privilege, a purged file).
    """
    folder = Path(job.spool)
    folder.mkdir(parents=True, exist_ok=True)
    spool = Spool(folder)
    start_columns = dict(job.columns)
    hooks = WorkerFileHooks()
    state = ReaderState(columns=start_columns)  # the reader keeps a filtered copy: start_columns stays as is
    serial_from = None
    try:
        # server_id 0: the source would end an older dump of the same id (the task's own, another worker's)
        annotate = keep_statements(job.tables)
        with open_dump(
            job.settings, server_id=0, start=job.range.start, flavor=job.flavor, annotate_rows=annotate
        ) as raw:
            reader = WindowReader(
                EventReader().events(raw),
                start=job.range.start,
                end=job.range.end,
                tables=job.tables,
                window=job.window,
                sink=spool,
                pipeline=job.pipeline,
                covers=job.covers,
                state=state,
                hooks=hooks,
                case_sensitive_names=job.case_sensitive_names,
            )
            try:
                reader.run()
            except NeedsSerialRead as err:
                serial_from = str(err)
    finally:
        spool.close()
    return FileResult(
        index=job.index,
        segments=spool.segments,
        seq=state.seq,
        stats=state.stats,
        zero_dates=state.zero_dates,
        committed_tables=state.committed_tables,
        columns={t: c for t, c in state.columns.items() if c is not start_columns.get(t)},
        last_commit_us=state.last_commit_us,
        serial_from=serial_from,
        trace=hooks.trace,
        statements=state.statement_batches(),
    )


def work(jobs: list[FileJob], channel: Connection, parent: int, spooled: Any) -> None:
    """Run :func:`read_file` for each of ``jobs`` in a worker process, in order.

    Sends ``("ok", path of the pickled result)`` per file (:func:`park`), or ``("error", exception, traceback)``
    and stops; stops after a file that needs the serial reader too (the later files are not needed then).

    :param spooled: a semaphore of :data:`~.parallel.SPOOLED_FILES`: taken before each file, given back by the
        task process once it replayed one.
    """
    detach(parent)
    try:
        for job in jobs:
            spooled.acquire()
            result = read_file(job)
            channel.send(("ok", park(result, job.spool)))
            if result.serial_from is not None:
                break
    except BaseException as err:  # noqa: BLE001  # everything goes back to the parent, which raises it
        text = traceback.format_exc()
        try:
            channel.send(("error", err, text))
        except Exception:  # an exception that does not pickle: its text
            channel.send(("error", ReplicationConnectionLostError(f"{type(err).__name__}: {err}"), text))
    finally:
        channel.close()


PR_SET_PDEATHSIG = 1
"""``prctl`` option (Linux, ``<sys/prctl.h>``): the signal the calling process gets when its parent ends."""


def detach(parent: int) -> None:
    """Make a forked worker leave everything it inherited from the task process alone.

    - :func:`~.heap.freeze_for_good`: the inherited objects are never collected here, so no finalizer of an
      inherited connection or socket (the supervisor's, the hook's) runs in the worker; the worker ends with
      ``os._exit`` (``multiprocessing``), which runs no ``atexit`` handler and flushes no inherited buffer.
    - logging off: the task's handlers write to the supervisor's log socket; the worker's findings come back
      in its :class:`FileResult` and the parent logs them.
    - on Linux, ``SIGKILL`` when the parent ends (``prctl(PR_SET_PDEATHSIG)``): a task process killed by its
      supervisor takes its workers along instead of leaving them holding copies of its sockets.
    """
    freeze_for_good()
    logging.disable(logging.CRITICAL)
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # the parent ended before prctl
        os._exit(1)


def park(result: FileResult, folder: str) -> str:
    """Pickle ``result`` into its file's spool ``folder``; return the file's path (what the worker sends).

    A result sent through the pipe itself blocks the worker until the task process reads it whenever it is
    larger than the pipe's buffer (64 KiB on Linux), and its trace alone takes 4 bytes per transaction: with
    a 64 MiB file of OLTP transactions the worker waited 70-90 ms per file for the task (measured), instead of
    reading its next file.
    """
    path = os.path.join(folder, "result.pickle")
    with open(path, "wb") as out:
        pickle.dump(result, out, protocol=pickle.HIGHEST_PROTOCOL)
    return path


def unpark(path: str) -> FileResult:
    """Return the result :func:`park` wrote to ``path``, and delete the file."""
    with open(path, "rb") as parked:
        result: FileResult = pickle.load(parked)
    os.unlink(path)
    return result
