"""Stream one binlog window ``(start, end]`` and hand committed row changes to table writers.

Transactions are buffered until their commit event (rolled-back ones are dropped, and so are rows
undone by a ``ROLLBACK TO`` a savepoint) and spilled to temporary Arrow IPC files past
:data:`SPILL_ROWS` rows, so memory stays bounded for any transaction size. The stream stops at the
first transaction boundary at or after the window end; reaching the end of the binlog before it is an
error (the window's bytes must exist to be re-read).

A window is read over one replication connection, or not at all. When the connection breaks (the
source restarts, a ``KILL`` ends the dump thread, the network drops it), the read fails with the
retryable :class:`ReplicationConnectionLostError` and the task's retry re-reads the same window from its
start into a cleared staging folder; nothing the failed attempt staged survives. A connection that dies
silently (a dropped NAT entry, a failover that leaves the socket open) is noticed by the stream's read
timeout, three heartbeat periods (:meth:`BinlogHook.stream_timeouts
<airflow_provider_binlog.hooks.binlog.BinlogHook.stream_timeouts>`).

mysql-replication would instead reconnect on its own (``BinLogStreamReader.fetchone``, on client errors
2006/2013) and resume at the end of the last event it received, most often inside a transaction; that
is correct only if the server serves a position inside an event group as is (MariaDB 10.11 does, as
measured; MariaDB 5.5 was reported to skip to the next group, mysql-binlog-connector-java #53) and if
the address still leads to the same server (after a failover, the coordinates mean something else).
When the server is still down, its reconnect fails with a raw ``pymysql`` 2003 instead. Resuming
inside the attempt would need the checks a retry already makes (same server, window start retained,
a transaction boundary to resume at), so the reader leaves recovery to the retry:
:class:`ReplicationConnections` turns the library's reconnect into an error, and raises the dump
session's ``net_write_timeout`` so a reader that pauses is not disconnected in the first place.
"""

from __future__ import annotations

import datetime as dt
import logging
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pymysql
from pymysql.protocol import MysqlPacket
from pymysqlreplication.event import (
    ExecuteLoadQueryEvent,
    GtidEvent,
    MariadbGtidEvent,
    NotImplementedEvent,
    QueryEvent,
    RotateEvent,
    XAPrepareEvent,
    XidEvent,
)
from pymysqlreplication.row_event import DeleteRowsEvent, RowsEvent, UpdateRowsEvent, WriteRowsEvent

from airflow_provider_binlog.contract.columns import OP_DELETE, OP_INSERT, OP_UPDATE, UTC
from airflow_provider_binlog.contract.names import database_of
from airflow_provider_binlog.exceptions import (
    ReplicationConnectionLostError,
    SourceUnreachableError,
    UndecodableValueError,
    UnsupportedEventError,
)
from airflow_provider_binlog.extract.batches import ChangeBatchBuilder, truncate_marker, with_commit
from airflow_provider_binlog.extract.columns import (
    ColumnSpec,
    ValueConversionError,
    column_spec,
    converter,
    describe_column,
)
from airflow_provider_binlog.extract.ddl import DdlEffect, classify_ddl, keeps_values
from airflow_provider_binlog.extract.decoder import RowDecoder, layout_key, unsupported_reason
from airflow_provider_binlog.extract.events import codes
from airflow_provider_binlog.extract.events.parsers import Gtid, MariadbGtid
from airflow_provider_binlog.extract.events.stream import Event
from airflow_provider_binlog.extract.events.stream import RowsEvent as OwnRowsEvent
from airflow_provider_binlog.extract.progress import ExtractProgress
from airflow_provider_binlog.extract.statements import written_tables
from airflow_provider_binlog.source.connect import LOST_CONNECTION_ERRORS, LoginTimeoutConnection
from airflow_provider_binlog.source.positions import BinlogPosition, file_index
from airflow_provider_binlog.source.sql import QueryKind, classify_query
from airflow_provider_binlog.state import STATEMENT_CHARS

log = logging.getLogger(__name__)

SPILL_ROWS = 50_000
"""Rows of one open transaction kept in memory before they are spilled to a temporary file."""
BATCH_ROWS = 8_192
"""Committed rows per table kept as Python values before they become an Arrow batch for the writer."""

# Event type codes the reader must not skip silently (MySQL source ``binlog_event.h``; MariaDB KB,
# "Replication Protocol" / "Binlog Event Header"): MySQL TRANSACTION_PAYLOAD_EVENT (compressed
# transactions, 8.0.20+) and MariaDB's compressed query/row events (``log_bin_compress``).
COMPRESSED_EVENT_TYPES = {40: "TRANSACTION_PAYLOAD_EVENT"} | {
    code: "MariaDB compressed event" for code in range(165, 172)
}
READ_EVENTS: tuple[type, ...] = (
    RotateEvent,
    GtidEvent,
    MariadbGtidEvent,
    QueryEvent,
    ExecuteLoadQueryEvent,
    XidEvent,
    XAPrepareEvent,
    WriteRowsEvent,
    UpdateRowsEvent,
    DeleteRowsEvent,
    NotImplementedEvent,
)
"""The events :class:`WindowReader` acts on; the window's stream must deliver each of them
(``NotImplementedEvent`` so that compressed transactions are seen and refused)."""

REPLICATION_NET_WRITE_TIMEOUT_SECONDS = 3600
"""How long the source waits for the reader to take more binlog bytes before it drops the stream (seconds)."""
_CONTROL_DATABASE = "information_schema"
"""The ``db`` mysql-replication gives its control connection (``BinLogStreamReader.__connect_to_ctl``)."""


PROGRESS_EVERY_EVENTS = 256
"""The reader asks its :class:`~airflow_provider_binlog.extract.progress.ExtractProgress` for a line once per
this many events, so the clock is not read per event."""


class _ConnectionLost(Exception):
    """A lost connection, raised where mysql-replication cannot catch it (it is no ``OperationalError``)."""


class ReplicationConnection(LoginTimeoutConnection):
    """A pymysql connection whose lost-connection errors mysql-replication cannot swallow.

    Its login is bounded by ``connect_timeout`` (:class:`~airflow_provider_binlog.source.connect.LoginTimeoutConnection`);
    reads after the login keep the stream's own timeout settings.

    ``BinLogStreamReader.fetchone`` (mysql-replication 1.0) catches ``OperationalError`` 2006/2013 from the
    replication connection and reconnects at the last event position it saw; this class re-raises every
    error of :data:`LOST_CONNECTION_ERRORS` as an exception the library does not catch.
    """

    def _read_packet(self, packet_type: Any = MysqlPacket) -> Any:
        try:
            return super()._read_packet(packet_type)
        except pymysql.err.OperationalError as err:
            if err.args and err.args[0] in LOST_CONNECTION_ERRORS:
                raise _ConnectionLost(str(err)) from err
            raise


