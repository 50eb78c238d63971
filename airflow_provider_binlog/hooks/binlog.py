"""BinlogHook: replication connections to MySQL/MariaDB, server state and source validation."""

from __future__ import annotations

import logging
import zlib
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseHook

from airflow_provider_binlog.contract.names import split_table_name
from airflow_provider_binlog.exceptions import (
    BinlogConfigError,
    SourcePrivilegeError,
    SourceUnreachableError,
)
from airflow_provider_binlog.get_provider_info import (
    CONN_TYPE,
    CONNECT_TIMEOUT_MAX_SECONDS,
    DEFAULT_CONNECT_TIMEOUT_SECONDS,
    DEFAULT_HEARTBEAT_PERIOD_SECONDS,
    DEFAULT_READ_TIMEOUT_SECONDS,
    HEARTBEAT_PERIOD_MAX_SECONDS,
    HOOK_NAME,
    SERVER_ID_BASE,
    SERVER_ID_MAX,
    SERVER_ID_MIN,
    SERVER_ID_SPAN,
    SSL_FIELDS,
    STREAM_TIMEOUT_HEARTBEATS,
    ui_field_behaviour,
)
from airflow_provider_binlog.grants import ACCESS_DENIED_ERRORS
from airflow_provider_binlog.positions import BinlogPosition, read_head

if TYPE_CHECKING:
    import pymysql
    from pymysqlreplication import BinLogStreamReader

    from airflow_provider_binlog.foreign_keys import ForeignKey
    from airflow_provider_binlog.grants import Grants, PrivilegeReport

log = logging.getLogger(__name__)

ACCESS_DENIED = ACCESS_DENIED_ERRORS
ER_PARSE_ERROR = 1064
MIN_REDACTED_SECRET_LENGTH = 5
"""Secrets shorter than this are not redacted from messages (they would garble them; Airflow's secrets
masker uses the same threshold)."""


def derive_server_id(pipeline: str) -> int:
    """Return a stable replication ``server_id`` for a pipeline name.

    Every replica of a server needs a distinct ``server_id`` (MySQL manual, "Replication and Binary
    Logging Options": ``server_id``); a pipeline uses ``SERVER_ID_BASE + crc32(name) % SERVER_ID_SPAN``,
    which lies in ``[2^30, 2^31 - 1)``.
    """
    return SERVER_ID_BASE + zlib.crc32(pipeline.encode()) % SERVER_ID_SPAN


@dataclass(frozen=True)
class ServerState:
    """What the hook read from the source server.

    :param flavor: ``mysql`` or ``mariadb``.
    :param version: server version string (``SELECT VERSION()``).
    :param server_identity: stable identity of the server: MySQL ``server_uuid``; MariaDB (which has
        none) ``mariadb:<server_id>@<hostname>:<port>``.
    :param variables: the server variables read (lower-case names, string values).
    :param binlog_files: ``[(file name, size in bytes)]`` from ``SHOW BINARY LOGS``, oldest first.
    :param head: the position after the last committed transaction.
    :param gtid_executed: MySQL ``@@gtid_executed`` / MariaDB ``@@gtid_binlog_pos``.
    :param gtid_purged: MySQL ``@@gtid_purged``; empty on MariaDB (no such variable).
    """

    flavor: str
    version: str
    server_identity: str
    variables: dict[str, str]
    binlog_files: list[tuple[str, int]] = field(default_factory=list)
    head: BinlogPosition | None = None
    gtid_executed: str = ""
    gtid_purged: str = ""

    def problems(self, *, allow_minimal_row_metadata: bool = False) -> list[str]:
        """Return one line per setting that makes the server unusable as a CDC source, with its fix."""
        v = self.variables
        issues = []
        if v.get("log_bin", "").upper() not in ("ON", "1"):
            issues.append("log_bin is OFF: start the server with --log-bin (binary logging; not dynamic).")
        if v.get("binlog_format", "").upper() != "ROW":
            issues.append(
                f"binlog_format is {v.get('binlog_format')}: row changes are only in ROW format; "
                "set binlog_format=ROW (SET PERSIST / my.cnf)."
            )
        if v.get("binlog_row_image", "").upper() != "FULL":
            issues.append(
                f"binlog_row_image is {v.get('binlog_row_image')}: before/after images must hold every "
                "column; set binlog_row_image=FULL."
            )
        metadata = v.get("binlog_row_metadata", "").upper()
        if metadata != "FULL" and not allow_minimal_row_metadata:
            issues.append(
                f"binlog_row_metadata is {metadata or 'unsupported'}: without FULL the binlog carries no "
                "column names, signedness, ENUM/SET values or primary key, and the information_schema "
                "fallback describes today's schema, not the schema at each event (wrong after an ALTER). "
                "Set binlog_row_metadata=FULL (MySQL 8.0.14+, MariaDB 10.5+), or opt into the fallback "
                "with allow_minimal_row_metadata=True."
            )
        if v.get("binlog_transaction_compression", "").upper() in ("ON", "1"):
            issues.append(
                "binlog_transaction_compression is ON: compressed transaction payloads cannot be decoded "
                "by the reader and would be lost; set binlog_transaction_compression=OFF."
            )
        if v.get("log_bin_compress", "").upper() in ("ON", "1"):
            issues.append(
                "log_bin_compress is ON: MariaDB's compressed binlog events cannot be decoded by the reader "
                "and their rows would be lost; set log_bin_compress=OFF."
            )
        if v.get("binlog_checksum", "CRC32").upper() not in ("CRC32", "NONE"):
            issues.append(f"binlog_checksum {v.get('binlog_checksum')} is not supported; use CRC32 or NONE.")
        return issues


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
class SettingCheck:
    """One line of :meth:`BinlogHook.test_connection`: a setting, its value and the verdict.

    :param name: the setting (server variable name, ``binlog retention`` or ``server_id``).
    :param value: its value as read.
    :param verdict: ``ok``, ``note: ...``, ``not checked: ...`` or, when ``wrong``, the fix.
    :param wrong: True when the setting keeps the source from being used.
    """

    name: str
    value: str
    verdict: str
    wrong: bool = False

    def __str__(self) -> str:
        return f"{self.name}={self.value}: {'WRONG: ' if self.wrong else ''}{self.verdict.rstrip('.')}"


