"""Consumer lag: how far a pipeline's checkpoint (what the target holds) is behind the source head.

Lag is measured three ways: **seconds** — the age of the oldest transaction the target does not hold
yet (now minus its commit time; 0 when nothing is pending), which is how stale the target is and what
Debezium's ``MilliSecondsBehindSource`` approximates under a steady workload; **bytes** of binlog between
checkpoint and head; **transactions** between them by GTID count (None when the source has GTIDs off).
The age form is chosen over "head commit time minus checkpoint commit time" because it stays right when
the source goes quiet: an idle source with an unmerged transaction keeps getting staler.

A snapshot in progress counts as pending since it started: until it is merged, its tables lack the rows
it reads (an initial load, a table new to the selection, a repair), whatever the binlog lag says.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pendulum

from airflow_provider_binlog.contract.positions import BinlogPosition
from airflow_provider_binlog.exceptions import BinlogConfigError
from airflow_provider_binlog.pipeline.windows import check_retained
from airflow_provider_binlog.source.flavor import ReplicaLag
from airflow_provider_binlog.source.gtid import GtidSet
from airflow_provider_binlog.source.server import binlog_bytes_between

if TYPE_CHECKING:
    from airflow_provider_binlog.hooks.binlog import BinlogHook
    from airflow_provider_binlog.pipeline.ledger import Snapshot
    from airflow_provider_binlog.source.server import ServerState


@dataclass(frozen=True)
class LagReport:
    """How far the target of a pipeline is behind its source.

    :param pipeline: pipeline name.
    :param checkpoint: the pipeline's checkpoint (everything before it is in the target).
    :param head: the source's binlog head when measured.
    :param checkpoint_commit_at: commit time of the last transaction merged (None: not known yet).
    :param pending_since: commit time of the oldest transaction not in the target, or the start of the
        oldest snapshot in progress when earlier; None when nothing is pending.
    :param seconds: ``measured_at - pending_since`` in seconds; 0 when nothing is pending.
    :param bytes: bytes of binlog between checkpoint and head.
    :param transactions: transactions between checkpoint and head (GTID count); None without GTIDs.
    :param measured_at: when the head was read (UTC; taken just before reading it).
    :param snapshots_running: ``(seq, start time)`` of each snapshot in progress, oldest first.
    :param replica: when the source is a replica, how far it is behind its own primary (seconds, None when
        it cannot be told, with the reason); the pipeline's own lag is counted from the source, so the target
        is behind the primary by both.
    :param quarantined: ``(db.table, when its quarantine was found)`` of each quarantined table
        (:mod:`~airflow_provider_binlog.pipeline.quarantine`): its target stands still from then, so its own lag
        grows while the pipeline's may be 0 (:meth:`table_seconds`).
    """

    pipeline: str
    checkpoint: BinlogPosition
    head: BinlogPosition
    checkpoint_commit_at: pendulum.DateTime | None
    pending_since: pendulum.DateTime | None
    seconds: float
    bytes: int
    transactions: int | None
    measured_at: pendulum.DateTime
    snapshots_running: tuple[tuple[int, pendulum.DateTime], ...] = ()
    replica: ReplicaLag = ReplicaLag(None)
    quarantined: tuple[tuple[str, pendulum.DateTime], ...] = ()

    def table_seconds(self) -> dict[str, float]:
        """Return ``{"db.table": seconds}``: each quarantined table's lag, from when its quarantine was found.

        A lower bound: its target stopped at the transaction before the refused one, committed at or before then.
        """
        return {t: max((self.measured_at - at).total_seconds(), 0.0) for t, at in self.quarantined}

    def covers(self, moment: pendulum.DateTime) -> bool:
        """Return True when the target holds every transaction committed before ``moment``.

        True only once the head was read at or after ``moment`` (until then more commits could land
        before it) and the oldest pending transaction, if any, has a commit time at or after it. Commit
        times are truncated to whole seconds, so a recorded time at or after ``moment`` means the real
        one is too; a transaction in the second before counts as pending (waits longer, never claims
        too much).

        A source that is a replica must also have applied what its primary committed before ``moment``: its
        measured lag behind the primary is taken off the time of the measurement. A quarantined table holds none
        of the transactions after it stopped: while one is, the target never covers a moment.
        """
        behind = self.replica.seconds or 0.0
        if self.quarantined or self.measured_at.subtract(seconds=behind) < moment:
            return False
        return self.pending_since is None or self.pending_since >= moment

    def describe(self) -> str:
        """Return one line for task logs."""
        transactions = "unknown (GTIDs off)" if self.transactions is None else str(self.transactions)
        since = (
            "nothing pending"
            if self.pending_since is None
            else f"oldest pending commit {self.pending_since.isoformat()}"
        )
        snapshots = "".join(
            f"; snapshot {seq} in progress since {at.isoformat()}" for seq, at in self.snapshots_running
        )
        replica = (
            f"; the source is a replica {self.replica.seconds:.0f} s behind its primary"
            if self.replica.seconds is not None
            else f"; the source is a replica, its lag behind its primary {self.replica.note}"
            if self.replica.replica
            else ""
        )
        quarantined = "".join(
            f"; {table} quarantined, its lag at least {seconds:.0f} s"
            for table, seconds in self.table_seconds().items()
        )
        return (
            f"pipeline {self.pipeline!r} lag: {self.seconds:.0f} s, {self.bytes} bytes, {transactions} transactions "
            f"({since}{snapshots}{replica}{quarantined}; checkpoint {self.checkpoint}, head {self.head})"
        )

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON form (XCom, trigger events)."""
        return {
            "pipeline": self.pipeline,
            "checkpoint": self.checkpoint.to_dict(),
            "head": self.head.to_dict(),
            "checkpoint_commit_at": None
            if self.checkpoint_commit_at is None
            else self.checkpoint_commit_at.isoformat(),
            "pending_since": None if self.pending_since is None else self.pending_since.isoformat(),
            "seconds": self.seconds,
            "bytes": self.bytes,
            "transactions": self.transactions,
            "measured_at": self.measured_at.isoformat(),
            "snapshots_running": [
                {"seq": seq, "started_at": at.isoformat()} for seq, at in self.snapshots_running
            ],
            "replica_seconds_behind_primary": self.replica.seconds,
            "replica_note": self.replica.note,
            "source_is_replica": self.replica.replica,
            "quarantined": [{"table": t, "seconds": s} for t, s in self.table_seconds().items()],
            "summary": self.describe(),
        }