class ReplicationConnections:
    """Open the connections of one ``BinLogStreamReader`` (its ``pymysql_wrapper``); refuse a reconnect.

    The library opens its replication connection and its control connection (``db=information_schema``)
    once each; a second replication connection is a reconnect, however the library got there, and is
    refused, so a window is read over one connection whatever the library version does on errors.

    Connections are :class:`ReplicationConnection` s. The replication connection's session gets
    ``net_write_timeout`` = :data:`REPLICATION_NET_WRITE_TIMEOUT_SECONDS`: the dump thread serving it
    waits that long for the reader to take more bytes before it drops the connection (MySQL manual,
    "Server System Variables": ``net_write_timeout``, default 60 s; measured on MariaDB 10.11). The reader
    takes no bytes while it writes a large committed transaction to staging, and without a reconnect a
    drop there would fail every retry of the window.
    """

    def __init__(self) -> None:
        self.replication_connections = 0

    def __call__(self, **settings: Any) -> ReplicationConnection:
        """Open a connection with pymysql keyword arguments ``settings``."""
        if settings.get("db") == _CONTROL_DATABASE:
            return ReplicationConnection(**settings)
        self.replication_connections += 1
        if self.replication_connections > 1:
            raise _ConnectionLost("mysql-replication tried to reopen the replication connection")
        conn = ReplicationConnection(**settings)
        with conn.cursor() as cur:
            cur.execute(f"SET SESSION net_write_timeout = {REPLICATION_NET_WRITE_TIMEOUT_SECONDS}")
        return conn


@dataclass(frozen=True)
class SchemaBarrier:
    """A schema change of a table that the target cannot follow from the binlog (it waits for a re-snapshot).

    :param since: the end of the statement's event.
    :param covered: a snapshot of the table ordered before this window (lower seq) started at or after
        ``since``: that snapshot holds the table as it was after the change, so the window stages the
        table's changes logged after ``since`` (they outrank the snapshot's rows) and none before it (their
        row images lack what the change gave every row, and would outrank the snapshot's exact rows).
        Uncovered, the window stages only the changes at or before ``since``; the re-snapshot brings the rest.
    """

    since: BinlogPosition
    covered: bool = False

    def stages(self, key: tuple[int, int]) -> bool:
        """Return whether a change whose event ends at ``key`` (``(file index, position)``) is staged."""
        return self.covered == (key > self.since.key)


@dataclass
class TableTarget:
    """A selected table: its name, its key, and where the pipeline's capture of it begins.

    :param name: ``db.table``.
    :param primary_key: the key that identifies its rows (primary key, or the one the user named).
    :param since: the start of the table's first snapshot when that lies inside the window: changes logged
        at or before it are in the snapshot and are not staged (they may predate the key, e.g. a table that
        got its primary key just before; replayed, rows sharing a key value would merge into one). None
        stages every change of the window.
    :param referenced: columns of this table that cascading foreign keys of selected tables reference
        (see :attr:`moving_columns`).
    :param captured: whether the target already holds rows of the table (a ``CREATE TABLE`` of its name is then
        re-snapshotted, see :func:`~airflow_provider_binlog.extract.ddl.classify_ddl`).
    :param barriers: schema changes of the table waiting for a re-snapshot (from the pipeline's state; the
        reader adds those it finds): a change is staged only when every barrier :meth:`SchemaBarrier.stages` it.
    :param gone: the table no longer exists on the source, but the target holds it: none of its row changes
        are staged (a ``DROP TABLE`` or ``RENAME TABLE`` at or after them empties it), only the truncate marker
        of the statement that removed it, when the window holds that statement.
    """

    name: str
    primary_key: list[str]
    since: BinlogPosition | None = None
    referenced: list[str] = field(default_factory=list)

    @property
    def moving_columns(self) -> list[str]:
        """Return the columns whose change is staged as a delete of the before image plus the after image.

        The key (the row moves), and the ``referenced`` columns that cascading foreign keys of selected
        child tables reference: the merge needs their old values to find the child rows the source changed
        (:mod:`airflow_provider_binlog.jobs.merge.cascades`).
        """
        return [*self.primary_key, *(c for c in self.referenced if c not in self.primary_key)]

    barriers: list[SchemaBarrier] = field(default_factory=list)
    captured: bool = False
    gone: bool = False

    def stages(self, key: tuple[int, int]) -> bool:
        """Return whether a change whose event ends at ``key`` is staged (see ``since``, ``barriers``, ``gone``)."""
        if self.gone or (self.since is not None and key <= self.since.key):
            return False
        return all(b.stages(key) for b in self.barriers)


@dataclass
class _Retype:
    """A ``MODIFY``/``CHANGE`` under a non-strict ``sql_mode`` whose decision waits for the table's next table map.

    :param effect: the statement's effect on the table (``resnapshot``, with :attr:`DdlEffect.retyped`).
    :param at: the end of the statement's event.
    :param text: the statement.
    :param gtid: its GTID.
    :param before: the table's table-map columns before it (:attr:`WindowReader.columns`).
    :param decision: its entry of the manifest's ``ddl[].effects``, completed when decided.
    """

    effect: DdlEffect
    at: BinlogPosition
    text: str
    gtid: str | None
    before: list[Any]
    decision: dict[str, Any]


@dataclass(frozen=True)
class SnapshotCover:
    """The newest snapshot (merged or running) of a selected table, as the pipeline's ledger records it.

    :param seq: the snapshot's sequence number (the order key of its rows).
    :param start: the source head before its first chunk was read.
    """

    seq: int
    start: BinlogPosition


@dataclass
class ExtractStats:
    """Counters of one window read (for the manifest and the task log)."""

    events: int = 0
    transactions: int = 0
    rolled_back: int = 0
    rows: int = 0
    seconds: float = 0.0
    ddl: list[dict[str, Any]] = field(default_factory=list)
    last_commit_ts: str | None = None
    statements_ignored: int = 0
    skipped_statements: list[dict[str, Any]] = field(default_factory=list)
    covered_tables: dict[str, int] = field(default_factory=dict)
    resnapshots: list[dict[str, Any]] = field(default_factory=list)
    schema_skipped_row_events: Counter[str] = field(default_factory=Counter)
    dropped: list[dict[str, Any]] = field(default_factory=list)


LayoutKey = tuple[str, tuple[Any, ...]]


