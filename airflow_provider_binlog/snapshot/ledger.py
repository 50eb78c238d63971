"""The snapshot entries of a pipeline's ledger: starting (or resuming) a snapshot and recording its merge.

Pure functions over :class:`~airflow_provider_binlog.state.PipelineState`, applied inside
:meth:`StateManager.transact <airflow_provider_binlog.state.StateManager.transact>`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal

from airflow_provider_binlog.exceptions import BinlogConfigError, PipelineBusyError
from airflow_provider_binlog.positions import BinlogPosition
from airflow_provider_binlog.state import Checkpoint, PipelineState, Position, Snapshot, now_iso

SnapshotMode = Literal["missing", "requested", "purged"]
"""Which tables a snapshot reads: ``missing`` those no snapshot of the pipeline has read (all of them for
a new pipeline), ``requested`` the tables named, ``purged`` the tables named after the binlogs the
pipeline still needed were purged (the checkpoint then jumps to the snapshot's start)."""


def begin_snapshot(
    state: PipelineState,
    *,
    run_id: str,
    tables: Sequence[str],
    mode: SnapshotMode,
    head: BinlogPosition,
    staging_uri: Callable[[int], str],
    new_pipeline: bool = False,
) -> tuple[PipelineState, Snapshot | None]:
    """Return ``(new state, the run's snapshot)``; the snapshot is None when no table needs one.

    A run that already started a snapshot gets it back unchanged (its retry resumes it, chunk by chunk).

    :param state: the pipeline state (a new pipeline's initial state, with ``new_pipeline=True``).
    :param run_id: the DAG run starting it.
    :param tables: the selected ``db.table`` names.
    :param mode: see :data:`SnapshotMode`.
    :param head: the source head now: the snapshot's start, before any chunk is read.
    :param staging_uri: ``seq -> staging folder`` of the snapshot.
    :raises BinlogConfigError: for a pipeline that cuts windows by interval (their sequence numbers are
        times, so a snapshot cannot be ordered between them), or an unknown mode.
    :raises PipelineBusyError: when a running snapshot of another run reads one of the tables.
    """
    existing = state.snapshot_of_run(run_id)
    if existing is not None:
        return state, existing
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
        start=Position.of(head),
        run_id=run_id,
        started_at=now_iso(),
        staging_uri=staging_uri(seq),
        reason=_REASONS["initial" if new_pipeline else mode],
    )
    update: dict[str, object] = {"snapshots": [*state.snapshots, snapshot]}
    if mode == "purged":
        # The changes between the checkpoint and the head are gone: the snapshot replaces them, and the
        # next window starts at its start. Windows not merged yet can never be read again.
        update["windows"] = []
        update["checkpoint"] = Checkpoint(
            position=Position.of(head), window=seq - 1, commit_ts=None, updated_at=now_iso()
        )
    return state.model_copy(update=update), snapshot


_REASONS: dict[str, Literal["initial", "added", "requested", "purged"]] = {
    "initial": "initial",
    "missing": "added",
    "requested": "requested",
    "purged": "purged",
}


def _tables_for(state: PipelineState, tables: Sequence[str], mode: SnapshotMode) -> list[str]:
    if mode == "missing":
        covered = state.snapshotted_tables()
        return [t for t in tables if t not in covered]
    if mode in ("requested", "purged"):
        return list(tables)
    raise BinlogConfigError(f"snapshot mode {mode!r} must be one of 'missing', 'requested', 'purged'")


def _check_not_running(state: PipelineState, tables: Sequence[str]) -> None:
    for other in state.snapshots:
        shared = sorted(set(other.tables) & set(tables))
        if other.status == "running" and shared:
            raise PipelineBusyError(
                f"snapshot {other.seq} of pipeline {state.pipeline!r} (run {other.run_id!r}) is still reading "
                f"{', '.join(shared)}. Let it finish (or clear its failed task: a retry resumes it from its last "
                f"finished chunk); this run started nothing."
            )


def finish_snapshot(state: PipelineState, seq: int, rows: int) -> PipelineState:
    """Return ``state`` with snapshot ``seq`` marked ``merged`` (its rows are verified in the target)."""
    snapshots = [
        s.model_copy(update={"status": "merged", "rows": rows}) if s.seq == seq else s
        for s in state.snapshots
    ]
    return state.model_copy(update={"snapshots": snapshots})
