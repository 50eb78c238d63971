"""Interval windows in the ledger: tiling, reuse, busy intervals, and the contiguous checkpoint."""

from __future__ import annotations

import pendulum
import pytest

from airflow_provider_binlog.contract.positions import BinlogPosition
from airflow_provider_binlog.exceptions import BinlogConfigError, PipelineBusyError
from airflow_provider_binlog.pipeline.ledger import PipelineState
from airflow_provider_binlog.pipeline.state import StateManager
from airflow_provider_binlog.pipeline.windows import (
    advance_checkpoint,
    cut_interval_window,
    cut_window,
    mark_window,
)

T0 = pendulum.datetime(2026, 3, 1, 12, 0, tz="UTC")
# A binlog where the transaction boundary before moment T0 + k minutes is at byte 1000 + 100 * k.
BOUNDARIES = {T0.add(minutes=k): BinlogPosition("b.000001", 1000 + 100 * k) for k in range(10)}


class Locator:
    def __init__(self) -> None:
        self.calls: list[pendulum.DateTime] = []

    def __call__(self, moment: pendulum.DateTime) -> BinlogPosition:
        self.calls.append(moment)
        return BOUNDARIES[moment]


def fresh() -> PipelineState:
    return StateManager("p", store=_Store()).initial("id", "mariadb", BinlogPosition("b.000001", 4))


class _Store:
    def get(self, key: str) -> str | None:
        return None

    def set(self, key: str, value: str) -> None:
        raise AssertionError("not written in these tests")


def cut(
    state: PipelineState, k: int, run: str, locate: Locator, holders: dict[str, str] | None = None
) -> tuple[PipelineState, object, bool]:
    """Cut the window of interval k for ``run``; ``holders`` gives other runs' Airflow states (default unknown)."""
    return cut_interval_window(
        state,
        run_id=run,
        interval_start=T0.add(minutes=k),
        interval_end=T0.add(minutes=k + 1),
        locate=locate,
        holder_state=lambda held: (holders or {}).get(held.run_id, "unknown"),
    )


def merge(state: PipelineState, seq: int) -> PipelineState:
    merged = mark_window(state, seq, status="merged")
    return merged.model_copy(update={"checkpoint": advance_checkpoint(merged, merged.window(seq))})


def test_intervals_cut_out_of_order_tile_and_share_bounds() -> None:
    locate = Locator()
    state, third, _ = cut(fresh(), 3, "r3", locate)
    state, first, _ = cut(state, 1, "r1", locate)
    state, second, _ = cut(state, 2, "r2", locate)
    ordered = sorted(state.windows, key=lambda w: w.seq)
    assert [w.run_id for w in ordered] == ["r1", "r2", "r3"]
    assert ordered[0].end == ordered[1].start
    assert ordered[1].end == ordered[2].start
    assert ordered[1].start.pos == 1200
    # the middle interval took both bounds from its neighbours: only four boundaries were located
    assert len(locate.calls) == 4
    assert third.seq == int(T0.add(minutes=4).timestamp() * 1000)  # type: ignore[attr-defined]


def test_a_held_interval_is_busy_and_a_merged_one_is_taken_over() -> None:
    locate = Locator()
    state, window, _ = cut(fresh(), 1, "r1", locate)
    with pytest.raises(PipelineBusyError, match="is held by run 'r1'"):
        cut(state, 1, "manual", locate)
    state = merge(state, window.seq)  # type: ignore[attr-defined]
    state, taken, reused = cut(state, 1, "backfill", locate)
    assert reused
    assert taken.run_id == "backfill"  # type: ignore[attr-defined]
    assert taken.seq == window.seq  # type: ignore[attr-defined]
    assert len(state.windows) == 1


def test_a_run_adopts_only_the_abandoned_window_of_its_own_interval() -> None:
    locate = Locator()
    state, first, _ = cut(fresh(), 1, "r1", locate)
    state, second, _ = cut(state, 2, "r2", locate)
    dead = {"r1": "failed", "r2": "failed"}
    # a run of another interval cuts its own window beside both abandoned ones
    state, third, reused = cut(state, 3, "r3", locate, holders=dead)
    assert not reused
    assert [w.run_id for w in state.windows] == ["r1", "r2", "r3"]
    # the new run of interval 1 adopts interval 1's window, and only that one
    state, adopted, reused = cut(state, 1, "again", locate, holders=dead)
    assert reused
    assert (adopted.seq, adopted.start, adopted.end) == (first.seq, first.start, first.end)  # type: ignore[attr-defined]
    assert [(h.from_run, h.to_run, h.holder_state) for h in adopted.handovers] == [("r1", "again", "failed")]  # type: ignore[attr-defined]
    assert [w.run_id for w in state.windows] == ["again", "r2", "r3"]
    assert state.window(second.seq).handovers == []  # type: ignore[attr-defined]
    with pytest.raises(
        PipelineBusyError,
        match=r"interval \[.*\) of pipeline 'p' is held by run 'r3'.*shows that run as running",
    ):
        cut(state, 3, "other", locate, holders={"r3": "running"})


def test_checkpoint_moves_only_across_contiguous_merged_windows() -> None:
    locate = Locator()
    state = fresh()
    state = state.model_copy(
        update={
            "checkpoint": state.checkpoint.model_copy(update={"position": (BOUNDARIES[T0.add(minutes=1)])})
        }
    )
    windows = {}
    for k in (1, 2, 3):
        state, windows[k], _ = cut(state, k, f"r{k}", locate)
    state = merge(state, windows[3].seq)  # ahead of a gap: waits
    assert state.checkpoint.position.pos == 1100
    state = merge(state, windows[1].seq)
    assert state.checkpoint.position.pos == 1200
    state = merge(state, windows[2].seq)  # fills the gap: jumps over the merged third window
    assert state.checkpoint.position.pos == 1400
    assert state.checkpoint.window == windows[3].seq


def test_empty_interval_and_mixed_modes_are_refused() -> None:
    with pytest.raises(BinlogConfigError, match="empty data interval"):
        cut_interval_window(fresh(), run_id="r", interval_start=T0, interval_end=T0, locate=Locator())
    state, _, _ = cut_window(fresh(), run_id="h", head=BinlogPosition("b.000001", 90))
    with pytest.raises(BinlogConfigError, match="cuts windows by head"):
        cut(state, 1, "r1", Locator())
