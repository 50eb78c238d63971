"""Measure a pipeline by name: read its checkpoint and the source, then its lag or retention report.

These are the blocking measurements behind the sensors and their triggers (which run them in a
thread). Each opens its own connections and closes them before returning.
"""

from __future__ import annotations

import pendulum

from airflow_provider_binlog.exceptions import StateError
from airflow_provider_binlog.hooks.binlog import BinlogHook, ServerState
from airflow_provider_binlog.lag import LagReport, measure_lag
from airflow_provider_binlog.retention import RetentionReport, assess_retention
from airflow_provider_binlog.state import PipelineState, StateManager


def read_pipeline(hook: BinlogHook, pipeline: str) -> tuple[ServerState, PipelineState, pendulum.DateTime]:
    """Return the source's state, the pipeline's state and the time taken just before reading the source.

    :raises StateError: when the pipeline has no state yet, its state is corrupt, or it was written
        for another server.
    :raises BinlogConfigError: on a refused login.
    :raises SourceUnreachableError: when the source cannot be reached.
    """
    read_at = pendulum.now("UTC")
    server = hook.server_state()
    state = StateManager(pipeline).load_for_source(server.server_identity)
    if state is None:
        raise StateError(
            f"pipeline {pipeline!r} has no state Variable yet: it has never run, so there is no checkpoint "
            f"to measure. Run its CDC DAG once (or check the pipeline name)."
        )
    return server, state, read_at


def pipeline_lag(binlog_conn_id: str, pipeline: str) -> LagReport:
    """Return the lag of ``pipeline`` behind the source of ``binlog_conn_id`` (see :mod:`.lag`)."""
    hook = BinlogHook(binlog_conn_id, pipeline=pipeline)
    server, state, read_at = read_pipeline(hook, pipeline)
    commit_ts = state.checkpoint.commit_ts
    return measure_lag(
        hook,
        pipeline,
        state.checkpoint.position.to_position(),
        None if commit_ts is None else pendulum.DateTime.fromisoformat(commit_ts),
        server,
        read_at,
    )


def pipeline_retention(binlog_conn_id: str, pipeline: str) -> RetentionReport:
    """Return whether ``pipeline``'s needed binlogs are retained, and for how long (see :mod:`.retention`)."""
    hook = BinlogHook(binlog_conn_id, pipeline=pipeline)
    server, state, _ = read_pipeline(hook, pipeline)
    return assess_retention(hook, pipeline, state.checkpoint.position.to_position(), server)
