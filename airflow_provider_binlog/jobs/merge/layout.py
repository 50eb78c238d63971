"""The key-range file layout: which data files a window rewrites, and how the new files are cut.

A table in this layout (``docs/adr/0020-key-range-file-layout.md``) keeps its rows in Parquet files sorted by
key; each file's key range is the first key column's ``minValues``/``maxValues`` in its Delta add action,
and after a whole rewrite the ranges are disjoint. A window rewrites only the files a changed key can be in
(:func:`plan_rewrite`):

* a key inside a file's range: that file (every file whose range holds it, so overlapping ranges are
  safe);
* a key in a gap between two files, or below the first: the file before the gap (the first file), whose
  range grows into the gap without reaching the next file;
* a key above the table's largest: the tail file while it is below the target size, else a new file.

A file without a recorded key range (a hash-bucket table's, or a key type without exact statistics) can
hold any key: the window then rewrites the whole table. The new files are cut per run of adjacent rewritten
files (a *segment*, :func:`segment_column`) so that no new file's range spans a file the window kept, and
split at the table's target size. For a composite key only the first column prunes: a superset of the
files holding the keys, never fewer.

Pure Python planning plus the Spark expressions and the one Spark job it plans from; no Airflow (it runs on
Spark drivers).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from airflow_provider_binlog.jobs.merge.delta import DataFile

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

SEGMENT_COLUMN = "_binlog_segment"
"""Column the merge's Spark write is partitioned by: the run of rewritten files a new row belongs to."""
MAX_SEGMENTS = 64
"""Most segments one rewrite cuts (the Spark expression is a chain of this many comparisons); beyond it the
files between the closest runs of rewritten files are rewritten too."""
FALLBACK_ROW_BYTES = 200
"""Bytes per row assumed when no current file tells (a new table): the files are split at size later."""


@dataclass(frozen=True)
class RewritePlan:
    """The files one window rewrites and how the new rows are cut into segments.

    :param removed: the current files the window rewrites (their rows are read and written again).
    :param bounds: the smallest key of each segment after the first, ascending: a row with first key
        column ``k`` goes to segment ``bisect_right(bounds, k)``.
    :param new_above: keys above this go to a segment of their own after the others (the tail file is
        full), None when there is no such segment.
    :param whole: every current file is rewritten (files without key ranges, or a whole-table operation).
    """

    removed: list[DataFile] = field(default_factory=list)
    bounds: list[Any] = field(default_factory=list)
    new_above: Any = None
    whole: bool = False

    def segment_of(self, key: Any) -> int:
        """Return the segment of a row whose first key column is ``key`` (what :func:`segment_column` computes)."""
        if self.new_above is not None and key > self.new_above:
            return len(self.bounds) + 1
        return bisect.bisect_right(self.bounds, key)


def plan_rewrite(
    files: Sequence[DataFile], keys: Sequence[Any], *, target_file_bytes: int, whole: bool = False
) -> RewritePlan:
    """Return the files a window rewrites, from the log's key ranges and the window's keys.

    :param files: the table's current files (:func:`~airflow_provider_binlog.jobs.merge.delta.current_files`).
    :param keys: the distinct values of the window's first key column, ascending.
    :param target_file_bytes: the table's target file size (a tail file at or above it takes no new keys).
    :param whole: rewrite every file (a snapshot, a truncate marker, a schema replacement).
    """
    if whole or not all(f.ranged for f in files):
        return RewritePlan(removed=list(files), whole=True)
    if not files:
        return RewritePlan()
    ranged = sorted(files, key=lambda f: (f.low, f.high))
    lows = [f.low for f in ranged]
    chosen = set()
    for i, f in enumerate(ranged):
        if bisect.bisect_right(keys, f.high) > bisect.bisect_left(keys, f.low):
            chosen.add(i)
    top = max(range(len(ranged)), key=lambda i: ranged[i].high)
    new_above = None
    for k in keys:
        i = bisect.bisect_right(lows, k) - 1
        if i >= 0 and k <= ranged[i].high:
            continue  # inside file i: chosen above
        if k > ranged[top].high:
            if ranged[top].size < target_file_bytes:
                chosen.add(top)
            else:
                new_above = ranged[top].high
        else:
            chosen.add(max(i, 0))
    runs = _fill_gaps(sorted(chosen), MAX_SEGMENTS)
    bounds = [ranged[i].low for n, i in enumerate(runs) if n > 0 and runs[n - 1] != i - 1]
    return RewritePlan(removed=[ranged[i] for i in runs], bounds=bounds, new_above=new_above)


def key_points(files: Sequence[DataFile]) -> list[Any]:
    """Return the distinct key bounds (``low`` and ``high``) of the ranged ``files``, ascending.

    The points cut the first key column's domain into *regions* (:func:`key_region`) over which every decision
    of :func:`plan_rewrite` and :func:`~airflow_provider_binlog.jobs.merge.merge_on_read.candidate_files` is
    constant, as each compares a key with these points only.
    """
    return sorted({v for f in files if f.ranged for v in (f.low, f.high)})


