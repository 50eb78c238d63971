"""What the source server is and whether it can be a CDC source: its state, retention and checks.

:func:`read_server_state` reads the flavor, version, binlog settings, files, head and GTID sets over one
cursor. :func:`setting_findings` judges them: one :class:`Finding` per setting, as data (subject, value,
verdict, problem, fix), which the hook's validation turns into one error and its connection Test into one
line each. Fixes are flavor-correct (:meth:`~airflow_provider_binlog.source.flavor.SourceFlavor.persist_fix`).

Imports pymysql (inside the functions that query) and nothing from Airflow.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from airflow_provider_binlog.contract.positions import BinlogPosition, file_index
from airflow_provider_binlog.source.config import SERVER_ID_BASE, SERVER_ID_SPAN
from airflow_provider_binlog.source.findings import Finding, Outcome
from airflow_provider_binlog.source.flavor import (
    ER_NO_BINARY_LOGGING,
    PurgedGtids,
    SourceFlavor,
    flavor_named,
)
from airflow_provider_binlog.source.gtid import GtidSet


def derive_server_id(pipeline: str) -> int:
    """Return a stable replication ``server_id`` for a pipeline name.

    Every replica of a server needs a distinct ``server_id`` (MySQL manual, "Replication and Binary
    Logging Options": ``server_id``); a pipeline uses ``SERVER_ID_BASE + crc32(name) % SERVER_ID_SPAN``,
    which lies in ``[2^30, 2^31 - 1)``.
    """
    return SERVER_ID_BASE + zlib.crc32(pipeline.encode()) % SERVER_ID_SPAN


VARIABLES = (
    "log_bin",
    "binlog_format",
    "binlog_row_image",
    "binlog_row_metadata",
    "binlog_checksum",
    "binlog_transaction_compression",
    "log_bin_compress",
    "binlog_expire_logs_seconds",
    "expire_logs_days",
    "max_binlog_total_size",
    "gtid_mode",
    "enforce_gtid_consistency",
    "gtid_strict_mode",
    "gtid_executed",
    "gtid_purged",
    "gtid_binlog_pos",
    "server_id",
    "server_uuid",
    "hostname",
    "port",
    "max_binlog_size",
    "innodb_native_foreign_keys",
    "log_slave_updates",
    "log_replica_updates",
    "gtid_slave_pos",
    "lower_case_table_names",
)
"""The server variables :func:`read_server_state` reads (``SHOW GLOBAL VARIABLES``; absent ones are left out)."""


@dataclass(frozen=True)
class ServerState:
    """What was read from the source server.

    :param flavor: ``mysql`` or ``mariadb`` (:attr:`strategy` is its :class:`SourceFlavor`).
    :param version: server version string (``SELECT VERSION()``).
    :param server_identity: stable identity of the server (:meth:`SourceFlavor.identity`).
    :param variables: the server variables read (lower-case names, string values; see :data:`VARIABLES`).
    :param binlog_files: ``[(file name, size in bytes)]`` from ``SHOW BINARY LOGS``, oldest first.
    :param head: the position after the last committed transaction; None when binary logging is off.
    :param gtid_executed: MySQL ``@@gtid_executed`` / MariaDB ``@@gtid_binlog_pos``.
    :param gtid_purged: MySQL ``@@gtid_purged``; empty on MariaDB (no such variable).
    :param replicating: whether the server replicates from a primary now (MariaDB status ``Slaves_running`` > 0,
        readable without a privilege); None when it cannot be told (MySQL keeps it in performance_schema).
    """

    flavor: str
    version: str
    server_identity: str
    variables: dict[str, str]
    binlog_files: list[tuple[str, int]] = field(default_factory=list)
    head: BinlogPosition | None = None
    gtid_executed: str = ""
    gtid_purged: str = ""
    replicating: bool | None = None

    @property
    def strategy(self) -> SourceFlavor:
        """Return the flavor strategy of this server."""
        return flavor_named(self.flavor)

    @property
    def case_sensitive_names(self) -> bool:
        """Return whether the server compares database and table names case-sensitively.

        ``lower_case_table_names`` 0 (the Linux default) compares them as written; 1 stores and compares them in
        lower case, 2 stores them as written and compares them in lower case (MySQL manual, "Identifier Case
        Sensitivity"; MariaDB the same). A server that does not report it is taken as 0.
        """
        return self.variables.get("lower_case_table_names", "0").strip() == "0"

    @property
    def oldest_file(self) -> str | None:
        """Return the oldest binlog file the server still has (None: none)."""
        return self.binlog_files[0][0] if self.binlog_files else None


def read_variables(cur: Any) -> dict[str, str]:
    """Return the :data:`VARIABLES` the server has, by lower-case name."""
    names = ", ".join(f"'{name}'" for name in VARIABLES)
    cur.execute(f"SHOW GLOBAL VARIABLES WHERE Variable_name IN ({names})")
    return {str(name).lower(): str(value) for name, value in cur.fetchall()}


def binlog_files(cur: Any) -> list[tuple[str, int]]:
    """Return ``[(file name, size in bytes)]`` of the binlogs the server still has, oldest first ([] when off)."""
    import pymysql

    try:
        cur.execute("SHOW BINARY LOGS")
    except pymysql.err.OperationalError as err:
        if err.args and err.args[0] == ER_NO_BINARY_LOGGING:
            return []
        raise
    return [(str(row[0]), int(row[1])) for row in cur.fetchall()]


def read_server_state(cur: Any, flavor: SourceFlavor) -> ServerState:
    """Read version, binlog settings, files, head and GTID sets over ``cur``.

    Needs ``BINLOG MONITOR`` (MariaDB 10.5.2+) or ``REPLICATION CLIENT`` (MySQL) for the files and head.

    :raises pymysql.err.MySQLError: as the server answers (1227 for a missing privilege).
    """
    cur.execute("SELECT VERSION()")
    version = str(cur.fetchone()[0])
    variables = read_variables(cur)
    files = binlog_files(cur)
    head = flavor.read_head(cur) if _on(variables.get("log_bin")) else None
    return ServerState(
        flavor=flavor.name,
        version=version,
        server_identity=flavor.identity(variables),
        variables=variables,
        binlog_files=files,
        head=head,
        gtid_executed=variables.get(flavor.gtid_executed_variable, "").replace("\n", ""),
        gtid_purged=variables.get("gtid_purged", "").replace("\n", ""),
        replicating=_replicating(cur) if flavor.name == "mariadb" else None,
    )


def _replicating(cur: Any) -> bool:
    """Return whether a MariaDB server runs replica SQL threads now.

    From the status variable ``Slaves_running`` (MariaDB KB, "Replication and Binary Log Status Variables").
    """
    cur.execute("SHOW GLOBAL STATUS LIKE 'Slaves_running'")
    row = cur.fetchone()
    return row is not None and int(row[1] or 0) > 0


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


def rds_retention_hours(cur: Any) -> str | None:
    """Return RDS's ``binlog retention hours`` (``""`` for NULL), or None when the server is not RDS."""
    import pymysql

    try:
        cur.execute("SELECT value FROM mysql.rds_configuration WHERE name = 'binlog retention hours'")
    except (pymysql.err.ProgrammingError, pymysql.err.OperationalError):
        return None  # no such table (not RDS) or no grant to read it
    row = cur.fetchone()
    return None if row is None else str(row[0] or "")


_MUST_EQUAL = (
    ("binlog_format", "ROW", "row changes are only in ROW format"),
    ("binlog_row_image", "FULL", "before/after images must hold every column"),
)
"""Settings that must have one value: ``(name, value, why)``."""
_MUST_BE_OFF = {
    "log_bin_compress": "MariaDB's compressed binlog events cannot be decoded by the reader and their rows "
    "would be lost",
}
"""The compression settings judged when the server has them, and why each must be OFF. MySQL's
``binlog_transaction_compression`` (8.0.20+) is not among them: the reader inflates TRANSACTION_PAYLOAD
events (zstd) and decodes their inner events (ADR 0018)."""


def _on(value: str | None) -> bool:
    return (value or "").upper() in ("ON", "1")


def setting_findings(state: ServerState, *, allow_minimal_row_metadata: bool = False) -> list[Finding]:
    """Return one finding per binlog setting, with flavor-correct fixes.

    The settings are ``log_bin``, ``binlog_format``, ``binlog_row_image``, ``binlog_row_metadata``,
    ``binlog_checksum``, then the compression settings the server has (:data:`_MUST_BE_OFF`), then
    its GTID mode variable (a note when off: the pipeline works on coordinates alone).

    :param allow_minimal_row_metadata: accept ``binlog_row_metadata=MINIMAL`` (the pipeline then describes
        tables from information_schema).
    """
    v = state.variables
    fix = state.strategy.persist_fix
    findings = []

    def judge(name: str, problem: str | None, how: str = "") -> None:
        value = v.get(name, "unsupported")
        if problem is None:
            findings.append(Finding(name, value, Outcome.OK))
        else:
            findings.append(Finding(name, value, Outcome.WRONG, problem, how))

    judge(
        "log_bin",
        None
        if _on(v.get("log_bin"))
        else "log_bin is OFF: start the server with --log-bin (binary logging; not dynamic)",
    )
    for name, wanted, why in _MUST_EQUAL:
        value = v.get(name, "")
        judge(
            name,
            None if value.upper() == wanted else f"{name} is {value or 'unset'}: {why}",
            fix(name, wanted),
        )
    metadata = v.get("binlog_row_metadata", "").upper()
    judge(
        "binlog_row_metadata",
        None
        if metadata == "FULL" or allow_minimal_row_metadata
        else (
            f"binlog_row_metadata is {metadata or 'unsupported'}: without FULL the binlog carries no column "
            "names, signedness, ENUM/SET values or primary key, and the information_schema fallback describes "
            "today's schema, not the schema at each event (wrong after an ALTER)"
        ),
        (
            fix("binlog_row_metadata", "FULL")
            + " (MySQL 8.0.14+, MariaDB 10.5+), or opt into the fallback with allow_minimal_row_metadata=True"
            if metadata
            else "upgrade to MySQL 8.0.14+ or MariaDB 10.5+, or opt into the fallback with "
            "allow_minimal_row_metadata=True"
        ),
    )
    checksum = v.get("binlog_checksum", "CRC32")
    judge(
        "binlog_checksum",
        None if checksum.upper() in ("CRC32", "NONE") else f"binlog_checksum {checksum} is not supported",
        fix("binlog_checksum", "CRC32"),
    )
    for name, why in _MUST_BE_OFF.items():
        if name in v:
            judge(name, f"{name} is ON: {why}" if _on(v[name]) else None, fix(name, "OFF"))
    mode = state.strategy.gtid_mode_variable
    if mode in v:
        if _on(v[mode]):
            findings.append(Finding(mode, v[mode], Outcome.OK))
        else:
            findings.append(Finding(mode, v[mode], Outcome.NOTE, state.strategy.gtid_mode_note))
    findings.extend(_replica_findings(state))
    return findings


def _replica_findings(state: ServerState) -> list[Finding]:
    """Return the finding on ``log_replica_updates`` (``log_slave_updates``), when the server has the setting.

    A replica writes the transactions it applies to its own binlog only with it ON (MySQL manual,
    "log_replica_updates", default ON since 8.0; MariaDB KB, "log_slave_updates", default OFF, not dynamic).
    Without it a pipeline reading the replica misses every replicated change, and one following a failover to
    it finds its checkpoint's transactions missing (``docs/failover.md``). OFF is wrong on a server that
    replicates now (:attr:`ServerState.replicating`); a note on one that has replicated (MariaDB
    ``gtid_slave_pos`` set: it may again, or be a failover target) and on MySQL, which the pipeline's user cannot
    ask; nothing on a MariaDB server that never replicated.
    """
    v = state.variables
    name = next((n for n in ("log_replica_updates", "log_slave_updates") if n in v), None)
    if name is None:
        return []
    if _on(v[name]):
        return [Finding(name, v[name], Outcome.OK)]
    fix = state.strategy.persist_fix(name, "ON") + " (not dynamic: restart the server)"
    if state.replicating:
        problem = (
            f"{name} is OFF on a server that replicates: the transactions it applies are not in its binlog, so a "
            "pipeline reading it misses them"
        )
        return [Finding(name, v[name], Outcome.WRONG, problem, fix)]
    if state.replicating is None or v.get("gtid_slave_pos", "").strip():
        note = (
            "if this server replicates, or becomes the failover target of its primary, turn it ON first: without "
            "it its binlog lacks the replicated transactions a pipeline needs (docs/failover.md)"
        )
        return [Finding(name, v[name], Outcome.NOTE, note, fix)]
    return []


def retention_finding(policy: RetentionPolicy) -> Finding:
    """Return the note on the binlog retention (always a note: only the user knows their longest outage)."""
    notes = "".join(f"; note: {note}" for note in policy.notes)
    if policy.seconds is None:
        return Finding("binlog retention", "unlimited", Outcome.OK, f"({policy.setting}){notes}")
    return Finding(
        "binlog retention",
        f"{policy.seconds} s by {policy.setting}",
        Outcome.NOTE,
        "keep it at least twice the longest outage a pipeline must survive" + notes,
    )


def nothing_purged(server: ServerState, cur: Any) -> bool:
    """Return True when no transaction was ever logged before the oldest binlog the source still has.

    The purged GTIDs (:meth:`~airflow_provider_binlog.source.flavor.SourceFlavor.purged_gtids`: MySQL
    ``@@gtid_purged`` with GTIDs on, MariaDB the oldest file's GTID list) are empty; when they cannot be
    known, the oldest file is the first one (index 1) the server wrote.
    """
    purged = server.strategy.purged_gtids(server.variables, server.oldest_file, cur)
    if purged is not None:
        return not purged.gtids
    return bool(server.binlog_files) and file_index(server.binlog_files[0][0]) == 1


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
    server: ServerState, needed: BinlogPosition, purged: PurgedGtids | None = None
) -> str | None:
    """Return why binlogs the pipeline needs from ``needed`` on are gone, or None when they are retained.

    Three checks: the file holding ``needed`` is still listed by ``SHOW BINARY LOGS``; on MySQL,
    ``@@gtid_purged`` is contained in the checkpoint's GTID set (MySQL manual, "GTID Sets":
    ``gtid_purged``); on MariaDB, the GTID list that opens the oldest file (the state before its first
    transaction, MariaDB KB "Gtid_list_log_event") is contained in the checkpoint's GTID position.
    The GTID checks also catch ``RESET MASTER`` / a replaced server, where file names repeat.

    :param purged: the purged GTIDs (:meth:`~airflow_provider_binlog.source.flavor.SourceFlavor.purged_gtids`);
        None takes what the server's variables tell (MySQL ``@@gtid_purged``; nothing on MariaDB).
    """
    names = [name for name, _ in server.binlog_files]
    if needed.file not in names:
        oldest = names[0] if names else "none"
        return f"binlog {needed.file} (needed from position {needed.pos}) is no longer on the source (oldest binlog now: {oldest})"
    if not needed.gtid_set:
        return None
    if purged is None:
        purged = server.strategy.purged_gtids(server.variables, server.oldest_file)
    if purged is None:
        return None
    checkpoint = GtidSet.parse(needed.gtid_set, server.flavor)
    lost = GtidSet.parse(purged.gtids, server.flavor) - checkpoint
    if lost.is_empty:
        return None
    return f"transactions {lost} were purged ({purged.origin}) but the checkpoint {needed.gtid_set} never read them"