class _Layout:
    """Column specs, row decoder and row builder of one table-map layout of a table.

    Rows are decoded by :class:`~airflow_provider_binlog.extract.decoder.RowDecoder` straight from the
    event bytes when it supports every column, else by mysql-replication plus the value converters.
    """

    def __init__(self, table: str, columns: list[Any], window: int) -> None:
        self.table = table
        self.columns = columns
        labels = [describe_column(table, c) for c in columns]
        converters = []
        for column, label in zip(columns, labels, strict=True):
            try:
                converters.append(converter(column))
            except ValueError as err:  # a type or character set the extractor cannot stage exactly
                raise ValueConversionError(label, err) from err
        self.specs: list[ColumnSpec] = [column_spec(c) for c in columns]
        self.builder = ChangeBatchBuilder(self.specs, converters, window, labels)
        self.decoder = RowDecoder(columns) if RowDecoder.supports(columns) else None

    def take_zero_dates(self) -> int:
        """Return the zero dates counted since the last call (by the decoder or the converters)."""
        count = self.builder.zero_dates + (self.decoder.zero_dates if self.decoder else 0)
        self.builder.zero_dates = 0
        if self.decoder:
            self.decoder.zero_dates = 0
        return count


SavepointMarks = dict[tuple[str, int], tuple[int, int]]
"""Per touched layout of the open transaction: ``(spilled files, rows in memory)`` at a savepoint."""


class _Transaction:
    """The open transaction: its GTID, the layouts it touched, its spilled row batches and savepoints."""

    def __init__(self) -> None:
        self.open = False
        self.gtid: str | None = None
        self.touched: dict[tuple[str, int], _Layout] = {}
        self.spilled: dict[tuple[str, int], list[Any]] = {}
        self.rows_in_memory = 0
        self.savepoints: dict[str, SavepointMarks] = {}

    def close_spills(self) -> None:
        for files in self.spilled.values():
            for spill_file in files:
                spill_file.close()
        self.spilled = {}


Sink = Callable[[str, pa.RecordBatch, list[ColumnSpec], list[str]], None]


