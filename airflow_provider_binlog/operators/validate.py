"""BinlogValidateOperator: compare target tables with their source tables, the way AWS DMS validation does."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from airflow.sdk import BaseOperator

from airflow_provider_binlog.contract.remedies import resnapshot_remedy
from airflow_provider_binlog.exceptions import BinlogConfigError, StateError, ValidationMismatchError
from airflow_provider_binlog.hooks.binlog import BinlogHook
from airflow_provider_binlog.operators.trusted import check_trusted_arguments
from airflow_provider_binlog.pipeline.tables import is_template

ON_MISMATCH = ("fail", "warn")
KEYS_SHOWN = 5
"""Keys per kind of mismatch named in the task's log line and error message (the XCom report has them all)."""


@dataclass
class TableValidation:
    """The outcome of validating one table.

    :param table: ``db.table``.
    :param source_rows: rows of the source table in the first pass.
    :param target_rows: live rows of the target table in the first pass.
    :param missing: keys in the source, not in the target (confirmed).
    :param extra: keys in the target, not in the source (confirmed).
    :param different: key -> names of the columns that differ (confirmed).
    :param pending: keys that differed but whose source row kept changing, or whose changes the target had
        not caught up with when the re-check time ran out: neither confirmed nor cleared.
    :param rechecks: re-check rounds done.
    """

    table: str
    source_rows: int
    target_rows: int
    missing: list[list[Any]] = field(default_factory=list)
    extra: list[list[Any]] = field(default_factory=list)
    different: dict[str, list[str]] = field(default_factory=dict)
    pending: list[list[Any]] = field(default_factory=list)
    rechecks: int = 0

    @property
    def mismatched(self) -> bool:
        """Return True when a mismatch is confirmed."""
        return bool(self.missing or self.extra or self.different)

    def summary(self) -> str:
        """Return one line naming the confirmed mismatches (first keys of each kind, columns that differ)."""
        columns = sorted({c for names in self.different.values() for c in names})
        return (
            f"{self.table}: {len(self.missing)} rows missing from the target {self.missing[:KEYS_SHOWN]}, "
            f"{len(self.extra)} extra {self.extra[:KEYS_SHOWN]}, {len(self.different)} differ in "
            f"{', '.join(f'{self.table}.{c}' for c in columns) or 'no column'} {list(self.different)[:KEYS_SHOWN]}"
        )


