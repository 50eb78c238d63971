"""A pipeline's health at a glance: checkpoint, open windows and snapshots, lag, headroom, last error, next step.

:func:`pipeline_health` computes one :class:`PipelineHealth` from the state Variable, the source and
Airflow (the state of the runs holding windows and snapshots); :meth:`PipelineHealth.render` is the text
the command line (``python -m airflow_provider_binlog.admin health``) and the monitor DAG print,
and ``model_dump_json()`` its JSON form. Lag and headroom are the sensors' measurements
(:mod:`airflow_provider_binlog.monitoring.measure`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, Protocol

import pendulum
from pydantic import BaseModel

from airflow_provider_binlog.contract.remedies import resnapshot_remedy
from airflow_provider_binlog.exceptions import BinlogError
from airflow_provider_binlog.pipeline.ledger import PipelineState
from airflow_provider_binlog.pipeline.quarantine import quarantined, retry_due
from airflow_provider_binlog.pipeline.state import VariableStore

ENDED_RUN_STATES = frozenset({"success", "failed", "missing"})
"""Airflow states of a holder run that will not finish its window or snapshot by itself."""


class RunLookup(Protocol):
    """Asks Airflow about the DAG run holding a window or snapshot."""

    def state(self, dag_id: str | None, run_id: str) -> str:
        """Return ``queued``, ``running``, ``success``, ``failed``, ``missing`` or ``unknown``."""

    def failure(self, dag_id: str | None, run_id: str) -> str | None:
        """Return what failed in the run (``task extract failed at ...``), or None when nothing did or it is unknown."""


class Held(BaseModel):
    """An open window or running snapshot and the run holding it.

    :param kind: ``window`` or ``snapshot``.
    :param status: ledger status (``cut``, ``extracted``; ``running``).
    :param run_state: Airflow state of the holder run (see :class:`RunLookup`).
    :param since: when it was cut or started (ISO-8601 UTC); ``age_seconds`` is measured from it.
    :param what: its bounds (window) or tables (snapshot).
    """

    kind: Literal["window", "snapshot"]
    seq: int
    status: str
    run_id: str
    dag_id: str | None
    run_state: str
    since: str
    age_seconds: float
    what: str
    handovers: list[str] = []

    @property
    def ended(self) -> bool:
        """Return True when the holder run has ended without finishing it."""
        return self.run_state in ENDED_RUN_STATES


class CheckpointInfo(BaseModel):
    """The checkpoint: binlog coordinates, GTID set, last merged window and commit time."""

    file: str
    pos: int
    gtid_set: str
    window: int
    commit_ts: str | None
    updated_at: str
    age_seconds: float


class MergedWindow(BaseModel):
    """The newest merged window (``merged_at``: when the checkpoint moved to it, when known)."""

    seq: int
    run_id: str
    end: str
    last_commit_ts: str | None
    merged_at: str | None
    age_seconds: float | None


class PipelineHealth(BaseModel):
    """One pipeline's health summary (JSON via ``model_dump_json()``; text via :meth:`render`).

    :param lag: the lag report (:meth:`~airflow_provider_binlog.monitoring.lag.LagReport.to_dict`), None if not measured.
    :param retention: the retention report (:meth:`~airflow_provider_binlog.monitoring.retention.RetentionReport.to_dict`).
    :param source_switch: the last change of source server the pipeline followed (or will follow at its next
        run, when the connection already reaches another server), in one line; None when it never changed.
    :param quarantined: one line per quarantined table (:mod:`~airflow_provider_binlog.pipeline.quarantine`): since
        where and when its target stands still, why, and the re-snapshots tried; its lag grows from then on.
    :param problems: what could not be measured, and why.
    :param last_error: the most pressing error the state, the source or Airflow knows of; None if none.
    :param next_step: one line: what to do next.
    :param needs_attention: False when the next step is to do nothing.
    """

    pipeline: str
    measured_at: str
    revision: int | None
    checkpoint: CheckpointInfo | None
    held: list[Held]
    last_merged: MergedWindow | None
    lag: dict[str, Any] | None
    retention: dict[str, Any] | None
    problems: list[str]
    last_error: str | None
    source_switch: str | None = None
    quarantined: list[str] = []
    next_step: str
    needs_attention: bool

    def render(self) -> str:
        """Return the summary as a few lines of text for a terminal or a task log."""
        lines = [f"pipeline {self.pipeline} (measured {self.measured_at}, state revision {self.revision})"]
        cp = self.checkpoint
        lines.append(
            "  checkpoint: none (never ran)"
            if cp is None
            else f"  checkpoint: {cp.file}:{cp.pos} gtid {cp.gtid_set or '-'} window {cp.window}, last commit "
            f"{cp.commit_ts or 'unknown'}, moved {cp.updated_at} ({_age(cp.age_seconds)} ago)"
        )
        for item in self.held:
            handed = f", handed over: {'; '.join(item.handovers)}" if item.handovers else ""
            lines.append(
                f"  open {item.kind} {item.seq} ({item.status}): held by run {item.run_id} ({item.run_state}), "
                f"since {item.since} ({_age(item.age_seconds)}), {item.what}{handed}"
            )
        if not self.held:
            lines.append("  open: no window or snapshot open")
        merged = self.last_merged
        lines.append(
            "  last merged window: none"
            if merged is None
            else f"  last merged window: {merged.seq} by run {merged.run_id}, ends {merged.end}, "
            f"merged {merged.merged_at or 'unknown'}"
            + ("" if merged.age_seconds is None else f" ({_age(merged.age_seconds)} ago)")
        )
        if self.source_switch is not None:
            lines.append(f"  source switch: {self.source_switch}")
        lines.append(f"  lag: {_summary(self.lag)}")
        lines += [f"  quarantined: {q}" for q in self.quarantined]
        lines.append(f"  headroom: {_summary(self.retention)}")
        lines += [f"  problem: {p}" for p in self.problems]
        lines.append(f"  last error: {self.last_error or 'none known'}")
        lines.append(f"  next: {self.next_step}")
        return "\n".join(lines)


def _summary(report: dict[str, Any] | None) -> str:
    return "not measured" if report is None else str(report["summary"])


def _age(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _seconds_since(moment: str, now: pendulum.DateTime) -> float:
    return max((now - pendulum.DateTime.fromisoformat(moment)).total_seconds(), 0.0)


def pipeline_health(
    hook: Any,
    pipeline: str,
    runs: RunLookup,
    *,
    store: VariableStore | None = None,
    cdc_dag_id: str = "binlog_cdc",
    tables: Sequence[str] = (),
) -> PipelineHealth:
    """Compute the health summary of ``pipeline``; measurement failures become ``problems``, never errors.

    :param hook: a :class:`~airflow_provider_binlog.hooks.binlog.BinlogHook` on the pipeline's source.
    :param runs: asks Airflow about holder runs.
    :param store: where the state Variable is read (Task SDK Variables by default).
    :param cdc_dag_id: the DAG whose runs cut the windows (the ledger records no DAG id for windows).
    :param tables: the table selection, for the snapshot estimate of the headroom (see
        :func:`~airflow_provider_binlog.monitoring.measure.retention_of`).
    """
    from airflow_provider_binlog.monitoring.measure import lag_of, read_pipeline, retention_of

    now = pendulum.now("UTC")
    problems: list[str] = []
    try:
        server, state, read_at = read_pipeline(hook, pipeline, store)
    except BinlogError as err:
        return _unreadable(pipeline, now, err)
    lag = retention = None
    if state is not None:
        try:
            lag = lag_of(hook, pipeline, server, state, read_at).to_dict()
        except BinlogError as err:
            problems.append(f"lag: {err}")
    try:
        retention = retention_of(hook, pipeline, server, state, tables=tables).to_dict()
    except BinlogError as err:
        problems.append(f"headroom: {err}")
    held = [] if state is None else _held(state, runs, cdc_dag_id, now)
    failures = [f"run {h.run_id}: {f}" for h in held if h.ended and (f := runs.failure(h.dag_id, h.run_id))]
    purged = retention["purged_reason"] if retention and retention["purged"] else None
    last_error = purged or next(iter(failures), None) or next(iter(problems), None)
    quarantine = [] if state is None else _quarantined(state, now)
    step, attention = _next_step(state, held, retention, problems)
    if quarantine and not attention:
        step, attention = (
            (
                f"{len(quarantine)} table(s) quarantined: fix the refused value or column at the source; the next run "
                f"re-snapshots each table once it reads (docs/operating.md, 'Quarantined tables')"
            ),
            True,
        )
    return PipelineHealth(
        pipeline=pipeline,
        measured_at=now.isoformat(),
        revision=None if state is None else state.revision,
        checkpoint=None if state is None else _checkpoint(state, now),
        held=held,
        last_merged=None if state is None else _last_merged(state, now),
        lag=lag,
        retention=retention,
        problems=problems,
        last_error=last_error,
        next_step=step,
        needs_attention=attention,
        source_switch=None if state is None else _last_switch(state),
        quarantined=quarantine,
    )


def _quarantined(state: PipelineState, now: pendulum.DateTime) -> list[str]:
    """Return one line per quarantined table: since where and how long, why, and the re-snapshots tried."""
    return [
        f"{table} since {e.since.file}:{e.since.pos} (GTID {e.gtid or 'unknown'}, found by window {e.window} "
        f"{_age(_seconds_since(e.detected_at, now))} ago, its lag grows from then): {e.reason}; re-snapshots "
        f"tried: {e.attempts}" + ("" if retry_due(e) else ", the next one once its refused chunk reads")
        for table, e in sorted(quarantined(state).items())
    ]


def _last_switch(state: PipelineState) -> str | None:
    """Return the last source switch of ``state`` in one line (pending: rebased by the measurement, not written)."""
    from airflow_provider_binlog.pipeline.failover import switch_summary

    if not state.switches:
        return None
    last = state.switches[-1]
    when = (
        "pending: the next run of the pipeline follows it"
        if last.run_id is None
        else f"followed by run {last.run_id} at {last.switched_at}"
    )
    return f"{switch_summary(last)} ({when})"


def _unreadable(pipeline: str, now: pendulum.DateTime, err: BinlogError) -> PipelineHealth:
    """Return the summary of a pipeline whose state or source could not be read."""
    from airflow_provider_binlog.exceptions import StateError

    step = (
        f"fix the state first: python -m airflow_provider_binlog.admin validate --pipeline {pipeline} "
        f"(and history / restore, docs/operating.md 'Pipeline state')"
        if isinstance(err, StateError)
        else "reach the source first (connection binlog_default, network, grants); the error says which"
    )
    return PipelineHealth(
        pipeline=pipeline,
        measured_at=now.isoformat(),
        revision=None,
        checkpoint=None,
        held=[],
        last_merged=None,
        lag=None,
        retention=None,
        problems=[str(err)],
        last_error=str(err),
        next_step=step,
        needs_attention=True,
    )


def _checkpoint(state: PipelineState, now: pendulum.DateTime) -> CheckpointInfo:
    cp = state.checkpoint
    return CheckpointInfo(
        file=cp.position.file,
        pos=cp.position.pos,
        gtid_set=cp.position.gtid_set,
        window=cp.window,
        commit_ts=cp.commit_ts,
        updated_at=cp.updated_at,
        age_seconds=_seconds_since(cp.updated_at, now),
    )


def _held(state: PipelineState, runs: RunLookup, cdc_dag_id: str, now: pendulum.DateTime) -> list[Held]:
    held = [
        Held(
            kind="window",
            seq=w.seq,
            status=w.status,
            run_id=w.run_id,
            dag_id=cdc_dag_id,
            run_state=runs.state(cdc_dag_id, w.run_id),
            since=w.cut_at,
            age_seconds=_seconds_since(w.cut_at, now),
            what=f"({w.start.file}:{w.start.pos}, {w.end.file}:{w.end.pos}] cut by {w.cut_by}",
        )
        for w in state.windows
        if w.status != "merged"
    ]
    held += [
        Held(
            kind="snapshot",
            seq=s.seq,
            status=s.status,
            run_id=s.run_id,
            dag_id=s.dag_id,
            run_state=runs.state(s.dag_id or cdc_dag_id, s.run_id),
            since=s.started_at,
            age_seconds=_seconds_since(s.started_at, now),
            what=f"{s.reason} snapshot of {', '.join(s.tables)} from {s.start.file}:{s.start.pos}",
            handovers=[f"{h.from_run} ({h.holder_state}) -> {h.to_run} at {h.at}" for h in s.handovers],
        )
        for s in state.snapshots
        if s.status == "running"
    ]
    return held


def _last_merged(state: PipelineState, now: pendulum.DateTime) -> MergedWindow | None:
    merged = [w for w in state.windows if w.status == "merged"]
    if not merged:
        return None
    last = max(merged, key=lambda w: w.seq)
    # The checkpoint records when it last moved: that is this window's merge when it names it.
    merged_at = state.checkpoint.updated_at if state.checkpoint.window == last.seq else None
    return MergedWindow(
        seq=last.seq,
        run_id=last.run_id,
        end=f"{last.end.file}:{last.end.pos}",
        last_commit_ts=last.last_commit_ts,
        merged_at=merged_at,
        age_seconds=None if merged_at is None else _seconds_since(merged_at, now),
    )


def _next_step(
    state: PipelineState | None,
    held: list[Held],
    retention: dict[str, Any] | None,
    problems: list[str],
) -> tuple[str, bool]:
    """Return ``(the one thing to do next, whether a person must act)``, most pressing first."""
    if retention is not None and retention["purged"]:
        return (
            "binlogs the pipeline needs are purged: re-snapshot every table "
            f"({resnapshot_remedy(retention['pipeline'], '<its tables>', 'purged')}) and raise the retention"
        ), True
    for item in held:
        if item.ended:  # taken over by the next run (guarantees 10 and 14), but that run failed for a reason
            return _ended_holder_step(item), True
    if problems:
        return f"look at: {problems[0]}", True
    after = None if retention is None else retention["headroom_after_snapshot_seconds"]
    if after is not None and after <= 0:
        return (
            f"the oldest needed binlog {retention['needed_file']} may be purged before the pipeline reads it: "  # type: ignore[index]
            f"run the CDC DAG now and raise {retention['retention_setting']}"  # type: ignore[index]
        ), True
    if state is None:
        return (
            "never ran: its first run snapshots the selected tables from the current head (nothing to do)",
            False,
        )
    if held:
        item = held[0]
        return (
            f"{item.kind} {item.seq} is being processed by run {item.run_id} ({item.run_state}, "
            f"{_age(item.age_seconds)}): nothing to do unless that run is stuck"
        ), False
    return "healthy: nothing to do", False


def _ended_holder_step(item: Held) -> str:
    if item.kind == "snapshot":
        return (
            f"snapshot {item.seq} held by {item.run_state} run {item.run_id}: the next snapshot task of the "
            f"pipeline takes it over and resumes it after its finished chunks (run binlog_cdc or binlog_resnapshot)"
        )
    return (
        f"window {item.seq} ({item.status}) held by {item.run_state} run {item.run_id}: the next run of the "
        f"pipeline adopts it with the same bounds and seq and finishes it (wait for the schedule or trigger "
        f"binlog_cdc); if that run fails the same way, the last error says why"
    )
