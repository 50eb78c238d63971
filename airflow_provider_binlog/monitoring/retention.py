"""Binlog retention model: whether the binlogs a pipeline still needs are retained, and for how long.

The pipeline reads by coordinates from its checkpoint, so the oldest file it needs is the file holding
the checkpoint. A source expires a binlog file once its last write is older than the retention
(MySQL manual, "Binary Logging Options and Variables": ``binlog_expire_logs_seconds``; MariaDB KB,
"expire_logs_days"; Amazon RDS, ``mysql.rds_set_configuration('binlog retention hours')``). Expiry runs
at start-up and at each rotation or ``FLUSH BINARY LOGS``, so the computed purge time is the earliest
moment the file can go: a lower bound on the real headroom.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pendulum

from airflow_provider_binlog.contract.positions import BinlogPosition, file_index
from airflow_provider_binlog.exceptions import RESNAPSHOT_REMEDY
from airflow_provider_binlog.source.server import (
    RetentionPolicy,
    binlog_bytes_between,
    purged_reason,
    rds_retention_hours,
    retention_policy,
)

if TYPE_CHECKING:
    from airflow_provider_binlog.extract.window import ArchivedBinlog
    from airflow_provider_binlog.hooks.binlog import BinlogHook
    from airflow_provider_binlog.monitoring.snapshot_estimate import SnapshotEstimate
    from airflow_provider_binlog.source.server import ServerState


@dataclass(frozen=True)
class RetentionReport:
    """Whether the binlogs a pipeline still needs are retained, and until when.

    :param pipeline: pipeline name.
    :param checkpoint: the pipeline's checkpoint (it reads from there on).
    :param needed_file: the oldest binlog file it needs (the file holding the checkpoint).
    :param oldest_file: the oldest binlog file on the source (None: none at all).
    :param purged_reason: why needed binlogs are gone; None when they are retained.
    :param policy: the source's retention.
    :param last_written_at: when ``needed_file`` was last written; None while it is the active file.
    :param purge_after: earliest time the source may purge ``needed_file``; None when it cannot
        expire by age or is still active.
    :param headroom_seconds: seconds left before ``purge_after`` (negative: overdue, goes at the next
        rotation); while the file is active, the full retention (a lower bound); None: unlimited.
    :param bytes_to_read: bytes of binlog between the checkpoint and the head.
    :param measured_at: when the report was taken (UTC).
    :param new_pipeline: True when the pipeline has no state yet: ``checkpoint`` is then the source head,
        where its first snapshot and window will start.
    :param snapshot: the time its pending snapshots (running, or not started yet for a new pipeline or
        a table new to the selection) still need; until they are merged the checkpoint cannot move, so
        this time is taken off the headroom (None: not estimated).
    """

    pipeline: str
    checkpoint: BinlogPosition
    needed_file: str
    oldest_file: str | None
    purged_reason: str | None
    policy: RetentionPolicy
    last_written_at: pendulum.DateTime | None
    purge_after: pendulum.DateTime | None
    headroom_seconds: float | None
    bytes_to_read: int
    measured_at: pendulum.DateTime = field(default_factory=lambda: pendulum.now("UTC"))
    new_pipeline: bool = False
    snapshot: SnapshotEstimate | None = None

    @property
    def headroom_after_snapshot(self) -> float | None:
        """Return the headroom left once the pending snapshots are merged (seconds; None: unlimited)."""
        if self.headroom_seconds is None:
            return None
        return self.headroom_seconds - (self.snapshot.seconds if self.snapshot else 0.0)

    @property
    def purged(self) -> bool:
        """Return True when binlogs the pipeline needs are already gone."""
        return self.purged_reason is not None

    def describe(self) -> str:
        """Return one line for task logs: needed file, retention, headroom and bytes to read."""
        if self.purged:
            return f"pipeline {self.pipeline!r}: {self.purged_reason}"
        retention = "unlimited" if self.policy.seconds is None else f"{self.policy.seconds} s"
        headroom = "unlimited" if self.headroom_seconds is None else f"{self.headroom_seconds:.0f} s"
        if self.purge_after is not None:
            headroom += f" (purge possible after {self.purge_after.isoformat()})"
        elif self.headroom_seconds is not None:
            headroom += " (at least: the file is still being written)"
        notes = "".join(f" Note: {note}" for note in self.policy.notes)
        start = (
            "has not run yet: its first snapshot starts at the head" if self.new_pipeline else "checkpoint"
        )
        snapshot = (
            "" if self.snapshot is None or not self.snapshot.tables else f" {self.snapshot.describe()}."
        )
        return (
            f"pipeline {self.pipeline!r} needs binlogs from {self.needed_file} ({start} {self.checkpoint}); "
            f"retention {retention} by {self.policy.setting}; headroom {headroom}; "
            f"{self.bytes_to_read} bytes of binlog still to read.{snapshot}{notes}"
        )

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON form (XCom, trigger events)."""
        return {
            "pipeline": self.pipeline,
            "checkpoint": self.checkpoint.to_dict(),
            "needed_file": self.needed_file,
            "oldest_file": self.oldest_file,
            "purged": self.purged,
            "purged_reason": self.purged_reason,
            "retention_seconds": self.policy.seconds,
            "retention_setting": self.policy.setting,
            "notes": list(self.policy.notes),
            "last_written_at": _iso(self.last_written_at),
            "purge_after": _iso(self.purge_after),
            "headroom_seconds": self.headroom_seconds,
            "bytes_to_read": self.bytes_to_read,
            "measured_at": self.measured_at.isoformat(),
            "new_pipeline": self.new_pipeline,
            "snapshot": None if self.snapshot is None else self.snapshot.to_dict(),
            "headroom_after_snapshot_seconds": self.headroom_after_snapshot,
            "summary": self.describe(),
        }