class WindowReader:
    """Read the committed row changes of selected tables inside one window.

    :param stream: an open mysql-replication ``BinLogStreamReader`` positioned at ``start``, whose
        ``pymysql_wrapper`` is a :class:`ReplicationConnections` (no silent reconnect).
    :param start: window start (a transaction boundary).
    :param end: window end (a transaction boundary at or after ``start``).
    :param tables: selected tables by ``db.table``.
    :param window: window sequence number.
    :param sink: receives committed rows in commit order: ``(table, batch, column specs, primary key)``.
    :param pipeline: the pipeline's name, for error messages.
    :param covers: per selected table, its newest snapshot in the ledger (merged or running): a
        statement-based write to the table is skipped when that snapshot covers it (see :meth:`_statement`).
    :param progress: logs progress lines while the window is read (checked every
        :data:`PROGRESS_EVERY_EVENTS` events).
    :param events: the window's events decoded by our own reader (``extract/events``, ADR 0018) from the
        dump ``stream`` opened; None reads mysql-replication's events of ``stream``.
    :param discard: removes every row of a table the sink has received so far (called when the table is
        dropped in the window and the target never held it, see :meth:`_empty`); None when the sink keeps
        nothing.
    :param columns: per selected table, its table-map columns at the window's start, when known (the schema
        history the previous window's manifest keeps, ``schemas``). The reader keeps them current in
        :attr:`columns`: each row event of a table sets them, each DDL that touches it (any action but
        ``ignore``) forgets them. They tell the old type of a column that a ``MODIFY`` under a non-strict
        ``sql_mode`` changes (:meth:`_decide_retype`).
    :raises ValueError: when ``stream`` opens its connections some other way.
    """

    def __init__(
        self,
        stream: Any,
        *,
        start: BinlogPosition,
        end: BinlogPosition,
        tables: dict[str, TableTarget],
        window: int,
        sink: Sink,
        pipeline: str = "?",
        covers: dict[str, SnapshotCover] | None = None,
        progress: ExtractProgress | None = None,
        events: Iterable[Event] | None = None,
        discard: Callable[[str], None] | None = None,
        columns: dict[str, list[Any]] | None = None,
    ) -> None:
        if not isinstance(getattr(stream, "pymysql_wrapper", None), ReplicationConnections):
            raise ValueError(
                "open the window's stream with pymysql_wrapper=ReplicationConnections() (see "
                "extract.window.stream_options): the library's own connections reconnect silently"
            )
        self.stream = stream
        self.start = start
        self.end = end
        self.tables = tables
        self.schemas = {database_of(name) for name in tables}
        self.window = window
        self.sink = sink
        self.pipeline = pipeline
        self.covers = dict(covers or {})
        self.progress = progress
        self.seq = 0
        self.stats = ExtractStats()
        self.txn = _Transaction()
        self.layouts: dict[LayoutKey, _Layout] = {}
        self.current_layout: dict[str, LayoutKey] = {}
        self.layout_of_list: dict[int, _Layout] = {}
        self.zero_dates: Counter[str] = Counter()
        self.committed_tables: set[str] = set()
        self.position = start
        self.events = events
        self.discard = discard
        self.retypes: dict[str, _Retype] = {}
        self.columns: dict[str, list[Any]] = {t: c for t, c in (columns or {}).items() if t in tables}

    def run(self) -> ExtractStats:
        """Read until the window end; return the counters.

        :raises UnsupportedEventError: on compressed transactions, XA, or statement-based DML writing a
            selected table that no snapshot covers (see :meth:`_statement`).
        :raises UndecodableValueError: on a value that cannot be staged exactly.
        :raises ReplicationConnectionLostError: when the connection to the source breaks (retryable).
        :raises SourceUnreachableError: when the binlog ends before the window end (retryable).
        """
        started = time.monotonic()
        if self.start.key >= self.end.key:
            return self.stats
        try:
            self._read()
        except _ConnectionLost as err:
            raise self._lost(err) from err
        except pymysql.err.OperationalError as err:
            if err.args and err.args[0] in LOST_CONNECTION_ERRORS:
                raise self._lost(err) from err
            raise
        finally:
            self.txn.close_spills()
        for table in list(self.retypes):
            self._decide_retype(table, None)
        for layout in self.layouts.values():
            try:
                self._flush(layout)
            except ValueConversionError as err:
                raise self._undecodable(err, None) from err
        self.stats.seconds = time.monotonic() - started
        return self.stats

    def _lost(self, err: Exception) -> ReplicationConnectionLostError:
        inside = f", inside transaction {self.txn.gtid or '?'}" if self.txn.open else ""
        return ReplicationConnectionLostError(
            f"lost the replication connection to the source while reading window {self.window} "
            f"({self.start}, {self.end}], {self.stats.transactions} transaction(s) into it (last boundary "
            f"read: {self.position}{inside}): {err}. The source restarted, killed the connection or the "
            f"network dropped it (a stream that receives nothing, not even a heartbeat, for three heartbeat "
            f"periods counts as lost: the connection extra heartbeat_period, default 15 s). The reader does not resume on another connection: the retry clears this "
            f"window's staging folder and re-reads the same window from its start."
        )

    def _undecodable(self, err: ValueConversionError, event: Any) -> UndecodableValueError:
        """Return the task-failing error of a value that cannot be staged, with where it is and what to do."""
        file: str | None
        pos: int | None
        if isinstance(event, Event):  # our reader's
            file, pos = err.file or event.file, err.pos or event.end_pos
        else:
            file = err.file or (self.stream.log_file if event is not None else None)
            pos = err.pos or (event.packet.log_pos if event is not None else None)
        gtid = err.gtid or self.txn.gtid
        return UndecodableValueError(
            f"pipeline {self.pipeline!r}, window {self.window}: cannot stage a value of column {err.column} "
            f"from the row event ending at {file or '?'}:{pos or '?'} (GTID {gtid or 'unknown'}): "
            f"{type(err.cause).__name__}: {err.cause}. The extractor stages every value exactly or not at all, "
            f"and a retry reads the same bytes and fails the same way. To go on: fix the value (or change the "
            f"column to a type and character set docs/types.md lists as staged) at the source, remove the table "
            f"from the pipeline's tables for one run, then add it back (a table added to the selection is "
            f'snapshotted by the next run). See docs/types.md, "What is refused".'
        )

    def _read(self) -> None:
        """Dispatch the stream's events until the window end.

        :raises SourceUnreachableError: when the binlog ends before the window end.
        """
        if self.events is not None:
            self._read_events(self.events)
            return
        for event in self.stream:
            if not self.txn.open and self._starts_at_or_after_end(event):
                break
            self.stats.events += 1
            if isinstance(event, NotImplementedEvent):
                self._check_unhandled(event)
            try:
                self._dispatch(event)
            except ValueConversionError as err:
                raise self._undecodable(err, event) from err
            if self._reached_end():
                break
            if self.progress is not None and not self.stats.events % PROGRESS_EVERY_EVENTS:
                self.progress.tick(self.stream.log_file, event.packet.log_pos, self.stats.rows)
        else:
            # Events the reader filters out (checkpoints, annotations) still move the stream's position.
            if not self.txn.open and self.stream.log_pos:
                self.position = BinlogPosition(self.stream.log_file, self.stream.log_pos)
            if not self._reached_end():
                raise self._ended_early()

    def _read_events(self, events: Iterable[Event]) -> None:
        """Dispatch our own reader's events until the window end (the library path's :meth:`_read`).

        :raises SourceUnreachableError: when the binlog ends before the window end.
        """
        for event in events:
            if (
                not self.txn.open
                and event.end_pos
                and event.type_code != codes.ROTATE
                and not event.in_payload
            ):
                if BinlogPosition(event.file, event.start).key >= self.end.key:
                    break
            self.stats.events += 1
            try:
                self._dispatch_event(event)
            except ValueConversionError as err:
                raise self._undecodable(err, event) from err
            if self._reached_end():
                break
            if self.progress is not None and not self.stats.events % PROGRESS_EVERY_EVENTS:
                self.progress.tick(event.file, event.end_pos, self.stats.rows)
        else:
            if not self._reached_end():
                raise self._ended_early()

    def _ended_early(self) -> SourceUnreachableError:
        """Return the error of a binlog that ended before the window end (retryable)."""
        return SourceUnreachableError(
            f"the binlog ended at {self.position} before the window end {self.end}; the server may "
            f"have been restarted or reset. Retry; if it persists, the window's binlogs are gone."
        )

    def _dispatch_event(self, event: Event) -> None:
        """Act on one of our reader's events as :meth:`_dispatch` does on the library's."""
        data, file, end_pos, code = event.data, event.file, event.end_pos, event.type_code
        if code == codes.ROTATE:
            if not self.txn.open:
                self.position = BinlogPosition(data.next_file, data.position)
            return
        if isinstance(data, (Gtid, MariadbGtid)):
            self._begin(data.gtid)
        elif isinstance(data, OwnRowsEvent):
            self._rows(data, file, end_pos)
        elif code == codes.XID:
            self._commit(event, file, end_pos)
        elif code in (codes.QUERY, codes.EXECUTE_LOAD_QUERY):
            statement = SimpleNamespace(
                query=data.query, schema=data.schema, timestamp=event.timestamp, sql_mode=data.status.sql_mode
            )
            if code == codes.QUERY:
                self._query(statement, file, end_pos)
            else:
                self._statement(data.query.strip(), data.schema, file, end_pos)
        elif code == codes.XA_PREPARE:
            self._xa_prepare(file, end_pos)
        if end_pos and not self.txn.open:
            self.position = BinlogPosition(file, end_pos)

    def _flush(self, layout: _Layout) -> None:
        """Hand the layout's committed rows to the sink (those of a covered table are dropped)."""
        self.zero_dates[layout.table] += layout.take_zero_dates()
        if layout.table in self.stats.covered_tables:
            layout.builder.take_committed()
        elif layout.builder.committed:
            self.sink(
                layout.table,
                layout.builder.take_committed(),
                layout.specs,
                self.tables[layout.table].primary_key,
            )

    def _starts_at_or_after_end(self, event: Any) -> bool:
        """Return True when ``event`` begins at or after the window end (a boundary between groups)."""
        end_pos, size = event.packet.log_pos, event.packet.event_size
        if isinstance(event, RotateEvent) or not end_pos:
            return False
        return BinlogPosition(self.stream.log_file, end_pos - size).key >= self.end.key

    def _reached_end(self) -> bool:
        return not self.txn.open and self.position.key >= self.end.key

    def _dispatch(self, event: Any) -> None:

        end_pos = event.packet.log_pos
        file = self.stream.log_file
        if isinstance(event, RotateEvent):
            # The rotate event ending a file carries that file's end offset, but the library has already
            # switched log_file to the next file: the boundary is the start of the next file.
            if not self.txn.open:
                self.position = BinlogPosition(event.next_binlog, event.position)
            return
        if isinstance(event, (GtidEvent, MariadbGtidEvent)):
            self._begin(event.gtid)
        elif isinstance(event, RowsEvent):
            self._rows(event, file, end_pos)
        elif isinstance(event, XidEvent):
            self._commit(event, file, end_pos)
        elif isinstance(event, QueryEvent):
            self._query(event, file, end_pos)
        elif isinstance(event, ExecuteLoadQueryEvent):
            self._load_query(event, file, end_pos)
        elif isinstance(event, XAPrepareEvent):
            self._xa_prepare(file, end_pos)
        if end_pos and not self.txn.open:
            self.position = BinlogPosition(file, end_pos)

    def _check_unhandled(self, event: Any) -> None:
        code = getattr(event.packet, "event_type", None)
        if code in COMPRESSED_EVENT_TYPES:
            raise UnsupportedEventError(
                f"{COMPRESSED_EVENT_TYPES[code]} (type {code}) at {self.stream.log_file}:{event.packet.log_pos}: "
                f"compressed binlog transactions cannot be decoded and their rows would be lost. Turn off "
                f"binlog_transaction_compression (MySQL) / log_bin_compress (MariaDB)."
            )

    def _begin(self, gtid: Any) -> None:
        if self.txn.open and self.txn.touched:
            raise UnsupportedEventError(
                f"transaction {self.txn.gtid} has row changes but no commit event before GTID {gtid} at "
                f"{self.position}; refusing to guess whether its rows were committed."
            )
        self._rollback()
        self.txn.open = True
        self.txn.gtid = str(gtid) if gtid else None

    def _rollback(self) -> None:
        for layout in self.txn.touched.values():
            layout.builder.rollback()
        self.txn.close_spills()
        self.txn = _Transaction()

    def _query(self, event: Any, file: str, end_pos: int) -> None:
        query = classify_query(event.query)
        text, kind = query.text, query.kind
        if kind is QueryKind.BEGIN:
            if not self.txn.open:
                self._begin(None)
            return
        if kind is QueryKind.COMMIT:
            self._commit(event, file, end_pos)
            return
        if kind is QueryKind.ROLLBACK:
            self.stats.rolled_back += 1
            self._rollback()
            return
        if kind is QueryKind.ROLLBACK_TO:
            self._rollback_to(query.savepoint, file, end_pos)
            return
        if kind is QueryKind.SAVEPOINT:
            self._savepoint(query.savepoint)
            return
        if kind in (QueryKind.XA_START, QueryKind.XA_END):
            return  # inside the group of an XA transaction, which ends with its XA_PREPARE event
        if kind in (QueryKind.XA_COMMIT, QueryKind.XA_ROLLBACK):
            self._rollback()  # a group of its own that holds no rows
            return
        schema = event.schema.decode() if isinstance(event.schema, bytes) else str(event.schema or "")
        if kind is QueryKind.DML:
            self._statement(text, schema, file, end_pos)
            return  # a statement inside a transaction: the transaction goes on (no implicit commit)
        self._ddl(
            text, schema, file, end_pos, sql_mode=getattr(event, "sql_mode", None), timestamp=event.timestamp
        )
        self._rollback()  # DDL commits implicitly and carries no rows: a transaction boundary

    def _ddl(
        self, text: str, schema: str, file: str, end_pos: int, *, sql_mode: int | None, timestamp: int
    ) -> None:
        """Decide what a DDL statement means for the selected tables (:func:`~airflow_provider_binlog.extract.ddl.classify_ddl`).

        Each decision goes to the task log and the manifest (``ddl``). A table the target cannot follow gets a
        :class:`SchemaBarrier` at the statement: this window stages none of its later changes (unless a
        snapshot ordered before the window covers the change), and the manifest lists it under
        ``resnapshots``, which the window's commit records in the pipeline state. A followed statement that
        empties a table (``TRUNCATE``, ``DROP TABLE``, renamed away) stages a truncate marker
        (:meth:`_empty`).

        :param sql_mode: the session's ``sql_mode`` bits logged with the statement (``Q_SQL_MODE_CODE``), if any.
        :param timestamp: the statement's start time (Unix seconds), the commit time of its implicit commit.
        """
        effects = classify_ddl(
            text,
            schema,
            self.tables,
            [t.name for t in self.tables.values() if t.captured],
            sql_mode=sql_mode,
        )
        if not effects:
            return
        for effect in effects:  # a later DDL of the table before any row event shows no new column type
            if effect.table in self.retypes:
                self._decide_retype(effect.table, None)
        before = {e.table: self.columns.pop(e.table, None) for e in effects if e.action != "ignore"}
        at = BinlogPosition(file, end_pos)
        decisions: list[dict[str, Any]] = [
            {"table": e.table, "action": e.action, "reason": e.reason} for e in effects
        ]
        self.stats.ddl.append(
            {
                "gtid": self.txn.gtid,
                "schema": schema,
                "query": text[:STATEMENT_CHARS],
                "file": file,
                "pos": end_pos,
                "effects": decisions,
            }
        )
        for effect, decision in zip(effects, decisions, strict=True):
            if effect.empties:
                decision["empties"] = effect.empties
                decision["marker_seq"] = self._empty(effect, text, at, timestamp)
            if effect.action != "resnapshot":
                log.info(
                    "window %s of %s: %s at %s (GTID %s): %s (%s)",
                    self.window, self.pipeline, effect.table, at, self.txn.gtid, effect.action, effect.reason,
                )  # fmt: skip
            elif effect.retyped and (columns := before.get(effect.table)) is not None:
                self.retypes[effect.table] = _Retype(effect, at, text, self.txn.gtid, columns, decision)
                log.info(
                    "window %s of %s: %s at %s (GTID %s): %s; followed if the table's next row event shows a "
                    "lossless widening of each, else re-snapshotted",
                    self.window, self.pipeline, effect.table, at, self.txn.gtid, effect.reason,
                )  # fmt: skip
            else:
                if effect.retyped:
                    decision["reason"] = effect.reason + (
                        "; no table map of the table before it (in this window or the schema history of earlier "
                        "ones) shows the old column types"
                    )
                self._needs_resnapshot(effect.table, decision["reason"], at, text, self.txn.gtid)

    def _needs_resnapshot(
        self, table: str, reason: str, at: BinlogPosition, text: str, gtid: str | None
    ) -> None:
        """Put a :class:`SchemaBarrier` on ``table`` at ``at``; list the table under ``resnapshots`` unless covered."""
        cover = self.covers.get(table)
        covered = cover is not None and cover.seq < self.window and cover.start.key >= at.key
        self.tables[table].barriers.append(SchemaBarrier(at, covered=covered))
        if covered:
            log.info(
                "window %s of %s: %s at %s (GTID %s) needs a re-snapshot (%s); snapshot %s already read "
                "the table after it: the window stages only its later changes",
                self.window, self.pipeline, table, at, gtid, reason, cover.seq,  # type: ignore[union-attr]
            )  # fmt: skip
            return
        self.stats.resnapshots.append(
            {
                "table": table,
                "since": {"file": at.file, "pos": at.pos},
                "gtid": gtid,
                "reason": reason,
                "statement": text[:STATEMENT_CHARS],
                "window": self.window,
            }
        )
        log.warning(
            "window %s of %s: %s at %s (GTID %s) cannot be followed from the binlog (%s): the table's "
            "changes after it are not staged, and the snapshot task of the next run re-snapshots %s; "
            "until that snapshot is merged the target shows the table as it was before this statement",
            self.window, self.pipeline, table, at, gtid, reason, table,
        )  # fmt: skip

    def _decide_retype(self, table: str, after: list[Any] | None) -> None:
        """Follow or re-snapshot a waiting non-strict ``MODIFY``/``CHANGE`` of ``table`` (:class:`_Retype`).

        :param after: the table-map columns of the table's first row event after the statement; None when
            none is known (a later DDL of the table, or the window's end): then it is re-snapshotted.
        """
        retype = self.retypes.pop(table)
        by_name = {c.name.lower(): c for c in after or []}
        before = {c.name.lower(): c for c in retype.before}
        kept = after is not None and all(
            name.lower() in by_name
            and name.lower() in before
            and keeps_values(before[name.lower()], by_name[name.lower()])
            for name in retype.effect.retyped
        )
        if kept:
            retype.decision.update(
                action="follow",
                reason=f"{retype.effect.reason}; the table maps before and after it show a lossless widening",
            )
            log.info(
                "window %s of %s: %s at %s (GTID %s): follow (%s)",
                self.window, self.pipeline, table, retype.at, retype.gtid, retype.decision["reason"],
            )  # fmt: skip
            return
        retype.decision["reason"] = retype.effect.reason + (
            "; the change may not keep every stored value (the table maps before and after it)"
            if after is not None
            else "; no row event of the table after it in this window shows the new column types"
        )
        self._needs_resnapshot(table, retype.decision["reason"], retype.at, retype.text, retype.gtid)

    def _empty(self, effect: Any, text: str, at: BinlogPosition, timestamp: int) -> int | None:
        """Stage a truncate marker of ``effect.table`` at the statement's place in the order; return its seq.

        The marker (``_binlog_op = 't'``, every data column NULL, see
        :mod:`~airflow_provider_binlog.jobs.merge.truncate`) tells the merge to remove every row of the table
        ordered before it. It is staged where the table's row changes would be (:meth:`TableTarget.stages`, or
        the table is ``gone``; a drop also behind a barrier waiting for a re-snapshot: the table is empty after
        it whatever the change before did, so the drop ends the barriers before it, and the window's commit
        clears their entries, :func:`~airflow_provider_binlog.operators.commit.with_schema_changes`), when the target holds the
        table or this window committed rows of it: a marker of a table the target never held has nothing to
        remove. A dropped table is listed under ``dropped`` in the manifest; one whose rows this window staged
        is then taken as held by the target, so a ``CREATE TABLE`` of its name later in the window is
        re-snapshotted (only a snapshot replaces the old table's columns). Unless the target never held it:
        then the rows this window staged of it are discarded (``discard``) instead, and a table created again
        under its name is followed from its first row, with its own columns only.

        :returns: the marker's ``_binlog_seq``, None when no marker was staged.
        """
        target = self.tables[effect.table]
        staged = target.gone or target.stages(at.key)
        discarded = False
        if effect.empties == "dropped":
            if not staged:
                staged = (target.since is None or at.key > target.since.key) and all(
                    not b.covered or b.stages(at.key) for b in target.barriers
                )
            if staged:  # what comes after is another table: the waits of this one end here
                target.barriers = [b for b in target.barriers if b.since.key > at.key]
            if staged and not target.captured and effect.table in self.committed_tables:
                discarded = self._discard(effect.table)
        held = target.captured or effect.table in self.committed_tables
        seq = None
        if staged and held and effect.table not in self.stats.covered_tables:
            seq = self._next_seq()
            commit_ts = dt.datetime.fromtimestamp(timestamp, dt.timezone.utc)
            marker = truncate_marker(
                window=self.window, seq=seq, gtid=self.txn.gtid, file=at.file, pos=at.pos, commit_ts=commit_ts
            )
            self.sink(effect.table, marker, [], target.primary_key)
            if effect.empties == "dropped":
                target.captured = True
        if effect.empties == "dropped":
            self.stats.dropped.append(
                {
                    "table": effect.table,
                    "since": {"file": at.file, "pos": at.pos},
                    "gtid": self.txn.gtid,
                    "statement": text[:STATEMENT_CHARS],
                    "window": self.window,
                    "marker_seq": seq,
                }
            )
        if seq is not None:
            outcome = f"truncate marker staged (seq {seq}); the merge removes every row ordered before it"
        elif not held:
            outcome = "no truncate marker: neither the target nor this window holds rows of it"
            if discarded:
                outcome += " (the target never held it: the rows this window had staged of it are discarded)"
        else:
            outcome = (
                "no truncate marker: a snapshot or a pending re-snapshot of the table covers the statement"
            )
        log.info(
            "window %s of %s: %s %s at %s (GTID %s): %s",
            self.window, self.pipeline, effect.table, effect.empties, at, self.txn.gtid, outcome,
        )  # fmt: skip
        return seq

    def _discard(self, table: str) -> bool:
        """Drop every row of ``table`` this window has committed so far, in the sink and held back.

        :returns: False (nothing dropped) when the reader has no ``discard``: the rows stay, and are then taken as
            held by the target.
        """
        if self.discard is None:
            return False
        for layout in self.layouts.values():
            if layout.table == table:
                layout.builder.take_committed()
                layout.take_zero_dates()
        self.zero_dates.pop(table, None)
        self.committed_tables.discard(table)
        self.discard(table)
        return True

    def _load_query(self, event: Any, file: str, end_pos: int) -> None:
        """Act on a statement-based ``LOAD DATA`` (an Execute_load_query event) like on any DML statement.

        mysql-replication reads only the event's fixed fields (``ExecuteLoadQueryEvent``); the rest of its
        body is laid out as a query event's: status variables, the default database and a NUL, then the
        statement up to the checksum (MySQL source ``log_event.h``, ``Execute_load_query_log_event``).
        """
        packet = event.packet
        packet.read(event.status_vars_length)
        schema = packet.read(event.schema_length).decode("utf-8", "replace")
        packet.advance(1)
        checksum = 4 if getattr(self.stream, "_BinLogStreamReader__use_checksum", True) else 0
        text = packet.read(max(packet.bytes_to_read() - checksum, 0)).decode("utf-8", "replace").strip()
        self._statement(text, schema, file, end_pos)

    def _statement(self, text: str, schema: str, file: str, end_pos: int) -> None:
        """Act on a statement-based DML statement (logged as SQL text, its rows are not in the binlog).

        A statement that writes no selected table is ignored (counted). One that writes selected tables
        is skipped when every one of them is **covered**: the table's newest snapshot in the ledger has a
        sequence number above this window's and started after the statement. Such a snapshot was started
        after this window was cut, so it read the table after the window's end: its rows carry the
        statement's effect and every other change of the window to the table, and they outrank the
        window's rows of the table. The window then stages no row of a covered table at all: a row the
        window inserted and the statement deleted has no row in the snapshot to outrank it (and no
        tombstone, when the target never held it), so staging it would bring back a deleted row when the
        window is merged after the snapshot. Skipped statements and covered tables go to the manifest.

        :raises UnsupportedEventError: when a selected table it writes is not covered (or, for a
            statement sqlglot cannot parse, a selected table of its default database, or of any database
            when it has none): the message names the remedy.
        """
        found = written_tables(text, schema)
        if found.parsed:
            wanted = {name.lower() for name in found.tables}
            written = sorted(t for t in self.tables if t.lower() in wanted)
        else:
            written = sorted(t for t in self.tables if not schema or database_of(t) == schema)
        if not written:
            self.stats.statements_ignored += 1
            return
        at = BinlogPosition(file, end_pos)
        uncovered = [
            t
            for t in written
            if (cover := self.covers.get(t)) is None or cover.seq <= self.window or cover.start.key <= at.key
        ]
        if uncovered:
            raise self._statement_error(text, schema, at, written, found)
        covering = {t: self.covers[t].seq for t in written}
        self.stats.skipped_statements.append(
            {
                "file": file,
                "pos": end_pos,
                "gtid": self.txn.gtid,
                "query": text[:200],
                "tables": written,
                "snapshots": covering,
            }
        )
        self.stats.covered_tables.update(covering)
        log.warning(
            "window %s of %s: skipped the statement-based write at %s (GTID %s) to %s, covered by snapshot(s) %s; "
            "the window stages no rows of those tables",
            self.window, self.pipeline, at, self.txn.gtid, ", ".join(written), covering,
        )  # fmt: skip

    def _statement_error(
        self, text: str, schema: str, at: BinlogPosition, written: list[str], found: Any
    ) -> UnsupportedEventError:
        """Return the error of a statement-based write to selected tables that no snapshot covers."""
        tables = ",".join(written)
        if found.parsed:
            what = f"it writes the selected table(s) {', '.join(written)}"
        else:
            scope = (
                f"default database {schema!r}"
                if schema
                else "the pipeline (it ran without a default database)"
            )
            what = (
                f"it could not be parsed ({found.error}), so it is taken to write every selected table of the "
                f"{scope}: {', '.join(written)}"
            )
        return UnsupportedEventError(
            f"pipeline {self.pipeline!r}, window {self.window}: statement-based DML {text[:80]!r} at {at} "
            f"(GTID {self.txn.gtid or 'unknown'}): {what}, and its rows are not in the binlog (the session ran with "
            f"binlog_format=STATEMENT or MIXED). To go on: set binlog_format=ROW globally, then trigger "
            f'binlog_resnapshot with {{"pipeline": "{self.pipeline}", "tables": "{tables}", "mode": "requested"}}; '
            f"once that snapshot has started, clear the failed extract: it re-reads the same window and skips the "
            f"statement."
        )

    def _savepoint(self, name: str) -> None:
        """Record where the open transaction stands at ``SAVEPOINT name`` (a name set again moves)."""
        self.txn.savepoints.pop(name, None)
        self.txn.savepoints[name] = {
            key: (len(self.txn.spilled.get(key, [])), len(layout.builder) - layout.builder.committed)
            for key, layout in self.txn.touched.items()
        }

    def _rollback_to(self, name: str, file: str, end_pos: int) -> None:
        """Drop the open transaction's rows logged after ``SAVEPOINT name`` (``ROLLBACK TO name``).

        MariaDB and MySQL log ``ROLLBACK TO`` only when the transaction changed a non-transactional table
        (else they cut the undone rows from the binlog cache). In row format those changes are binlogged
        in groups of their own, so every row of this group after the savepoint is transactional and undone.
        """
        if name not in self.txn.savepoints:
            raise UnsupportedEventError(
                f"ROLLBACK TO {name!r} at {file}:{end_pos} names a savepoint this transaction ({self.txn.gtid}) "
                f"did not log; refusing to guess which of its rows were undone."
            )
        names = list(self.txn.savepoints)
        for later in names[names.index(name) + 1 :]:
            del self.txn.savepoints[later]
        marks = self.txn.savepoints[name]
        for key, layout in self.txn.touched.items():
            files_at, rows_at = marks.get(key, (0, 0))
            spilled = self.txn.spilled.get(key, [])
            if len(spilled) == files_at:
                layout.builder.rollback(keep=rows_at)
                continue
            # Spilled since the savepoint: the rows held then are the start of the first file spilled after.
            layout.builder.rollback()
            kept = spilled[:files_at]
            if rows_at:
                kept.append(_spill_head(spilled[files_at], rows_at))
            for spill_file in spilled[files_at:]:
                spill_file.close()
            self.txn.spilled[key] = kept

    def _xa_prepare(self, file: str, end_pos: int) -> None:
        """End the group of a prepared XA transaction; refuse it when it changed selected tables."""
        if self.txn.touched:
            tables = sorted({layout.table for layout in self.txn.touched.values()})
            raise UnsupportedEventError(
                f"XA PREPARE at {file}:{end_pos} of a transaction that changed {', '.join(tables)}: XA "
                f"transactions are not supported yet; whether their rows count is decided by a later, separate "
                f"XA COMMIT or XA ROLLBACK. Avoid two-phase XA on the selected tables (XA COMMIT ... ONE PHASE "
                f"is fine)."
            )
        self._rollback()  # nothing of the selected tables: the group ends here

    def _rows(self, event: Any, file: str, end_pos: int) -> None:
        name = f"{event.schema}.{event.table}"
        target = self.tables.get(name)
        if target is None:
            return
        if name in self.retypes:
            self._decide_retype(name, event.columns)
        self.columns[name] = event.columns
        if name in self.stats.covered_tables:
            return
        if not target.stages((file_index(file), end_pos)):
            if target.barriers and (target.since is None or (file_index(file), end_pos) > target.since.key):
                self._skip_for_schema_change(target, BinlogPosition(file, end_pos))
            return
        self.txn.open = True
        layout = self._layout(name, event.columns)
        self.txn.touched[(name, id(layout))] = layout
        self._add_rows(event, layout, target, file, end_pos)
        if self.txn.rows_in_memory >= SPILL_ROWS:
            self._spill()

    def _skip_for_schema_change(self, target: TableTarget, at: BinlogPosition) -> None:
        """Count a row event of ``target`` left out for a schema change; log the first one of each table."""
        if not self.stats.schema_skipped_row_events[target.name]:
            log.warning(
                "window %s of %s: row changes of %s (first at %s) are not staged: schema change(s) at %s need a "
                "re-snapshot of the table, which brings the table's rows as they are after the change(s) (see "
                "docs/schema-changes.md)",
                self.window, self.pipeline, target.name, at, ", ".join(str(b.since) for b in target.barriers),
            )  # fmt: skip
        self.stats.schema_skipped_row_events[target.name] += 1

    def _layout(self, table: str, columns: list[Any]) -> _Layout:
        known = self.layout_of_list.get(id(columns))
        if known is not None and known.columns is columns:
            return known  # the table-map cache hands out the same column list for the same definition
        key = (table, layout_key(columns))
        layout = self.layouts.get(key)
        if layout is None:
            previous = self.current_layout.get(table)
            if previous is not None:  # the table was altered: its older rows go out first
                self._flush(self.layouts.pop(previous))
            layout = self.layouts[key] = _Layout(table, columns, self.window)
            self.current_layout[table] = key
        if len(self.layout_of_list) > 4096:
            self.layout_of_list.clear()
        self.layout_of_list[id(columns)] = layout
        return layout

    def _spill(self) -> None:
        """Move the open transaction's rows to temporary files (committed rows go to the sink first)."""
        for key, layout in self.txn.touched.items():
            self._flush(layout)
            if len(layout.builder):
                spill_file = tempfile.TemporaryFile(prefix="binlog-spill-")
                batch = layout.builder.take_open()
                with pa.ipc.new_stream(spill_file, batch.schema) as stream:
                    stream.write_batch(batch)
                self.txn.spilled.setdefault(key, []).append(spill_file)
        self.txn.rows_in_memory = 0

    def _add_rows(self, event: Any, layout: _Layout, target: TableTarget, file: str, end_pos: int) -> None:

        if isinstance(event, OwnRowsEvent) and layout.decoder is None:
            raise UnsupportedEventError(
                f"{event.where}: {unsupported_reason(layout.columns)}; the extractor's own reader decodes every "
                f"row with RowDecoder"
            )
        if isinstance(event, UpdateRowsEvent) or (isinstance(event, OwnRowsEvent) and event.kind == "update"):
            count = self._add_updates(event, layout, target, file, end_pos)
        elif isinstance(event, OwnRowsEvent):
            count = self._add_images(event, layout, "c" if event.kind == "write" else "d", file, end_pos)
        elif isinstance(event, (WriteRowsEvent, DeleteRowsEvent)):
            op = OP_INSERT if isinstance(event, WriteRowsEvent) else OP_DELETE
            count = self._add_images(event, layout, op, file, end_pos)
        else:
            raise UnsupportedEventError(f"unexpected rows event {type(event).__name__} at {end_pos}")
        self.txn.rows_in_memory += count
        self.stats.rows += count

    def _add_images(self, event: Any, layout: _Layout, op: str, file: str, end_pos: int) -> int:
        builder = layout.builder
        if layout.decoder is not None:
            rows = (
                event.rows_with(layout.decoder)
                if isinstance(event, OwnRowsEvent)
                else layout.decoder.decode(event)
            )
            for values in rows:
                builder.add_values(op, self._next_seq(), file, end_pos, values)
            return len(rows)
        for row in event.rows:
            builder.add(op, self._next_seq(), file, end_pos, row["values"], row["none_sources"])
        return len(event.rows)

    def _add_updates(self, event: Any, layout: _Layout, target: TableTarget, file: str, end_pos: int) -> int:
        builder = layout.builder
        if layout.decoder is not None:
            names = layout.builder.names
            index = [names.index(k) for k in target.moving_columns if k in names]
            pairs = (
                event.rows_with(layout.decoder)
                if isinstance(event, OwnRowsEvent)
                else layout.decoder.decode_updates(event)
            )
            for before, after in pairs:
                if any(before[i] != after[i] for i in index):
                    builder.add_values(OP_DELETE, self._next_seq(), file, end_pos, before)
                builder.add_values(OP_UPDATE, self._next_seq(), file, end_pos, after)
            return len(pairs)
        key = target.moving_columns
        for row in event.rows:
            before, after = row["before_values"], row["after_values"]
            if key and any(before.get(k) != after.get(k) for k in key):
                builder.add(OP_DELETE, self._next_seq(), file, end_pos, before, row["before_none_sources"])
            builder.add(OP_UPDATE, self._next_seq(), file, end_pos, after, row["after_none_sources"])
        return len(event.rows)

    def _next_seq(self) -> int:
        self.seq += 1
        return self.seq

    def _commit(self, event: Any, file: str, end_pos: int) -> None:
        commit_ts = dt.datetime.fromtimestamp(event.timestamp, UTC)
        for key, layout in self.txn.touched.items():
            if layout.table in self.stats.covered_tables:
                layout.builder.rollback()
                continue
            for spill_file in self.txn.spilled.get(key, []):
                spill_file.seek(0)
                for batch in pa.ipc.open_stream(spill_file):
                    spilled = with_commit(batch, gtid=self.txn.gtid, commit_ts=commit_ts)
                    self.sink(layout.table, spilled, layout.specs, self.tables[layout.table].primary_key)
            layout.builder.commit(self.txn.gtid, commit_ts)
            if layout.builder.committed or self.txn.spilled.get(key):
                self.committed_tables.add(layout.table)
            if layout.builder.committed >= BATCH_ROWS:
                self._flush(layout)
        self.txn.close_spills()
        self.txn = _Transaction()
        self.stats.transactions += 1
        self.stats.last_commit_ts = commit_ts.isoformat()


def _spill_head(spill_file: Any, rows: int) -> Any:
    """Return a new spill file holding the first ``rows`` rows of ``spill_file``."""
    spill_file.seek(0)
    head = pa.ipc.open_stream(spill_file).read_all().slice(0, rows)
    out = tempfile.TemporaryFile(prefix="binlog-spill-")
    with pa.ipc.new_stream(out, head.schema) as stream:
        stream.write_table(head)
    return out
