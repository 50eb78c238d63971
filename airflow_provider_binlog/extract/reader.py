"""Read one binlog window ``(start, end]`` and hand committed row changes to table writers.

The window's events come decoded by our event reader (``extract/events``, ADR 0018), off the one
replication connection :mod:`~airflow_provider_binlog.extract.connections` opens (no silent reconnect: a
lost connection fails the read with the retryable
:class:`~airflow_provider_binlog.exceptions.ReplicationConnectionLostError`, and the retry re-reads the window).

Transactions are buffered until their commit event (rolled-back ones are dropped, and so are rows
undone by a ``ROLLBACK TO`` a savepoint) and spilled to temporary Arrow IPC files past
:data:`SPILL_ROWS` rows, so memory stays bounded for any transaction size. The stream stops at the
first transaction boundary at or after the window end; reaching the end of the binlog before it is an
error (the window's bytes must exist to be re-read). What statements mean for the window (DDL,
statement-based DML) is decided by :class:`~airflow_provider_binlog.extract.effects.StatementEffects`.

``_binlog_ts`` is the transaction's commit time: on MySQL 8.0.1+ the GTID event's
``immediate_commit_timestamp`` (microseconds), else the commit event's header timestamp (seconds).

About 700 lines: the event loop, the transaction boundaries and the row path are one hot loop; its state
(:class:`~airflow_provider_binlog.extract.targets.ReaderState`), the connections, targets, transaction buffer,
statement effects and the collector setting (:mod:`~airflow_provider_binlog.extract.heap`) are apart.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Callable, Iterable
from operator import itemgetter
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pymysql

from airflow_provider_binlog.contract.columns import OP_DELETE, OP_INSERT, OP_UPDATE, UTC
from airflow_provider_binlog.contract.history import CHANGELOG
from airflow_provider_binlog.contract.names import database_of
from airflow_provider_binlog.contract.positions import BinlogPosition, file_index
from airflow_provider_binlog.exceptions import (
    UndecodableValueError,
    UnsupportedEventError,
)
from airflow_provider_binlog.extract.batches import hold_batches, lean_arrow, with_commit
from airflow_provider_binlog.extract.columns import ColumnSpec, ValueConversionError
from airflow_provider_binlog.extract.decoder import layout_key, unsupported_reason
from airflow_provider_binlog.extract.effects import StatementEffects
from airflow_provider_binlog.extract.errors import UndecodableEventError
from airflow_provider_binlog.extract.events import codes
from airflow_provider_binlog.extract.events.parsers import Gtid, MariadbGtid, RowsQuery
from airflow_provider_binlog.extract.events.stream import Event, RowsEvent
from airflow_provider_binlog.extract.events.tablemap import TableMap
from airflow_provider_binlog.extract.heap import frozen_heap
from airflow_provider_binlog.extract.progress import ExtractProgress
from airflow_provider_binlog.extract.refusals import undecodable_value, unsupported_layout
from airflow_provider_binlog.extract.stream_errors import connection_lost, ended_early
from airflow_provider_binlog.extract.targets import (
    ExtractStats,
    ReaderState,
    ReadHooks,
    SchemaBarrier,
    Sink,
    SnapshotCover,
    TableTarget,
)
from airflow_provider_binlog.extract.transaction import (
    Layout,
    LayoutKey,
    LoggedStatement,
    Transaction,
    spill,
)
from airflow_provider_binlog.source.connect import LOST_CONNECTION_ERRORS
from airflow_provider_binlog.source.sql import QueryKind, classify_query

if TYPE_CHECKING:
    from airflow_provider_binlog.extract.events.tablemap import Column

log = logging.getLogger(__name__)

__all__ = [
    "BATCH_ROWS",
    "SPILL_ROWS",
    "ExtractStats",
    "ReaderState",
    "ReadHooks",
    "SchemaBarrier",
    "Sink",
    "SnapshotCover",
    "TableTarget",
    "WindowReader",
]
"""``SchemaBarrier``, ``SnapshotCover``, ``TableTarget``, ``ExtractStats``, ``ReaderState``, ``ReadHooks`` and
``Sink`` live in :mod:`~airflow_provider_binlog.extract.targets` and are imported here for the reader's callers."""