def _iso(value: pendulum.DateTime | None) -> str | None:
    return None if value is None else value.isoformat()


def assess_retention(
    hook: BinlogHook,
    pipeline: str,
    checkpoint: BinlogPosition,
    server: ServerState,
    *,
    new_pipeline: bool = False,
    snapshot: SnapshotEstimate | None = None,
    archive: ArchivedBinlog | None = None,
) -> RetentionReport:
    """Measure whether ``pipeline``'s binlogs from ``checkpoint`` on are retained, and for how long.

    With ``archive`` (the source's binlog archive, docs/archive.md) the files the archive has finished count as
    retained: the source's own binlog is needed from the first file from the checkpoint on that the archive has
    not finished (``needed_file``), and the binlogs are purged only when neither holds a file.

    :param new_pipeline: the pipeline has no state yet and ``checkpoint`` is the source head.
    :param snapshot: the time its pending snapshots still need (see :class:`RetentionReport`).

    Reads the RDS retention setting and the oldest file's GTID list (MariaDB) over SQL, and the time
    the next file was opened (:func:`~airflow_provider_binlog.source.probes.file_opened_at`) over the
    replication protocol.

    :raises BinlogConfigError: on a refused login or missing grant.
    :raises SourceUnreachableError: when the source cannot be reached.
    """
    from airflow_provider_binlog.source.probes import file_opened_at

    with hook.cursor() as cur:
        policy = retention_policy(server.variables, rds_retention_hours(cur))
        purged = server.strategy.purged_gtids(server.variables, server.oldest_file, cur)
    names = [name for name, _ in server.binlog_files]
    head = server.head or checkpoint
    needed, gap = checkpoint, None
    if archive is not None:
        gap = archive.gap(checkpoint.file, server.binlog_files)
        needed = checkpoint if gap is not None else archive.first_needed(checkpoint, server.binlog_files)
    common: dict[str, Any] = {
        "pipeline": pipeline,
        "checkpoint": checkpoint,
        "needed_file": needed.file,
        "oldest_file": names[0] if names else None,
        "policy": policy,
        "new_pipeline": new_pipeline,
        "snapshot": snapshot,
    }
    reason = (
        purged_reason(server, needed, purged)
        if gap is None
        else f"binlog {checkpoint.file} (needed from position {checkpoint.pos}) is no longer on the source, and {gap}"
    )
    if reason is not None:
        return RetentionReport(
            **common,
            purged_reason=reason,
            last_written_at=None,
            purge_after=None,
            headroom_seconds=None,
            bytes_to_read=0,
        )
    later = [name for name in names if file_index(name) > file_index(needed.file)]
    last_written = file_opened_at(hook, later[0]) if later else None
    return RetentionReport(
        **common,
        purged_reason=None,
        last_written_at=last_written,
        purge_after=_purge_after(policy, last_written),
        headroom_seconds=_headroom(policy, last_written, pendulum.now("UTC")),
        bytes_to_read=binlog_bytes_between(
            server.binlog_files if archive is None else archive.files_with(server.binlog_files),
            checkpoint,
            head,
        ),
    )


def _purge_after(policy: RetentionPolicy, last_written: pendulum.DateTime | None) -> pendulum.DateTime | None:
    if policy.seconds is None or last_written is None:
        return None
    return last_written.add(seconds=policy.seconds)


def _headroom(
    policy: RetentionPolicy, last_written: pendulum.DateTime | None, now: pendulum.DateTime
) -> float | None:
    if policy.seconds is None:
        return None
    if last_written is None:
        return float(policy.seconds)
    return policy.seconds - (now - last_written).total_seconds()


def purge_risk_verdict(report: RetentionReport, min_headroom_seconds: float) -> tuple[str, str]:
    """Judge a retention report: ``("purged" | "low" | "safe", message for the task log)``.

    ``low`` when the headroom left once the pending snapshots are merged
    (:attr:`RetentionReport.headroom_after_snapshot`) is below ``min_headroom_seconds``; an unlimited
    retention is always safe.
    """
    if report.purged:
        return "purged", f"pipeline {report.pipeline!r}: {report.purged_reason}. {RESNAPSHOT_REMEDY}"
    headroom = report.headroom_seconds
    after = report.headroom_after_snapshot
    if headroom is None or after is None or after >= min_headroom_seconds:
        return "safe", report.describe()
    if report.snapshot is not None and report.snapshot.seconds > 0 and headroom >= min_headroom_seconds:
        return "low", (
            f"pipeline {report.pipeline!r} needs binlog {report.needed_file} until its snapshot is merged, but "
            f"{report.snapshot.describe()}, which leaves {after:.0f} s of its {headroom:.0f} s binlog headroom, "
            f"below min_headroom_seconds={min_headroom_seconds:.0f}. Raise {report.policy.setting} to at least "
            f"twice the snapshot's time, or select fewer tables for the first snapshot (add the others later: "
            f"a table new to the selection is snapshotted on its own)."
        )
    when = "now (overdue: it goes at the next rotation)" if headroom <= 0 else f"after {report.purge_after}"
    if report.purge_after is None:
        when = f"{headroom:.0f} s after it is rotated"
    return "low", (
        f"pipeline {report.pipeline!r} has {headroom:.0f} s of binlog headroom, below min_headroom_seconds="
        f"{min_headroom_seconds:.0f}: the source may purge binlog {report.needed_file} {when}, and the pipeline "
        f"still has {report.bytes_to_read} bytes of binlog to read. Catch the pipeline up (run or unpause its "
        f"CDC DAG) or raise {report.policy.setting} to at least twice the longest expected outage."
    )
