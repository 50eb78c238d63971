"""What statements in the binlog mean for a window: DDL effects, truncate markers, statement-based DML.

The methods of :class:`StatementEffects` are those of
:class:`~airflow_provider_binlog.extract.reader.WindowReader` that act on QUERY events other than
transaction control: DDL of selected tables (classified by :func:`~airflow_provider_binlog.extract.ddl.classify_ddl`,
recorded in the manifest, truncate markers for statements that empty a table, schema barriers for
changes the target cannot follow) and statement-based DML (skipped when a snapshot covers it, else refused).
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from airflow_provider_binlog.contract.names import database_of
from airflow_provider_binlog.exceptions import UnsupportedEventError
from airflow_provider_binlog.extract.batches import truncate_marker
from airflow_provider_binlog.extract.ddl import classify_ddl
from airflow_provider_binlog.extract.statements import written_tables
from airflow_provider_binlog.extract.targets import SchemaBarrier
from airflow_provider_binlog.pipeline.ledger import STATEMENT_CHARS
from airflow_provider_binlog.source.positions import BinlogPosition

if TYPE_CHECKING:
    from airflow_provider_binlog.extract.columns import ColumnSpec
    from airflow_provider_binlog.extract.targets import ExtractStats, SnapshotCover, TableTarget
    from airflow_provider_binlog.extract.transaction import Transaction

log = logging.getLogger(__name__)


class StatementEffects:
    """The statement handling of :class:`~airflow_provider_binlog.extract.reader.WindowReader` (a mixin).

    It reads and updates the reader's state named below; the reader sets all of it.
    """

    tables: dict[str, TableTarget]
    covers: dict[str, SnapshotCover]
    stats: ExtractStats
    txn: Transaction
    window: int
    pipeline: str
    sink: Callable[[str, pa.RecordBatch, list[ColumnSpec], list[str]], None]
    committed_tables: set[str]
    _next_seq: Callable[[], int]

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
                continue
            cover = self.covers.get(effect.table)
            covered = cover is not None and cover.seq < self.window and cover.start.key >= at.key
            self.tables[effect.table].barriers.append(SchemaBarrier(at, covered=covered))
            if covered:
                log.info(
                    "window %s of %s: %s at %s (GTID %s) needs a re-snapshot (%s); snapshot %s already read "
                    "the table after it: the window stages only its later changes",
                    self.window, self.pipeline, effect.table, at, self.txn.gtid, effect.reason, cover.seq,  # type: ignore[union-attr]
                )  # fmt: skip
                continue
            self.stats.resnapshots.append(
                {
                    "table": effect.table,
                    "since": {"file": file, "pos": end_pos},
                    "gtid": self.txn.gtid,
                    "reason": effect.reason,
                    "statement": text[:STATEMENT_CHARS],
                    "window": self.window,
                }
            )
            log.warning(
                "window %s of %s: %s at %s (GTID %s) cannot be followed from the binlog (%s): the table's "
                "changes after it are not staged, and the snapshot task of the next run re-snapshots %s; "
                "until that snapshot is merged the target shows the table as it was before this statement",
                self.window, self.pipeline, effect.table, at, self.txn.gtid, effect.reason, effect.table,
            )  # fmt: skip

    def _empty(self, effect: Any, text: str, at: BinlogPosition, timestamp: int) -> int | None:
        """Stage a truncate marker of ``effect.table`` at the statement's place in the order; return its seq.

        The marker (``_binlog_op = 't'``, every data column NULL, see
        :mod:`~airflow_provider_binlog.jobs.merge.truncate`) tells the merge to remove every row of the table
        ordered before it. It is staged where the table's row changes would be (:meth:`TableTarget.stages`, or
        the table is ``gone``), when the target holds the table or this window committed rows of it: a
        marker of a table the target never held has nothing to remove. A dropped table is listed under
        ``dropped`` in the manifest; one whose rows this window staged is then taken as held by the target, so
        a ``CREATE TABLE`` of its name later in the window is re-snapshotted (only a snapshot replaces the
        old table's columns).

        :returns: the marker's ``_binlog_seq``, None when no marker was staged.
        """
        target = self.tables[effect.table]
        staged = target.gone or target.stages(at.key)
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
        else:
            outcome = (
                "no truncate marker: a snapshot or a pending re-snapshot of the table covers the statement"
            )
        log.info(
            "window %s of %s: %s %s at %s (GTID %s): %s",
            self.window, self.pipeline, effect.table, effect.empties, at, self.txn.gtid, outcome,
        )  # fmt: skip
        return seq

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
