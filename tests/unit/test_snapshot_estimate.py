"""Which snapshots measure the snapshot rate, and how the pending snapshots' time is estimated."""

from __future__ import annotations

import pendulum
import pytest

from airflow_provider_binlog.contract.positions import BinlogPosition
from airflow_provider_binlog.monitoring.snapshot_estimate import (
    DEFAULT_SNAPSHOT_ROWS_PER_SECOND,
    SNAPSHOT_OVERHEAD_SECONDS,
    estimate_snapshots,
    snapshot_rate,
)
from airflow_provider_binlog.pipeline.ledger import Handover, PipelineState, Snapshot
from airflow_provider_binlog.pipeline.state import StateManager

HEAD = BinlogPosition("mariadb-bin.000001", 400, "0-1-5")
NOW = pendulum.datetime(2026, 11, 24, 12, tz="UTC")


class _Store:
    def get(self, key: str) -> str | None:
        return None

    def set(self, key: str, value: str) -> None:
        raise AssertionError("not written")


def snapshot(seq: int, tables: list[str], rows: int, seconds: float | None, **extra: object) -> Snapshot:
    """A snapshot started ``seconds`` before NOW + overhead and finished at NOW (None: still running)."""
    started = NOW.subtract(seconds=(seconds or 0) + SNAPSHOT_OVERHEAD_SECONDS)
    return Snapshot(
        seq=seq,
        tables=tables,
        start=(HEAD),
        run_id=f"r{seq}",
        started_at=started.isoformat(),
        staging_uri=f"/s/snapshot={seq}",
        status="running" if seconds is None else "merged",
        rows=rows,
        finished_at=None if seconds is None else NOW.isoformat(),
        **extra,  # type: ignore[arg-type]
    )


def state_with(*snapshots: Snapshot) -> PipelineState:
    state = StateManager("p", store=_Store()).initial("id", "mariadb", HEAD)
    return state.model_copy(update={"snapshots": list(snapshots)})


def test_rate_is_measured_on_large_untaken_snapshots_only() -> None:
    handed = Handover(from_run="r0", to_run="r3", at=NOW.isoformat(), holder_state="failed")
    state = state_with(
        snapshot(1, ["d.a"], 100_000, 100.0),  # 1000 rows/s
        snapshot(2, ["d.b"], 500, 1.0),  # too small: mostly overhead
        snapshot(3, ["d.c"], 300_000, 100.0, handovers=[handed]),  # its time includes a dead run's
        snapshot(4, ["d.d"], 300_000, 100.0),  # 3000 rows/s
    )
    rate = snapshot_rate(state, configured=7.0)
    assert rate.rows_per_second == pytest.approx(2000)  # 400,000 rows in 200 s
    assert rate.source == "measured on snapshot 1, 4"


def test_without_a_measurement_the_configured_rate_then_the_default_applies() -> None:
    assert snapshot_rate(None, configured=7.0).rows_per_second == 7.0
    assert snapshot_rate(state_with(), None).rows_per_second == DEFAULT_SNAPSHOT_ROWS_PER_SECOND


def test_running_snapshots_count_their_remaining_time_and_new_tables_their_whole_time() -> None:
    running = snapshot(1, ["d.a"], 0, None)  # started SNAPSHOT_OVERHEAD_SECONDS ago
    state = state_with(running, snapshot(2, ["d.done"], 10, 5.0))
    rate = snapshot_rate(None, configured=10.0)
    rows = {"d.a": 3000, "d.new": 1000, "d.done": 10}
    estimate = estimate_snapshots(state, rows, ["d.a", "d.new", "d.done"], rate, NOW)
    assert estimate.tables == ("d.a", "d.new")
    assert estimate.running == (1,)
    # d.a: 120 + 300 s needed, 120 s done; d.new: 120 + 100 s
    assert estimate.seconds == pytest.approx(300 + SNAPSHOT_OVERHEAD_SECONDS + 100)
    assert estimate_snapshots(None, rows, ["d.new"], rate, NOW).seconds == SNAPSHOT_OVERHEAD_SECONDS + 100
