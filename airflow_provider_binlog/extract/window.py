"""Extract one window: stream it from the source, write Parquet per table, write the manifest last."""

from __future__ import annotations

import copy
import dataclasses
import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol

import pyarrow as pa
import pyarrow.parquet as pq
import pymysql

from airflow_provider_binlog.contract.history import STATEMENTS_FILE, STATEMENTS_SCHEMA
from airflow_provider_binlog.contract.manifest import Manifest, TableEntry
from airflow_provider_binlog.contract.positions import BinlogPosition
from airflow_provider_binlog.exceptions import RESNAPSHOT_REMEDY, BinlogPurgedError, TableRefusalError
from airflow_provider_binlog.extract.connections import pipeline_dump
from airflow_provider_binlog.extract.ddl import column_record, record_column
from airflow_provider_binlog.extract.events.feeds import Event
from airflow_provider_binlog.extract.events.stream import EventReader
from airflow_provider_binlog.extract.file_worker import FileJob, FileRange
from airflow_provider_binlog.extract.parallel import (
    PARALLEL_MIN_BYTES,
    TaskFileHooks,
    file_ranges,
    read_parallel,
    read_task_file,
    worker_count,
)
from airflow_provider_binlog.extract.progress import ExtractProgress
from airflow_provider_binlog.extract.reader import ReaderState, SnapshotCover, TableTarget, WindowReader
from airflow_provider_binlog.extract.targets import keep_statements
from airflow_provider_binlog.extract.writer import TableOutput, WindowWriters
from airflow_provider_binlog.pipeline.ledger import Window, now_iso
from airflow_provider_binlog.pipeline.quarantine import OnTableError
from airflow_provider_binlog.pipeline.staging import clear_window, write_manifest
from airflow_provider_binlog.pipeline.windows import check_retained
from airflow_provider_binlog.source.grants import ACCESS_DENIED_ERRORS
from airflow_provider_binlog.source.server import binlog_bytes_between

if TYPE_CHECKING:
    from airflow.sdk import ObjectStoragePath

    from airflow_provider_binlog.contract.foreign_keys import ForeignKey
    from airflow_provider_binlog.hooks.binlog import BinlogHook
    from airflow_provider_binlog.source.server import ServerState

log = logging.getLogger(__name__)


class ArchivedBinlog(Protocol):
    """Binlog files kept beyond the source's retention, which a window reads where the source no longer has them.

    :class:`~airflow_provider_binlog.archive.feed.ArchiveFeed` is the binlog archive's (docs/archive.md).
    """

    def gap(self, start_file: str, server_files: Sequence[tuple[str, int]]) -> str | None:
        """Return what the archive and the source together lack of the binlog from ``start_file`` on (None: nothing)."""

    def events(
        self,
        start: BinlogPosition,
        server_files: Sequence[tuple[str, int]],
        dump: Callable[[BinlogPosition], AbstractContextManager[Iterator[Event]]],
        *,
        annotate_rows: bool,
    ) -> AbstractContextManager[Iterator[Event]]:
        """Return the events from ``start``: archived ones while the source lacks their file, then ``dump``'s.

        Without ``annotate_rows``, no ANNOTATE_ROWS event (as a dump that was not asked for them).
        """

    def files_with(self, server_files: Sequence[tuple[str, int]]) -> list[tuple[str, int]]:
        """Return ``(name, size)`` of the files only the archive has, then of the source's ``server_files``."""

    def first_needed(self, start: BinlogPosition, server_files: Sequence[tuple[str, int]]) -> BinlogPosition:
        """Return where the source's own binlog is needed from, reading from ``start`` (no gap, see :meth:`gap`)."""


