"""Purge-risk and lag sensors through dag.test(): poke, soft-fail, deferrable and reschedule modes."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pendulum
import pymysql
import pytest
from conftest import REPO, DagRunner, load_example_dag, load_module, stored_state, xcom

from airflow_provider_binlog.contract.positions import BinlogPosition
from airflow_provider_binlog.hooks.binlog import BinlogHook
from airflow_provider_binlog.monitoring.lag import LagReport, measure_lag
from airflow_provider_binlog.testing.mariadb import LocalMariaDB
from airflow_provider_binlog.testing.workload import ShopWorkload, create_shop_schema

pytestmark = pytest.mark.system


def states(run: Any) -> dict[str, str]:
    return {ti.task_id: str(ti.state) for ti in run.get_task_instances()}


@pytest.fixture
def sensor_dags() -> Any:
    return load_module(REPO / "tests" / "system" / "dags" / "sensor_dags.py")


@pytest.fixture
def shop(
    connections: LocalMariaDB, airflow_db: object, pipeline_dirs: dict[str, str]
) -> Iterator[dict[str, Any]]:
    """A shop database and a pipeline over it that has run once (its checkpoint is the head)."""
    name = f"shop_{uuid.uuid4().hex[:8]}"
    with pymysql.connect(**connections.connection_kwargs()) as conn:
        create_shop_schema(conn, name)
    conf = {"pipeline": f"p_{name}", "tables": f"{name}.*", **pipeline_dirs}
    cdc = DagRunner(load_example_dag(), conf)
    assert cdc.run().state == "success"
    yield {"db": name, "pipeline": conf["pipeline"], "cdc": cdc}
    connections.execute("SET GLOBAL binlog_expire_logs_seconds = 0")


def add_customer(server: LocalMariaDB, shop: dict[str, Any]) -> None:
    """Commit one transaction in the pipeline's tables."""
    server.execute(
        f"INSERT INTO {shop['db']}.customers (id, email, name, created_at) "
        f"VALUES ({uuid.uuid4().int % 10**12}, 'x@example.com', 'x', NOW(6))"
    )


def run_sensors(dag: Any, pipeline: str, **params: Any) -> Any:
    return DagRunner(dag, {"pipeline": pipeline, **params}).run()


def lag_of(pipeline: str, mariadb: LocalMariaDB) -> LagReport:
    state = stored_state(pipeline)
    assert state is not None
    hook = BinlogHook(pipeline=pipeline)
    read_at = pendulum.now("UTC")
    server = hook.server_state()
    return measure_lag(
        hook, pipeline, BinlogPosition.from_dict(state["checkpoint"]["position"]), None, server, read_at
    )


def test_purge_risk_sensor_outcomes(
    connections: LocalMariaDB, shop: dict[str, Any], sensor_dags: Any
) -> None:
    pipeline = shop["pipeline"]
    safe = run_sensors(sensor_dags.purge_guard, pipeline, min_headroom=10**9)
    assert states(safe) == {"purge_risk": "success"}  # binlog_expire_logs_seconds=0: never expires
    assert xcom(safe, "purge_risk")["headroom_seconds"] is None

    connections.execute("SET GLOBAL binlog_expire_logs_seconds = 3600")
    assert states(run_sensors(sensor_dags.purge_guard, pipeline, min_headroom=60)) == {
        "purge_risk": "success"
    }
    assert states(run_sensors(sensor_dags.purge_guard, pipeline, min_headroom=7200)) == {
        "purge_risk": "failed"
    }
    assert states(run_sensors(sensor_dags.purge_guard_soft, pipeline, min_headroom=7200)) == {
        "purge_risk": "skipped"
    }

    add_customer(connections, shop)
    connections.purge_binlogs_before_current()
    assert states(run_sensors(sensor_dags.purge_guard, pipeline, min_headroom=60)) == {"purge_risk": "failed"}
    # soft_fail must not turn lost binlogs into a skip
    assert states(run_sensors(sensor_dags.purge_guard_soft, pipeline, min_headroom=60)) == {
        "purge_risk": "failed"
    }


def test_deferrable_sensors_decide_in_the_trigger(
    connections: LocalMariaDB, shop: dict[str, Any], sensor_dags: Any
) -> None:
    before_pending = pendulum.now("UTC").start_of("second")
    time.sleep(1.1)
    add_customer(connections, shop)
    run = run_sensors(
        sensor_dags.sensors_deferred,
        shop["pipeline"],
        min_headroom=60,
        fresh_until=before_pending.isoformat(),
    )
    assert states(run) == {"purge_risk": "success", "fresh": "success"}
    report = xcom(run, "fresh")
    assert report["transactions"] == 1
    assert report["pending_since"] >= before_pending.isoformat()


def test_reschedule_mode_waits_then_soft_fails_while_lag_stays(
    connections: LocalMariaDB, shop: dict[str, Any], sensor_dags: Any
) -> None:
    add_customer(connections, shop)
    run = run_sensors(sensor_dags.lag_gate_reschedule, shop["pipeline"])
    assert states(run) == {"caught_up": "skipped"}
    assert shop["cdc"].run().state == "success"
    assert states(run_sensors(sensor_dags.lag_gate_reschedule, shop["pipeline"])) == {"caught_up": "success"}


def test_lag_rises_under_a_workload_and_falls_after_a_merge(
    connections: LocalMariaDB, shop: dict[str, Any]
) -> None:
    workload = ShopWorkload(
        connect=lambda: pymysql.connect(**connections.connection_kwargs(autocommit=False)),
        db=shop["db"],
        seed=5,
    )
    workload.start(100_000, pause_seconds=0.01)
    try:
        time.sleep(2)
        first = lag_of(shop["pipeline"], connections)
        time.sleep(2)
        second = lag_of(shop["pipeline"], connections)
    finally:
        workload.stop()
    assert 0 < first.seconds < second.seconds
    assert 0 < first.transactions < second.transactions  # type: ignore[operator]
    assert 0 < first.bytes < second.bytes
    assert shop["cdc"].run().state == "success"
    after = lag_of(shop["pipeline"], connections)
    assert (after.seconds, after.transactions, after.pending_since) == (0.0, 0, None)


def test_monitor_dag_fails_loudly_on_lag(
    connections: LocalMariaDB, shop: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BINLOG_MONITOR_PIPELINES", shop["pipeline"])
    monkeypatch.setenv("BINLOG_MONITOR_MIN_HEADROOM_SECONDS", "60")
    monkeypatch.setenv("BINLOG_MONITOR_MAX_LAG_SECONDS", "1")
    monitor = load_module(REPO / "example_dags" / "binlog_monitor.py").dag
    pipeline = shop["pipeline"]
    run = DagRunner(monitor, {}).run()
    assert states(run) == {
        f"health__{pipeline}": "success",
        f"purge_risk__{pipeline}": "success",
        f"lag__{pipeline}": "success",
    }
    health = xcom(run, f"health__{pipeline}")
    state = stored_state(pipeline)
    assert state is not None
    assert health["checkpoint"]["pos"] == state["checkpoint"]["position"]["pos"]
    assert health["last_merged"]["seq"] == state["checkpoint"]["window"]
    assert (health["held"], health["needs_attention"], health["next_step"]) == (
        [],
        False,
        "healthy: nothing to do",
    )
    add_customer(connections, shop)
    time.sleep(2.5)
    assert states(DagRunner(monitor, {}).run()) == {
        f"health__{pipeline}": "success",
        f"purge_risk__{pipeline}": "success",
        f"lag__{pipeline}": "failed",
    }
