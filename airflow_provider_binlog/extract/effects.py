"""What statements in the binlog mean for a window: DDL effects, truncate markers, statement-based DML.

:class:`StatementEffects` is the window reader's collaborator for QUERY events other than transaction control:
DDL of selected tables (classified by :func:`~airflow_provider_binlog.extract.ddl.classify_ddl`, recorded in
the manifest, truncate markers for statements that empty a table, schema barriers for changes the target
cannot follow) and statement-based DML (skipped when a snapshot covers it, else refused). It reads and
updates the reader's :class:`~airflow_provider_binlog.extract.targets.ReaderState` and nothing else of it.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from airflow_provider_binlog.contract.columns import UTC
from airflow_provider_binlog.contract.names import database_of, name_fold
from airflow_provider_binlog.contract.positions import BinlogPosition
from airflow_provider_binlog.contract.remedies import resnapshot_remedy
from airflow_provider_binlog.exceptions import TableRefusalError
from airflow_provider_binlog.extract.batches import truncate_marker
from airflow_provider_binlog.extract.ddl import classify_ddl, keeps_values
from airflow_provider_binlog.extract.statements import written_tables
from airflow_provider_binlog.extract.targets import Retype, SchemaBarrier
from airflow_provider_binlog.pipeline.ledger import STATEMENT_CHARS

if TYPE_CHECKING:
    from airflow_provider_binlog.extract.events.tablemap import Column
    from airflow_provider_binlog.extract.targets import (
        ReaderState,
        ReadHooks,
        Sink,
        SnapshotCover,
        TableTarget,
    )

log = logging.getLogger(__name__)


class StatementEffects:
    """Decide what the statements of a window mean for its selected tables.

    :param tables: the selected tables by ``db.table`` (their barriers and ``captured`` flags are updated).
    :param covers: per selected table, its newest snapshot in the ledger.
    :param window: the window's sequence number.
    :param pipeline: the pipeline's name, for messages.
    :param state: the reader's state: its ``stats`` (DDL, re-snapshots, drops, skipped statements), its
        ``seq`` (a truncate marker takes the next one), its ``columns`` (the schema history), its
        ``committed_tables``.
    :param sink: where a truncate marker goes (the reader's sink).
    :param discard_table: drops every row of a table the reader has committed so far (in the sink and held
        back); returns False when it cannot (the rows then stay).
    :param quarantine: stops staging a table from the open transaction on (the reader's quarantine step,
        ``docs/adr/0033-table-quarantine.md``).
    :param hooks: told of each statement with an effect on a selected table before it is applied.
    :param case_sensitive_names: whether the source compares table names case-sensitively.
    """

    def __init__(
        self,
        *,
        tables: dict[str, TableTarget],
        covers: dict[str, SnapshotCover],
        window: int,
        pipeline: str,
        state: ReaderState,
        sink: Sink,
        discard_table: Callable[[str], bool],
        quarantine: Callable[[TableTarget], None],
        hooks: ReadHooks | None = None,
        case_sensitive_names: bool = True,
    ) -> None:
        self.tables = tables
        self.case_sensitive_names = case_sensitive_names
        self.covers = covers
        self.window = window
        self.pipeline = pipeline
        self.state = state
        self.sink = sink
        self.discard_table = discard_table
        self.quarantine = quarantine
        self.hooks = hooks
        self.retypes: dict[str, Retype] = {}
        """Non-strict type changes waiting for their table's next table map (:meth:`decide_retype`)."""

    def decide_retypes(self) -> None:
        """At the window's end: re-snapshot every table whose type change no table map after it showed."""
        for table in list(self.retypes):
            self.decide_retype(table, None)

    def ddl(
        self,
        text: str,
        schema: str,
        file: str,
        end_pos: int,
        *,
        gtid: str | None,
        sql_mode: int | None,
        timestamp: int,
    ) -> None:
        """Decide what a DDL statement means for the selected tables (:func:`~airflow_provider_binlog.extract.ddl.classify_ddl`).

        Each decision goes to the task log and the manifest (``ddl``; the columns a ``DROP COLUMN`` removed under
        ``dropped_columns``, which the table's target keeps). A table the target cannot follow gets a
        :class:`SchemaBarrier` at the statement: this window stages none of its later changes (unless a
        snapshot ordered before the window covers the change), and the manifest lists it under
        ``resnapshots``, which the window's commit records in the pipeline state. A followed statement that
        empties a table (``TRUNCATE``, ``DROP TABLE``, renamed away) stages a truncate marker
        (:meth:`_empty`).

        :param gtid: the GTID of the statement's event group, if any.
        :param sql_mode: the session's ``sql_mode`` bits logged with the statement (``Q_SQL_MODE_CODE``), if any.
        :param timestamp: the statement's start time (Unix seconds), the commit time of its implicit commit.
        """
        effects = classify_ddl(
            text,
            schema,
            self.tables,
            [t.name for t in self.tables.values() if t.captured],
            sql_mode=sql_mode,
            kept={t.name: t.kept_columns for t in self.tables.values() if t.kept_columns},
            case_sensitive=self.case_sensitive_names,
        )
        if not effects:
            return
        if self.hooks is not None:
            self.hooks.statement_with_effect(f"a DDL statement of a selected table at {file}:{end_pos}")
        for effect in effects:  # a later DDL of the table before any row event shows no new column type
            if effect.table in self.retypes:
                self.decide_retype(effect.table, None)
        before = {e.table: self.state.columns.pop(e.table, None) for e in effects if e.action != "ignore"}
        at = BinlogPosition(file, end_pos)
        decisions: list[dict[str, Any]] = [
            {"table": e.table, "action": e.action, "reason": e.reason} for e in effects
        ]
        self.state.stats.ddl.append(
            {
                "gtid": gtid,
                "schema": schema,
                "query": text[:STATEMENT_CHARS],
                "file": file,
                "pos": end_pos,
                "effects": decisions,
            }
        )
        for effect, decision in zip(effects, decisions, strict=True):
            if effect.dropped:  # the target keeps them (a later ADD COLUMN of the name is re-snapshotted)
                decision["dropped_columns"] = list(effect.dropped)
                self.tables[effect.table].kept_columns.update(effect.dropped)
            if effect.empties:
                decision["empties"] = effect.empties
                decision["marker_seq"] = self._empty(effect, text, at, timestamp, gtid)
            if effect.action != "resnapshot":
                log.info(
                    "window %s of %s: %s at %s (GTID %s): %s (%s)",
                    self.window, self.pipeline, effect.table, at, gtid, effect.action, effect.reason,
                )  # fmt: skip
            elif effect.retyped and (columns := before.get(effect.table)) is not None:
                self.retypes[effect.table] = Retype(effect, at, text, gtid, columns, decision)
                log.info(
                    "window %s of %s: %s at %s (GTID %s): %s; followed if the table's next row event shows a "
                    "lossless widening of each, else re-snapshotted",
                    self.window, self.pipeline, effect.table, at, gtid, effect.reason,
                )  # fmt: skip
            else:
                if effect.retyped:
                    decision["reason"] = effect.reason + (
                        "; no table map of the table before it (in this window or the schema history of earlier "
                        "ones) shows the old column types"
                    )
                self._needs_resnapshot(effect.table, decision["reason"], at, text, gtid)

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
        self.state.stats.resnapshots.append(
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

    def decide_retype(self, table: str, after: list[Column] | None) -> None:
        """Follow or re-snapshot a waiting non-strict ``MODIFY``/``CHANGE`` of ``table`` (:class:`Retype`).

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

    def _empty(
        self, effect: Any, text: str, at: BinlogPosition, timestamp: int, gtid: str | None
    ) -> int | None:
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
            if staged and not target.captured and effect.table in self.state.committed_tables:
                discarded = self.discard_table(effect.table)
        held = target.captured or effect.table in self.state.committed_tables
        seq = None
        if staged and held and effect.table not in self.state.stats.covered_tables:
            seq = self.state.next_seq()
            commit_ts = dt.datetime.fromtimestamp(timestamp, UTC)
            marker = truncate_marker(
                window=self.window, seq=seq, gtid=gtid, file=at.file, pos=at.pos, commit_ts=commit_ts
            )
            self.sink(effect.table, marker, [], target.primary_key)
            if effect.empties == "dropped":
                target.captured = True
        if effect.empties == "dropped":
            self.state.stats.dropped.append(
                {
                    "table": effect.table,
                    "since": {"file": at.file, "pos": at.pos},
                    "gtid": gtid,
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
            self.window, self.pipeline, effect.table, effect.empties, at, gtid, outcome,
        )  # fmt: skip
        return seq

    def statement(self, text: str, schema: str, file: str, end_pos: int, *, gtid: str | None) -> None:
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

        A selected table it writes that is not covered is refused: a
        :class:`~airflow_provider_binlog.exceptions.TableRefusalError` of that table, which the extract turns
        into a quarantine of the table alone (the next read of the window stops the table at the statement's
        transaction, here, and the table heals by a re-snapshot). A table whose changes at the statement are not
        staged anyway (a schema change or a quarantine waits for its re-snapshot, its snapshot started later, it
        is gone) is not written for this purpose.

        :raises TableRefusalError: for the selected tables it writes that are not covered (or, for a
            statement sqlglot cannot parse, a selected table of its default database, or of any database
            when it has none): the message names the remedy.
        """
        at = BinlogPosition(file, end_pos)
        found = written_tables(text, schema)
        if found.parsed:
            fold = name_fold(self.case_sensitive_names)
            wanted = {fold(name) for name in found.tables}
            written = sorted(t for t in self.tables if fold(t) in wanted)
        else:
            written = sorted(t for t in self.tables if not schema or database_of(t) == schema)
        written = [t for t in written if self._staged_at(t, at)]
        if not written:
            self.state.stats.statements_ignored += 1
            return
        if self.hooks is not None:
            self.hooks.statement_with_effect(
                f"a statement-based write to a selected table at {file}:{end_pos}"
            )
        uncovered = [
            t
            for t in written
            if (cover := self.covers.get(t)) is None or cover.seq <= self.window or cover.start.key <= at.key
        ]
        if uncovered:
            raise self._statement_error(text, schema, at, uncovered, found, gtid)
        covering = {t: self.covers[t].seq for t in written}
        self.state.stats.skipped_statements.append(
            {
                "file": file,
                "pos": end_pos,
                "gtid": gtid,
                "query": text[:200],
                "tables": written,
                "snapshots": covering,
            }
        )
        self.state.stats.covered_tables.update(covering)
        log.warning(
            "window %s of %s: skipped the statement-based write at %s (GTID %s) to %s, covered by snapshot(s) %s; "
            "the window stages no rows of those tables",
            self.window, self.pipeline, at, gtid, ", ".join(written), covering,
        )  # fmt: skip

    def _staged_at(self, table: str, at: BinlogPosition) -> bool:
        """Return whether ``table``'s changes at ``at`` are staged; quarantine it when a re-read stops it there."""
        target = self.tables[table]
        if target.quarantine_at is not None and at.key >= target.quarantine_at.key:
            self.quarantine(target)
        return target.stages(at.key)

    def _statement_error(
        self, text: str, schema: str, at: BinlogPosition, written: list[str], found: Any, gtid: str | None
    ) -> TableRefusalError:
        """Return the refusal of a statement-based write to selected tables no snapshot covers (the first one)."""
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
        return TableRefusalError(
            f"pipeline {self.pipeline!r}, window {self.window}: statement-based DML {text[:80]!r} at {at} "
            f"(GTID {gtid or 'unknown'}): {what}, and its rows are not in the binlog (the session ran with "
            f"binlog_format=STATEMENT or MIXED). Set binlog_format=ROW globally. With on_table_error='quarantine' "
            f"(the default) only these tables stop, each quarantined at the statement's transaction, and the next "
            f"run re-snapshots them. With on_table_error='fail': {resnapshot_remedy(self.pipeline, tables)}; "
            "once that snapshot has "
            f"started, clear the failed extract: it re-reads the same window and skips the statement.",
            table=written[0],
            also=tuple(written[1:]),
            file=at.file,
            pos=at.pos,
            gtid=gtid,
            reason=f"a statement-based write ({text[:60]!r}) whose rows are not in the binlog",
        )
