"""The window reader's open transaction and the table-map layouts its rows are decoded and built with.

A :class:`Layout` holds, per table and table-map layout, the staged column specs, the generated
:class:`~airflow_provider_binlog.extract.decoder.RowDecoder` and the
:class:`~airflow_provider_binlog.extract.batches.ChangeBatchBuilder` that collects committed and open rows.
A :class:`Transaction` records which layouts the open transaction touched, its rows spilled to temporary
Arrow IPC files, its savepoints (and undoes its rows back to one, ``ROLLBACK TO``) and the statements of its rows
events (:class:`LoggedStatement`).
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from airflow_provider_binlog.exceptions import UnsupportedEventError
from airflow_provider_binlog.extract.batches import ChangeBatchBuilder
from airflow_provider_binlog.extract.columns import (
    ColumnSpec,
    ValueConversionError,
    check_stageable,
    column_spec,
    describe_column,
)
from airflow_provider_binlog.extract.decoder import RowDecoder

if TYPE_CHECKING:
    from airflow_provider_binlog.extract.events.parsers import RowsQuery
    from airflow_provider_binlog.extract.events.tablemap import Column

LayoutKey = tuple[str, tuple[Any, ...]]
"""``(db.table, decoder.layout_key(columns))``."""


class Layout:
    """Column specs, row decoder and row builder of one table-map layout of a table.

    :param table: ``db.table``. :param columns: the table map's columns.
    :param window: the window's sequence number (``_binlog_window`` of the rows built).
    :param before_images: whether its rows carry the before image of their update (a table with history,
        :class:`~airflow_provider_binlog.extract.batches.ChangeBatchBuilder`).
    :raises ValueConversionError: when a column cannot be staged exactly (its type, character set or
        ENUM/SET members; :func:`~airflow_provider_binlog.extract.columns.check_stageable`), naming it.
    """

    def __init__(
        self, table: str, columns: list[Column], window: int, *, before_images: bool = False
    ) -> None:
        self.table = table
        self.columns = columns
        labels = [describe_column(table, c) for c in columns]
        for column, label in zip(columns, labels, strict=True):
            try:
                check_stageable(column)
            except ValueError as err:
                raise ValueConversionError(label, err) from err
        self.specs: list[ColumnSpec] = [column_spec(c) for c in columns]
        self.builder = ChangeBatchBuilder(self.specs, window, labels, before_images=before_images)
        self.decoder = RowDecoder(columns) if RowDecoder.supports(columns) else None
        self.moving_key: Callable[[Sequence[Any]], Any] | None = None
        """Returns an image's values of the table's moving columns (:attr:`~.targets.TableTarget.moving_columns`)
        (an ``operator.itemgetter``), set by the reader at the layout's first UPDATE."""

    def take_zero_dates(self) -> int:
        """Return the zero dates the decoder counted since the last call."""
        if self.decoder is None:
            return 0
        count, self.decoder.zero_dates = self.decoder.zero_dates, 0
        return count


StatementEntry = tuple[str, str, int, int, int, str | None]
"""A row of the statements side file: ``(table, file, end position, seq, statement position, text)``
(:data:`~airflow_provider_binlog.contract.history.STATEMENTS_SCHEMA`)."""
SavepointMarks = dict[tuple[str, int], tuple[int, int]]
"""Per touched layout of the open transaction: ``(spilled files, rows in memory)`` at a savepoint."""


@dataclass
class LoggedStatement:
    """The logged statement whose rows events follow: its ROWS_QUERY (MySQL) or ANNOTATE_ROWS (MariaDB) event.

    :param file: the binlog file. :param pos: the event's start (a compressed transaction's: its payload's).
    :param event: the parsed event (its text is decoded when a table keeping a change log needs it).
    :param recorded: the tables whose first rows event of the statement was recorded with the text.
    """

    file: str
    pos: int
    event: RowsQuery
    recorded: set[str] = field(default_factory=set)

    def entry(self, table: str, file: str, end_pos: int, seq: int) -> StatementEntry:
        """Return the statements side file entry of a rows event of ``table`` ending at ``(file, end_pos)``.

        ``seq`` is the ``_binlog_seq`` of the event's first change in the table's change log. The text is on the
        statement's first rows event of each table only
        (:data:`~airflow_provider_binlog.contract.history.STATEMENTS_SCHEMA`).
        """
        text = None if table in self.recorded else self.event.query
        self.recorded.add(table)
        return table, file, end_pos, seq, self.pos, text


