"""How long the snapshots a pipeline still has to take will last: the time its oldest needed binlog must survive.

A new pipeline's first window starts at its snapshot's start, and the example DAG cuts it only once the
snapshot is merged, so the binlog file holding that start must outlive the snapshot. The estimate is
``SNAPSHOT_OVERHEAD_SECONDS + rows / rate`` per snapshot still to take, where ``rows`` is the
information_schema row estimate of its tables (``TABLES.TABLE_ROWS``: exact for MyISAM, a sampled
estimate for InnoDB, MySQL manual "The INFORMATION_SCHEMA TABLES Table") and ``rate`` is measured on the
pipeline's earlier snapshots when there are any, else :data:`DEFAULT_SNAPSHOT_ROWS_PER_SECOND`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pendulum

from airflow_provider_binlog.pipeline.ledger import PipelineState, Snapshot

DEFAULT_SNAPSHOT_ROWS_PER_SECOND = 5000.0
"""Rows per second assumed when the pipeline has no measured snapshot: about a tenth of the end-to-end rate
measured on 2 cores (47,000 rows/s, ``docs/benchmarks.md``, "Snapshot throughput"), so a busy source, wide
rows or a slow Spark cluster still finish within the estimate."""
SNAPSHOT_OVERHEAD_SECONDS = 120.0
"""Seconds added to every snapshot for planning, the Spark application's start and its Delta commit."""
MEASURED_SNAPSHOTS = 5
"""How many of the newest merged snapshots the measured rate is taken from."""
MIN_MEASURED_ROWS = 10_000
"""Snapshots smaller than this are not measured: their time is mostly overhead."""


@dataclass(frozen=True)
class SnapshotRate:
    """A snapshot read rate and where it comes from.

    :param rows_per_second: rows per second, overhead excluded.
    :param source: ``measured (snapshots 3, 7)`` or ``default`` / ``configured``.
    """

    rows_per_second: float
    source: str


@dataclass(frozen=True)
class SnapshotEstimate:
    """The time the pipeline's pending snapshots still need.

    :param tables: the ``db.table`` names still to read (running snapshots' tables included).
    :param rows: their information_schema row estimate.
    :param seconds: estimated seconds until they are merged (running ones: minus the time they have run).
    :param rate: the rate it assumes.
    :param running: seq numbers of the snapshots in progress it includes.
    """

    tables: tuple[str, ...]
    rows: int
    seconds: float
    rate: SnapshotRate
    running: tuple[int, ...] = ()

    def describe(self) -> str:
        """Return one phrase for logs: what is estimated and from what."""
        if not self.tables:
            return "no snapshot pending"
        running = (
            f" (snapshot {', '.join(map(str, self.running))} in progress: the time it has run is deducted)"
            if self.running
            else ""
        )
        return (
            f"snapshot of {', '.join(self.tables)}: ~{self.rows} rows at {self.rate.rows_per_second:.0f} rows/s "
            f"({self.rate.source}) + {SNAPSHOT_OVERHEAD_SECONDS:.0f} s overhead per snapshot, {self.seconds:.0f} s "
            f"still needed{running}"
        )

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON form."""
        return {
            "tables": list(self.tables),
            "rows": self.rows,
            "seconds": self.seconds,
            "rows_per_second": self.rate.rows_per_second,
            "rate_source": self.rate.source,
            "running": list(self.running),
        }


def snapshot_rate(state: PipelineState | None, configured: float | None = None) -> SnapshotRate:
    """Return the rate of the pipeline's newest merged snapshots, else ``configured``, else the default.

    Measured as total rows over total time (``finished_at - started_at`` minus
    :data:`SNAPSHOT_OVERHEAD_SECONDS` each) of up to :data:`MEASURED_SNAPSHOTS` merged snapshots of at
    least :data:`MIN_MEASURED_ROWS` rows that no other run took over (a take-over's time includes the dead
    run's idle time). ``configured`` wins over the default only: a measurement is better than a guess.
    """
    measured = [s for s in (state.snapshots if state else []) if _measurable(s)][-MEASURED_SNAPSHOTS:]
    if measured:
        rows = sum(s.rows or 0 for s in measured)
        seconds = sum(max(_elapsed(s) - SNAPSHOT_OVERHEAD_SECONDS, 1.0) for s in measured)
        seqs = ", ".join(str(s.seq) for s in measured)
        return SnapshotRate(rows / seconds, f"measured on snapshot {seqs}")
    if configured is not None:
        return SnapshotRate(float(configured), "configured")
    return SnapshotRate(DEFAULT_SNAPSHOT_ROWS_PER_SECOND, "default")


def _measurable(snapshot: Snapshot) -> bool:
    return (
        snapshot.status == "merged"
        and snapshot.finished_at is not None
        and not snapshot.handovers
        and (snapshot.rows or 0) >= MIN_MEASURED_ROWS
    )


def _elapsed(snapshot: Snapshot, now: pendulum.DateTime | None = None) -> float:
    """Return seconds from the snapshot's start to its finish (or to ``now`` while it runs)."""
    started = pendulum.DateTime.fromisoformat(snapshot.started_at)
    end = pendulum.DateTime.fromisoformat(snapshot.finished_at) if snapshot.finished_at else now
    return max(((end or pendulum.now("UTC")) - started).total_seconds(), 0.0)


def pending_tables(state: PipelineState | None, selected: Sequence[str]) -> list[str]:
    """Return the selected tables no snapshot of the pipeline has merged or is reading (all for a new one)."""
    covered = set() if state is None else {t for s in state.snapshots for t in s.tables}
    return [t for t in selected if t not in covered]


def estimate_snapshots(
    state: PipelineState | None,
    rows: dict[str, int],
    selected: Sequence[str],
    rate: SnapshotRate,
    now: pendulum.DateTime,
) -> SnapshotEstimate:
    """Estimate the seconds until every running snapshot and the snapshot of the pending tables are merged.

    :param rows: row estimate per table (:func:`~airflow_provider_binlog.source.schema.tables_rows`) for the running snapshots' tables and ``selected``.
    :param selected: the pipeline's selected tables (already resolved to names).
    :param now: the time to measure running snapshots' progress against.
    """
    running = [s for s in (state.snapshots if state else []) if s.status == "running"]
    pending = pending_tables(state, selected)
    seconds = 0.0
    for snapshot in running:
        need = SNAPSHOT_OVERHEAD_SECONDS + sum(rows.get(t, 0) for t in snapshot.tables) / rate.rows_per_second
        seconds += max(need - _elapsed(snapshot, now), 0.0)
    if pending:
        seconds += SNAPSHOT_OVERHEAD_SECONDS + sum(rows.get(t, 0) for t in pending) / rate.rows_per_second
    tables = tuple([t for s in running for t in s.tables] + pending)
    return SnapshotEstimate(
        tables=tables,
        rows=sum(rows.get(t, 0) for t in tables),
        seconds=seconds,
        rate=rate,
        running=tuple(s.seq for s in running),
    )