SPILL_ROWS = 50_000
"""Rows of one open transaction kept in memory before they are spilled to a temporary file."""
BATCH_ROWS = 4_096
"""Committed rows per table kept as Python values before they become an Arrow batch for the writer."""
PROGRESS_EVERY_EVENTS = 256
"""The reader asks its :class:`~airflow_provider_binlog.extract.progress.ExtractProgress` for a line once per
this many events, so the clock is not read per event."""

_ROTATE = codes.ROTATE
STMT_END = 1
"""Rows event flag ``STMT_END_F``: the last rows event of its statement (``sql/log_event.h``, MySQL and MariaDB)."""
_PASSED = frozenset({TableMap, RowsQuery})
"""Parsed event bodies the dispatch only counts (a table map is read through the rows events that name it)."""


def _no_moving_columns(image: Any) -> None:
    """Return None: the moving key of a layout without moving columns (every image has the same one)."""


class WindowReader:
    """Read the committed row changes of selected tables inside one window.

    Its state (:attr:`state`, a :class:`~airflow_provider_binlog.extract.targets.ReaderState`) is one explicit
    object that the reader updates in place; statements are decided by its collaborator :attr:`effects`
    (:class:`~airflow_provider_binlog.extract.effects.StatementEffects`); a parallel read's readers hear of
    what they need through ``hooks`` and read a file's part of the window with :meth:`read` (to the file's
    end) and :meth:`hold`, where the serial read runs :meth:`run` (:meth:`read` to the window end, then
    :meth:`finish`).

    :param events: the window's events from ``start`` on, decoded by our
        :class:`~airflow_provider_binlog.extract.events.stream.EventReader` (ADR 0018); reading them may
        raise a pymysql lost-connection error.
    :param start: where the read starts: the window start, or a file's start in a parallel read (a transaction
        boundary).
    :param end: window end (a transaction boundary at or after ``start``).
    :param tables: selected tables by ``db.table``.
    :param window: window sequence number.
    :param sink: receives committed rows in commit order: ``(table, batch, column specs, primary key)``.
    :param pipeline: the pipeline's name, for error messages.
    :param covers: per selected table, its newest snapshot in the ledger (merged or running): a
        statement-based write to the table is skipped when that snapshot covers it
        (:meth:`StatementEffects.statement <airflow_provider_binlog.extract.effects.StatementEffects.statement>`).
    :param progress: logs progress lines while the window is read (checked every
        :data:`PROGRESS_EVERY_EVENTS` events).
    :param discard: removes every row of a table the sink has received so far (called when the table is
        dropped in the window and the target never held it); None when the sink keeps nothing.
    :param state: the state the read starts from (a fresh one by default): the one another reader ended with at
        the end of the file before ``start``, or a fresh one with ``columns``, per selected table its
        table-map columns at the window's start when known (the schema history the previous window's manifest
        keeps, ``schemas``). The reader keeps the columns current: each row event of a table sets them, each
        DDL that touches it (any action but ``ignore``) forgets them. They tell the old type of a column that a
        ``MODIFY`` under a non-strict ``sql_mode`` changes. Rows the state holds go back into the tables'
        batch builders, as committed rows of their current layouts.
    :param hooks: the seams a parallel read's readers use (:mod:`~airflow_provider_binlog.extract.parallel`).
    :param case_sensitive_names: whether the source compares table names case-sensitively (DDL names are
        matched to the selected tables so, :func:`~airflow_provider_binlog.extract.ddl.classify_ddl`).
    """

    def __init__(
        self,
        events: Iterable[Event],
        *,
        start: BinlogPosition,
        end: BinlogPosition,
        tables: dict[str, TableTarget],
        window: int,
        sink: Sink,
        pipeline: str = "?",
        covers: dict[str, SnapshotCover] | None = None,
        progress: ExtractProgress | None = None,
        discard: Callable[[str], None] | None = None,
        state: ReaderState | None = None,
        hooks: ReadHooks | None = None,
        case_sensitive_names: bool = True,
    ) -> None:
        lean_arrow()
        self.events = iter(events)  # a read to a file's end and a read on from there take the same events
        self.start = start
        self.end = end
        self.tables = tables
        self.schemas = {database_of(name) for name in tables}
        self.window = window
        self.sink = sink
        self.pipeline = pipeline
        self.covers = dict(covers or {})
        self.progress = progress
        self.discard = discard
        self.hooks = hooks
        self.state = state if state is not None else ReaderState()
        self.state.columns = {t: c for t, c in self.state.columns.items() if t in tables}
        self.effects = StatementEffects(
            tables=tables,
            covers=self.covers,
            window=window,
            pipeline=pipeline,
            state=self.state,
            sink=sink,
            discard_table=self._discard_table,
            quarantine=self._quarantine,
            hooks=hooks,
            case_sensitive_names=case_sensitive_names,
        )
        self.txn = Transaction()
        self.statement: LoggedStatement | None = None
        self.layouts: dict[LayoutKey, Layout] = {}
        self.current_layout: dict[str, LayoutKey] = {}
        self.layout_of_list: dict[int, tuple[list[Column], Layout]] = {}
        """The layout of a table map's column list, by the list's id (with the list, which keeps the id unique)."""
        self._file_indexes: dict[str, int] = {}
        self._end_key = end.key
        self._at: tuple[str, int] = (start.file, start.pos)
        self._at_key = start.key
        for table, batches in self.state.held.items():
            if batches:
                hold_batches(self._layout(table, self.state.columns[table]).builder, batches)
        self.state.held, self.state.specs, self.state.at_window_end = {}, {}, False

    @property
    def stats(self) -> ExtractStats:
        """Return the read's counters (those of :attr:`state`)."""
        return self.state.stats

    def run(self) -> ExtractStats:
        """Read until the window end, hand every row to the sink (:meth:`finish`); return the counters.

        :raises UnsupportedEventError: on events that cannot be decoded without loss, XA, or statement-based DML
            writing a selected table that no snapshot covers.
        :raises UndecodableValueError: on a value that cannot be staged exactly.
        :raises ReplicationConnectionLostError: when the connection to the source breaks (retryable).
        :raises SourceUnreachableError: when the binlog ends before the window end (retryable).
        """
        started = time.monotonic()
        if self.start.key >= self.end.key:
            return self.stats
        self.read()
        self.finish()
        self.stats.seconds = time.monotonic() - started
        return self.stats

    def read(self, until: BinlogPosition | None = None) -> None:
        """Read the events up to ``until`` (a file's end in a parallel read) or, when None, the window end.

        A later call reads on from where the last one stopped.

        :raises: as :meth:`run`.
        """
        self._end_key = self.end.key if until is None else until.key
        try:
            with frozen_heap():
                try:
                    self._read()
                except pymysql.err.OperationalError as err:
                    if err.args and err.args[0] in LOST_CONNECTION_ERRORS:
                        raise connection_lost(
                            err,
                            window=self.window,
                            start=self.start,
                            end=self.end,
                            transactions=self.state.stats.transactions,
                            position=self.position,
                            open_gtid=(self.txn.gtid or "?") if self.txn.open else None,
                        ) from err
                    raise
                finally:
                    self.txn.close_spills()
        except UndecodableEventError as err:  # the event reader's refusal, as the provider's (no retry helps)
            raise UnsupportedEventError(str(err)) from err

    def finish(self) -> None:
        """At the window end: decide the retypes still waiting for a table map, hand every committed row to the sink.

        :raises UnsupportedEventError, UndecodableValueError: as :meth:`run`.
        """
        self.effects.decide_retypes()
        self._flush_all(self.sink)
        self.state.at_window_end = True

    def can_hold(self) -> bool:
        """Return whether the rows this reader holds at a file's end can go on in another reader (:meth:`hold`).

        Not when a type change waits for its table's next table map, nor when a table holds committed rows of
        two layouts (a DDL of effect came first: the next reader holds rows of the current layout only).
        """
        tables = [layout.table for layout in self.layouts.values() if layout.builder.committed]
        return not self.effects.retypes and len(tables) == len(set(tables))

    def hold(self) -> ReaderState:
        """At a file's end: put the committed rows not yet handed to the sink into :attr:`state` and return it.

        The rows are those the serial reader would still hold there (fewer than :data:`BATCH_ROWS` per table);
        a reader built with the returned state holds them again. Call only when :meth:`can_hold`.

        :raises UndecodableValueError: when a held value cannot be staged.
        """
        state = self.state

        def keep(table: str, batch: pa.RecordBatch, specs: list[ColumnSpec], key: list[str]) -> None:
            state.held.setdefault(table, []).append(batch)
            state.specs[table] = (specs, key)

        self._flush_all(keep)
        return state

    def _flush_all(self, sink: Sink) -> None:
        """Hand every layout's committed rows to ``sink`` (:meth:`_flush`); note the last commit time.

        :raises UndecodableValueError: when a value cannot be staged.
        """
        for layout in self.layouts.values():
            try:
                self._flush(layout, sink)
            except ValueConversionError as err:
                raise self._undecodable(err, None) from err
        if self.state.last_commit_us is not None:
            self.state.stats.last_commit_ts = _utc(self.state.last_commit_us).isoformat()

    def _undecodable(self, err: ValueConversionError, event: Event | None) -> UndecodableValueError:
        """Return the refusal of a value that cannot be staged (:func:`~.refusals.undecodable_value`)."""
        return undecodable_value(
            err,
            pipeline=self.pipeline,
            window=self.window,
            file=event.file if event is not None else None,
            pos=event.end_pos if event is not None else None,
            gtid=self.txn.gtid,
        )

    @property
    def position(self) -> BinlogPosition:
        """Return the last transaction boundary read."""
        return BinlogPosition(*self._at)

    def _key(self, file: str, pos: int) -> tuple[int, int]:
        """Return ``(file index, pos)`` (:attr:`BinlogPosition.key`), the file's index parsed once per file."""
        index = self._file_indexes.get(file)
        if index is None:
            index = self._file_indexes[file] = file_index(file)
        return (index, pos)

    def _move(self, file: str, pos: int) -> None:
        """Record the transaction boundary at ``(file, pos)``."""
        self._at = (file, pos)
        self._at_key = self._key(file, pos)

    def _read(self) -> None:
        """Dispatch the window's events until the window end.

        :raises SourceUnreachableError: when the binlog ends before the window end.
        """
        stats, dispatch, progress, end_key = self.state.stats, self._dispatch, self.progress, self._end_key
        for event in self.events:
            if not self.txn.open and event.end_pos and event.type_code != _ROTATE and not event.in_payload:
                if self._key(event.file, event.start) >= end_key:
                    break
            stats.events += 1
            try:
                dispatch(event)
            except ValueConversionError as err:
                raise self._undecodable(err, event) from err
            if not self.txn.open and self._at_key >= end_key:  # _reached_end, inlined: once per event
                break
            if progress is not None and not stats.events % PROGRESS_EVERY_EVENTS:
                progress.tick(event.file, event.end_pos, stats.rows)
        else:
            if not self._reached_end():
                raise ended_early(self.position, self.end)

    def _dispatch(self, event: Event) -> None:
        """Act on one event: transaction bounds, rows of selected tables, statements."""
        data, file, end_pos, code = event.data, event.file, event.end_pos, event.type_code
        if type(data) is RowsEvent:
            self._rows(data, file, end_pos)
            if data.flags & STMT_END and self.statement is not None:
                self.statement = None  # a statement's last rows event: the next one may have no text logged
            if end_pos and not self.txn.open:
                self._move(file, end_pos)
            return
        if type(data) is RowsQuery:  # the text of the statement whose rows events follow
            self.statement = LoggedStatement(file, event.start, data)
            self.txn.payload_statements += event.in_payload
        if data is None or type(data) in _PASSED:  # table maps, events not acted on
            if end_pos and not self.txn.open:
                self._move(file, end_pos)
            return
        if code == codes.ROTATE:
            if not self.txn.open:
                self._move(data.next_file, data.position)
            return
        if isinstance(data, Gtid):
            self._begin(data.gtid, data.immediate_commit_us)
        elif isinstance(data, MariadbGtid):
            self._begin(data.gtid)
        elif code == codes.XID:
            self._commit(event, file, end_pos)
        elif code in (codes.QUERY, codes.EXECUTE_LOAD_QUERY):
            statement = SimpleNamespace(
                query=data.query, schema=data.schema, timestamp=event.timestamp, sql_mode=data.status.sql_mode
            )
            if code == codes.QUERY:
                self._query(statement, file, end_pos)
            else:
                self.effects.statement(data.query.strip(), data.schema, file, end_pos, gtid=self.txn.gtid)
        elif code == codes.XA_PREPARE:
            self._xa_prepare(file, end_pos)
        if end_pos and not self.txn.open:
            self._move(file, end_pos)

    def _discard_table(self, table: str) -> bool:
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
        self.state.zero_dates.pop(table, None)
        self.state.committed_tables.discard(table)
        self.discard(table)
        return True

    def _flush(self, layout: Layout, sink: Sink | None = None) -> None:
        """Hand the layout's committed rows to ``sink`` (the reader's; those of a covered table are dropped)."""
        self.state.zero_dates[layout.table] += layout.take_zero_dates()
        if layout.table in self.state.stats.covered_tables:
            layout.builder.take_committed()
        elif layout.builder.committed:
            batch = _taken(layout, layout.builder.take_committed)
            (sink or self.sink)(layout.table, batch, layout.specs, self.tables[layout.table].primary_key)

    def _reached_end(self) -> bool:
        return not self.txn.open and self._at_key >= self._end_key

    def _begin(self, gtid: Any, commit_us: int | None = None) -> None:
        """Open a transaction (a GTID event, or a BEGIN without one).

        :param commit_us: the commit time a MySQL GTID event carries (microseconds since the epoch).
        """
        if self.txn.open and self.txn.touched:
            raise UnsupportedEventError(
                f"transaction {self.txn.gtid} has row changes but no commit event before GTID {gtid} at "
                f"{self.position}; refusing to guess whether its rows were committed."
            )
        txn = self.txn
        if (
            txn.open or txn.touched or txn.spilled or txn.savepoints
        ):  # else the fresh one the last commit left
            self._rollback()
            txn = self.txn
        txn.open = True
        txn.gtid = str(gtid) if gtid else None
        txn.commit_us = commit_us

    def _rollback(self) -> None:
        for layout in self.txn.touched.values():
            layout.builder.rollback()
        self.txn.close_spills()
        self.txn = Transaction()
        self.statement = None

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
            self.state.stats.rolled_back += 1
            self._rollback()
            return
        if kind is QueryKind.ROLLBACK_TO:
            self.txn.rollback_to(query.savepoint, f"{file}:{end_pos}")
            return
        if kind is QueryKind.SAVEPOINT:
            self.txn.savepoint(query.savepoint)
            return
        if kind in (QueryKind.XA_START, QueryKind.XA_END):
            return  # inside the group of an XA transaction, which ends with its XA_PREPARE event
        if kind in (QueryKind.XA_COMMIT, QueryKind.XA_ROLLBACK):
            self._rollback()  # a group of its own that holds no rows
            return
        schema = event.schema.decode() if isinstance(event.schema, bytes) else str(event.schema or "")
        if kind is QueryKind.DML:
            self.effects.statement(text, schema, file, end_pos, gtid=self.txn.gtid)
            return  # a statement inside a transaction: the transaction goes on (no implicit commit)
        self.effects.ddl(
            text,
            schema,
            file,
            end_pos,
            gtid=self.txn.gtid,
            sql_mode=getattr(event, "sql_mode", None),
            timestamp=event.timestamp,
        )
        self._rollback()  # DDL commits implicitly and carries no rows: a transaction boundary

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
        table_map = event.table_map
        name = table_map.name
        target = self.tables.get(name)
        if target is None:
            return
        columns = table_map.columns
        if name in self.effects.retypes:
            self.effects.decide_retype(name, columns)
        self.state.columns[name] = columns
        if name in self.state.stats.covered_tables:
            return
        if target.since is not None or target.barriers or target.gone or target.quarantine_at is not None:
            key = self._key(file, end_pos)  # else it stages every change
            if target.quarantine_at is not None and key >= target.quarantine_at.key:
                self._quarantine(target)
            if not target.stages(key):
                if target.barriers and (target.since is None or key > target.since.key):
                    self._skip_for_schema_change(target, BinlogPosition(file, end_pos))
                return
        txn = self.txn
        txn.open = True
        try:
            layout = self._layout(name, columns)
            txn.touched[(name, id(layout))] = layout
            self._add_rows(event, layout, target, file, end_pos)
        except ValueConversionError as err:
            err.table = name
            raise
        if txn.rows_in_memory >= SPILL_ROWS:
            self._spill()

    def _quarantine(self, target: TableTarget) -> None:
        """Stop staging ``target`` from the open transaction on: the read's table refusal is in it.

        The transaction's rows of the table staged so far are dropped, and an uncovered
        :class:`SchemaBarrier` at the transaction's start (the last boundary read) leaves out the table's
        later changes: the target keeps the table as it was after the last transaction before the refused one.
        The manifest lists the table under ``resnapshots`` with ``cause`` ``quarantine``
        (:func:`~airflow_provider_binlog.extract.window.extract_window`).
        """
        since = self.position
        self.txn.drop_table(target.name)
        target.barriers.append(SchemaBarrier(since))
        target.quarantine_at = None
        self.state.stats.quarantined[target.name] = since

    def _skip_for_schema_change(self, target: TableTarget, at: BinlogPosition) -> None:
        """Count a row event of ``target`` left out for a schema change; log the first one of each table."""
        if not self.state.stats.schema_skipped_row_events[target.name]:
            log.warning(
                "window %s of %s: row changes of %s (first at %s) are not staged: schema change(s) or a quarantine at "
                "%s need a re-snapshot of the table, which brings the table's rows as they are then (see "
                "docs/schema-changes.md and docs/operating.md)",
                self.window, self.pipeline, target.name, at, ", ".join(str(b.since) for b in target.barriers),
            )  # fmt: skip
        self.state.stats.schema_skipped_row_events[target.name] += 1

    def _layout(self, table: str, columns: list[Column]) -> Layout:
        known = self.layout_of_list.get(id(columns))
        if known is not None and known[0] is columns:
            return known[1]  # the table-map cache hands out the same column list for the same definition
        key = (table, layout_key(columns))
        layout = self.layouts.get(key)
        if layout is None:
            previous = self.current_layout.get(table)
            if previous is not None:  # the table was altered: its older rows go out first
                self._flush(self.layouts.pop(previous))
            target = self.tables.get(table)
            history = target is not None and bool(target.history)
            layout = self.layouts[key] = Layout(table, columns, self.window, before_images=history)
            self.current_layout[table] = key
        if len(self.layout_of_list) > 4096:
            self.layout_of_list.clear()
        # Keyed by this list, not layout.columns: a layout seeded from another reader holds another list.
        self.layout_of_list[id(columns)] = (columns, layout)
        return layout

    def _spill(self) -> None:
        """Move the open transaction's rows to temporary files (committed rows go to the sink first)."""
        if self.hooks is not None:
            self.hooks.spilling(self.txn.touched.values())
        for key, layout in self.txn.touched.items():
            self._flush(layout)
            if len(layout.builder):
                rows = _taken(layout, layout.builder.take_open)
                self.txn.spilled.setdefault(key, []).append(spill(rows))
        self.txn.rows_in_memory = 0

    def _add_rows(
        self, event: RowsEvent, layout: Layout, target: TableTarget, file: str, end_pos: int
    ) -> None:
        decoder = layout.decoder
        if decoder is None:
            raise unsupported_layout(
                layout.table,
                unsupported_reason(layout.columns),
                where=event.where,
                pipeline=self.pipeline,
                window=self.window,
                file=file,
                pos=end_pos,
                gtid=self.txn.gtid,
            )
        builder, state = layout.builder, self.state
        rows = event.rows_with(decoder)
        count = len(rows)
        if not count:
            return
        first = state.seq + 1  # of the event's first change in a change log
        if event.kind != "update":
            op = OP_INSERT if event.kind == "write" else OP_DELETE
            builder.add_images(op, rows, state.seq + 1, file, end_pos)
        else:
            moving = layout.moving_key
            if moving is None:
                names = builder.names
                index = [names.index(k) for k in target.moving_columns if k in names]
                moving = layout.moving_key = itemgetter(*index) if index else _no_moving_columns
            ops: list[str] = []
            images: list[Any] = []
            befores: list[Any] | None = None if builder.befores is None else []  # history: each row keeps it
            for before, after in rows:
                if moving(before) != moving(after):  # the row moved: a delete, then the after image
                    ops.append(OP_DELETE)
                    images.append(before)
                    if befores is not None:
                        befores.append(before)
                ops.append(OP_UPDATE)
                images.append(after)
                if befores is not None:
                    befores.append(before)
            builder.add_images(ops, images, state.seq + 1, file, end_pos, befores)
            count = len(images)
            if ops[0] == OP_DELETE:  # the first row moved: its change is the update after its delete
                first += 1
        state.seq += count
        self.txn.rows_in_memory += count
        state.stats.rows += len(rows)
        if self.statement is not None and CHANGELOG in target.history:
            self.txn.statements.append(self.statement.entry(layout.table, file, end_pos, first))

    def _commit(self, event: Event | SimpleNamespace, file: str, end_pos: int) -> None:
        """Commit the open transaction: its rows get its GTID and commit time, and go to the sink in batches.

        The commit time is the MySQL GTID's ``immediate_commit_timestamp`` when the transaction had one,
        else the commit event's header timestamp (seconds).
        """
        commit_us = self.txn.commit_us if self.txn.commit_us is not None else event.timestamp * 1_000_000
        if self.hooks is not None:
            self.hooks.committing(self.txn.touched.values())
        for key, layout in self.txn.touched.items():
            if layout.table in self.state.stats.covered_tables:
                layout.builder.rollback()
                continue
            for spill_file in self.txn.spilled.get(key, []):
                spill_file.seek(0)
                for batch in pa.ipc.open_stream(spill_file):
                    spilled = with_commit(batch, gtid=self.txn.gtid, commit_ts=_utc(commit_us))
                    self.sink(layout.table, spilled, layout.specs, self.tables[layout.table].primary_key)
            layout.builder.commit(self.txn.gtid, commit_us)
            if layout.builder.committed or self.txn.spilled.get(key):
                self.state.committed_tables.add(layout.table)
            if layout.builder.committed >= BATCH_ROWS:
                self._flush(layout)
        if self.txn.statements and self.txn.payload_statements < 2:  # else the coordinates are ambiguous
            self.state.add_statements(self.txn.statements)
        self.txn.close_spills()
        self.txn = Transaction()
        self.statement = None
        self.state.stats.transactions += 1
        self.state.last_commit_us = commit_us


def _taken(layout: Layout, take: Callable[[], pa.RecordBatch]) -> pa.RecordBatch:
    """Return ``take()``'s rows of ``layout``; a value that cannot be staged is refused with the layout's table."""
    try:
        return take()
    except ValueConversionError as err:
        err.table = layout.table
        raise


def _utc(micros: int) -> dt.datetime:
    """Return the UTC time ``micros`` microseconds after the epoch."""
    return dt.datetime(1970, 1, 1, tzinfo=UTC) + dt.timedelta(microseconds=micros)