def transactions_between(checkpoint: BinlogPosition, head: BinlogPosition, flavor: str) -> int | None:
    """Return how many transactions the head's GTID set holds beyond the checkpoint's; None without GTIDs."""
    if not head.gtid_set:
        return None
    return (GtidSet.parse(head.gtid_set, flavor) - GtidSet.parse(checkpoint.gtid_set, flavor)).count()


def measure_lag(
    hook: BinlogHook,
    pipeline: str,
    checkpoint: BinlogPosition,
    checkpoint_commit_at: pendulum.DateTime | None,
    server: ServerState,
    measured_at: pendulum.DateTime,
    snapshots: Sequence[Snapshot] = (),
    quarantined: Sequence[tuple[str, pendulum.DateTime]] = (),
) -> LagReport:
    """Measure the lag of ``pipeline`` whose checkpoint is ``checkpoint`` against ``server``'s head.

    :param measured_at: a time taken just before ``server`` was read (UTC).
    :param snapshots: the pipeline's snapshot ledger; those ``running`` count as pending since they started.
    :param quarantined: ``(db.table, when its quarantine was found)`` of the quarantined tables.

    Reads at most one transaction after the checkpoint
    (:func:`~airflow_provider_binlog.source.probes.next_commit_at`).

    :raises BinlogPurgedError: when binlogs from the checkpoint on are gone (lag is then unbounded).
    :raises SourceUnreachableError: when the source cannot be reached.
    """
    from airflow_provider_binlog.source.probes import next_commit_at

    check_retained(server, checkpoint, pipeline)
    head = server.head or checkpoint
    running = tuple(
        sorted(
            (s.seq, pendulum.DateTime.fromisoformat(s.started_at).in_timezone("UTC"))
            for s in snapshots
            if s.status == "running"
        )
    )
    pending_since = None if head <= checkpoint else next_commit_at(hook, checkpoint)
    with hook.cursor() as cur:
        replica = server.strategy.replica_lag(cur)
    pending_since = min(
        [t for t in (pending_since, *(at for _, at in running)) if t is not None], default=None
    )
    seconds = 0.0 if pending_since is None else max((measured_at - pending_since).total_seconds(), 0.0)
    return LagReport(
        pipeline=pipeline,
        checkpoint=checkpoint,
        head=head,
        checkpoint_commit_at=checkpoint_commit_at,
        pending_since=pending_since,
        seconds=seconds,
        bytes=binlog_bytes_between(server.binlog_files, checkpoint, head),
        transactions=transactions_between(checkpoint, head, server.flavor),
        measured_at=measured_at,
        snapshots_running=running,
        replica=replica,
        quarantined=tuple(quarantined),
    )


def lag_verdict(
    report: LagReport,
    *,
    max_seconds: float | None = None,
    max_bytes: int | None = None,
    max_transactions: int | None = None,
    fresh_until: pendulum.DateTime | None = None,
) -> tuple[bool, str]:
    """Return ``(within every given limit, message)``; limits left None are not checked.

    ``max_transactions`` is not met when the source has GTIDs off (the count is unknown).
    """
    exceeded = []
    if max_seconds is not None and report.seconds > max_seconds:
        exceeded.append(f"{report.seconds:.0f} s > max_lag_seconds={max_seconds:g}")
    if max_bytes is not None and report.bytes > max_bytes:
        exceeded.append(f"{report.bytes} bytes > max_lag_bytes={max_bytes}")
    if max_transactions is not None and (
        report.transactions is None or report.transactions > max_transactions
    ):
        exceeded.append(f"{report.transactions} transactions > max_lag_transactions={max_transactions}")
    if fresh_until is not None and not report.covers(fresh_until):
        exceeded.append(
            f"the target does not yet hold every transaction committed before {fresh_until.isoformat()}"
        )
    if exceeded:
        return False, f"{report.describe()}; waiting: " + "; ".join(exceeded)
    return True, f"{report.describe()}; within limits"


def parse_moment(text: str) -> pendulum.DateTime:
    """Parse an ISO-8601 date-time (``fresh_until``); a time without offset is taken as UTC.

    :raises BinlogConfigError: when the text is not a date-time.
    """
    try:
        value = pendulum.parse(str(text), tz="UTC")
    except (ValueError, pendulum.parsing.exceptions.ParserError) as err:
        raise BinlogConfigError(f"fresh_until={text!r} is not an ISO-8601 date-time: {err}") from err
    if not isinstance(value, pendulum.DateTime):
        raise BinlogConfigError(f"fresh_until={text!r} is not a date-time (e.g. 2026-01-01T00:15:00+00:00)")
    return value
