"""Cutting windows: each DAG run owns exactly one half-open binlog range ``(start, end]``.

Rules (ARCHITECTURE.md, "Data flow of one DAG run"):

* a run that already cut a window reuses it, so a retry or a cleared task re-reads the same bytes;
* a new window starts where the previous one ended (consecutive windows tile the binlog) and ends at
  the source head captured now;
* a new window is refused while an earlier one is not merged (:class:`PipelineBusyError`): cutting
  past it and committing the later window would move the checkpoint over changes that are not in the
  target, and it is how a second concurrent run of the pipeline is turned away.
"""

from __future__ import annotations

from airflow_provider_binlog.exceptions import PipelineBusyError, StateError
from airflow_provider_binlog.positions import BinlogPosition
from airflow_provider_binlog.state import PipelineState, Position, Window, now_iso


def cut_window(
    state: PipelineState,
    *,
    run_id: str,
    head: BinlogPosition,
    data_interval_start: str | None = None,
    data_interval_end: str | None = None,
) -> tuple[PipelineState, Window, bool]:
    """Return ``(new state, the run's window, reused)`` for a DAG run.

    :param state: the pipeline state as read.
    :param run_id: the DAG run's id.
    :param head: the source head now (end of a new window).
    :raises PipelineBusyError: when another run holds the pipeline (its window is not merged yet).
    :raises StateError: when the head is behind the window start (the binlog was reset).
    """
    existing = state.window_of_run(run_id)
    if existing is not None:
        return state, existing, True
    previous = state.last_window
    if previous is not None and previous.status != "merged":
        raise PipelineBusyError(
            f"pipeline {state.pipeline!r} is held by run {previous.run_id!r}: its window {previous.seq} is "
            f"{previous.status}, not merged yet. Either that run is still in progress (two runs of one pipeline "
            f"at once: keep max_active_runs=1 and do not trigger runs beside the schedule) or it failed before "
            f"its merge (clear its failed tasks: a retry re-reads exactly the same binlog range). This run cut "
            f"no window and changed nothing; run it again after that run has committed."
        )
    start = previous.end if previous is not None else state.checkpoint.position
    if head.key < start.to_position().key:
        raise StateError(
            f"the source head {head} is behind the window start {start.file}:{start.pos} of pipeline "
            f"{state.pipeline!r}: the binlog was reset (RESET MASTER) or this is another server. A snapshot "
            f"into a new pipeline is needed."
        )
    window = Window(
        seq=(previous.seq if previous is not None else state.checkpoint.window) + 1,
        start=start,
        end=Position.of(head),
        run_id=run_id,
        data_interval_start=data_interval_start,
        data_interval_end=data_interval_end,
        cut_at=now_iso(),
    )
    return state.model_copy(update={"windows": [*state.windows, window]}), window, False


def mark_window(state: PipelineState, seq: int, **changes: object) -> PipelineState:
    """Return ``state`` with window ``seq`` updated (status, manifest_uri, rows)."""
    windows = [w.model_copy(update=changes) if w.seq == seq else w for w in state.windows]
    state.window(seq)
    return state.model_copy(update={"windows": windows})