def extract_window(
    hook: BinlogHook,
    *,
    pipeline: str,
    window: Window,
    tables: dict[str, TableTarget],
    window_dir: ObjectStoragePath,
    server: ServerState,
    covers: dict[str, SnapshotCover] | None = None,
    skipped: dict[str, str] | None = None,
    foreign_keys: Sequence[ForeignKey] = (),
    schemas: Mapping[str, list[Mapping[str, Any]]] | None = None,
    max_workers: int | None = 1,
    parallel_min_bytes: int | None = None,
    on_table_error: OnTableError = "quarantine",
    archive: ArchivedBinlog | None = None,
) -> Manifest:
    """Stream ``window`` into ``window_dir`` and return the manifest written last.

    A statement-based write to a selected table is skipped when the table's snapshot in ``covers`` covers
    it (:meth:`WindowReader._statement <airflow_provider_binlog.extract.reader.WindowReader._statement>`); the
    window then stages no rows of that table (files it had written for it are deleted), and the manifest
    lists the skipped statements (``skipped_statements``) and the covered tables (``covered_tables``:
    ``{table: snapshot seq}``). Statements writing no selected table are counted in
    ``stats.statements_ignored``.

    :param covers: per selected table, its newest snapshot (merged or running) in the pipeline's ledger.
    :param skipped: ``{"db.table": reason}`` of selected tables this window leaves out (recorded in the
        manifest under ``skipped``).
    :param foreign_keys: the cascading foreign keys among the selected tables whose child changes the source
        does not log (:func:`~airflow_provider_binlog.extract.plan.cascading_keys`); recorded in the
        manifest under ``foreign_keys`` for the merge, which applies them.
    :param schemas: the schema history at the window's start: the ``schemas`` of the manifest of the window
        that ends where this one starts (``{"db.table": [column records]}``, :func:`~.ddl.column_record`); the
        manifest records it as of this window's end.

    DDL of selected tables is classified (:mod:`~airflow_provider_binlog.extract.ddl`): the manifest lists
    each statement with its effect per table (``ddl``), the tables that need a re-snapshot from a point in
    this window on (``resnapshots``, recorded in the state by the window's commit) and, per table, the row
    events left out because of such a schema change (``schema_skipped_row_events``; see
    :class:`~airflow_provider_binlog.extract.reader.SchemaBarrier`).
    A statement that empties a table (``TRUNCATE``, ``DROP TABLE``, renamed away) stages a truncate marker
    at its place in the order (``_binlog_op`` = ``t``, :mod:`~airflow_provider_binlog.jobs.merge.truncate`);
    the tables dropped or renamed away are listed under ``dropped`` (table, position, GTID, statement, the
    marker's seq or None when the target held no rows of it). The rows staged of a table the target never
    held are discarded when the window drops it (a table created again under its name starts anew). A table
    dropped in an earlier window (a ``gone`` target) has an entry in ``tables`` only when this window stages
    its truncate marker.

    :param max_workers: how many worker processes may read the window's binlog files in parallel
        (:mod:`~airflow_provider_binlog.extract.parallel`): None for up to ``os.cpu_count()``, 1 (the default
        here) reads serially. Used only for a window of two files or more and ``parallel_min_bytes`` binlog
        bytes or more; the staged rows, order keys and manifest are a serial read's.
    :param parallel_min_bytes: binlog bytes below which the window is read serially whatever ``max_workers``;
        None for :data:`~airflow_provider_binlog.extract.parallel.PARALLEL_MIN_BYTES`.
    :param on_table_error: what a :class:`~airflow_provider_binlog.exceptions.TableRefusalError` (a value or row
        layout of one table that cannot be staged exactly) does: ``quarantine`` reads the window again (serially)
        with that table stopped at the start of the refused transaction, as often as refusals come (each table
        at most once per earlier event); the manifest lists it under ``resnapshots`` with ``cause``
        ``quarantine``, and the window's other tables are staged as usual. ``fail`` raises the error.

    :param archive: binlog files kept beyond the source's retention: a window whose start the source purged is
        read from there up to the first file the source still has (serially), with the same coordinates and
        bytes, so it stages what it would have staged from the source.

    :raises BinlogPurgedError: when the window start was purged (and ``archive`` lacks it, or a file after it).
    :raises UnsupportedEventError: on events that cannot be decoded without loss (with
        ``on_table_error="fail"``, a :class:`~airflow_provider_binlog.exceptions.TableRefusalError` too).
    :raises SourcePrivilegeError: when the source refuses the stream for a missing privilege (no retry;
        the message holds the GRANT statements).
    :raises SourceUnreachableError: when the stream breaks or ends early (retryable; a broken connection, or a
        parallel read's worker process that dies, raises
        :class:`~airflow_provider_binlog.exceptions.ReplicationConnectionLostError`). The retry
        re-reads the window: the window folder holds no manifest then, and it is cleared first.
    """
    start, end = window.start, window.end
    check_available(server, start, pipeline, archive)
    started = time.monotonic()
    ranges = file_ranges(start, end, server.binlog_files)  # [] from an archived file: read serially
    files = server.binlog_files if archive is None else archive.files_with(server.binlog_files)
    workers = worker_count(
        ranges,
        binlog_bytes_between(files, start, end),
        max_workers=max_workers,
        min_bytes=PARALLEL_MIN_BYTES if parallel_min_bytes is None else parallel_min_bytes,
    )
    history = {t: [record_column(c) for c in cols] for t, cols in (schemas or {}).items()}
    progress = ExtractProgress(window=window.seq, start=start, end=end, binlog_files=files)
    pristine = tables
    refusals: dict[str, TableRefusalError] = {}
    while True:
        tables = copy.deepcopy(pristine)  # a read adds barriers to its targets: each attempt starts anew
        for name, refusal in refusals.items():
            tables[name].quarantine_at = BinlogPosition(str(refusal.file), int(refusal.pos or 0))
        try:
            read, outputs = _read_window(
                hook, window, tables, window_dir, server, covers, history, progress,
                pipeline=pipeline, ranges=ranges, workers=workers if not refusals else 0, archive=archive,
            )  # fmt: skip
            break
        except TableRefusalError as err:
            if on_table_error == "fail" or not _quarantinable(err, tables, refusals):
                raise
            log.warning(
                "window %s of %s: %s is quarantined from transaction %s on: %s. The window is read again without "
                "its changes from that transaction on; the other tables are staged as usual.",
                window.seq, pipeline, ", ".join((str(err.table), *err.also)), err.gtid or "?", err.reason or err,
            )  # fmt: skip
            refusals.update((name, err) for name in (str(err.table), *err.also) if name in tables)
    stats = read.stats
    stats.seconds = time.monotonic() - started
    for name in stats.covered_tables:  # rows staged before the statement that made the table covered
        for relative in outputs.pop(name, TableOutput(name=name, primary_key=[])).files:
            (window_dir / relative).unlink()
    for name, target in tables.items():
        if target.gone and name not in outputs:
            continue  # dropped in an earlier window: nothing to say about it in every later manifest
        outputs.setdefault(name, TableOutput(name=name, primary_key=target.primary_key))
        outputs[name].zero_dates = read.zero_dates[name]
    manifest = Manifest(
        pipeline=pipeline,
        window=window.seq,
        run_id=window.run_id,
        start=start,
        end=end,
        tables={name: _entry(outputs[name], tables.get(name)) for name in sorted(outputs)},
        skipped=dict(sorted((skipped or {}).items())),
        ddl=stats.ddl,
        skipped_statements=stats.skipped_statements,
        covered_tables=stats.covered_tables,
        foreign_keys=[k.to_manifest() for k in foreign_keys],
        resnapshots=stats.resnapshots + quarantine_records(stats.quarantined, refusals, window.seq),
        schema_skipped_row_events=dict(sorted(stats.schema_skipped_row_events.items())),
        dropped=stats.dropped,
        schemas={t: [column_record(c) for c in cols] for t, cols in sorted(read.columns.items())},
        statements=_write_statements(window_dir, read.statement_batches()),
        stats={
            "events": stats.events,
            "transactions": stats.transactions,
            "rolled_back": stats.rolled_back,
            "row_events_rows": stats.rows,
            "rows": sum(o.rows for o in outputs.values()),
            "binlog_bytes": binlog_bytes_between(files, start, end),
            "read_seconds": round(stats.seconds, 3),
            "last_commit_ts": stats.last_commit_ts,
            "statements_ignored": stats.statements_ignored,
            "statements_skipped": len(stats.skipped_statements),
        },
        created_at=now_iso(),
    )
    path = write_manifest(window_dir, manifest)
    log.info(
        "window %s of %s staged: %s rows in %s transactions (%s binlog bytes) in %.2f s -> %s",
        window.seq,
        pipeline,
        manifest.stats["rows"],
        stats.transactions,
        manifest.stats["binlog_bytes"],
        stats.seconds,
        str(path),
    )
    return manifest


