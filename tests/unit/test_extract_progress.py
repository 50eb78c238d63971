from __future__ import annotations

import logging

import pytest

from airflow_provider_binlog.contract.positions import BinlogPosition
from airflow_provider_binlog.extract.progress import ExtractProgress

FILES = [("bin.000001", 1_000), ("bin.000002", 4_000), ("bin.000003", 500)]


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_bytes_left_and_eta_span_binlog_files() -> None:
    clock = Clock()
    progress = ExtractProgress(
        window=7,
        start=BinlogPosition("bin.000001", 200),
        end=BinlogPosition("bin.000003", 300),
        binlog_files=FILES,
        clock=clock,
    )
    assert progress.total == 800 + 4_000 + 300
    # 1,275 of 5,100 bytes read in 30 s: 3,825 left take 90 s more at that rate.
    line = progress.line(BinlogPosition("bin.000002", 475), 6_000, 130.0)
    assert (
        line
        == "window 7: 6,000 rows (200 rows/s) at bin.000002:475, 3,825 of 5,100 bytes left, ETA 1 min 30 s"
    )
    assert progress.line(BinlogPosition("bin.000001", 200), 0, 101.0).endswith("ETA unknown")


def test_a_line_at_most_once_per_period(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    progress = ExtractProgress(
        window=1,
        start=BinlogPosition("bin.000001", 4),
        end=BinlogPosition("bin.000001", 1_000),
        binlog_files=FILES,
        period=10,
        clock=clock,
    )
    with caplog.at_level(logging.INFO):
        for step in range(35):
            clock.now = 100.0 + step
            progress.tick("bin.000001", 4 + step, step)
    assert [r.getMessage().split(" rows ")[0] for r in caplog.records] == [
        "window 1: 10",
        "window 1: 20",
        "window 1: 30",
    ]