class Transaction:
    """The open transaction: its GTID, the layouts it touched, its spilled row batches and savepoints.

    ``commit_us`` is the commit time a MySQL GTID event carries (``immediate_commit_timestamp``,
    microseconds since the epoch), None when the source logs none (MariaDB, MySQL before 8.0.1).
    """

    def __init__(self) -> None:
        self.open = False
        self.gtid: str | None = None
        self.commit_us: int | None = None
        self.touched: dict[tuple[str, int], Layout] = {}
        self.spilled: dict[tuple[str, int], list[Any]] = {}
        self.rows_in_memory = 0
        self.savepoints: dict[str, SavepointMarks] = {}
        self.statements: list[StatementEntry] = []
        """Its rows events of tables keeping a change log that have a logged statement (:meth:`LoggedStatement.entry`)."""
        self.payload_statements = 0
        """Statements logged inside a compressed TRANSACTION_PAYLOAD (MySQL): its events all have its coordinates,
        so with two or more the rows events' coordinates cannot tell their statements apart and none is recorded."""

    def savepoint(self, name: str) -> None:
        """Record where the transaction stands at ``SAVEPOINT name`` (a name set again moves)."""
        self.savepoints.pop(name, None)
        self.savepoints[name] = {
            key: (len(self.spilled.get(key, [])), len(layout.builder) - layout.builder.committed)
            for key, layout in self.touched.items()
        }

    def rollback_to(self, name: str, where: str) -> None:
        """Drop the transaction's rows logged after ``SAVEPOINT name`` (``ROLLBACK TO name`` at ``where``).

        MariaDB and MySQL log ``ROLLBACK TO`` only when the transaction changed a non-transactional table
        (else they cut the undone rows from the binlog cache). In row format those changes are binlogged
        in groups of their own, so every row of this group after the savepoint is transactional and undone.

        :param where: the event's binlog coordinates ``file:position``, for the error.
        :raises UnsupportedEventError: when the transaction logged no ``SAVEPOINT name``.
        """
        if name not in self.savepoints:
            raise UnsupportedEventError(
                f"ROLLBACK TO {name!r} at {where} names a savepoint this transaction ({self.gtid}) "
                f"did not log; refusing to guess which of its rows were undone."
            )
        names = list(self.savepoints)
        for later in names[names.index(name) + 1 :]:
            del self.savepoints[later]
        marks = self.savepoints[name]
        for key, layout in self.touched.items():
            files_at, rows_at = marks.get(key, (0, 0))
            spilled = self.spilled.get(key, [])
            if len(spilled) == files_at:
                layout.builder.rollback(keep=rows_at)
                continue
            # Spilled since the savepoint: the rows held then are the start of the first file spilled after.
            layout.builder.rollback()
            kept = spilled[:files_at]
            if rows_at:
                kept.append(spill_head(spilled[files_at], rows_at))
            for spill_file in spilled[files_at:]:
                spill_file.close()
            self.spilled[key] = kept

    def drop_table(self, table: str) -> None:
        """Forget the transaction's rows of ``table`` so far: in its layouts' builders and in spilled files."""
        for key, layout in list(self.touched.items()):
            if layout.table == table:
                layout.builder.rollback()
                for spill_file in self.spilled.pop(key, []):
                    spill_file.close()
                del self.touched[key]

    def close_spills(self) -> None:
        """Close (and so delete) every temporary file of spilled rows."""
        if not self.spilled:
            return
        for files in self.spilled.values():
            for spill_file in files:
                spill_file.close()
        self.spilled = {}


def spill(batch: pa.RecordBatch) -> Any:
    """Return a new temporary file (deleted on close) holding ``batch`` as an Arrow IPC stream."""
    spill_file = tempfile.TemporaryFile(prefix="binlog-spill-")
    with pa.ipc.new_stream(spill_file, batch.schema) as stream:
        stream.write_batch(batch)
    return spill_file


def spill_head(spill_file: Any, rows: int) -> Any:
    """Return a new spill file holding the first ``rows`` rows of ``spill_file``."""
    spill_file.seek(0)
    head = pa.ipc.open_stream(spill_file).read_all().slice(0, rows)
    out = tempfile.TemporaryFile(prefix="binlog-spill-")
    with pa.ipc.new_stream(out, head.schema) as stream:
        stream.write_table(head)
    return out
