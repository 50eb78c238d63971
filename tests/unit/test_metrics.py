from __future__ import annotations

import socket
from collections.abc import Iterator

import pendulum
import pytest

from airflow_provider_binlog.contract.positions import BinlogPosition
from airflow_provider_binlog.monitoring.lag import LagReport


@pytest.fixture
def statsd_listener(monkeypatch: pytest.MonkeyPatch) -> Iterator[socket.socket]:
    """A UDP socket that Airflow's StatsD client (influxdb-style tags) sends to."""
    from airflow.sdk._shared.observability.metrics import stats
    from airflow.sdk._shared.observability.metrics.base_stats_logger import NoStatsLogger
    from airflow.sdk.observability.metrics import stats_utils

    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    sock.settimeout(5)
    monkeypatch.setenv("AIRFLOW__METRICS__STATSD_ON", "True")
    monkeypatch.setenv("AIRFLOW__METRICS__STATSD_HOST", "127.0.0.1")
    monkeypatch.setenv("AIRFLOW__METRICS__STATSD_PORT", str(sock.getsockname()[1]))
    monkeypatch.setenv("AIRFLOW__METRICS__STATSD_INFLUXDB_ENABLED", "True")
    stats.initialize(factory=stats_utils.get_stats_factory(), export_legacy_names=False)
    try:
        yield sock
    finally:
        stats.initialize(factory=NoStatsLogger, export_legacy_names=False)
        sock.close()


def received(sock: socket.socket, count: int) -> list[str]:
    return [sock.recv(4096).decode() for _ in range(count)]


def test_lag_gauges_carry_the_pipeline_tag(statsd_listener: socket.socket) -> None:
    from airflow_provider_binlog.monitoring.metrics import emit_lag

    position = BinlogPosition("b.000001", 4)
    now = pendulum.now("UTC")
    report = LagReport("orders", position, position, None, None, 12.5, 2048, 7, now)
    emit_lag(report)
    assert received(statsd_listener, 3) == [
        "airflow.binlog.lag.seconds,pipeline=orders:12.5|g",
        "airflow.binlog.lag.bytes,pipeline=orders:2048|g",
        "airflow.binlog.lag.transactions,pipeline=orders:7|g",
    ]


def test_window_metrics(statsd_listener: socket.socket) -> None:
    from airflow_provider_binlog.monitoring.metrics import emit_window

    emit_window("orders", rows_extracted=120, rows_merged=120, duration_seconds=1.5)
    assert received(statsd_listener, 3) == [
        "airflow.binlog.window.rows_extracted,pipeline=orders:120|g",
        "airflow.binlog.window.rows_merged,pipeline=orders:120|g",
        "airflow.binlog.window.duration,pipeline=orders:1500.000000|ms",
    ]