def _write_statements(window_dir: ObjectStoragePath, batches: list[pa.RecordBatch]) -> str | None:
    """Write the window's statements side file (:data:`~.contract.history.STATEMENTS_FILE`); return its name.

    None, and no file, when the read recorded no statement.
    """
    if not batches:
        return None
    path = window_dir / STATEMENTS_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as out:
        pq.write_table(pa.Table.from_batches(batches, STATEMENTS_SCHEMA), out, compression="zstd")
    return STATEMENTS_FILE


def _entry(output: TableOutput, target: TableTarget | None) -> TableEntry:
    """Return a table's manifest entry: what was written for it, and the history kinds it stages for."""
    entry = output.manifest_entry()
    return (
        entry if target is None or not target.history else dataclasses.replace(entry, history=target.history)
    )


def _read_window(
    hook: BinlogHook,
    window: Window,
    tables: dict[str, TableTarget],
    window_dir: ObjectStoragePath,
    server: ServerState,
    covers: dict[str, SnapshotCover] | None,
    history: dict[str, list[Any]],
    progress: ExtractProgress,
    *,
    pipeline: str,
    ranges: list[FileRange],
    workers: int,
    archive: ArchivedBinlog | None = None,
) -> tuple[ReaderState, dict[str, TableOutput]]:
    """Read the window into a cleared ``window_dir``; return the reader's final state and the tables' outputs.

    :param workers: processes reading the window's files in parallel; 0 reads serially.
    :raises: as :func:`extract_window` (the folder's partial files are removed first).
    """
    start, end = window.start, window.end
    clear_window(window_dir)
    window_dir.mkdir(parents=True, exist_ok=True)
    # The parallel read's workers are forks of this process: its writer thread starts once they are forked.
    writers = WindowWriters(window_dir, threaded=not workers)
    sink, discard = writers.write, writers.discard

    def serial(at: BinlogPosition, before: ReaderState, until: BinlogPosition | None = None) -> ReaderState:
        """Read from ``at`` (the window start, or a file's start in a parallel read) with ``before``'s state.

        To the window end or, with ``until`` (a file's end in a parallel read), as
        :func:`~.parallel.read_task_file` does; return the state the read ended with.
        """
        hooks = None if until is None else TaskFileHooks()
        with _feed(hook, at, server, archive, annotate_rows=keep_statements(tables)) as raw:
            reader = WindowReader(
                EventReader().events(raw),
                start=at,
                end=end,
                tables=tables,
                window=window.seq,
                sink=sink,
                pipeline=pipeline,
                covers=covers,
                progress=progress,
                discard=discard,
                state=before,
                hooks=hooks,
                case_sensitive_names=server.case_sensitive_names,
            )
            if hooks is None or until is None:
                reader.run()
                return reader.state
            return read_task_file(reader, until, hooks)

    try:
        if workers:
            log.info(
                "window %s spans %s binlog files: the task process and %s worker process(es) read them",
                window.seq,
                len(ranges),
                workers - 1,
            )
            job = FileJob(
                index=0, range=ranges[0], settings=hook.dump_settings(), flavor=server.flavor, tables=tables,
                covers=dict(covers or {}), window=window.seq, pipeline=pipeline, columns=history, spool="",
                case_sensitive_names=server.case_sensitive_names,
            )  # fmt: skip
            read = read_parallel(
                ranges,
                workers=workers,
                job=job,
                sink=sink,
                serial=serial,
                start_columns=history,
                progress=progress,
                forked=writers.start_thread,
            )
        else:
            read = serial(start, ReaderState(columns=history))
    except BaseException as err:
        writers.abort()
        if isinstance(err, pymysql.err.MySQLError) and err.args and err.args[0] in ACCESS_DENIED_ERRORS:
            raise hook.privilege_error(err, f"stream the binlog of window {window.seq} from {start}") from err
        raise
    return read, writers.close()


