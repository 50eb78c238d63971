"""Measure a pipeline by name: read its checkpoint and the source, then its lag or retention report.

These are the blocking measurements behind the sensors, their triggers (which run them in a thread) and
the health summary. Each opens its own connections and closes them before returning.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import pendulum

from airflow_provider_binlog.exceptions import StateError
from airflow_provider_binlog.hooks.binlog import BinlogHook
from airflow_provider_binlog.monitoring.lag import LagReport, measure_lag
from airflow_provider_binlog.monitoring.retention import RetentionReport, assess_retention
from airflow_provider_binlog.pipeline.ledger import PipelineState
from airflow_provider_binlog.pipeline.quarantine import quarantined
from airflow_provider_binlog.pipeline.state import StateManager, VariableStore
from airflow_provider_binlog.source.server import ServerState

if TYPE_CHECKING:
    from airflow_provider_binlog.archive.feed import ArchiveFeed


def read_pipeline(
    hook: BinlogHook, pipeline: str, store: VariableStore | None = None
) -> tuple[ServerState, PipelineState | None, pendulum.DateTime]:
    """Return the source's state, the pipeline's state (None: never ran) and the time taken just before reading the source.

    :param store: where the state Variable is read (Task SDK Variables by default).
    :raises StateError: when the pipeline's state is corrupt or was written for another server.
    :raises BinlogConfigError: on a refused login.
    :raises SourceUnreachableError: when the source cannot be reached.
    """
    read_at = pendulum.now("UTC")
    server = hook.server_state()
    state = StateManager(pipeline, store=store).load()
    return server, None if state is None else on_source(hook, state, server), read_at


def on_source(hook: BinlogHook, state: PipelineState, server: ServerState) -> PipelineState:
    """Return ``state`` as its next run will see it on ``server``: rebased when it was written for another one.

    The measurement reads the rebase without writing it (the next extract or snapshot task writes it,
    ``docs/failover.md``): the checkpoint's GTID set located on the new server, or, when that server lacks
    part of it, the newest earlier boundary it holds.

    :raises StateError: when the pipeline cannot follow the switch (GTIDs off, a MySQL source).
    """
    from airflow_provider_binlog.extract.resume import (
        check_followable,
        gtids_at_checkpoint,
        must_follow,
        source_locator,
    )
    from airflow_provider_binlog.pipeline.failover import plan_switch, switch_source

    if not must_follow(state, server, gtids_at_checkpoint(hook, state, server)):
        return state
    check_followable(state, server)
    plan = plan_switch(
        state,
        locate=source_locator(server, hook.dump_settings()),
        window_tables=lambda window: None,
        head=server.head,  # type: ignore[arg-type]  # check_followable: binary logging is on
    )
    return switch_source(state, plan, identity=server.server_identity, run_id=None)


def never_ran(pipeline: str) -> StateError:
    """Return the error for a measurement that needs a checkpoint the pipeline does not have yet."""
    return StateError(
        f"pipeline {pipeline!r} has no state Variable yet: it has never run, so there is no checkpoint "
        f"to measure. Run its CDC DAG once (or check the pipeline name)."
    )


def lag_of(
    hook: BinlogHook, pipeline: str, server: ServerState, state: PipelineState, read_at: pendulum.DateTime
) -> LagReport:
    """Return the lag of ``state``'s checkpoint (and its running snapshots) behind ``server`` (see :mod:`.lag`)."""
    commit_ts = state.checkpoint.commit_ts
    return measure_lag(
        hook,
        pipeline,
        state.checkpoint.position,
        None if commit_ts is None else pendulum.DateTime.fromisoformat(commit_ts),
        server,
        read_at,
        state.snapshots,
        [(t, pendulum.DateTime.fromisoformat(e.detected_at)) for t, e in sorted(quarantined(state).items())],
    )


def pipeline_lag(binlog_conn_id: str, pipeline: str) -> LagReport:
    """Return the lag of ``pipeline`` behind the source of ``binlog_conn_id`` (see :mod:`.lag`).

    :raises StateError: when the pipeline has never run (no checkpoint to measure).
    """
    hook = BinlogHook(binlog_conn_id, pipeline=pipeline)
    server, state, read_at = read_pipeline(hook, pipeline)
    if state is None:
        raise never_ran(pipeline)
    return lag_of(hook, pipeline, server, state, read_at)


def retention_of(
    hook: BinlogHook,
    pipeline: str,
    server: ServerState,
    state: PipelineState | None,
    *,
    tables: Sequence[str] = (),
    snapshot_rows_per_second: float | None = None,
    archive: str | None = None,
) -> RetentionReport:
    """Return whether the binlogs ``pipeline`` needs are retained long enough (see :mod:`.retention`).

    A pipeline that has not run yet (``state`` None) needs the binlogs from the source head on, where its
    first snapshot starts. The time the pending snapshots still need (running ones, and one of the
    selected tables no snapshot has read) is estimated from the tables' information_schema row counts
    (:mod:`~airflow_provider_binlog.monitoring.snapshot_estimate`).

    :param tables: the pipeline's table selection (names, patterns, ``!`` exclusions); empty: only the
        running snapshots are estimated.
    :param snapshot_rows_per_second: the rate to assume when no earlier snapshot was measured.
    :param archive: the source's binlog archive (a local path or URI; store credentials from the environment),
        whose finished files count as retained (:func:`~.retention.assess_retention`).
    :raises BinlogConfigError: when the selection matches no table.
    """
    from airflow_provider_binlog.monitoring.snapshot_estimate import (
        estimate_snapshots,
        snapshot_rate,
    )
    from airflow_provider_binlog.source.schema import tables_rows

    checkpoint = server.head if state is None else state.checkpoint.position
    if checkpoint is None:
        raise never_ran(pipeline)
    selected = sorted(hook.describe_tables(tables)) if tables else []
    running = [t for s in (state.snapshots if state else []) if s.status == "running" for t in s.tables]
    with hook.cursor() as cur:
        rows = tables_rows(cur, sorted({*selected, *running}))
    estimate = estimate_snapshots(
        state, rows, selected, snapshot_rate(state, snapshot_rows_per_second), pendulum.now("UTC")
    )
    return assess_retention(
        hook,
        pipeline,
        checkpoint,
        server,
        new_pipeline=state is None,
        snapshot=estimate,
        archive=archive_feed(archive),
    )


def archive_feed(archive: str | None) -> ArchiveFeed | None:
    """Return the :class:`~airflow_provider_binlog.archive.feed.ArchiveFeed` of the archive at ``archive``, or None."""
    if archive is None:
        return None
    from airflow_provider_binlog.archive.copy import BinlogArchive
    from airflow_provider_binlog.archive.feed import ArchiveFeed

    return ArchiveFeed(BinlogArchive(archive))


def pipeline_retention(
    binlog_conn_id: str,
    pipeline: str,
    *,
    tables: Sequence[str] = (),
    snapshot_rows_per_second: float | None = None,
    archive: str | None = None,
) -> RetentionReport:
    """Return whether ``pipeline``'s needed binlogs are retained, and for how long (see :func:`retention_of`)."""
    hook = BinlogHook(binlog_conn_id, pipeline=pipeline)
    server, state, _ = read_pipeline(hook, pipeline)
    return retention_of(
        hook, pipeline, server, state, tables=tables, snapshot_rows_per_second=snapshot_rows_per_second,
        archive=archive,
    )  # fmt: skip
