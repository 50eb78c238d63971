"""Cutting windows: each DAG run owns exactly one half-open binlog range ``(start, end]``.

Rules (README, "The example DAG" and docs/guarantees.md):

* a run that already cut a window reuses it, so a retry or a cleared task re-reads the same bytes;
* a new window starts where the previous one ended (consecutive windows tile the binlog) and ends at
  the source head captured now;
* a new window is never cut while an earlier one is not merged: cutting past it and committing the later
  window would move the checkpoint over changes that are not in the target. When the run holding it has
  ended (failed, succeeded without its commit, deleted), the new run **adopts** it instead
  (:func:`adopt_window`: same bounds and seq, the hand-over recorded); while that run is active, or its
  state cannot be told, the new run is turned away (:class:`PipelineBusyError`), which is also how a second
  concurrent run of the pipeline is turned away.

Interval windows (:func:`cut_interval_window`) cover a run's data interval instead: they may be cut
and merged in any order (backfills), tile the binlog by construction, and move the checkpoint only
across a contiguous run of merged windows (:func:`advance_checkpoint`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Literal, get_args

import pendulum

from airflow_provider_binlog.contract.positions import BinlogPosition
from airflow_provider_binlog.exceptions import (
    RESNAPSHOT_REMEDY,
    BinlogConfigError,
    BinlogPurgedError,
    PipelineBusyError,
    StateError,
)
from airflow_provider_binlog.pipeline.ledger import Checkpoint, PipelineState, Window, now_iso
from airflow_provider_binlog.pipeline.runs import HolderState, has_ended, never_ended
from airflow_provider_binlog.source.probes import file_opened_at, scan_to
from airflow_provider_binlog.source.server import nothing_purged, purged_reason

if TYPE_CHECKING:
    from airflow_provider_binlog.hooks.binlog import BinlogHook
    from airflow_provider_binlog.source.server import ServerState

CutBy = Literal["head", "interval"]
"""How a pipeline cuts its windows (the extract operator's ``cut_by``, fixed per pipeline): ``head`` at the
source head when the run cuts it (:func:`cut_window`), ``interval`` at the run's data interval
(:func:`cut_interval_window`). Recorded per window as
:attr:`Window.cut_by <airflow_provider_binlog.pipeline.ledger.Window.cut_by>`."""
CUT_BY_MODES: tuple[CutBy, ...] = get_args(CutBy)
"""The values of :data:`CutBy`."""


def cut_window(
    state: PipelineState,
    *,
    run_id: str,
    head: BinlogPosition,
    data_interval_start: str | None = None,
    data_interval_end: str | None = None,
    dag_id: str | None = None,
    holder_state: HolderState = never_ended,
) -> tuple[PipelineState, Window, bool]:
    """Return ``(new state, the run's window, reused)`` for a DAG run.

    ``reused`` is True for a window already in the ledger: the run's own (a retry), or the unmerged window
    of a run that has ended, which this run adopts (:func:`adopt_window`).

    :param state: the pipeline state as read.
    :param run_id: the DAG run's id.
    :param head: the source head now (end of a new window).
    :param dag_id: the DAG of ``run_id``, recorded so a later run can ask whether this one is active.
    :param holder_state: tells the state of the run holding an unmerged window
        (:func:`~airflow_provider_binlog.pipeline.runs.holder_states`); by default every holder counts as active.
    :raises PipelineBusyError: when a run that is still active (or whose state cannot be told) holds the
        pipeline: its window is not merged yet.
    :raises StateError: when the head is behind the window start (the binlog was reset).
    """
    existing = state.window_of_run(run_id)
    if existing is not None:
        return state, existing, True
    _check_mode(state, "head")
    previous = state.last_window
    if previous is not None and previous.status != "merged":
        return (*adopt_window(state, previous, run_id=run_id, dag_id=dag_id, holder_state=holder_state), True)
    start = previous.end if previous is not None else state.checkpoint.position
    if head.key < start.key:
        raise StateError(
            f"the source head {head} is behind the window start {start.file}:{start.pos} of pipeline "
            f"{state.pipeline!r}: the binlog was reset (RESET MASTER) or this is another server. A snapshot "
            f"into a new pipeline is needed."
        )
    window = Window(
        seq=state.next_seq,
        start=start,
        end=(head),
        run_id=run_id,
        data_interval_start=data_interval_start,
        data_interval_end=data_interval_end,
        cut_at=now_iso(),
        dag_id=dag_id,
    )
    return state.model_copy(update={"windows": [*state.windows, window]}), window, False


def adopt_window(
    state: PipelineState, held: Window, *, run_id: str, dag_id: str | None, holder_state: HolderState
) -> tuple[PipelineState, Window]:
    """Return ``(new state, the window)`` with the unmerged window ``held`` handed over to ``run_id``.

    The window keeps its bounds, seq, status and staged manifest: its bytes are fixed by its bounds, and
    its seq keeps the merge exactly-once (each table's Delta log records the window's seq with the commit
    that applied it, so tables the earlier holder merged are skipped). The ledger records the hand-over
    (:class:`~airflow_provider_binlog.pipeline.ledger.Handover`: from run, to run, when, the holder's state), and the
    commit and merge of ``run_id`` find the window by its new run id.

    :param held: an unmerged window of ``state`` held by another run.
    :param holder_state: tells the state of the run holding ``held``.
    :raises PipelineBusyError: when that run is still active, or its state cannot be told.
    """
    holder = holder_state(held)
    if not has_ended(holder):
        raise PipelineBusyError(_busy_message(state, held, holder))
    taken = held.handed_to(run_id, dag_id, holder)
    windows = [taken if w.seq == held.seq else w for w in state.windows]
    return state.model_copy(update={"windows": windows}), taken


def _busy_message(state: PipelineState, held: Window, holder: str) -> str:
    interval = (
        f"interval [{held.data_interval_start}, {held.data_interval_end}) of "
        if held.cut_by == "interval"
        else ""
    )
    told = (
        "Airflow cannot tell whether that run is still active (no Task SDK access to its state), so it counts "
        "as active"
        if holder == "unknown"
        else f"Airflow shows that run as {holder}"
    )
    return (
        f"{interval}pipeline {state.pipeline!r} is held by run {held.run_id!r}: its window {held.seq} is "
        f"{held.status}, not merged yet (binlog range ({held.start.file}:{held.start.pos}, {held.end.file}:"
        f"{held.end.pos}]), and {told}. This run cut no window and changed nothing. If that run is in progress, "
        f"this is two runs of one pipeline at once: keep max_active_runs=1 and do not trigger runs beside the "
        f"schedule. Once that run has ended (failed, succeeded without its commit, or deleted: the scheduler "
        f"fails a run whose worker died, or mark it failed yourself), the next run of the pipeline adopts its "
        f"window and reads exactly the same binlog range."
    )


def mark_window(state: PipelineState, seq: int, **changes: object) -> PipelineState:
    """Return ``state`` with window ``seq`` updated (status, manifest_uri, rows)."""
    windows = [w.model_copy(update=changes) if w.seq == seq else w for w in state.windows]
    state.window(seq)
    return state.model_copy(update={"windows": windows})


def _check_mode(state: PipelineState, cut_by: CutBy) -> None:
    """Refuse to mix head and interval windows in one pipeline (their sequence numbers differ)."""
    other = next((w for w in state.windows if w.cut_by != cut_by), None)
    if other is not None:
        raise BinlogConfigError(
            f"pipeline {state.pipeline!r} cuts windows by {other.cut_by} (window {other.seq}); this run asks "
            f"for windows by {cut_by}. One pipeline keeps one way of cutting: use a new pipeline name."
        )


def cut_interval_window(
    state: PipelineState,
    *,
    run_id: str,
    interval_start: pendulum.DateTime,
    interval_end: pendulum.DateTime,
    locate: Callable[[pendulum.DateTime], BinlogPosition],
    dag_id: str | None = None,
    holder_state: HolderState = never_ended,
) -> tuple[PipelineState, Window, bool]:
    """Return ``(new state, window, reused)`` for the run's data interval ``[interval_start, interval_end)``.

    The window is ``(locate(interval_start), locate(interval_end)]`` where ``locate(t)`` is the boundary
    before the first transaction committed at or after ``t``
    (:func:`~airflow_provider_binlog.pipeline.windows.boundary_at`); a bound shared with an interval already in the
    ledger is taken from that window, so neighbours tile the binlog exactly. The sequence number is the
    interval end in Unix milliseconds: binlog order, whatever order the windows are cut or merged in, so
    order keys let a re-merged old window lose to newer changes. A new run over an interval whose window
    is merged takes that window over (same bytes; its merge is a no-op).

    A run adopts the unmerged window of its own interval from a run that has ended
    (:func:`adopt_window`); windows of other intervals are left to the runs of those intervals.

    :param dag_id: the DAG of ``run_id``, recorded so a later run can ask whether this one is active.
    :param holder_state: tells the state of the run holding the interval's window; by default every
        holder counts as active.
    :raises PipelineBusyError: when another run, still active (or whose state cannot be told), holds the
        interval's window and has not merged it.
    :raises BinlogConfigError: on an empty interval (a timetable without data intervals) or a pipeline
        that cuts by head.
    :raises StateError: when the window would overlap a window in the ledger.
    """
    existing = state.window_of_run(run_id)
    if existing is not None:
        return state, existing, True
    _check_mode(state, "interval")
    if interval_end <= interval_start:
        raise BinlogConfigError(
            f"run {run_id!r} has an empty data interval [{interval_start}, {interval_end}): windows by interval "
            f"need a timetable with data intervals (schedule=timedelta(...) or CronDataIntervalTimetable)"
        )
    bounds = (interval_start.isoformat(), interval_end.isoformat())
    same = next((w for w in state.windows if (w.data_interval_start, w.data_interval_end) == bounds), None)
    if same is not None:
        if same.status != "merged":
            adopted = adopt_window(state, same, run_id=run_id, dag_id=dag_id, holder_state=holder_state)
            return (*adopted, True)
        taken = same.model_copy(update={"run_id": run_id, "dag_id": dag_id})
        windows = [taken if w.seq == same.seq else w for w in state.windows]
        return state.model_copy(update={"windows": windows}), taken, True
    start = _bound(state, "data_interval_end", bounds[0], "end") or (locate(interval_start))
    end = _bound(state, "data_interval_start", bounds[1], "start") or (locate(interval_end))
    window = Window(
        seq=int(interval_end.timestamp() * 1000),
        start=start,
        end=end,
        run_id=run_id,
        data_interval_start=bounds[0],
        data_interval_end=bounds[1],
        cut_at=now_iso(),
        cut_by="interval",
        dag_id=dag_id,
    )
    _check_tiles(state, window)
    return state.model_copy(update={"windows": [*state.windows, window]}), window, False


def _bound(state: PipelineState, field: str, moment: str, side: str) -> BinlogPosition | None:
    """Return the ``side`` of the ledger window whose ``field`` is ``moment``, if there is one."""
    neighbour = next((w for w in state.windows if getattr(w, field) == moment), None)
    return None if neighbour is None else getattr(neighbour, side)


def _check_tiles(state: PipelineState, window: Window) -> None:
    """Refuse a window that runs backwards or overlaps another (a changed binlog or clock)."""
    low, high = window.start.key, window.end.key
    if high < low:
        raise StateError(
            f"interval window {window.seq} would end ({window.end}) before it starts ({window.start})"
        )
    for other in state.windows:
        if low < other.end.key and other.start.key < high:
            raise StateError(
                f"interval window {window.seq} ({window.start.file}:{window.start.pos}, {window.end.file}:"
                f"{window.end.pos}] overlaps window {other.seq} of interval [{other.data_interval_start}, "
                f"{other.data_interval_end}): the binlog or the server clock changed between the two cuts"
            )


def advance_checkpoint(state: PipelineState, merged: Window) -> Checkpoint:
    """Return the checkpoint once window ``merged`` is in the target.

    The checkpoint moves across the contiguous run of merged windows that starts at it, so it never
    points past a change that is not in the target: a window merged ahead of a gap (a backfill out of
    order) waits for the gap, and a window behind the checkpoint leaves it where it is.
    """
    merged_seqs = {w.seq for w in state.windows if w.status == "merged"} | {merged.seq}
    chain = sorted(
        (w for w in state.windows if w.seq in merged_seqs),
        key=lambda w: (w.start.key, w.end.key),
    )
    checkpoint = state.checkpoint
    position, seq, commit_ts = checkpoint.position, checkpoint.window, checkpoint.commit_ts
    for window in chain:  # empty windows sort before the window starting where they are
        if window.start.key == position.key:
            position, seq = window.end, window.seq
            commit_ts = window.last_commit_ts or commit_ts
    return Checkpoint(position=position, window=seq, commit_ts=commit_ts, updated_at=now_iso())


def boundary_at(hook: BinlogHook, server: ServerState, moment: pendulum.DateTime) -> BinlogPosition:
    """Return the transaction boundary before the first transaction committed at or after ``moment``.

    This is the cut of interval windows: a window for ``[s, e)`` is ``(boundary_at(s), boundary_at(e)]``.
    "First" is in binlog (commit) order, so the result is monotone in ``moment`` and consecutive
    intervals tile the binlog even where commit timestamps (whole seconds, the commit statement's start
    time) are not. The scan starts at the last file the server opened at or before ``moment`` and reads
    only group-ending events. When no transaction at or after ``moment`` has been logged yet, the
    result is the end of the last complete transaction; callers only ask for moments in the past.

    :returns: the boundary with the GTID state there where the flavor can tell it
        (:meth:`~airflow_provider_binlog.source.flavor.SourceFlavor.gtid_at`: MariaDB ``BINLOG_GTID_POS``;
        MySQL has no SQL function for it, so there the GTID set is left empty).
    :raises BinlogPurgedError: when the binlogs holding ``moment`` were purged.
    """
    boundary = scan_to(hook, _file_holding(hook, server, moment), moment)
    with hook.cursor() as cur:
        gtids = server.strategy.gtid_at(cur, boundary.file, boundary.pos)
    return BinlogPosition(boundary.file, boundary.pos, gtids)


def _file_holding(hook: BinlogHook, server: ServerState, moment: pendulum.DateTime) -> str:
    """Return the last binlog file opened at or before ``moment`` (binary search over open times).

    :raises BinlogPurgedError: when the oldest file was opened after ``moment`` and older ones existed.
    """
    names = [name for name, _ in server.binlog_files]
    if not names:
        raise BinlogPurgedError("the source lists no binary logs")
    oldest_opened = file_opened_at(hook, names[0])
    if oldest_opened > moment:
        with hook.cursor() as cur:
            if nothing_purged(server, cur):
                return names[0]
        raise BinlogPurgedError(
            f"the binlogs holding {moment.isoformat()} were purged: the oldest binlog left, {names[0]}, was "
            f"opened at {oldest_opened.isoformat()}. {RESNAPSHOT_REMEDY}"
        )
    low, high = 0, len(names) - 1  # invariant: names[low] was opened at or before moment
    while low < high:
        middle = (low + high + 1) // 2
        if file_opened_at(hook, names[middle]) <= moment:
            low = middle
        else:
            high = middle - 1
    return names[low]


def check_retained(server: ServerState, start: BinlogPosition, pipeline: str) -> None:
    """Check that every binlog from ``start`` on is still on the source (no extra query).

    :raises BinlogPurgedError: naming what is gone and the remedy.
    """
    reason = purged_reason(server, start)
    if reason is not None:
        raise BinlogPurgedError(f"pipeline {pipeline!r}: {reason}. {RESNAPSHOT_REMEDY}")