class BinlogHook(BaseHook):
    """Open replication and SQL connections to a MySQL/MariaDB source and read its binlog state.

    Works from a standard ``mysql`` connection or the provider's ``mysql_binlog`` connection type,
    whose form declares the extras (see :mod:`airflow_provider_binlog.get_provider_info`).
    Connection extras (JSON; empty values count as unset): ``server_id`` (int in 1..4294967295, replica
    id of the stream; default derived from the pipeline name, see :func:`derive_server_id`), ``flavor``
    (``mysql``/``mariadb``, overrides detection), ``ssl_ca`` / ``ssl_cert`` / ``ssl_key`` (file paths) and
    ``ssl_key_password``, or the equivalent ``ssl`` object passed to pymysql (``ca``, ``cert``, ``key``,
    ``password``, ``check_hostname``), ``charset`` (default ``utf8mb4``), ``connect_timeout`` (seconds,
    default 10), ``read_timeout`` (seconds, default 60: SQL connections), ``heartbeat_period`` (seconds,
    default 15: binlog streams, see :meth:`stream_timeouts`).

    :param binlog_conn_id: Airflow connection id.
    :param pipeline: pipeline name, used to derive a stable ``server_id``.
    """

    conn_name_attr = "binlog_conn_id"
    default_conn_name = "binlog_default"
    conn_type = CONN_TYPE
    hook_name = HOOK_NAME

    def __init__(self, binlog_conn_id: str = default_conn_name, *, pipeline: str = "default") -> None:
        super().__init__()
        self.binlog_conn_id = binlog_conn_id
        self.pipeline = pipeline
        self._settings: dict[str, Any] | None = None
        self._extras: dict[str, Any] = {}

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        """Return how the Airflow UI shows the standard fields of the ``mysql_binlog`` form.

        Airflow 3.2+ reads the same definition from the provider info (``ui-field-behaviour``).
        """
        return ui_field_behaviour()

    def connection_settings(self) -> dict[str, Any]:
        """Return pymysql keyword arguments built from the Airflow connection (looked up once).

        :raises BinlogConfigError: when the connection extras are malformed.
        """
        if self._settings is None:
            conn = self.get_connection(self.binlog_conn_id)
            extras = conn.extra_dejson
            if not isinstance(extras, dict):
                raise BinlogConfigError(f"connection {self.binlog_conn_id!r}: extra must be a JSON object")
            self._extras = {name: value for name, value in extras.items() if value not in (None, "")}
            settings: dict[str, Any] = {
                "host": conn.host or "127.0.0.1",
                "port": int(conn.port or 3306),
                "user": conn.login or "",
                "passwd": conn.password or "",
                "charset": str(self._extras.get("charset", "utf8mb4")),
                "connect_timeout": self._int_extra("connect_timeout", 1, CONNECT_TIMEOUT_MAX_SECONDS)
                or DEFAULT_CONNECT_TIMEOUT_SECONDS,
            }
            ssl = self._ssl_options()
            if ssl:
                settings["ssl"] = ssl
            self._settings = settings
        return dict(self._settings)

    def _int_extra(self, name: str, low: int, high: int) -> int | None:
        """Return the integer extra ``name`` (None when unset).

        :raises BinlogConfigError: when it is not an integer in ``low..high``.
        """
        raw = self._extras.get(name)
        if raw is None:
            return None
        try:
            value = int(raw)
        except (TypeError, ValueError) as err:
            raise BinlogConfigError(
                f"connection {self.binlog_conn_id!r}: extra {name}={raw!r} is not an integer"
            ) from err
        if not low <= value <= high:
            raise BinlogConfigError(
                f"connection {self.binlog_conn_id!r}: extra {name}={value} must be in {low}..{high}"
            )
        return value

    def _ssl_options(self) -> dict[str, Any]:
        """Return the pymysql ``ssl`` dict: the extra ``ssl`` object plus the form's ``ssl_*`` fields.

        :raises BinlogConfigError: when ``ssl`` is not an object, or a field and the object disagree.
        """
        ssl = self._extras.get("ssl") or {}
        if not isinstance(ssl, dict):
            raise BinlogConfigError(
                f"connection {self.binlog_conn_id!r}: extra 'ssl' must be an object like "
                '{"ca": "/path/ca.pem"}; or use the extras ssl_ca, ssl_cert, ssl_key'
            )
        merged = dict(ssl)
        for name, key in SSL_FIELDS.items():
            if name not in self._extras:
                continue
            if key in ssl and ssl[key] != self._extras[name]:
                raise BinlogConfigError(
                    f"connection {self.binlog_conn_id!r}: extras {name} and ssl.{key} differ; set only one"
                )
            merged[key] = self._extras[name]
        return merged

    @property
    def server_id(self) -> int:
        """Return the replica ``server_id`` this hook's streams use (extra ``server_id``, else derived)."""
        self.connection_settings()
        configured = self._int_extra("server_id", SERVER_ID_MIN, SERVER_ID_MAX)
        return derive_server_id(self.pipeline) if configured is None else configured

    def _server_id_origin(self) -> str:
        """Return where :attr:`server_id` comes from, for messages."""
        self.connection_settings()
        if "server_id" in self._extras:
            return f"set by the extra of connection {self.binlog_conn_id!r}"
        return f"derived from pipeline name {self.pipeline!r}"

    def sql_settings(self) -> dict[str, Any]:
        """Return ``pymysql.connect()`` keyword arguments of SQL connections.

        They hold ``password`` (not the stream's ``passwd``) and, unlike the replication stream's settings,
        ``read_timeout`` and ``write_timeout``: the extra ``read_timeout`` (seconds, default
        :data:`~airflow_provider_binlog.get_provider_info.DEFAULT_READ_TIMEOUT_SECONDS`) for both.

        :raises BinlogConfigError: when the connection extras are malformed.
        """
        settings = self.connection_settings()
        settings["password"] = settings.pop("passwd")
        timeout = (
            self._int_extra("read_timeout", 1, CONNECT_TIMEOUT_MAX_SECONDS) or DEFAULT_READ_TIMEOUT_SECONDS
        )
        settings["read_timeout"] = settings["write_timeout"] = timeout
        return settings

    def stream_timeouts(self) -> tuple[int, int]:
        """Return ``(heartbeat period, read timeout)`` of binlog streams, in seconds.

        The period is the extra ``heartbeat_period`` (1..600, default 15). A stream asks the source for a
        heartbeat event every period in which the dump thread sends nothing, i.e. while it waits at the end
        of the binlog (``@master_heartbeat_period``, set by mysql-replication's ``slave_heartbeat``; MySQL
        manual, "CHANGE REPLICATION SOURCE TO": ``SOURCE_HEARTBEAT_PERIOD``; MariaDB ``sql_repl.cc``,
        ``wait_new_events``). Each read and write of the stream then waits at most
        :data:`~airflow_provider_binlog.get_provider_info.STREAM_TIMEOUT_HEARTBEATS` periods: a live source
        never stays silent that long, a dead connection fails within that time.

        :raises BinlogConfigError: when the extra is not an integer in 1..600.
        """
        self.connection_settings()
        period = (
            self._int_extra("heartbeat_period", 1, HEARTBEAT_PERIOD_MAX_SECONDS)
            or DEFAULT_HEARTBEAT_PERIOD_SECONDS
        )
        return period, STREAM_TIMEOUT_HEARTBEATS * period

    def get_conn(self) -> pymysql.connections.Connection:
        """Open an autocommit SQL connection to the source, its login bounded by ``connect_timeout``.

        The connection is a :class:`~airflow_provider_binlog.connect.LoginTimeoutConnection`: the TCP
        connect and every read and write of the login wait at most ``connect_timeout`` seconds, later reads
        and writes at most ``read_timeout`` seconds.

        :raises BinlogConfigError: when the login is refused (wrong user/password or missing grant).
        :raises SourceUnreachableError: when the server cannot be reached or does not complete the login
            within ``connect_timeout`` (retryable).
        """
        import pymysql

        from airflow_provider_binlog.connect import LoginTimeoutConnection

        settings = self.sql_settings()
        where = f"{settings['host']}:{settings['port']}"
        try:
            return LoginTimeoutConnection(autocommit=True, **settings)
        except pymysql.err.OperationalError as err:
            code = err.args[0] if err.args else None
            if code in ACCESS_DENIED:
                raise BinlogConfigError(
                    f"the source {where} refused user {settings['user']!r}: {err.args[1]}. "
                    f"Check the login and password of connection {self.binlog_conn_id!r}."
                ) from err
            raise SourceUnreachableError(
                f"cannot reach the source {where} (connection {self.binlog_conn_id!r}) with "
                f"connect_timeout={settings['connect_timeout']} s: {err}. The task retries; if the server is "
                f"up but slow to log in, raise the extra connect_timeout."
            ) from err

    @contextmanager
    def cursor(self) -> Iterator[pymysql.cursors.Cursor]:
        """Yield a cursor on a fresh connection and close both afterwards.

        :raises SourcePrivilegeError: when the server denies a statement for a missing privilege (no
            retry; the message holds the GRANT statements, see :meth:`privilege_error`).
        :raises SourceUnreachableError: when the connection is lost or a read or write waits longer than
            ``read_timeout`` (retryable).
        """
        import pymysql

        from airflow_provider_binlog.connect import LOST_CONNECTION_ERRORS

        conn = self.get_conn()
        cur = conn.cursor()
        try:
            yield cur
        except pymysql.err.MySQLError as err:
            code = err.args[0] if err.args else None
            if code in ACCESS_DENIED:
                statement = str(getattr(cur, "_executed", None) or "SQL")
                shown = statement if len(statement) <= 60 else statement[:57] + "..."
                raise self.privilege_error(err, f"run {shown}") from err
            if code in LOST_CONNECTION_ERRORS:
                settings = self.sql_settings()
                raise SourceUnreachableError(
                    f"lost the SQL connection to the source {settings['host']}:{settings['port']} (connection "
                    f"{self.binlog_conn_id!r}; read_timeout={settings['read_timeout']} s): {err}. The task "
                    f"retries; raise the extra read_timeout if the server answers slower than that."
                ) from err
            raise
        finally:
            cur.close()
            conn.close()

    def read_grants(self, cur: pymysql.cursors.Cursor) -> tuple[str, str, Grants]:
        """Return ``(flavor, version, grants)``: the grants active in a new session of the connection's user.

        Reads ``CURRENT_USER()`` (the account the server matched, whose host part a ``GRANT`` must name),
        the enabled roles (``CURRENT_ROLE()``: MariaDB's default role; MySQL's active roles, absent before
        8.0) and ``SHOW GRANTS``, which needs no privilege for one's own account. MariaDB lists the
        privileges of the enabled role (and of the roles granted to it) under plain ``SHOW GRANTS``
        (measured on 10.11); MySQL lists them with ``SHOW GRANTS FOR CURRENT_USER() USING <roles>``
        (MySQL manual, "SHOW GRANTS Statement").

        Lines of unknown shape are kept in ``Grants.unparsed``.
        """
        import pymysql

        from airflow_provider_binlog.grants import Grants, flavor_of, parse_role_list

        flavor = self.flavor(cur)
        cur.execute("SELECT VERSION(), CURRENT_USER()")
        version, current_user = (str(value) for value in cur.fetchone())
        try:
            cur.execute("SELECT CURRENT_ROLE()")
            enabled = str((cur.fetchone() or [None])[0] or "")
        except pymysql.err.MySQLError:  # MySQL 5.7: no roles
            enabled = ""
        roles = parse_role_list(enabled)
        if flavor == "mysql" and roles:
            cur.execute(f"SHOW GRANTS FOR CURRENT_USER() USING {enabled}")
        else:
            cur.execute("SHOW GRANTS")
        lines = [str(row[0]) for row in cur.fetchall()]
        return flavor, version, Grants.parse(current_user, lines, flavor_of(flavor, version), roles)

    def check_privileges(self, tables: Iterable[str] | None = None) -> PrivilegeReport:
        """Check every privilege the pipeline needs: binlog stream, binlog status, SELECT on ``tables``.

        See :mod:`airflow_provider_binlog.grants` for the privileges of each flavor and the sources.

        :param tables: the table selection (``db.table`` names or patterns); None checks only the global
            privileges (the connection test knows no tables).
        :returns: the report; its ``missing`` verdicts carry the ``GRANT`` statement that fixes each.
        :raises BinlogConfigError: on a refused login.
        :raises SourceUnreachableError: when the server cannot be reached.
        """
        from airflow_provider_binlog.grants import PrivilegeReport, table_levels
        from airflow_provider_binlog.tables import split_selection

        selection, _ = split_selection(tables or [])  # an exclusion needs no privilege
        with self.cursor() as cur:
            flavor, version, grants = self.read_grants(cur)
            databases: list[str] = []
            if any(any(c in t.partition(".")[0] for c in "*?[") for t in selection):
                cur.execute("SELECT SCHEMA_NAME FROM information_schema.SCHEMATA")
                databases = [str(row[0]) for row in cur.fetchall()]
        requirements = grants.flavor.requirements(table_levels(selection, databases))
        return PrivilegeReport(flavor, version, grants, grants.check(requirements))

    def privilege_error(self, err: Exception, action: str) -> SourcePrivilegeError:
        """Return the error for an access-denied answer of the source, with the GRANTs that fix it.

        The source answered ``action`` with one of :data:`~airflow_provider_binlog.grants.ACCESS_DENIED_ERRORS`
        (the privilege was revoked after validation, or is not checked by it). The error lists the
        statements for every privilege the pipeline needs and lacks (read again from ``SHOW GRANTS`` on a
        new connection) and the one the server's message names. A retry cannot succeed before an
        administrator runs them, so the error fails the task at once.
        """
        from airflow_provider_binlog.grants import fix_from_error, quote_string

        settings = self.connection_settings()
        where = f"{settings['host']}:{settings['port']}"
        account = f"{quote_string(settings['user'])}@'%'"
        fixes: list[str] = []
        try:
            conn = self.get_conn()
            try:
                with conn.cursor() as cur:
                    _, _, grants = self.read_grants(cur)
            finally:
                conn.close()
            account = grants.account
            fixes = [v.fix for v in grants.check(grants.flavor.requirements()) if v.missing]
        except Exception as reread:  # the advice is best effort; the denial is the error to report
            log.warning("could not read the grants of connection %r again: %s", self.binlog_conn_id, reread)
        named = fix_from_error(str(err.args[1] if len(err.args) > 1 else err), account, fixes)
        if named:
            fixes.append(named)
        advice = (
            "Run as an administrator of the source:\n" + "\n".join(f"  {fix}" for fix in fixes)
            if fixes
            else f"Grant {account} the privilege the message names."
        )
        return SourcePrivilegeError(
            self._redacted(
                f"the source {where} refused to let {account} {action} (connection {self.binlog_conn_id!r}): "
                f"{err}. {advice}\nA retry cannot succeed before that, so the task fails without retrying."
            )
        )

    def flavor(self, cur: pymysql.cursors.Cursor) -> str:
        """Return ``mariadb`` or ``mysql`` (from the connection extra, else ``SELECT VERSION()``)."""
        self.connection_settings()
        forced = self._extras.get("flavor")
        if forced:
            if forced not in ("mysql", "mariadb"):
                raise BinlogConfigError(f"connection extra flavor={forced!r} must be 'mysql' or 'mariadb'")
            return str(forced)
        cur.execute("SELECT VERSION()")
        return "mariadb" if "mariadb" in str(cur.fetchone()[0]).lower() else "mysql"

    def head_position(self, cur: pymysql.cursors.Cursor, flavor: str) -> BinlogPosition:
        """Return the position after the last committed transaction (:func:`~airflow_provider_binlog.positions.read_head`).

        :raises BinlogConfigError: when binary logging is off (no status row).
        """
        head = read_head(cur, flavor)
        if head is None:
            raise BinlogConfigError("binary logging is off on the source: start the server with --log-bin")
        return head

    def binlog_files(self, cur: pymysql.cursors.Cursor) -> list[tuple[str, int]]:
        """Return ``[(file name, size in bytes)]`` of the binlogs the server still has, oldest first."""
        import pymysql

        try:
            cur.execute("SHOW BINARY LOGS")
        except pymysql.err.OperationalError as err:
            if err.args and err.args[0] == 1381:  # ER_NO_BINARY_LOGGING
                return []
            raise
        return [(str(row[0]), int(row[1])) for row in cur.fetchall()]

    def server_state(self) -> ServerState:
        """Read flavor, version, binlog settings, files, head and GTID sets in one connection.

        :raises BinlogConfigError: on a refused login.
        :raises SourceUnreachableError: when the server cannot be reached.
        """
        with self.cursor() as cur:
            flavor = self.flavor(cur)
            cur.execute("SELECT VERSION()")
            version = str(cur.fetchone()[0])
            variables = self._variables(cur)
            identity = self._identity(cur, flavor, variables)
            files = self.binlog_files(cur)
            log_bin_on = variables.get("log_bin", "").upper() in ("ON", "1")
            head = self.head_position(cur, flavor) if log_bin_on else None
        executed = variables.get("gtid_binlog_pos" if flavor == "mariadb" else "gtid_executed", "")
        return ServerState(
            flavor=flavor,
            version=version,
            server_identity=identity,
            variables=variables,
            binlog_files=files,
            head=head,
            gtid_executed=executed.replace("\n", ""),
            gtid_purged=variables.get("gtid_purged", "").replace("\n", ""),
        )

    _VARIABLES = (
        "log_bin",
        "binlog_format",
        "binlog_row_image",
        "binlog_row_metadata",
        "binlog_checksum",
        "binlog_transaction_compression",
        "log_bin_compress",
        "binlog_expire_logs_seconds",
        "expire_logs_days",
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
    )

    def _variables(self, cur: pymysql.cursors.Cursor) -> dict[str, str]:
        names = ", ".join(f"'{name}'" for name in self._VARIABLES)
        cur.execute(f"SHOW GLOBAL VARIABLES WHERE Variable_name IN ({names})")
        return {str(name).lower(): str(value) for name, value in cur.fetchall()}

    @staticmethod
    def _identity(cur: pymysql.cursors.Cursor, flavor: str, variables: dict[str, str]) -> str:
        if flavor == "mysql" and variables.get("server_uuid"):
            return variables["server_uuid"]
        return f"mariadb:{variables.get('server_id')}@{variables.get('hostname')}:{variables.get('port')}"

    def validate_source(
        self, *, allow_minimal_row_metadata: bool = False, tables: Iterable[str] | None = None
    ) -> ServerState:
        """Check that the server can be a CDC source for the user and return its state.

        Checks the user's privileges (:meth:`check_privileges`) before the settings, so a missing grant
        fails here instead of in a later run.

        :param allow_minimal_row_metadata: accept ``binlog_row_metadata=MINIMAL`` and describe tables
            from information_schema instead (today's schema, not the schema at each event).
        :param tables: the table selection, whose tables need SELECT; None skips that check.
        :raises SourcePrivilegeError: listing every missing privilege with its ``GRANT`` statement, and
            every wrong setting when they could be read.
        :raises BinlogConfigError: listing every wrong setting and its fix in one message.
        """
        report = self.check_privileges(tables)
        try:
            state = self.server_state()
        except SourcePrivilegeError:
            if not report.missing:
                raise
            raise SourcePrivilegeError(self._privileges_message(report)) from None
        problems = state.problems(allow_minimal_row_metadata=allow_minimal_row_metadata)
        listing = "\n".join(f"  - {p}" for p in problems)
        if report.missing:
            settings = f"\nIts settings are wrong too:\n{listing}" if problems else ""
            raise SourcePrivilegeError(self._privileges_message(report) + settings)
        if problems:
            raise BinlogConfigError(
                f"the source {state.flavor} {state.version} (connection {self.binlog_conn_id!r}) cannot be "
                f"used for CDC:\n{listing}"
            )
        return state

    def _privileges_message(self, report: PrivilegeReport) -> str:
        """Return the error text for the missing privileges of ``report``, one GRANT per line."""
        return (
            f"the user {report.grants.account} of connection {self.binlog_conn_id!r} lacks privileges the "
            f"pipeline needs on the source {report.flavor} {report.version}:\n{report.describe_missing()}\n"
            "Run the statements as an administrator of the source, then run the task again."
        )

    def registered_replicas(self, cur: pymysql.cursors.Cursor) -> list[ReplicaHost]:
        """Return the replicas registered with the source.

        MySQL 8.0.22+ answers ``SHOW REPLICAS`` (the only spelling left in 8.4); MariaDB and older MySQL
        answer ``SHOW SLAVE HOSTS`` (MySQL manual, "SHOW REPLICAS Statement"; MariaDB KB, "SHOW REPLICA
        HOSTS"). Only clients that sent ``COM_REGISTER_SLAVE`` are listed: real replicas, and
        mysql-replication readers opened with ``report_slave``.

        :raises pymysql.err.OperationalError: 1227 when the user may not list replicas (MySQL needs
            REPLICATION SLAVE, MariaDB 10.5.2+ REPLICATION MASTER ADMIN).
        """
        import pymysql

        try:
            cur.execute("SHOW REPLICAS")
        except pymysql.err.ProgrammingError as err:
            if not err.args or err.args[0] != ER_PARSE_ERROR:
                raise
            cur.execute("SHOW SLAVE HOSTS")
        columns = [str(d[0]).lower() for d in cur.description]
        rows = [dict(zip(columns, row, strict=True)) for row in cur.fetchall()]
        return [
            ReplicaHost(
                server_id=int(row["server_id"]), host=str(row["host"] or ""), port=int(row["port"] or 0)
            )
            for row in rows
        ]

    def check_server_id(self) -> list[ReplicaHost] | None:
        """Check that no replica of the source and not the source itself uses :attr:`server_id`.

        Each replica's ``server_id`` must differ from the source's and from every other replica's
        (MySQL manual, "Setting the Replica Configuration"), and a source runs one binlog dump per id: a
        new dump ends the running dump with the same id (MySQL's "zombie" dump threads; measured on
        MariaDB 10.11). A pipeline sharing a real replica's id would break that replica's replication
        and be broken by it in turn.

        The provider's own streams do not register (mysql-replication sends ``COM_REGISTER_SLAVE`` only
        when given ``report_slave``, which :meth:`stream_reader` does not pass), so a registered replica
        is never an earlier stream of this pipeline, alive or crashed, and needs no exemption. By the
        same token two pipelines sharing a ``server_id`` are invisible here; the derived ids keep them
        apart unless the extra sets one id for several pipelines.

        :returns: the registered replicas checked; None when the user may not list them (then only
            the source's own ``@@server_id`` was compared).
        :raises BinlogConfigError: naming the colliding server and the fix.
        """
        server_id = self.server_id
        with self.cursor() as cur:
            cur.execute("SELECT @@GLOBAL.server_id")
            source_id = int(cur.fetchone()[0])
            replicas = self._replicas_if_allowed(cur)
        taken = [source_id, *(r.server_id for r in replicas or [])]
        if server_id == source_id:
            raise BinlogConfigError(
                f"server_id {server_id} ({self._server_id_origin()}) is the source's own @@server_id: "
                f"every server and replica of a topology needs its own id. {self._server_id_fix(taken)}"
            )
        clashes = [r for r in replicas or [] if r.server_id == server_id]
        if clashes:
            raise BinlogConfigError(
                f"server_id {server_id} ({self._server_id_origin()}) is already used by the replica "
                f"{clashes[0]} registered with the source: the source keeps one binlog dump per server_id "
                f"and would disconnect one of the two. {self._server_id_fix(taken)}"
            )
        return replicas

    def _replicas_if_allowed(self, cur: pymysql.cursors.Cursor) -> list[ReplicaHost] | None:
        import pymysql

        try:
            return self.registered_replicas(cur)
        except pymysql.err.OperationalError as err:
            if err.args and err.args[0] in ACCESS_DENIED:
                return None
            raise

    def _server_id_fix(self, taken: Iterable[int]) -> str:
        used = ", ".join(str(i) for i in sorted(set(taken)))
        return (
            f"Set the extra server_id of connection {self.binlog_conn_id!r} to a value in "
            f"{SERVER_ID_MIN}..{SERVER_ID_MAX} that nothing uses (in use: {used}); it then applies to every "
            "pipeline using that connection."
        )

    def test_connection(self) -> tuple[bool, str]:
        """Log in, check every binlog setting, the ``server_id`` and the user's privileges (the Test button).

        :returns: ``(ok, message)``: a header line, one ``name=value: verdict`` line per setting checked
            (see :class:`SettingCheck`), one ``privilege=...`` line per privilege the pipeline needs
            (:meth:`check_privileges`; when a missing one keeps the server from showing the settings, a
            ``settings=?: not checked`` line stands for them) and the binlog head, separated by a semicolon
            and a newline (readable whether the UI keeps line breaks or not); ``ok`` is False when any line
            is WRONG or the server cannot be reached. Secrets never appear in it.
        """
        state: ServerState | None = None
        try:
            report = self.check_privileges()
            try:
                state = self.server_state()
                checks = [*self._setting_checks(state), self._server_id_check(state, report.grants)]
            except SourcePrivilegeError:
                if not report.missing:
                    raise
                checks = [
                    SettingCheck(
                        "settings", "?", "not checked: reading them needs the privileges marked WRONG"
                    )
                ]
        except Exception as err:
            return False, self._redacted(str(err))
        checks += self._privilege_checks(report)
        ok = not any(check.wrong for check in checks)
        settings = self.connection_settings()
        verdict = (
            "usable as a CDC source" if ok else "NOT usable as a CDC source; fix the settings marked WRONG"
        )
        header = f"{report.flavor} {report.version} at {settings['host']}:{settings['port']}: {verdict}"
        head = state.head if state else None
        footer = f"head={head.file}:{head.pos} gtid={head.gtid_set or 'none'}" if head else "head=none"
        return ok, self._redacted(";\n".join([header, *map(str, checks), footer]))

    @staticmethod
    def _privilege_checks(report: PrivilegeReport) -> list[SettingCheck]:
        """Return one ``privilege=...`` line per privilege checked and a note per role not enabled."""
        checks = []
        for verdict in report.verdicts:
            requirement = verdict.requirement
            if verdict.missing:
                text = f"missing: the pipeline {requirement.purpose}; run {verdict.fix.rstrip(';')}"
            elif verdict.granted_to == f"{report.grants.user}@{report.grants.host}":
                text = "ok"
            else:
                text = f"ok (through role {verdict.granted_to})"
            checks.append(SettingCheck("privilege", str(requirement), text, wrong=verdict.missing))
        for line in report.grants.unparsed:
            checks.append(SettingCheck("grant", line, "note: not understood, counted as granting nothing"))
        for role in report.grants.inactive_roles():
            checks.append(
                SettingCheck(
                    "role",
                    role,
                    "note: granted but not enabled in new sessions, so its privileges do not count; "
                    f"run {report.grants.default_role_fix(role).rstrip(';')} to use them",
                )
            )
        return checks

    _REQUIRED_SETTINGS = (
        "log_bin",
        "binlog_format",
        "binlog_row_image",
        "binlog_row_metadata",
        "binlog_checksum",
    )
    _COMPRESSION_SETTINGS = ("binlog_transaction_compression", "log_bin_compress")
    _GTID_NOTES = {
        "gtid_mode": "GTIDs are off: changes and checkpoints then carry binlog coordinates only",
        "gtid_strict_mode": "MariaDB may log out-of-order GTIDs; gtid_strict_mode=ON refuses them",
    }

    def _setting_checks(self, state: ServerState) -> list[SettingCheck]:
        """Return the verdict on each binlog setting (:meth:`ServerState.problems`), GTID mode and retention."""
        # Each problem text of ServerState.problems() starts with the name of the setting it is about.
        problems = {p.split(" ", 1)[0]: p for p in state.problems()}
        present = [name for name in self._COMPRESSION_SETTINGS if name in state.variables]
        checks = []
        for name in (*self._REQUIRED_SETTINGS, *present):
            value = state.variables.get(name, "unsupported")
            problem = problems.pop(name, None)
            checks.append(SettingCheck(name, value, problem or "ok", wrong=problem is not None))
        checks += [SettingCheck(name, "?", problem, wrong=True) for name, problem in problems.items()]
        for name, note in self._GTID_NOTES.items():
            if name in state.variables:
                value = state.variables[name]
                checks.append(
                    SettingCheck(name, value, "ok" if value.upper() in ("ON", "1") else f"note: {note}")
                )
        checks.append(self._retention_check(state))
        return checks

    def _retention_check(self, state: ServerState) -> SettingCheck:
        """Return the verdict on the binlog retention (:func:`~airflow_provider_binlog.retention.retention_policy`)."""
        from airflow_provider_binlog.retention import rds_retention_hours, retention_policy

        with self.cursor() as cur:
            policy = retention_policy(state.variables, rds_retention_hours(cur))
        notes = "".join(f"; note: {note}" for note in policy.notes)
        if policy.seconds is None:
            return SettingCheck("binlog retention", "unlimited", f"ok ({policy.setting}){notes}")
        advice = "note: keep it at least twice the longest outage a pipeline must survive"
        return SettingCheck("binlog retention", f"{policy.seconds} s by {policy.setting}", advice + notes)

    def _server_id_check(self, state: ServerState, grants: Grants) -> SettingCheck:
        """Return the verdict of :meth:`check_server_id` on :attr:`server_id` (``grants``: for the advice)."""
        server_id: int | str = self._extras.get("server_id", "?")
        try:
            server_id = self.server_id
            replicas = self.check_server_id()
        except BinlogConfigError as err:
            return SettingCheck("server_id", str(server_id), str(err), wrong=True)
        source_id = state.variables.get("server_id", "?")
        value = f"{server_id} ({self._server_id_origin()}; the source's is {source_id})"
        if replicas is None:
            return SettingCheck(
                "server_id",
                value,
                "not checked against replicas: the user may not list them; grant REPLICATION MASTER ADMIN "
                f"(MariaDB 10.5.2+) or REPLICATION SLAVE (MySQL) to check: {grants.list_replicas_fix().rstrip(';')}",
            )
        ids = ", ".join(str(r.server_id) for r in replicas) or "none"
        return SettingCheck("server_id", value, f"ok, no registered replica uses it (registered: {ids})")

    def _redacted(self, text: str) -> str:
        """Return ``text`` with the connection's password and TLS key password replaced by ``***``."""
        settings = self._settings or {}
        secrets = (settings.get("passwd"), (settings.get("ssl") or {}).get("password"))
        for secret in secrets:
            if secret and len(str(secret)) >= MIN_REDACTED_SECRET_LENGTH:
                text = text.replace(str(secret), "***")
        return text

    def describe_tables(self, selection: Iterable[str]) -> dict[str, TableInfo]:
        """Resolve a table selection to existing base tables (see :func:`~airflow_provider_binlog.tables.select_tables`).

        :param selection: ``db.table`` names and shell patterns (``shop.*``); entries starting with ``!``
            exclude the tables they match, after the includes.
        :returns: ``{"db.table": TableInfo}`` with columns in ordinal order and primary key columns.
        :raises BinlogConfigError: when a plain name matches no table, a pattern matches nothing or the
            exclusions leave no table.
        """
        from airflow_provider_binlog.tables import select_tables

        with self.cursor() as cur:
            cur.execute(
                "SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES "
                "WHERE TABLE_TYPE = 'BASE TABLE' AND TABLE_SCHEMA NOT IN "
                "('mysql', 'information_schema', 'performance_schema', 'sys')"
            )
            chosen = select_tables(selection, [f"{db}.{name}" for db, name in cur.fetchall()])
            return {name: self._table_info(cur, name) for name in chosen}

    def foreign_keys(self, tables: Iterable[str]) -> list[ForeignKey]:
        """Return the foreign keys with CASCADE or SET NULL actions whose child is one of ``tables``.

        One query on information_schema (:func:`~airflow_provider_binlog.foreign_keys.read_foreign_keys`);
        the parent may be any table of the server.

        :param tables: ``db.table`` names (the resolved selection).
        """
        from airflow_provider_binlog.foreign_keys import read_foreign_keys

        with self.cursor() as cur:
            return read_foreign_keys(cur, tables)

    @staticmethod
    def _table_info(cur: pymysql.cursors.Cursor, name: str) -> TableInfo:
        db, table = split_table_name(name)
        cur.execute(
            "SELECT COLUMN_NAME, COLUMN_TYPE, COLUMN_KEY FROM information_schema.COLUMNS "
            "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION",
            (db, table),
        )
        rows = cur.fetchall()
        cur.execute(
            "SELECT COLUMN_NAME FROM information_schema.KEY_COLUMN_USAGE "
            "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s AND CONSTRAINT_NAME = 'PRIMARY' "
            "ORDER BY ORDINAL_POSITION",
            (db, table),
        )
        key = [str(r[0]) for r in cur.fetchall()]
        return TableInfo(
            name=name,
            columns=[str(r[0]) for r in rows],
            column_types=[str(r[1]) for r in rows],
            primary_key=key,
        )

    def stream_reader(
        self, start: BinlogPosition, *, schemas: Iterable[str], **kwargs: Any
    ) -> BinLogStreamReader:
        """Open a non-blocking binlog stream from ``start`` (a transaction boundary) by file/position.

        The stream is opened by coordinates on both flavors: with ``is_mariadb=True`` mysql-replication
        ignores file/position and an unknown GTID domain would stream from the oldest binlog. Logging
        of the library's settings (which include the password) is off.

        :raises BinlogConfigError: when another replica or the source uses :attr:`server_id` (checked
            first by :meth:`check_server_id`, one extra SQL connection).
        """
        if self.check_server_id() is None:
            log.warning(
                "server_id %s of pipeline %r was not checked against the source's replicas: the user may "
                "not list them (grant REPLICATION MASTER ADMIN on MariaDB 10.5.2+)",
                self.server_id,
                self.pipeline,
            )
        return self.open_stream(start, server_id=self.server_id, only_schemas=sorted(set(schemas)), **kwargs)

    def open_stream(self, start: BinlogPosition, *, server_id: int, **kwargs: Any) -> BinLogStreamReader:
        """Open a non-blocking stream from ``start`` by coordinates with ``server_id``, unchecked.

        For short reads under an id of their own (:mod:`airflow_provider_binlog.probes`); pipelines use
        :meth:`stream_reader`. ``kwargs`` go to ``BinLogStreamReader`` (``only_events``, ...). Its
        connections log in within ``connect_timeout`` (``pymysql_wrapper`` defaults to
        :class:`~airflow_provider_binlog.connect.LoginTimeoutConnection`); afterwards the source sends
        heartbeats and every read and write waits at most the read timeout of :meth:`stream_timeouts`
        (pymysql then raises ``OperationalError`` 2013, "Lost connection ... (timed out)").

        :raises BinlogConfigError: when the extra ``heartbeat_period`` is malformed.
        """
        from pymysqlreplication import BinLogStreamReader

        from airflow_provider_binlog.connect import LoginTimeoutConnection

        heartbeat, timeout = self.stream_timeouts()
        kwargs.setdefault("pymysql_wrapper", LoginTimeoutConnection)
        return BinLogStreamReader(
            connection_settings={
                **self.connection_settings(),
                "read_timeout": timeout,
                "write_timeout": timeout,
            },
            slave_heartbeat=heartbeat,
            server_id=server_id,
            log_file=start.file,
            log_pos=start.pos,
            resume_stream=True,
            blocking=False,
            enable_logging=False,
            **kwargs,
        )


@dataclass(frozen=True)
class TableInfo:
    """A source table as information_schema describes it now.

    :param name: ``db.table``.
    :param columns: column names in ordinal order.
    :param column_types: ``COLUMN_TYPE`` text per column (``bigint(20) unsigned``, ``enum('a','b')``).
    :param primary_key: primary key column names in key order; empty when the table has none.
    """

    name: str
    columns: list[str]
    column_types: list[str]
    primary_key: list[str]
