from __future__ import annotations

import importlib
import json

import pytest

from airflow_provider_binlog.triggers import BinlogLagTrigger, BinlogPurgeRiskTrigger


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
    ],
)
def test_trigger_serializes_to_json_and_rebuilds_itself(trigger: object) -> None:
    classpath, kwargs = trigger.serialize()  # type: ignore[attr-defined]
    module, _, name = classpath.rpartition(".")
    rebuilt = getattr(importlib.import_module(module), name)(**json.loads(json.dumps(kwargs)))
    assert type(rebuilt) is type(trigger)
    assert rebuilt.serialize() == (classpath, kwargs)
    assert kwargs["pipeline"] == "orders"
