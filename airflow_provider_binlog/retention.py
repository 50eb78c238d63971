"""Binlog retention model: whether the binlogs a pipeline still needs are retained, and for how long.

The pipeline reads by coordinates from its checkpoint, so the oldest file it needs is the file holding
the checkpoint. A source expires a binlog file once its last write is older than the retention
(MySQL manual, "Binary Logging Options and Variables": ``binlog_expire_logs_seconds``; MariaDB KB,
"expire_logs_days"; Amazon RDS, ``mysql.rds_set_configuration('binlog retention hours')``). Expiry runs
at start-up and at each rotation or ``FLUSH BINARY LOGS``, so the computed purge time is the earliest
moment the file can go: a lower bound on the real headroom.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pendulum

from airflow_provider_binlog.exceptions import BinlogPurgedError
from airflow_provider_binlog.gtid import GtidSet
from airflow_provider_binlog.positions import BinlogPosition, file_index

if TYPE_CHECKING:
    import pymysql

    from airflow_provider_binlog.hooks.binlog import BinlogHook, ServerState
    from airflow_provider_binlog.snapshot.estimate import SnapshotEstimate

RESNAPSHOT_REMEDY = (
    "The changes in between are gone: re-snapshot every table of the pipeline, which also moves its "
    'checkpoint past the gap (trigger binlog_resnapshot with {"mode": "purged", "tables": "<the '
    'pipeline\'s tables>"}, or BinlogSnapshotOperator(mode="purged")), and raise the source\'s binlog '
    "retention (binlog_expire_logs_seconds) to at least twice the longest expected outage."
)


@dataclass(frozen=True)
class RetentionPolicy:
    """How long the source keeps a binlog file after its last write.

    :param seconds: retention in seconds; None when files never expire by age.
    :param setting: the setting that decides it, as a user would change it.
    :param notes: other settings that can purge earlier (size limits) or caveats.
    """

    seconds: int | None
    setting: str
    notes: tuple[str, ...] = ()


def retention_policy(variables: Mapping[str, str], rds_retention_hours: str | None = None) -> RetentionPolicy:
    """Return the effective retention from server variables and, on Amazon RDS/Aurora, its configuration.

    :param variables: lower-case server variable names to values (``SHOW GLOBAL VARIABLES``).
    :param rds_retention_hours: ``value`` of ``binlog retention hours`` in ``mysql.rds_configuration``
        (``""`` for SQL NULL); None when the server is not RDS. RDS ignores the server's expiry
        variables and with NULL purges binlogs as soon as no replica needs them (AWS RDS user guide,
        "Setting binary log retention").
    """
    notes = _size_limit_notes(variables)
    if rds_retention_hours is not None:
        setting = "mysql.rds_configuration 'binlog retention hours'"
        if not rds_retention_hours:
            notes += (
                "RDS binlog retention hours is NULL: RDS purges binlogs almost at once; call "
                "mysql.rds_set_configuration('binlog retention hours', 168).",
            )
            return RetentionPolicy(0, setting, notes)
        return RetentionPolicy(int(float(rds_retention_hours) * 3600), setting, notes)
    seconds = int(float(variables.get("binlog_expire_logs_seconds") or 0))
    if seconds:
        return RetentionPolicy(seconds, "binlog_expire_logs_seconds", notes)
    days = float(variables.get("expire_logs_days") or 0)
    if days:
        return RetentionPolicy(int(days * 86400), "expire_logs_days", notes)
    return RetentionPolicy(None, "binlog_expire_logs_seconds=0 (binlogs never expire by age)", notes)


def _size_limit_notes(variables: Mapping[str, str]) -> tuple[str, ...]:
    limit = int(float(variables.get("max_binlog_total_size") or 0))
    if not limit:
        return ()
    return (
        f"max_binlog_total_size={limit} bytes also purges the oldest binlogs when the total grows past "
        "it (MariaDB 11.4+); the time headroom does not cover that.",
    )


def binlog_bytes_between(files: list[tuple[str, int]], start: BinlogPosition, end: BinlogPosition) -> int:
    """Return the bytes of binlog between ``start`` and ``end``.

    :param files: ``[(file name, size in bytes)]`` from ``SHOW BINARY LOGS``.
    """
    if end <= start:
        return 0
    if start.file == end.file:
        return end.pos - start.pos
    sizes = dict(files)
    low, high = file_index(start.file), file_index(end.file)
    middle = sum(size for name, size in files if low < file_index(name) < high)
    return max(sizes.get(start.file, start.pos) - start.pos, 0) + middle + end.pos


def purged_reason(
    server: ServerState, needed: BinlogPosition, oldest_gtid_list: str | None = None
) -> str | None:
    """Return why binlogs the pipeline needs from ``needed`` on are gone, or None when they are retained.

    Three checks: the file holding ``needed`` is still listed by ``SHOW BINARY LOGS``; on MySQL,
    ``@@gtid_purged`` is contained in the checkpoint's GTID set (MySQL manual, "GTID Sets":
    ``gtid_purged``); on MariaDB, the GTID list that opens the oldest file (the state before its first
    transaction, MariaDB KB "Gtid_list_log_event") is contained in the checkpoint's GTID position.
    The GTID checks also catch ``RESET MASTER`` / a replaced server, where file names repeat.

    :param oldest_gtid_list: MariaDB only: the oldest file's GTID list (``0-1-100,1-2-7``); None skips.
    """
    names = [name for name, _ in server.binlog_files]
    if needed.file not in names:
        oldest = names[0] if names else "none"
        return f"binlog {needed.file} (needed from position {needed.pos}) is no longer on the source (oldest binlog now: {oldest})"
    if not needed.gtid_set:
        return None
    checkpoint = GtidSet.parse(needed.gtid_set, server.flavor)
    gone_text = server.gtid_purged if server.flavor == "mysql" else (oldest_gtid_list or "")
    lost = GtidSet.parse(gone_text, server.flavor) - checkpoint
    if lost.is_empty:
        return None
    what = "@@gtid_purged" if server.flavor == "mysql" else f"the GTID list of the oldest binlog {names[0]}"
    return f"transactions {lost} were purged ({what}) but the checkpoint {needed.gtid_set} never read them"


def check_retained(server: ServerState, start: BinlogPosition, pipeline: str) -> None:
    """Check that every binlog from ``start`` on is still on the source (no extra query).

    :raises BinlogPurgedError: naming what is gone and the remedy.
    """
    reason = purged_reason(server, start)
    if reason is not None:
        raise BinlogPurgedError(f"pipeline {pipeline!r}: {reason}. {RESNAPSHOT_REMEDY}")


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
) -> RetentionReport:
    """Measure whether ``pipeline``'s binlogs from ``checkpoint`` on are retained, and for how long.

    :param new_pipeline: the pipeline has no state yet and ``checkpoint`` is the source head.
    :param snapshot: the time its pending snapshots still need (see :class:`RetentionReport`).

    Reads the RDS retention setting and the oldest file's GTID list (MariaDB) over SQL, and the time
    the next file was opened (:func:`~airflow_provider_binlog.probes.file_opened_at`) over the
    replication protocol.

    :raises BinlogConfigError: on a refused login or missing grant.
    :raises SourceUnreachableError: when the source cannot be reached.
    """
    from airflow_provider_binlog.probes import file_opened_at

    with hook.cursor() as cur:
        policy = retention_policy(server.variables, rds_retention_hours(cur))
        gtid_list = _oldest_gtid_list(cur, server) if server.flavor == "mariadb" else None
    names = [name for name, _ in server.binlog_files]
    head = server.head or checkpoint
    common: dict[str, Any] = {
        "pipeline": pipeline,
        "checkpoint": checkpoint,
        "needed_file": checkpoint.file,
        "oldest_file": names[0] if names else None,
        "policy": policy,
        "new_pipeline": new_pipeline,
        "snapshot": snapshot,
    }
    reason = purged_reason(server, checkpoint, gtid_list)
    if reason is not None:
        return RetentionReport(
            **common,
            purged_reason=reason,
            last_written_at=None,
            purge_after=None,
            headroom_seconds=None,
            bytes_to_read=0,
        )
    later = [name for name in names if file_index(name) > file_index(checkpoint.file)]
    last_written = file_opened_at(hook, later[0]) if later else None
    return RetentionReport(
        **common,
        purged_reason=None,
        last_written_at=last_written,
        purge_after=_purge_after(policy, last_written),
        headroom_seconds=_headroom(policy, last_written, pendulum.now("UTC")),
        bytes_to_read=binlog_bytes_between(server.binlog_files, checkpoint, head),
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


def rds_retention_hours(cur: pymysql.cursors.Cursor) -> str | None:
    """Return RDS's ``binlog retention hours`` (``""`` for NULL), or None when the server is not RDS."""
    import pymysql

    try:
        cur.execute("SELECT value FROM mysql.rds_configuration WHERE name = 'binlog retention hours'")
    except (pymysql.err.ProgrammingError, pymysql.err.OperationalError):
        return None  # no such table (not RDS) or no grant to read it
    row = cur.fetchone()
    return None if row is None else str(row[0] or "")


