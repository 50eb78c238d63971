"""Unit tests of the key-range layout's planning: which files a window rewrites, how compaction groups files."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from airflow_provider_binlog.jobs.merge.delta import DataFile
from airflow_provider_binlog.jobs.merge.layout import (
    RewritePlan,
    key_points,
    key_region,
    plan_rewrite,
    rows_per_file,
)
from airflow_provider_binlog.jobs.merge.merge_on_read import candidate_files
from airflow_provider_binlog.maintenance import _File, small_file_runs

TARGET = 1000


def files(*ranges: tuple[int, int], size: int = TARGET) -> list[DataFile]:
    return [DataFile(f"f{low}", size, rows=10, low=low, high=high) for low, high in ranges]


LAYOUT = files((1, 10), (11, 20), (31, 40), (41, 50))


def removed(plan: RewritePlan) -> list[str]:
    return [f.path for f in plan.removed]


def test_a_key_inside_a_range_rewrites_that_file_only():
    plan = plan_rewrite(LAYOUT, [15], target_file_bytes=TARGET)

    assert removed(plan) == ["f11"]
    assert not plan.whole


def test_keys_in_two_distant_files_make_two_segments_that_keep_the_file_between():
    plan = plan_rewrite(LAYOUT, [5, 45], target_file_bytes=TARGET)

    assert removed(plan) == ["f1", "f41"]
    assert plan.bounds == [41]
    assert [plan.segment_of(k) for k in (1, 5, 10, 41, 50)] == [0, 0, 0, 1, 1]


def test_adjacent_files_share_a_segment():
    plan = plan_rewrite(LAYOUT, [5, 15], target_file_bytes=TARGET)

    assert removed(plan) == ["f1", "f11"]
    assert plan.bounds == []


def test_a_key_in_a_gap_goes_to_the_file_before_it_and_below_all_to_the_first():
    assert removed(plan_rewrite(LAYOUT, [25], target_file_bytes=TARGET)) == ["f11"]
    assert removed(plan_rewrite(LAYOUT, [0], target_file_bytes=TARGET)) == ["f1"]


def test_keys_above_the_largest_join_a_small_tail_or_open_a_new_segment():
    small_tail = [*LAYOUT[:-1], DataFile("f41", 100, rows=10, low=41, high=50)]
    assert removed(plan_rewrite(small_tail, [60], target_file_bytes=TARGET)) == ["f41"]

    plan = plan_rewrite(LAYOUT, [15, 60, 61], target_file_bytes=TARGET)

    assert removed(plan) == ["f11"]
    assert plan.new_above == 50
    assert [plan.segment_of(k) for k in (15, 50, 60)] == [0, 0, 1]


def test_overlapping_ranges_rewrite_every_file_a_key_can_be_in():
    overlapping = files((1, 10), (10, 20))

    assert removed(plan_rewrite(overlapping, [10], target_file_bytes=TARGET)) == ["f1", "f10"]


def test_a_file_without_a_key_range_makes_the_whole_table_rewritten():
    plan = plan_rewrite([*LAYOUT, DataFile("old", 10, rows=1)], [5], target_file_bytes=TARGET)

    assert plan.whole
    assert len(plan.removed) == 5


def test_rows_per_file_follows_the_bytes_per_row_of_the_current_files():
    assert rows_per_file(files((1, 10), size=1000), 50_000) == 500  # 100 bytes per row
    assert rows_per_file([], 50_000) == 250  # 200 bytes per row assumed


def test_compaction_joins_runs_of_small_adjacent_files_up_to_the_target():
    def f(low: int, size: int) -> _File:
        return _File(f"f{low}", size, {}, low, low + 9)

    layout = [f(1, 100), f(11, 200), f(21, 900), f(31, 100), f(41, 100), f(51, 300), f(61, 100)]

    runs = small_file_runs(layout, TARGET)

    assert [[x.path for x in run] for run in runs] == [["f1", "f11"], ["f31", "f41", "f51", "f61"]]


def test_scattered_keys_fill_the_smallest_gaps_beyond_the_most_segments():
    layout = files(*[(10 * i, 10 * i + 5) for i in range(400)])
    keys = [10 * i for i in range(0, 400, 3)]  # every third file: 134 runs

    plan = plan_rewrite(layout, keys, target_file_bytes=TARGET)

    assert len(plan.bounds) + 1 <= 64
    assert {f"f{k}" for k in keys} <= set(removed(plan))
    assert all(plan.segment_of(f.low) == plan.segment_of(f.high) for f in plan.removed)


def test_regions_number_the_gaps_and_the_points_between_the_files_bounds():
    points = key_points(files((10, 20), (30, 40), (15, 35)))

    assert points == [10, 15, 20, 30, 35, 40]
    assert [key_region(points, k) for k in (9, 10, 11, 15, 40, 41)] == [0, 1, 2, 3, 11, 12]


ranges = st.lists(
    st.tuples(st.integers(0, 60), st.integers(0, 20)).map(lambda t: (t[0], t[0] + t[1])),
    min_size=1,
    max_size=6,
)


@given(ranges, st.lists(st.integers(-5, 90), min_size=1, max_size=40), st.integers(0, 3))
def test_the_smallest_and_largest_key_of_each_region_decide_as_all_the_window_keys_do(
    bounds: list[tuple[int, int]], keys: list[int], full: int
):
    layout = [
        DataFile(f"f{n}", TARGET * (n < full), rows=10, low=lo, high=hi) for n, (lo, hi) in enumerate(bounds)
    ]
    points = key_points(layout)
    by_region: dict[int, list[int]] = {}
    for k in keys:
        by_region.setdefault(key_region(points, k), []).append(k)
    chosen = sorted({f(ks) for ks in by_region.values() for f in (min, max)})
    everything = sorted(set(keys))

    assert plan_rewrite(layout, chosen, target_file_bytes=TARGET) == plan_rewrite(
        layout, everything, target_file_bytes=TARGET
    )
    assert candidate_files(layout, chosen) == candidate_files(layout, everything)