def check_available(
    server: ServerState, start: BinlogPosition, pipeline: str, archive: ArchivedBinlog | None
) -> None:
    """Check that the binlog from ``start`` on is on the source, or in ``archive`` up to what the source has.

    :raises BinlogPurgedError: naming what is gone and the remedy.
    """
    if archive is None or start.file in {name for name, _ in server.binlog_files}:
        check_retained(server, start, pipeline)
        return
    gap = archive.gap(start.file, server.binlog_files)
    if gap is not None:
        raise BinlogPurgedError(
            f"pipeline {pipeline!r}: the source no longer has the binlog from {start} on, and {gap}. "
            f"{RESNAPSHOT_REMEDY}"
        )
    log.info(
        "the source no longer has %s: the window is read from the binlog archive up to its oldest file", start
    )


def _feed(
    hook: BinlogHook,
    at: BinlogPosition,
    server: ServerState,
    archive: ArchivedBinlog | None,
    *,
    annotate_rows: bool,
) -> AbstractContextManager[Iterator[Event]]:
    """Return the raw events from ``at``: the source's dump, or the archive's events up to the source's files."""

    def dump(position: BinlogPosition) -> AbstractContextManager[Iterator[Event]]:
        return pipeline_dump(hook, position, flavor=server.flavor, annotate_rows=annotate_rows)

    if archive is None or at.file in {name for name, _ in server.binlog_files}:
        return dump(at)
    return archive.events(at, server.binlog_files, dump, annotate_rows=annotate_rows)


