"""The truncate marker's order keys and what a merge does with them (``jobs/merge/truncate.py``)."""

from __future__ import annotations

from airflow_provider_binlog.jobs.merge.truncate import Truncation, floor_app_ids
from airflow_provider_binlog.jobs.merge.window import StagedTable

WINDOW = 1_763_950_000_000  # window seqs start at a Unix time in milliseconds
SNAPSHOT_SEQ = 7 << 32 | 12  # a snapshot row's _binlog_seq: chunk << 32 | row


def test_a_marker_above_the_floor_empties_and_raises_the_floor() -> None:
    truncation = Truncation(floor=(WINDOW, SNAPSHOT_SEQ), marker=(WINDOW + 1, 2))
    assert truncation.empties
    assert truncation.cut == (WINDOW + 1, 2)
    window_app, seq_app = floor_app_ids("shop")
    assert truncation.app_transactions("shop") == {window_app: WINDOW + 1, seq_app: 2}


def test_a_marker_below_the_floor_only_drops_rows_below_the_floor() -> None:
    # an older window with a TRUNCATE merged after a newer one: the newer marker already removed more
    truncation = Truncation(floor=(6, 1), marker=(4, 2))
    assert not truncation.empties
    assert truncation.cut == (6, 1)
    assert truncation.app_transactions("shop") == {}


def test_without_a_marker_the_floor_still_cuts() -> None:
    assert Truncation(floor=(6, 1)).cut == (6, 1)
    assert not Truncation(floor=(6, 1)).empties
    assert Truncation().cut is None


def test_a_window_of_only_markers_is_told_apart() -> None:
    only = StagedTable(name="shop.t", files=("f",), rows=2, primary_key=(), markers=2)
    mixed = StagedTable(name="shop.t", files=("f",), rows=3, primary_key=("id",), markers=1)
    none = StagedTable(name="shop.t", files=("f",), rows=0, primary_key=("id",))
    assert only.markers_only
    assert not mixed.markers_only
    assert not none.markers_only
