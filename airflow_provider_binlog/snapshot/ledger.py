"""The snapshot entries of a pipeline's ledger: starting (or resuming) a snapshot and recording its merge.

Pure functions over :class:`~airflow_provider_binlog.pipeline.ledger.PipelineState`, applied inside
:meth:`StateManager.transact <airflow_provider_binlog.pipeline.state.StateManager.transact>`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, cast, get_args

from airflow_provider_binlog.contract.positions import BinlogPosition
from airflow_provider_binlog.exceptions import BinlogConfigError, PipelineBusyError
from airflow_provider_binlog.pipeline.ledger import (
    Checkpoint,
    PipelineState,
    Snapshot,
    SnapshotReason,
    covers,
    now_iso,
)
from airflow_provider_binlog.pipeline.quarantine import retry_due, with_failed_resnapshots
from airflow_provider_binlog.pipeline.runs import HolderState, has_ended, never_ended

SnapshotMode = Literal["missing", "requested", "purged"]
"""Which tables a snapshot reads: ``missing`` those no snapshot of the pipeline has read (all of them for
a new pipeline) and those a schema change left waiting for a re-snapshot
(:meth:`~airflow_provider_binlog.pipeline.ledger.PipelineState.pending_resnapshots`), ``requested`` the tables named, ``purged`` the tables named after the binlogs the
pipeline still needed were purged (the checkpoint then jumps to the snapshot's start)."""
SNAPSHOT_MODES: tuple[SnapshotMode, ...] = get_args(SnapshotMode)
"""The values of :data:`SnapshotMode`."""


def check_snapshot_mode(mode: str) -> SnapshotMode:
    """Return a snapshot operator's ``mode`` argument, checked (as rendered, when it was templated).

    :raises BinlogConfigError: when it is not one of :data:`SNAPSHOT_MODES`.
    """
    if mode not in SNAPSHOT_MODES:
        raise BinlogConfigError(f"mode={mode!r} must be one of {', '.join(SNAPSHOT_MODES)}")
    return cast(SnapshotMode, mode)


def begin_snapshot(
    state: PipelineState,
    *,
    run_id: str,
    tables: Sequence[str],
    mode: SnapshotMode,
    head: BinlogPosition,
    staging_uri: Callable[[int], str],
    new_pipeline: bool = False,
    dag_id: str | None = None,
    holder_state: HolderState = never_ended,
) -> tuple[PipelineState, Snapshot | None]:
    """Return ``(new state, the run's snapshot)``; the snapshot is None when no table needs one.

    A run that already holds a snapshot gets it back unchanged (its retry resumes it, chunk by chunk).
    Otherwise a snapshot still ``running`` whose holder run has finished without merging it (its retries
    ran out, it was killed, marked failed or deleted) is **taken over** first, whatever this run asked
    for: it keeps its seq, start, plan and finished chunks, and the ledger records the hand-over. Such a
    snapshot is never skipped: until it is merged, its tables may lack rows (a new pipeline's initial
    load), and a ``purged`` snapshot has already moved the checkpoint past changes only it brings back.
    The tables this run wanted beyond it are left to the next run.

    :param state: the pipeline state (a new pipeline's initial state, with ``new_pipeline=True``).
    :param run_id: the DAG run starting it.
    :param tables: the selected ``db.table`` names.
    :param mode: see :data:`SnapshotMode`.
    :param head: the source head now: the snapshot's start, before any chunk is read.
    :param staging_uri: ``seq -> staging folder`` of the snapshot.
    :param dag_id: the DAG of ``run_id``, recorded so another run can ask whether this one is active.
    :param holder_state: tells the state of the run holding a snapshot
        (:func:`~airflow_provider_binlog.pipeline.runs.holder_states`); by default every holder counts as active and
        nothing is taken over.
    :raises BinlogConfigError: for a pipeline that cuts windows by interval (their sequence numbers are
        times, so a snapshot cannot be ordered between them), or an unknown mode.
    :raises PipelineBusyError: when a running snapshot of another, active run reads one of the tables.
    """
    existing = state.snapshot_of_run(run_id)
    if existing is not None:
        return state, existing
    abandoned = _abandoned(state, holder_state)
    if abandoned is not None:
        snapshot, ended = abandoned
        taken = snapshot.handed_to(run_id, dag_id, ended)
        snapshots = [taken if s.seq == snapshot.seq else s for s in state.snapshots]
        return state.model_copy(update={"snapshots": snapshots}), taken
    interval = next((w for w in state.windows if w.cut_by == "interval"), None)
    if interval is not None:
        raise BinlogConfigError(
            f"pipeline {state.pipeline!r} cuts windows by interval (window {interval.seq}); snapshots need a "
            f"pipeline that cuts by head (cut_by='head'): load the tables into a new head pipeline instead"
        )
    chosen = _tables_for(state, tables, mode)
    if not chosen:
        return state, None
    _check_not_running(state, chosen)
    seq = state.next_seq
    snapshot = Snapshot(
        seq=seq,
        tables=chosen,
        start=(head),
        run_id=run_id,
        dag_id=dag_id,
        started_at=now_iso(),
        staging_uri=staging_uri(seq),
        reason=_reason(state, chosen, mode, new_pipeline),
    )
    update: dict[str, object] = {"snapshots": [*state.snapshots, snapshot]}
    if mode == "purged":
        # The changes between the checkpoint and the head are gone: the snapshot replaces them, and the
        # next window starts at its start. Windows not merged yet can never be read again.
        update["windows"] = []
        update["checkpoint"] = Checkpoint(
            position=(head), window=seq - 1, commit_ts=None, updated_at=now_iso()
        )
    return state.model_copy(update=update), snapshot


def _abandoned(state: PipelineState, holder_state: HolderState) -> tuple[Snapshot, str] | None:
    """Return the oldest running snapshot whose holder run has ended, with the holder's state."""
    for snapshot in state.snapshots:
        if snapshot.status == "running":
            holder = holder_state(snapshot)
            if has_ended(holder):
                return snapshot, holder
    return None


_REASONS: dict[str, Literal["initial", "added", "requested", "purged"]] = {
    "initial": "initial",
    "missing": "added",
    "requested": "requested",
    "purged": "purged",
}


def _reason(
    state: PipelineState, chosen: Sequence[str], mode: SnapshotMode, new_pipeline: bool
) -> SnapshotReason:
    """Return the snapshot's reason.

    The cause of the re-snapshots (``schema_change``, ``lost_transactions``) when every table it reads waits for
    one (``lost_transactions`` when any of them waits for that cause), else the mode's.
    """
    pending = state.pending_resnapshots()
    if mode == "missing" and not new_pipeline and set(chosen) <= {r.table for r in pending}:
        causes = {r.cause for r in pending if r.table in chosen}
        return next((c for c in ("lost_transactions", "quarantine") if c in causes), "schema_change")
    return _REASONS["initial" if new_pipeline else mode]


def _tables_for(state: PipelineState, tables: Sequence[str], mode: SnapshotMode) -> list[str]:
    if mode == "missing":
        covered = state.snapshotted_tables()
        pending = state.pending_resnapshots()
        waiting = {r.table for r in pending}
        # A quarantined table whose last re-snapshot failed waits until a retry can help (it changed).
        held = {r.table for r in pending if not retry_due(r)}
        return [t for t in tables if (t not in covered or t in waiting) and t not in held]
    if mode in ("requested", "purged"):
        return list(tables)
    raise BinlogConfigError(f"snapshot mode {mode!r} must be one of 'missing', 'requested', 'purged'")


def _check_not_running(state: PipelineState, tables: Sequence[str]) -> None:
    for other in state.snapshots:
        shared = sorted(set(other.tables) & set(tables))
        if other.status == "running" and shared:
            raise PipelineBusyError(
                f"snapshot {other.seq} of pipeline {state.pipeline!r} (run {other.run_id!r}) is still reading "
                f"{', '.join(shared)}, and that run is still active. Let it finish: once that run has ended (merged, "
                f"failed or deleted), the next snapshot task of the pipeline takes the snapshot over and resumes it "
                f"from its last finished chunk. This run started nothing."
            )


def finish_snapshot(
    state: PipelineState,
    seq: int,
    rows: int,
    target: str,
    written: Sequence[str],
    refused: Mapping[str, Mapping[str, Any]] | None = None,
) -> PipelineState:
    """Return ``state`` with snapshot ``seq`` marked ``merged`` now (its rows are verified in the target).

    The entries of ``resnapshots_needed`` it covers (:func:`~airflow_provider_binlog.pipeline.ledger.covers`: one of
    its tables, ``since`` at or before its start, found by a window ordered before it) are cleared: the target holds the table as the source had it after the schema change.
    So are the ``kept_columns`` of its tables: its merge replaced each table's schema with the source's.

    :param target: the target root it was merged into.
    :param written: the tables whose Delta tables hold its merge (none when every table was empty and
        no target table existed), recorded with the root (see
        :meth:`~airflow_provider_binlog.pipeline.ledger.PipelineState.with_target`).
    :param refused: ``{"db.table": record}`` of the tables the snapshot could not read
        (:func:`~airflow_provider_binlog.pipeline.quarantine.snapshot_refusals`): they leave the snapshot's tables
        and are quarantined (:func:`~airflow_provider_binlog.pipeline.quarantine.with_failed_resnapshots`).
    """
    refused = refused or {}
    snapshots = [
        s.model_copy(
            update={
                "status": "merged",
                "rows": rows,
                "finished_at": now_iso(),
                "tables": [t for t in s.tables if t not in refused],
            }
        )
        if s.seq == seq
        else s
        for s in state.snapshots
    ]
    merged = next(s for s in snapshots if s.seq == seq)
    state = with_failed_resnapshots(state.model_copy(update={"snapshots": snapshots}), merged, refused)
    needed = [r for r in state.resnapshots_needed if not covers(merged, r)]
    update = {"snapshots": snapshots, "resnapshots_needed": needed}
    return state.model_copy(update=update).without_kept_columns(merged.tables).with_target(target, written)
