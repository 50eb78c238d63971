from __future__ import annotations

import importlib
import json

import pytest

from airflow_provider_binlog.triggers import (
    BinlogLagTrigger,
    BinlogPurgeRiskTrigger,
    SparkConnectOperationTrigger,
)

OPERATION = {
    "session_id": "0f2c6b1e-5d0a-4f55-9a43-36c1f5e0f7aa",
    "operation_id": "6f1c1e2a-4a7b-4c46-8a36-0d3a1b0c9e11",
    "server_side_session_id": "b3c1c7de-1c0e-4c8b-8d0e-0b8f6f1d2c3e",
    "user_id": "airflow",
    "description": "window 7's new files of /target/shop/orders",
}


@pytest.mark.parametrize(
    "trigger",
    [
        BinlogLagTrigger(
            binlog_conn_id="src",
            pipeline="orders",
            max_lag_seconds=300.0,
            max_lag_bytes=10_000_000,
            max_lag_transactions=None,
            fresh_until="2026-01-01T00:15:00+00:00",
            poke_interval=30.0,
        ),
        BinlogPurgeRiskTrigger(binlog_conn_id="src", pipeline="orders", min_headroom_seconds=7200.0),
        SparkConnectOperationTrigger(conn_id="spark_default", operation=OPERATION),
    ],
)
def test_trigger_serializes_to_json_and_rebuilds_itself(trigger: object) -> None:
    classpath, kwargs = trigger.serialize()  # type: ignore[attr-defined]
    module, _, name = classpath.rpartition(".")
    rebuilt = getattr(importlib.import_module(module), name)(**json.loads(json.dumps(kwargs)))
    assert type(rebuilt) is type(trigger)
    assert rebuilt.serialize() == (classpath, kwargs)
    assert kwargs.get("pipeline", "orders") == "orders"


def test_spark_connect_trigger_keeps_no_secret_and_refuses_a_handle_without_ids() -> None:
    _, kwargs = SparkConnectOperationTrigger(conn_id="spark_default", operation=OPERATION).serialize()
    assert kwargs == {"conn_id": "spark_default", "operation": OPERATION}  # the token stays in the connection
    with pytest.raises(ValueError, match="operation_id must be a UUID"):
        SparkConnectOperationTrigger(conn_id="spark_default", operation={**OPERATION, "operation_id": ""})