def _quarantinable(
    err: TableRefusalError, tables: dict[str, TableTarget], known: dict[str, TableRefusalError]
) -> bool:
    """Return whether ``err`` names a staged table and an event before any refusal of that table read so far.

    A later read of the window stops the table at the refused transaction, so the next refusal of the same
    table can only come from an earlier event (a batch converts its rows together): anything else would
    read the window again for nothing.
    """
    if err.table not in tables or err.file is None or err.pos is None:
        return False
    before = known.get(err.table)
    if before is None:
        return True
    return BinlogPosition(err.file, err.pos).key < BinlogPosition(str(before.file), int(before.pos or 0)).key


def quarantine_records(
    quarantined: Mapping[str, BinlogPosition], refusals: Mapping[str, TableRefusalError], window: int
) -> list[dict[str, Any]]:
    """Return the manifest's ``resnapshots`` entries of the tables a read quarantined.

    Each names the table, ``since`` (the start of the refused transaction: the target keeps the table as it
    was there), the refused event (``at``), its GTID, the column, the reason in a few words, the full message
    (``error``) and ``cause`` ``quarantine``.
    """
    records = []
    for table, since in sorted(quarantined.items()):
        refusal = refusals[table]
        records.append(
            {
                "table": table,
                "since": {"file": since.file, "pos": since.pos},
                "gtid": refusal.gtid,
                "reason": refusal.reason or str(refusal),
                "statement": "",
                "window": window,
                "cause": "quarantine",
                "column": refusal.column,
                "at": {"file": refusal.file, "pos": refusal.pos},
                "error": str(refusal),
            }
        )
    return records
