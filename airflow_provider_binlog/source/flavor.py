"""The flavor strategy: everything MySQL and MariaDB do differently for a binlog reader, in one object.

Callers ask a :class:`SourceFlavor` (:func:`flavor_named`, :func:`flavor_of_version`) instead of
branching on ``flavor == "mariadb"``; there are two implementations, :class:`MySqlFlavor` and
:class:`MariaDbFlavor`. What differs (MySQL manual 8.4; MariaDB KB):

- the binlog head: ``SHOW BINARY LOG STATUS`` (MySQL 8.2+; ``SHOW MASTER STATUS`` before, removed in 8.4)
  whose ``Executed_Gtid_Set`` is the GTID state at the head; MariaDB ``SHOW MASTER STATUS`` (``SHOW BINLOG
  STATUS`` from 10.5.2) has no GTID column, and the GTID position of the coordinates is
  ``BINLOG_GTID_POS(file, pos)`` ("BINLOG_GTID_POS"), exact where reading ``@@gtid_binlog_pos`` separately
  could race with a commit;
- the GTID state at any position: MariaDB ``BINLOG_GTID_POS``; MySQL has no SQL function for it;
- the GTID variables: MySQL ``@@gtid_executed`` / ``@@gtid_purged`` ("GTID Sets"); MariaDB
  ``@@gtid_binlog_pos`` (one position per domain) and no purged set: what was purged before the oldest
  binlog is the ``Gtid_list`` event opening that file ("Gtid_list_log_event");
- the GTID mode: MySQL ``gtid_mode=ON``; MariaDB always logs GTIDs, and ``gtid_strict_mode=ON`` refuses
  out-of-order ones;
- the replica listing: MySQL 8.0.22+ ``SHOW REPLICAS`` (``SHOW SLAVE HOSTS`` before; the only spelling left in
  8.4), MariaDB ``SHOW SLAVE HOSTS`` ("SHOW REPLICA HOSTS");
- the server's identity: MySQL ``@@server_uuid``; MariaDB has none, so ``server_id``, host and port;
- the privilege names (:mod:`~airflow_provider_binlog.source.grants`);
- how a setting is changed for good: MySQL ``SET PERSIST`` (8.0+: applies now and survives a restart);
  MariaDB has no ``SET PERSIST``: ``SET GLOBAL`` now plus the option file for the next start.

Imports pymysql (inside the methods that query) and nothing from Airflow.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from airflow_provider_binlog.contract.positions import BinlogPosition
from airflow_provider_binlog.source.grants import PrivilegeModel, privilege_model

ER_PARSE_ERROR = 1064
ER_NO_BINARY_LOGGING = 1381


@dataclass(frozen=True)
class ReplicaHost:
    """A replica registered with the source (a row of ``SHOW REPLICAS`` / ``SHOW SLAVE HOSTS``).

    :param server_id: the replica's ``server_id``.
    :param host: the host it reported (``--report-host``; MariaDB 10.5.1+ fills in the peer address).
    :param port: the port it reported (0 when none).
    """

    server_id: int
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.host or '?'}:{self.port} (server_id {self.server_id})"


@dataclass(frozen=True)
class PurgedGtids:
    """The GTIDs of the transactions the source no longer has binlogs for.

    :param gtids: GTID set text (MySQL ``3E11...:1-5``, MariaDB ``0-1-100``); empty when nothing was purged.
    :param origin: where it was read, for messages (``@@gtid_purged``, ``the GTID list of the oldest binlog
        mariadb-bin.000003``).
    """

    gtids: str
    origin: str


@dataclass(frozen=True)
class ReplicaLag:
    """How far the source, when it is itself a replica, is behind its own primary.

    :param seconds: ``Seconds_Behind_Master`` / ``Seconds_Behind_Source`` (the SQL thread's estimate from event
        timestamps; MySQL manual, "SHOW REPLICA STATUS"; MariaDB KB, "SHOW REPLICA STATUS"); None when the
        server is not a replica, its applier is stopped, or the user may not read the status.
    :param note: why ``seconds`` is None ("" when it is known or the server replicates from nothing).
    :param replica: True when the server is known to be a replica; False when it is not, None when the user may
        not tell.
    """

    seconds: float | None
    note: str = ""
    replica: bool | None = False


class SourceFlavor(ABC):
    """What one server flavor does its own way (see the module docstring); stateless, one instance each."""

    name: ClassVar[str]
    gtid_executed_variable: ClassVar[str]
    """The variable holding the GTID state at the head."""
    gtid_mode_variable: ClassVar[str]
    """The variable that must be ON for well-formed GTIDs, and :attr:`gtid_mode_note` when it is not."""
    gtid_mode_note: ClassVar[str]

    def __str__(self) -> str:
        return self.name

    def read_head(self, cur: Any) -> BinlogPosition | None:
        """Return the position after the last committed transaction (the binlog head); None when binlog is off.

        Needs ``BINLOG MONITOR`` (MariaDB 10.5.2+) or ``REPLICATION CLIENT`` (MySQL).

        :param cur: a DB-API cursor on the source.
        """
        import pymysql

        try:
            cur.execute("SHOW BINARY LOG STATUS")
        except pymysql.err.ProgrammingError:
            cur.execute("SHOW MASTER STATUS")
        row = cur.fetchone()
        if not row:
            return None
        file, pos = str(row[0]), int(row[1])
        return BinlogPosition(file=file, pos=pos, gtid_set=self._head_gtids(cur, row, file, pos))

    @abstractmethod
    def _head_gtids(self, cur: Any, row: tuple[Any, ...], file: str, pos: int) -> str:
        """Return the GTID state at the head whose status row is ``row``."""

    @abstractmethod
    def gtid_at(self, cur: Any, file: str, pos: int) -> str:
        """Return the GTID state at the coordinates ``file:pos`` of a transaction boundary ("" when unknown)."""

    @abstractmethod
    def purged_gtids(
        self, variables: Mapping[str, str], oldest_file: str | None, cur: Any = None
    ) -> PurgedGtids | None:
        """Return the purged GTIDs; None when they cannot be known (GTIDs off, no cursor to read with).

        :param variables: the server's variables (lower-case names).
        :param oldest_file: the oldest binlog file the server lists (None: none).
        :param cur: a cursor, for flavors that must query; None returns only what ``variables`` tell.
        """

    def replica_lag(self, cur: Any) -> ReplicaLag:
        """Return how far this server is behind its primary when it is a replica (see :class:`ReplicaLag`).

        ``SHOW REPLICA STATUS`` (MySQL 8.0.22+, MariaDB 10.5.1+), else ``SHOW SLAVE STATUS``; it needs
        ``REPLICATION CLIENT`` (MySQL) or ``SLAVE MONITOR`` (MariaDB 10.5.9+), which the pipeline itself does not.
        """
        import pymysql

        from airflow_provider_binlog.source.grants import ACCESS_DENIED_ERRORS

        try:
            _execute_spelling(cur, "SHOW REPLICA STATUS", older="SHOW SLAVE STATUS")
        except (pymysql.err.OperationalError, pymysql.err.ProgrammingError) as err:
            if err.args and err.args[0] in ACCESS_DENIED_ERRORS:
                note = f"not measured: the user may not read SHOW REPLICA STATUS ({err.args[1]})"
                return ReplicaLag(None, note, replica=None)
            raise
        columns = [str(d[0]).lower() for d in cur.description or ()]
        row = cur.fetchone()
        if row is None:
            return ReplicaLag(None)
        status = dict(zip(columns, row, strict=True))
        seconds = status.get("seconds_behind_source", status.get("seconds_behind_master"))
        if seconds is None:
            return ReplicaLag(None, "unknown: its applier is not running (SHOW REPLICA STATUS)", replica=True)
        return ReplicaLag(float(seconds), replica=True)

    @abstractmethod
    def replicas(self, cur: Any) -> list[ReplicaHost]:
        """Return the replicas registered with the source.

        Only clients that sent ``COM_REGISTER_SLAVE`` are listed: real replicas, and mysql-replication readers
        opened with ``report_slave``.

        :raises pymysql.err.OperationalError: 1227 when the user may not list them (see
            :class:`~airflow_provider_binlog.source.grants.PrivilegeModel`, ``list_replicas``).
        """

    @abstractmethod
    def identity(self, variables: Mapping[str, str]) -> str:
        """Return the stable identity of the server from its variables."""

    @abstractmethod
    def persist_fix(self, setting: str, value: str) -> str:
        """Return how to set ``setting`` to ``value`` now and for every later start of the server."""

    def cascades_are_logged(self, variables: Mapping[str, str]) -> bool:
        """Return whether the server writes the child rows its foreign-key actions change to the binlog.

        False here: MariaDB and MySQL before 9.6 apply the actions inside InnoDB, unlogged
        (:mod:`airflow_provider_binlog.contract.foreign_keys`).

        :param variables: the server's global variables, lower-case names (``ServerState.variables``).
        """
        return False

    def privileges(self, version: str) -> PrivilegeModel:
        """Return the privilege names of this flavor at ``version`` (``SELECT VERSION()``)."""
        return privilege_model(self.name, version)

    @staticmethod
    def _replica_rows(cur: Any) -> list[ReplicaHost]:
        columns = [str(d[0]).lower() for d in cur.description]
        rows = [dict(zip(columns, row, strict=True)) for row in cur.fetchall()]
        return [
            ReplicaHost(
                server_id=int(row["server_id"]), host=str(row["host"] or ""), port=int(row["port"] or 0)
            )
            for row in rows
        ]


class MySqlFlavor(SourceFlavor):
    """MySQL 5.7, 8.0, 8.4 (and Percona Server, Amazon RDS/Aurora MySQL)."""

    name = "mysql"
    gtid_executed_variable = "gtid_executed"
    gtid_mode_variable = "gtid_mode"
    gtid_mode_note = (
        "GTIDs are off: changes and checkpoints then carry binlog coordinates only, and a failover to another "
        "server needs a re-snapshot (gtid_mode=ON lets the pipeline follow it, docs/failover.md)"
    )

    def _head_gtids(self, cur: Any, row: tuple[Any, ...], file: str, pos: int) -> str:
        return str(row[4]).replace("\n", "") if len(row) > 4 and row[4] else ""

    def gtid_at(self, cur: Any, file: str, pos: int) -> str:
        """Return "": MySQL has no SQL function for the GTID state at a position."""
        return ""

    def purged_gtids(
        self, variables: Mapping[str, str], oldest_file: str | None, cur: Any = None
    ) -> PurgedGtids | None:
        """Return ``@@gtid_purged`` (None with ``gtid_mode`` not ON)."""
        if variables.get("gtid_mode", "").upper() != "ON":
            return None
        return PurgedGtids(variables.get("gtid_purged", "").replace("\n", ""), "@@gtid_purged")

    def replicas(self, cur: Any) -> list[ReplicaHost]:
        """List ``SHOW REPLICAS`` (8.0.22+), else ``SHOW SLAVE HOSTS`` (MySQL manual, "SHOW REPLICAS Statement")."""
        _execute_spelling(cur, "SHOW REPLICAS", older="SHOW SLAVE HOSTS")
        return self._replica_rows(cur)

    def cascades_are_logged(self, variables: Mapping[str, str]) -> bool:
        """Return whether foreign keys live in the SQL layer, which logs the child rows they change.

        True with ``innodb_native_foreign_keys`` present (9.6+) and OFF (its default); before 9.6, or with
        it ON, InnoDB applies them unlogged.
        """
        native = variables.get("innodb_native_foreign_keys")
        return native is not None and native.upper() in ("OFF", "0")

    def identity(self, variables: Mapping[str, str]) -> str:
        """Return ``@@server_uuid`` (MySQL 5.6+), else what :class:`MariaDbFlavor` uses."""
        return variables.get("server_uuid") or _host_identity(variables)

    def persist_fix(self, setting: str, value: str) -> str:
        """Return ``SET PERSIST setting = value`` (MySQL 8.0+; on 5.7 also write it in my.cnf)."""
        return f"run SET PERSIST {setting} = {value} (MySQL 5.7: SET GLOBAL, and {setting}={value} in my.cnf)"


class MariaDbFlavor(SourceFlavor):
    """MariaDB 10.5+."""

    name = "mariadb"
    gtid_executed_variable = "gtid_binlog_pos"
    gtid_mode_variable = "gtid_strict_mode"
    gtid_mode_note = (
        "MariaDB may log out-of-order GTIDs; gtid_strict_mode=ON refuses them, which a failover resume by GTID "
        "relies on (docs/failover.md)"
    )

    def _head_gtids(self, cur: Any, row: tuple[Any, ...], file: str, pos: int) -> str:
        return self.gtid_at(cur, file, pos)

    def gtid_at(self, cur: Any, file: str, pos: int) -> str:
        """Return ``BINLOG_GTID_POS(file, pos)`` (MariaDB KB, "BINLOG_GTID_POS")."""
        cur.execute("SELECT BINLOG_GTID_POS(%s, %s)", (file, pos))
        return str((cur.fetchone() or [""])[0] or "").replace("\n", "")

    def purged_gtids(
        self, variables: Mapping[str, str], oldest_file: str | None, cur: Any = None
    ) -> PurgedGtids | None:
        """Return the ``Gtid_list`` opening the oldest binlog (None: no cursor, no file, or unreadable)."""
        import pymysql

        if cur is None or oldest_file is None:
            return None
        try:
            cur.execute("SHOW BINLOG EVENTS IN %s LIMIT 4", (oldest_file,))
        except (pymysql.err.ProgrammingError, pymysql.err.OperationalError):
            return None  # purged in between, or no grant: the file check still stands
        for row in cur.fetchall():
            if str(row[2]) == "Gtid_list":
                return PurgedGtids(
                    str(row[5]).strip("[] "), f"the GTID list of the oldest binlog {oldest_file}"
                )
        return None

    def replicas(self, cur: Any) -> list[ReplicaHost]:
        """List ``SHOW SLAVE HOSTS`` (MariaDB KB, "SHOW REPLICA HOSTS"; the old spelling works on every version)."""
        cur.execute("SHOW SLAVE HOSTS")
        return self._replica_rows(cur)

    def identity(self, variables: Mapping[str, str]) -> str:
        """Return ``mariadb:<server_id>@<hostname>:<port>`` (MariaDB has no server UUID)."""
        return _host_identity(variables)

    def persist_fix(self, setting: str, value: str) -> str:
        """Return ``SET GLOBAL`` plus the option file line (MariaDB has no ``SET PERSIST``)."""
        return (
            f"run SET GLOBAL {setting} = {value} and add {setting}={value} under [mariadb] in the server's "
            "option file (MariaDB has no SET PERSIST)"
        )


def _execute_spelling(cur: Any, current: str, *, older: str) -> None:
    """Run the statement ``current``, or its ``older`` spelling where the server does not know it (parse error 1064).

    :raises pymysql.err.MySQLError: any other error, as the server answers.
    """
    import pymysql

    try:
        cur.execute(current)
    except pymysql.err.ProgrammingError as err:
        if not err.args or err.args[0] != ER_PARSE_ERROR:
            raise
        cur.execute(older)


def _host_identity(variables: Mapping[str, str]) -> str:
    return f"mariadb:{variables.get('server_id')}@{variables.get('hostname')}:{variables.get('port')}"


MYSQL = MySqlFlavor()
MARIADB = MariaDbFlavor()
FLAVORS: dict[str, SourceFlavor] = {MYSQL.name: MYSQL, MARIADB.name: MARIADB}


def flavor_named(name: str) -> SourceFlavor:
    """Return the flavor called ``name`` (``mysql`` or ``mariadb``).

    :raises ValueError: for any other name.
    """
    try:
        return FLAVORS[name]
    except KeyError:
        raise ValueError(f"flavor {name!r} must be 'mysql' or 'mariadb'") from None


def flavor_of_version(version: str) -> SourceFlavor:
    """Return the flavor of a server from ``SELECT VERSION()`` (``10.11.6-MariaDB-log`` is MariaDB)."""
    return MARIADB if re.search("mariadb", version, re.IGNORECASE) else MYSQL