def key_region(points: Sequence[Any], key: Any) -> int:
    """Return the region of ``points`` (:func:`key_points`) that holds ``key``.

    Region ``2a`` is the open interval below ``points[a]`` (and above ``points[a - 1]``), region ``2a + 1`` the
    point ``points[a]`` itself: ``2 * len(points) + 1`` regions in all.
    """
    return bisect.bisect_left(points, key) + bisect.bisect_right(points, key)


def region_column(key: str, points: Sequence[Any]) -> Column:
    """Return the Spark expression of :func:`key_region` for the first key column ``key``.

    A balanced tree of comparisons with the points (depth about log2 of their number), so that a window of
    millions of keys over thousands of files costs a few comparisons per key.
    """
    from pyspark.sql import functions as F

    from airflow_provider_binlog.jobs.merge.transforms import col

    def between(lo: int, hi: int) -> Column:  # the key lies above points[lo - 1] and below points[hi]
        if lo == hi:
            return F.lit(2 * lo)
        mid = (lo + hi) // 2
        point = F.lit(points[mid])
        return (
            F.when(col(key) < point, between(lo, mid))
            .when(col(key) == point, F.lit(2 * mid + 1))
            .otherwise(between(mid + 1, hi))
        )

    return between(0, len(points)).cast("int")


def deciding_keys(frame: DataFrame, key: str, files: Sequence[DataFile]) -> list[Any]:
    """Return keys of ``frame`` that stand for all of its first key column's values in the rewrite's decisions.

    Each decision of :func:`plan_rewrite` and
    :func:`~airflow_provider_binlog.jobs.merge.merge_on_read.candidate_files` compares a key with the files' key
    bounds only, so it is the same for every key of one region between them (:func:`key_region`): the smallest
    and largest key of each region the frame touches decide as all of its keys do (nulls, which no file holds,
    are left out). One Spark job; at most two keys per region (about ``4 * len(files) + 2``) reach the driver,
    however many rows the frame holds.

    :param frame: rows with the first key column ``key`` (a window's changes, an SCD2 merge's events).
    :param files: the table's current files, all ranged.
    :raises MergeJobError: if Spark orders the keys other than Python does (a region's smallest or largest key
        falls in another region when compared in Python), which would make the plan miss files.
    """
    from pyspark.sql import functions as F

    from airflow_provider_binlog.jobs.application import MergeJobError
    from airflow_provider_binlog.jobs.merge.transforms import col

    points = key_points(files)
    regions = (
        frame.where(col(key).isNotNull())
        .groupBy(region_column(key, points).alias("region"))
        .agg(F.min(col(key)).alias("low"), F.max(col(key)).alias("high"))
        .toArrow()
        .to_pylist()
    )
    keys: set[Any] = set()
    for r in regions:
        if key_region(points, r["low"]) != r["region"] or key_region(points, r["high"]) != r["region"]:
            raise MergeJobError(
                f"key column {key!r}: Spark and Python order its values {r['low']!r}, {r['high']!r} differently "
                "against the files' key ranges; the merge cannot choose the files to rewrite"
            )
        keys.update((r["low"], r["high"]))
    return sorted(keys)


def _fill_gaps(chosen: list[int], most: int) -> list[int]:
    """Return ``chosen`` (ascending file indexes) with the smallest gaps filled, so that at most ``most`` runs remain."""
    gaps = [(b - a - 1, a, b) for a, b in zip(chosen, chosen[1:], strict=False) if b - a > 1]
    if len(gaps) < most:
        return chosen
    filled = set(chosen)
    for _, a, b in sorted(gaps)[: len(gaps) - most + 1]:
        filled.update(range(a + 1, b))
    return sorted(filled)


def rows_per_file(files: Sequence[DataFile], target_file_bytes: int) -> int:
    """Return how many rows a new file holds to reach the target size, from the current files' bytes per row.

    :param files: files whose size and row count are known (the table's current ones).
    :param target_file_bytes: the table's target file size.
    """
    rows = sum(f.rows for f in files)
    size = sum(f.size for f in files if f.rows)
    per_row = size / rows if rows and size else FALLBACK_ROW_BYTES
    return max(1, int(target_file_bytes // max(per_row, 1)))


def write_partitions(rows: int, per_file: int) -> int:
    """Return the number of Spark tasks that write ``rows`` rows into files of ``per_file`` rows (at least 1)."""
    return max(1, math.ceil(rows / per_file))


def segment_column(key: str, plan: RewritePlan) -> Column:
    """Return the Spark expression of :meth:`RewritePlan.segment_of` for the first key column ``key``.

    :param key: the first key column's name.
    :param plan: the rewrite plan.
    """
    from pyspark.sql import functions as F

    from airflow_provider_binlog.jobs.merge.transforms import col

    segment = F.lit(0)
    for n, bound in enumerate(plan.bounds, start=1):
        segment = F.when(col(key) >= F.lit(bound), F.lit(n)).otherwise(segment)
    if plan.new_above is not None:
        segment = F.when(col(key) > F.lit(plan.new_above), F.lit(len(plan.bounds) + 1)).otherwise(segment)
    return segment.cast("int").alias(SEGMENT_COLUMN)