def _oldest_gtid_list(cur: pymysql.cursors.Cursor, server: ServerState) -> str | None:
    """Return the MariaDB GTID list opening the oldest binlog file (``0-1-100``), or None if unreadable."""
    import pymysql

    if not server.binlog_files:
        return None
    try:
        cur.execute("SHOW BINLOG EVENTS IN %s LIMIT 4", (server.binlog_files[0][0],))
    except (pymysql.err.ProgrammingError, pymysql.err.OperationalError):
        return None  # purged in between, or no grant: the file check still stands
    for row in cur.fetchall():
        if str(row[2]) == "Gtid_list":
            return str(row[5]).strip("[] ")
    return None


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


def nothing_purged(hook: BinlogHook, server: ServerState) -> bool:
    """Return True when no transaction was ever logged before the oldest binlog the source still has.

    MySQL with GTIDs: ``@@gtid_purged`` is empty. MariaDB: the oldest file's GTID list is empty. Else
    the oldest file is the first one (index 1) the server wrote.
    """
    if server.flavor == "mysql" and server.variables.get("gtid_mode", "").upper() == "ON":
        return not server.gtid_purged
    if server.flavor == "mariadb":
        with hook.cursor() as cur:
            gtid_list = _oldest_gtid_list(cur, server)
        if gtid_list is not None:
            return not gtid_list
    return bool(server.binlog_files) and file_index(server.binlog_files[0][0]) == 1
