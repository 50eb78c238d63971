"""What a window read is asked to stage per table, what it counts and carries, and where its rows go.

:class:`TableTarget` (a selected table, where its capture starts, its schema barriers), :class:`SchemaBarrier`,
:class:`SnapshotCover` (the newest snapshot of a table in the ledger), :class:`ExtractStats` (the read's
counters for the manifest), :class:`Retype` (a non-strict type change waiting for the table's next table map),
:class:`ReaderState` (what a reader carries from one binlog file into the next), :data:`Sink` (where committed
rows go) and :class:`ReadHooks` (the seams a parallel read's readers use). Used by
:class:`~airflow_provider_binlog.extract.reader.WindowReader` and its collaborators.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import pyarrow as pa

from airflow_provider_binlog.contract.columns import moving_columns
from airflow_provider_binlog.contract.history import CHANGELOG, STATEMENTS_SCHEMA
from airflow_provider_binlog.contract.positions import BinlogPosition
from airflow_provider_binlog.extract.columns import ColumnSpec

if TYPE_CHECKING:
    from airflow_provider_binlog.extract.ddl import DdlEffect
    from airflow_provider_binlog.extract.events.tablemap import Column
    from airflow_provider_binlog.extract.transaction import Layout, StatementEntry

Sink = Callable[[str, pa.RecordBatch, list[ColumnSpec], list[str]], None]
"""Where a reader hands committed rows, in commit order: ``(db.table, batch, column specs, primary key)``."""


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
    :param since: the start of the table's newest snapshot ordered before the window
        (:func:`~airflow_provider_binlog.extract.plan.capture_start`) when that lies inside the window: changes logged
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
    :param quarantine_at: the end of a row event of the table that an earlier read of this window refused
        (:class:`~airflow_provider_binlog.exceptions.TableRefusalError`): at the table's first row event at or
        after it, the reader drops the table's rows of the open transaction and puts an uncovered barrier at
        the transaction's start (the table is quarantined, ``docs/operating.md``). None: no refusal known.
    :param history: the history kinds the pipeline keeps of the table (``docs/history.md``), recorded in the
        manifest; with any, every update is staged as the ``d`` of its before image and the ``u`` of its after
        image, as a key change is (:mod:`airflow_provider_binlog.contract.history`).
    :param kept_columns: the columns the target keeps although the source dropped them (from the pipeline's
        state; the reader adds those it sees dropped): an ``ADD COLUMN`` of one of these names is re-snapshotted
        (``kept`` of :func:`~airflow_provider_binlog.extract.ddl.classify_ddl`).
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
        return moving_columns(self.primary_key, self.referenced)

    barriers: list[SchemaBarrier] = field(default_factory=list)
    captured: bool = False
    gone: bool = False
    quarantine_at: BinlogPosition | None = None
    kept_columns: set[str] = field(default_factory=set)
    history: tuple[str, ...] = ()

    def stages(self, key: tuple[int, int]) -> bool:
        """Return whether a change whose event ends at ``key`` is staged (see ``since``, ``barriers``, ``gone``)."""
        if self.gone or (self.since is not None and key <= self.since.key):
            return False
        return not self.barriers or all(b.stages(key) for b in self.barriers)


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
    quarantined: dict[str, BinlogPosition] = field(default_factory=dict)
    """Tables the read quarantined (:attr:`TableTarget.quarantine_at`), each with the start of the refused
    transaction: the table's changes after it are not staged."""


@dataclass
class Retype:
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
    before: list[Column]
    decision: dict[str, Any]


STATEMENT_BATCH_ENTRIES = 65_536
"""Statement entries a :class:`ReaderState` keeps as Python tuples before it makes them an Arrow batch."""


