"""Monitoring DAG: every 10 minutes, the health summary, purge risk and consumer lag of each CDC pipeline.

Each pipeline gets a ``health__<pipeline>`` task, which logs the pipeline's health summary (checkpoint,
open windows and snapshots with the runs holding them, last merged window, lag, headroom, last error and
the next step; :mod:`airflow_provider_binlog.monitoring.health`) and returns it as JSON (XCom), and two sensors; a failing one fails the run with the sensor's message (which names the
pipeline, the number that is off and the remedy), so the DAG's failure alerting (``on_failure_callback``,
email, a Notifier) is the CDC alert. Settings come from environment variables read at parse time:

* ``BINLOG_MONITOR_PIPELINES`` comma-separated pipeline names, default ``BINLOG_CDC_PIPELINE`` or
  ``binlog_cdc``; all pipelines share the connection ``binlog_default``
* ``BINLOG_MONITOR_MIN_HEADROOM_SECONDS`` least retention headroom, default 21600 (6 h)
* ``BINLOG_MONITOR_MAX_LAG_SECONDS`` largest acceptable lag, default 3600 (1 h)
* ``BINLOG_MONITOR_SCHEDULE`` cron, default every 10 minutes; ``none`` for manual runs only
* ``BINLOG_MONITOR_CDC_DAG_ID`` the DAG whose runs cut the pipelines' windows, default ``binlog_cdc``

The lag sensor checks once per run in the worker (``timeout=0``, not deferred): the monitor reports,
it does not wait.
"""

from __future__ import annotations

import os
from typing import Any

import pendulum
from airflow.sdk import DAG, get_current_context, task

from airflow_provider_binlog.sensors import BinlogConsumerLagSensor, BinlogPurgeRiskSensor

_PIPELINES = [
    name.strip()
    for name in os.environ.get(
        "BINLOG_MONITOR_PIPELINES", os.environ.get("BINLOG_CDC_PIPELINE", "binlog_cdc")
    ).split(",")
    if name.strip()
]
_SCHEDULE = os.environ.get("BINLOG_MONITOR_SCHEDULE", "*/10 * * * *")
_CDC_DAG_ID = os.environ.get("BINLOG_MONITOR_CDC_DAG_ID", "binlog_cdc")


@task
def health(pipeline: str) -> dict[str, Any]:
    """Log the pipeline's health summary and return it as JSON; fail only when it cannot be computed."""
    from airflow_provider_binlog.hooks.binlog import BinlogHook
    from airflow_provider_binlog.monitoring.health import pipeline_health
    from airflow_provider_binlog.pipeline.runs import ContextRunLookup

    summary = pipeline_health(
        BinlogHook("binlog_default", pipeline=pipeline),
        pipeline,
        ContextRunLookup(get_current_context()),
        cdc_dag_id=_CDC_DAG_ID,
    )
    print(summary.render())
    return summary.model_dump(mode="json")


# [START howto_binlog_monitor]
with DAG(
    dag_id="binlog_monitor",
    description="Purge risk and consumer lag of each binlog CDC pipeline",
    schedule=None if _SCHEDULE.lower() in ("", "none", "manual") else _SCHEDULE,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    tags=["cdc", "binlog", "monitoring"],
) as dag:
    for pipeline in _PIPELINES:
        health.override(task_id=f"health__{pipeline}")(pipeline)
        BinlogPurgeRiskSensor(
            task_id=f"purge_risk__{pipeline}",
            pipeline=pipeline,
            min_headroom_seconds=float(os.environ.get("BINLOG_MONITOR_MIN_HEADROOM_SECONDS", 6 * 3600)),
            binlog_conn_id="binlog_default",
        )
        BinlogConsumerLagSensor(
            task_id=f"lag__{pipeline}",
            pipeline=pipeline,
            max_lag_seconds=float(os.environ.get("BINLOG_MONITOR_MAX_LAG_SECONDS", 3600)),
            binlog_conn_id="binlog_default",
            timeout=0,
            deferrable=False,
        )
# [END howto_binlog_monitor]