class BinlogValidateOperator(BaseOperator):
    """Compare each target table with its source table row by row and report the rows that differ.

    The source keeps changing while the target follows it a window behind, so a first pass finds
    candidates, not mismatches (the AWS DMS validation approach: re-validate after the target caught up).
    For each table:

    1. read the source table, then the source's binlog head ``H`` (every change the read saw is at or
       before ``H``), then the target's live rows; keys that differ (missing, extra, or a column value)
       are candidates;
    2. wait until the pipeline's checkpoint is at or past ``H`` (its CDC DAG keeps running), at most
       ``recheck_timeout_seconds`` per round, then read the candidate rows again on both sides: a key
       whose source row is unchanged and still differs is a confirmed mismatch, a key that matches now is
       cleared, a key whose source row changed again is a candidate of the next round (with the new head);
    3. after ``max_rechecks`` rounds, or when the checkpoint did not reach ``H`` in time, the remaining
       candidates are reported as ``pending``, not as mismatches.

    Confirmed mismatches fail the task (``on_mismatch="fail"``, :class:`ValidationMismatchError`, no
    retry) or log a warning (``"warn"``). A quarantined table is not compared: its target stands still by
    design (:mod:`~airflow_provider_binlog.pipeline.quarantine`); it is listed under ``quarantined`` with where
    it stopped. Returns (XCom) ``{"pipeline", "checkpoint", "tables": {table:
    {"source_rows", "target_rows", "missing", "extra", "different": {key: [columns]}, "pending",
    "rechecks"}}, "mismatched": [tables], "quarantined": {table: record}}``, keys as lists of primary-key values
    (JSON).

    :param pipeline: pipeline name (templated).
    :param target_path: the pipeline's target root (templated).
    :param tables: ``db.table`` names or patterns to validate (templated; list or comma-separated); None
        or empty validates every table the pipeline has written.
    :param on_mismatch: ``fail`` (default) or ``warn`` (templated).
    :param recheck_timeout_seconds: most seconds a round waits for the checkpoint to reach the source head
        (default 1800): longer than the CDC DAG's schedule interval plus its run time, since any write to the
        source, to any table, moves the head and only the next commit moves the checkpoint past it.
    :param poll_seconds: seconds between reads of the checkpoint while waiting.
    :param max_rechecks: re-check rounds per table.
    :param binlog_conn_id: the pipeline's source connection.
    :raises ValueError: on an invalid argument.
    """

    template_fields: Sequence[str] = ("pipeline", "target_path", "tables", "on_mismatch")
    ui_color = "#f6eaf4"

    def __init__(
        self,
        *,
        pipeline: str,
        target_path: str,
        tables: str | Sequence[str] | None = None,
        on_mismatch: str = "fail",
        recheck_timeout_seconds: float = 1800,
        poll_seconds: float = 10,
        max_rechecks: int = 3,
        binlog_conn_id: str = BinlogHook.default_conn_name,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if on_mismatch not in ON_MISMATCH and not is_template(on_mismatch):
            raise ValueError(f"on_mismatch={on_mismatch!r} must be one of {', '.join(ON_MISMATCH)}")
        if recheck_timeout_seconds < 0 or poll_seconds <= 0 or max_rechecks < 1:
            raise ValueError(
                "recheck_timeout_seconds must be 0 or more, poll_seconds more than 0 and max_rechecks at least 1"
            )
        check_trusted_arguments(self, pipeline=pipeline, target_path=target_path)
        self.pipeline = pipeline
        self.target_path = target_path
        self.tables = tables
        self.on_mismatch = on_mismatch
        self.recheck_timeout_seconds = recheck_timeout_seconds
        self.poll_seconds = poll_seconds
        self.max_rechecks = max_rechecks
        self.binlog_conn_id = binlog_conn_id

    def execute(self, context: Any) -> dict[str, Any]:
        """Validate every selected table; fail or warn on confirmed mismatches.

        :raises StateError: when the pipeline has no state.
        :raises BinlogConfigError: for a bad ``on_mismatch``, a target root the state does not record, or a
            selection that names no table of the pipeline.
        :raises ValidationMismatchError: on a confirmed mismatch with ``on_mismatch="fail"``.
        """
        from airflow_provider_binlog.pipeline.quarantine import quarantine_record, quarantined
        from airflow_provider_binlog.pipeline.state import StateManager, StateRoots
        from airflow_provider_binlog.target import target_root

        if self.on_mismatch not in ON_MISMATCH:
            raise BinlogConfigError(
                f"on_mismatch={self.on_mismatch!r} must be one of {', '.join(ON_MISMATCH)}"
            )
        manager = StateManager(self.pipeline, roots=StateRoots(target=self.target_path))
        state = manager.load()
        if state is None:
            raise StateError(f"pipeline {self.pipeline!r} has no state: nothing to validate")
        if state.target is not None and state.target != target_root(self.target_path):
            raise BinlogConfigError(
                f"pipeline {self.pipeline!r} writes its target at {state.target}, not {self.target_path}"
            )
        quarantine = {t: quarantine_record(e) for t, e in quarantined(state).items()}
        tables = self._selected(state.target_tables)
        for table in (t for t in tables if t in quarantine):
            self.log.warning("%s is quarantined, not compared: %s", table, quarantine[table])
        hook = BinlogHook(self.binlog_conn_id, pipeline=self.pipeline)
        results = {}
        with hook.get_conn() as conn:
            for table in (t for t in tables if t not in quarantine):
                results[table] = self._validate(hook, conn, manager, table)
        checkpoint = manager.load()
        position = None if checkpoint is None else checkpoint.checkpoint.position
        mismatched = [t for t, r in results.items() if r.mismatched]
        for table, result in results.items():
            if result.pending:
                self.log.warning(
                    "%s: %s rows could not be confirmed either way (their source rows kept changing or the target "
                    "had not caught up in %s s): %s", table, len(result.pending), self.recheck_timeout_seconds,
                    result.pending[:KEYS_SHOWN],
                )  # fmt: skip
            self.log.info(
                "%s: %s",
                table,
                result.summary() if result.mismatched else f"matches ({result.source_rows} rows)",
            )
        report = {
            "pipeline": self.pipeline,
            "checkpoint": None if position is None else position.to_dict(),
            "tables": {t: _as_dict(r) for t, r in results.items()},
            "mismatched": mismatched,
            "quarantined": {t: quarantine[t] for t in tables if t in quarantine},
        }
        if mismatched:
            message = (
                f"pipeline {self.pipeline!r}: the target {self.target_path} differs from the source at checkpoint "
                f"{position} (confirmed after the target caught up with the source rows read): "
                + "; ".join(results[t].summary() for t in mismatched)
                + ". Rows changed on the source without the binlog (sql_log_bin=0, a restore) or a target "
                "written by something else cause this. To repair, re-snapshot the tables: "
                f"{resnapshot_remedy(self.pipeline, mismatched)}."
            )
            if self.on_mismatch == "fail":
                raise ValidationMismatchError(message)
            self.log.warning(message)
        return report

    def _selected(self, written: list[str]) -> list[str]:
        """Return the pipeline's tables the selection names (all of them without a selection).

        :raises BinlogConfigError: when an include matches none of them.
        """
        from airflow_provider_binlog.pipeline.tables import parse_tables, select_tables

        if not self.tables:
            return sorted(written)
        return select_tables(parse_tables(self.tables), sorted(written))

    def _validate(self, hook: BinlogHook, conn: Any, manager: Any, table: str) -> TableValidation:
        """Compare one table: a full pass, then re-check rounds of the differing keys (class docstring)."""
        from airflow_provider_binlog.verify import diff, read_source, read_target

        source = read_source(conn, table)
        head = self._head(hook, conn)
        first = diff(table, source, read_target(source, self.target_path, table))
        result = TableValidation(table=table, source_rows=first.source_rows, target_rows=first.target_rows)
        candidates = first.keys
        seen = {key: source.rows.get(key) for key in candidates}
        while candidates and result.rechecks < self.max_rechecks:
            if not self._wait_for_checkpoint(manager, head):
                break
            result.rechecks += 1
            again = read_source(conn, table, keys=candidates)
            head = self._head(hook, conn)
            now = diff(
                table, again, read_target(again, self.target_path, table, keys=candidates), keys=candidates
            )
            steady = {key for key in candidates if again.rows.get(key) == seen[key]}
            result.missing += [list(k) for k in now.missing if k in steady]
            result.extra += [list(k) for k in now.extra if k in steady]
            result.different.update({_key_text(k): now.columns[k] for k in now.different if k in steady})
            candidates = [k for k in now.keys if k not in steady]
            seen = {key: again.rows.get(key) for key in candidates}
        result.pending = [list(k) for k in candidates]
        return result

    @staticmethod
    def _head(hook: BinlogHook, conn: Any) -> Any:
        with conn.cursor() as cur:
            return hook.head_position(cur, hook.flavor(cur))

    def _wait_for_checkpoint(self, manager: Any, head: Any) -> bool:
        """Wait until the pipeline's checkpoint is at or past ``head``; False when the time ran out."""
        deadline = time.monotonic() + self.recheck_timeout_seconds
        while True:
            state = manager.load()
            if state is not None and head <= state.checkpoint.position:
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(min(self.poll_seconds, max(deadline - time.monotonic(), 0)))


def _key_text(key: tuple[Any, ...]) -> str:
    """Return a primary key as JSON object key text: ``"7"``, ``"7|2"`` for a composite key."""
    return "|".join(str(v) for v in key)


def _as_dict(result: TableValidation) -> dict[str, Any]:
    return {
        "source_rows": result.source_rows,
        "target_rows": result.target_rows,
        "missing": result.missing,
        "extra": result.extra,
        "different": result.different,
        "pending": result.pending,
        "rechecks": result.rechecks,
    }