@dataclass
class ReaderState:
    """What a window reader carries from one binlog file into the next: all that a file can change.

    A reader is built with one (:class:`~airflow_provider_binlog.extract.reader.WindowReader` ``state=``) and
    updates it in place as it reads: a reader built with the state another ended with at a file's end goes
    on as if it had read the files before its start itself. A transaction never spans files, so the open
    transaction, its spills and savepoints are not carried.

    :param seq: the last ``_binlog_seq`` given (order keys of the window are ``seq + 1`` on).
    :param stats: the read's counters (for the manifest).
    :param zero_dates: per table, zero dates staged as NULL.
    :param committed_tables: tables with committed rows in the window so far.
    :param columns: per selected table, its table-map columns as of the last row event (the schema history).
    :param last_commit_us: the commit time of the last transaction read (microseconds since the epoch).
    :param held: per table, the committed rows a reader still held in its batch builder when it stopped at a
        file's end (:meth:`~airflow_provider_binlog.extract.reader.WindowReader.hold`, final seqs); a reader
        built with this state holds them again.
    :param specs: per table, the column specs and primary key of the :attr:`held` batches.
    :param at_window_end: the read reached the window end and handed every row to the sink (nothing held).
    :param statements: the committed transactions' rows events of tables keeping a change log, with their
        statements, as batches of :data:`~airflow_provider_binlog.contract.history.STATEMENTS_SCHEMA`
        (:meth:`add_statements`).
    """

    seq: int = 0
    stats: ExtractStats = field(default_factory=ExtractStats)
    zero_dates: Counter[str] = field(default_factory=Counter)
    committed_tables: set[str] = field(default_factory=set)
    columns: dict[str, list[Column]] = field(default_factory=dict)
    last_commit_us: int | None = None
    held: dict[str, list[pa.RecordBatch]] = field(default_factory=dict)
    specs: dict[str, tuple[list[ColumnSpec], list[str]]] = field(default_factory=dict)
    at_window_end: bool = False
    statements: list[pa.RecordBatch] = field(default_factory=list)
    _statement_entries: list[StatementEntry] = field(default_factory=list)

    def add_statements(self, entries: Iterable[StatementEntry]) -> None:
        """Keep a committed transaction's statement entries (:data:`~.transaction.StatementEntry`).

        They are kept as Python tuples up to :data:`STATEMENT_BATCH_ENTRIES`, then as an Arrow batch.
        """
        self._statement_entries.extend(entries)
        if len(self._statement_entries) >= STATEMENT_BATCH_ENTRIES:
            self.statement_batches()

    def statement_batches(self) -> list[pa.RecordBatch]:
        """Return every statement entry kept so far as batches of :data:`~airflow_provider_binlog.contract.history.STATEMENTS_SCHEMA`."""
        if self._statement_entries:
            columns = zip(*self._statement_entries, strict=True)
            arrays = [pa.array(list(c), f.type) for c, f in zip(columns, STATEMENTS_SCHEMA, strict=True)]
            self.statements.append(pa.RecordBatch.from_arrays(arrays, schema=STATEMENTS_SCHEMA))
            self._statement_entries = []
        return self.statements

    def next_seq(self) -> int:
        """Take the next ``_binlog_seq`` (for a row or a truncate marker) and return it."""
        self.seq += 1
        return self.seq


class ReadHooks(Protocol):
    """The seams of a window reader that a parallel read's readers use (a serial read passes none).

    Called by :class:`~airflow_provider_binlog.extract.reader.WindowReader` and
    :class:`~airflow_provider_binlog.extract.effects.StatementEffects`; see
    :mod:`~airflow_provider_binlog.extract.parallel` for the two implementations and why they keep the read
    exact.
    """

    def statement_with_effect(self, what: str) -> None:
        """Hear of a statement that changes what the window stages of a selected table, before it is applied.

        A DDL statement that :func:`~airflow_provider_binlog.extract.ddl.classify_ddl` gives an effect on a
        selected table, or a statement-based write to one. Raising stops the read there.

        :param what: the statement and its binlog coordinates, for messages.
        """

    def committing(self, touched: Iterable[Layout]) -> None:
        """Hear of a transaction about to commit: the layouts it added rows to, their builders as yet uncommitted."""

    def spilling(self, touched: Iterable[Layout]) -> None:
        """Hear of the open transaction's rows about to be spilled to temporary files."""


def keep_statements(tables: Mapping[str, TableTarget]) -> bool:
    """Return whether a read of ``tables`` records statements: some table keeps a change log."""
    return any(CHANGELOG in target.history for target in tables.values())
