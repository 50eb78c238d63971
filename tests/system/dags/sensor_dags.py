"""Sensor DAGs for the system tests: purge-risk guards (poke, soft-fail) and deferrable sensors."""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG, Param

from airflow_provider_binlog.sensors import BinlogConsumerLagSensor, BinlogPurgeRiskSensor

PARAMS = {
    "pipeline": Param("p", type="string"),
    "min_headroom": Param(60, type="number"),
    "fresh_until": Param("2000-01-01T00:00:00+00:00", type="string"),
}


def sensor_dag(dag_id: str) -> DAG:
    return DAG(
        dag_id=dag_id, schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"), params=PARAMS
    )


def purge_guard_dag(dag_id: str, **sensor_args: object) -> DAG:
    """A DAG of one purge-risk sensor with the params' pipeline and minimum headroom."""
    with sensor_dag(dag_id) as dag:
        BinlogPurgeRiskSensor(
            task_id="purge_risk",
            pipeline="{{ params.pipeline }}",
            min_headroom_seconds="{{ params.min_headroom }}",
            **sensor_args,  # type: ignore[arg-type]
        )
    return dag


purge_guard = purge_guard_dag("purge_guard")
purge_guard_soft = purge_guard_dag("purge_guard_soft", soft_fail=True)

with sensor_dag("sensors_deferred") as sensors_deferred:
    BinlogPurgeRiskSensor(
        task_id="purge_risk",
        pipeline="{{ params.pipeline }}",
        min_headroom_seconds="{{ params.min_headroom }}",
        deferrable=True,
    ) >> BinlogConsumerLagSensor(
        task_id="fresh",
        pipeline="{{ params.pipeline }}",
        fresh_until="{{ params.fresh_until }}",
        deferrable=True,
        poke_interval=1,
    )

with sensor_dag("lag_gate_reschedule") as lag_gate_reschedule:
    BinlogConsumerLagSensor(
        task_id="caught_up",
        pipeline="{{ params.pipeline }}",
        max_lag_transactions=0,
        mode="reschedule",
        poke_interval=1,
        timeout=3,
        soft_fail=True,
    )
