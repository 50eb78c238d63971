"""BinlogHook: replication connections to MySQL/MariaDB, server state and source validation.

The hook is the Airflow face of :mod:`airflow_provider_binlog.source`: it resolves the connection, turns the
server's errors into the provider's exceptions (naming the connection, the address and the fix), and
composes the source's findings into validation errors (the connection Test's report is in
:mod:`~airflow_provider_binlog.hooks.connection_report`). It is longer than 500 lines because those messages
are its job and each is documented where it is written; the logic it uses lives in ``source/``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseHook

from airflow_provider_binlog.contract.positions import BinlogPosition
from airflow_provider_binlog.exceptions import (
    BinlogConfigError,
    BinlogPurgedError,
    SourcePrivilegeError,
    SourceUnreachableError,
)
from airflow_provider_binlog.get_provider_info import CONN_TYPE, HOOK_NAME, ui_field_behaviour
from airflow_provider_binlog.source.config import (
    SERVER_ID_MAX,
    SERVER_ID_MIN,
    STREAM_TIMEOUT_HEARTBEATS,
    SourceExtras,
    parse_extras,
)
from airflow_provider_binlog.source.flavor import ReplicaHost, SourceFlavor, flavor_named, flavor_of_version
from airflow_provider_binlog.source.grants import ACCESS_DENIED_ERRORS
from airflow_provider_binlog.source.schema import TableInfo, base_tables, names_case_sensitive, tables_info
from airflow_provider_binlog.source.server import (
    ServerState,
    derive_server_id,
    read_server_state,
    setting_findings,
)

if TYPE_CHECKING:
    import pymysql
    from pymysqlreplication import BinLogStreamReader

    from airflow_provider_binlog.contract.foreign_keys import ForeignKey
    from airflow_provider_binlog.source.grants import Grants, PrivilegeReport

log = logging.getLogger(__name__)


MIN_REDACTED_SECRET_LENGTH = 5
"""Secrets shorter than this are not redacted from messages (they would garble them; Airflow's secrets
masker uses the same threshold)."""


class BinlogHook(BaseHook):
    """Open replication and SQL connections to a MySQL/MariaDB source and read its binlog state.

    Works from a standard ``mysql`` connection or the provider's ``mysqlbinlog`` connection type,
    whose form declares the extras (see :mod:`airflow_provider_binlog.get_provider_info`).
    Connection extras (JSON; empty values count as unset): ``server_id`` (int in 1..4294967295, replica
    id of the stream; default derived from the pipeline name, see :func:`derive_server_id`), ``flavor``
    (``mysql``/``mariadb``, overrides detection), ``ssl_ca`` / ``ssl_cert`` / ``ssl_key`` (file paths) and
    ``ssl_key_password``, or the equivalent ``ssl`` object passed to pymysql (``ca``, ``capath``, ``cert``,
    ``key``, ``password``, ``cipher``, ``check_hostname``), ``tls`` (the TLS mode of every connection:
    ``disabled``, ``preferred``, ``required``, ``verify_ca``, ``verify_identity``, see
    :meth:`SourceExtras.tls_mode`), ``charset`` (default ``utf8mb4``), ``connect_timeout`` (seconds,
    default 10), ``read_timeout`` (seconds, default 60: SQL connections), ``heartbeat_period`` (seconds,
    default 15: binlog streams, see :meth:`stream_timeouts`).

    :param binlog_conn_id: Airflow connection id.
    :param pipeline: pipeline name, used to derive a stable ``server_id`` (None: ``default``, and the
        connection Test explains the derivation instead of checking one id).
    """

    conn_name_attr = "binlog_conn_id"
    default_conn_name = "binlog_default"
    conn_type = CONN_TYPE
    hook_name = HOOK_NAME

    def __init__(self, binlog_conn_id: str = default_conn_name, *, pipeline: str | None = None) -> None:
        super().__init__()
        self.binlog_conn_id = binlog_conn_id
        self.pipeline = "default" if pipeline is None else pipeline
        self.pipeline_given = pipeline is not None
        """False for a hook made without a pipeline (the connection Test): ids are then derived for ``default``."""
        self._settings: dict[str, Any] | None = None
        self._extras: SourceExtras | None = None

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        """Return how the Airflow UI shows the standard fields of the ``mysqlbinlog`` form.

        Airflow 3.2+ reads the same definition from the provider info (``ui-field-behaviour``).
        """
        return ui_field_behaviour()

    def extras(self) -> SourceExtras:
        """Return the connection's extras, validated (:class:`~airflow_provider_binlog.source.config.SourceExtras`).

        :raises BinlogConfigError: naming each malformed extra and the connection.
        """
        self.connection_settings()
        assert self._extras is not None
        return self._extras

    def connection_settings(self) -> dict[str, Any]:
        """Return pymysql keyword arguments built from the Airflow connection (looked up once).

        They hold ``tls_mode`` (:meth:`SourceExtras.tls_mode`) and, when TLS files are set, ``ssl`` (their
        paths): arguments of :class:`~airflow_provider_binlog.source.connect.LoginTimeoutConnection`, which
        every connection of the provider is (SQL, replication, parallel-read workers, snapshot chunk reads,
        in Spark executors too). A client certificate without a CA is logged as a warning (the server is
        not verified: :meth:`SourceExtras.tls_warnings`).

        :raises BinlogConfigError: when the connection extras are malformed or the TLS extras contradict
            each other.
        """
        if self._settings is None:
            conn = self.get_connection(self.binlog_conn_id)
            try:
                extras = parse_extras(conn.extra_dejson)
            except ValueError as err:
                raise BinlogConfigError(f"connection {self.connection_label()}: {err}") from None
            settings: dict[str, Any] = {
                "host": conn.host or "127.0.0.1",
                "port": int(conn.port or 3306),
                "user": conn.login or "",
                "passwd": conn.password or "",
                "charset": extras.charset,
                "connect_timeout": extras.connect_timeout,
            }
            settings["tls_mode"] = extras.tls_mode()
            ssl = extras.ssl_options()
            if ssl:
                settings["ssl"] = ssl
            for warning in extras.tls_warnings():
                log.warning("connection %s: %s", self.connection_label(), warning)
            self._extras = extras
            self._settings = settings
        return dict(self._settings)

    @property
    def server_id(self) -> int:
        """Return the replica ``server_id`` this hook's streams use (extra ``server_id``, else derived)."""
        configured = self.extras().server_id
        return derive_server_id(self.pipeline) if configured is None else configured

    def server_id_origin(self) -> str:
        """Return where :attr:`server_id` comes from, for messages."""
        if self.extras().server_id is not None:
            return f"set by the extra of connection {self.connection_label()}"
        return f"derived from pipeline name {self.pipeline!r}"

    def connection_label(self) -> str:
        """Return the connection's id, quoted, for messages: the id the user saved it under.

        Airflow's API (the UI's Test button) tests a connection under a random temporary id, exported as
        ``AIRFLOW_CONN_<ID>`` for the test's duration, which means nothing to the user. During such a test
        the label names the id the request was made for (:func:`~airflow_provider_binlog.hooks.connection_report.requested_connection_id`), or says the id
        is temporary when that cannot be known.
        """
        from airflow_provider_binlog.hooks.connection_report import requested_connection_id

        requested = requested_connection_id(self)
        if requested is None or requested == self.binlog_conn_id:
            return repr(self.binlog_conn_id)
        if requested:
            return repr(requested)
        return f"being tested (Airflow's temporary id {self.binlog_conn_id!r}; use the id you save it under)"

    testing_connection = False
    """True while :meth:`test_connection` runs (set by it)."""

    def sql_settings(self) -> dict[str, Any]:
        """Return ``pymysql.connect()`` keyword arguments of SQL connections.

        They hold ``password`` (not the stream's ``passwd``) and, unlike the replication stream's settings,
        ``read_timeout`` and ``write_timeout``: the extra ``read_timeout`` (seconds, default
        :data:`~airflow_provider_binlog.source.config.DEFAULT_READ_TIMEOUT_SECONDS`) for both.

        :raises BinlogConfigError: when the connection extras are malformed.
        """
        settings = self.connection_settings()
        settings["password"] = settings.pop("passwd")
        settings["read_timeout"] = settings["write_timeout"] = self.extras().read_timeout
        return settings

    def stream_timeouts(self) -> tuple[int, int]:
        """Return ``(heartbeat period, read timeout)`` of binlog streams, in seconds.

        The period is the extra ``heartbeat_period`` (1..600, default 15). A stream asks the source for a
        heartbeat event every period in which the dump thread sends nothing, i.e. while it waits at the end
        of the binlog (``@master_heartbeat_period``, set by mysql-replication's ``slave_heartbeat``; MySQL
        manual, "CHANGE REPLICATION SOURCE TO": ``SOURCE_HEARTBEAT_PERIOD``; MariaDB ``sql_repl.cc``,
        ``wait_new_events``). Each read and write of the stream then waits at most
        :data:`~airflow_provider_binlog.source.config.STREAM_TIMEOUT_HEARTBEATS` periods: a live source
        never stays silent that long, a dead connection fails within that time.

        :raises BinlogConfigError: when the extra is not an integer in 1..600.
        """
        period = self.extras().heartbeat_period
        return period, STREAM_TIMEOUT_HEARTBEATS * period

    def dump_settings(self) -> dict[str, Any]:
        """Return ``pymysql.connect()`` keyword arguments of a connection that reads a binlog dump of its own.

        Those of the stream (:meth:`connection_settings`, ``password`` instead of ``passwd``) with the stream's
        read and write timeout (:meth:`stream_timeouts`): the parallel window read's workers
        (:mod:`~airflow_provider_binlog.extract.parallel`) read non-blocking dumps over such connections.

        :raises BinlogConfigError: when the connection extras are malformed.
        """
        settings = self.connection_settings()
        settings["password"] = settings.pop("passwd")
        settings["read_timeout"] = settings["write_timeout"] = self.stream_timeouts()[1]
        return settings

    def get_conn(self) -> pymysql.connections.Connection:
        """Open an autocommit SQL connection to the source, its login bounded by ``connect_timeout``.

        The connection is a :class:`~airflow_provider_binlog.source.connect.LoginTimeoutConnection`: the TCP
        connect and every read and write of the login wait at most ``connect_timeout`` seconds, later reads
        and writes at most ``read_timeout`` seconds.

        :raises BinlogConfigError: when the login is refused (wrong user/password or missing grant), or TLS
            fails (:meth:`tls_error`).
        :raises SourceUnreachableError: when the server cannot be reached or does not complete the login
            within ``connect_timeout`` (retryable).
        """
        import pymysql

        from airflow_provider_binlog.source.connect import LoginTimeoutConnection, TlsConnectionError

        settings = self.sql_settings()
        where = f"{settings['host']}:{settings['port']}"
        try:
            return LoginTimeoutConnection(autocommit=True, **settings)
        except TlsConnectionError as err:
            raise self.tls_error(err) from err
        except pymysql.err.OperationalError as err:
            code = err.args[0] if err.args else None
            if code in ACCESS_DENIED_ERRORS:
                raise BinlogConfigError(
                    f"the source {where} refused user {settings['user']!r}: {err.args[1]}. "
                    f"Check the login and password of connection {self.connection_label()}."
                ) from err
            raise SourceUnreachableError(
                f"cannot reach the source {where} (connection {self.connection_label()}) with "
                f"connect_timeout={settings['connect_timeout']} s: {err}. The task retries; if the server is "
                f"up but slow to log in, raise the extra connect_timeout."
            ) from err

    def tls_error(self, err: Exception) -> BinlogConfigError:
        """Return the error for a connection whose TLS failed (a :class:`~airflow_provider_binlog.source.connect.TlsConnectionError`).

        A retry cannot fix a certificate the CA did not sign, a certificate for another host or a server
        without TLS, so the error fails the task at once; it names the mode, the problem and the connection.
        """
        settings = self.connection_settings()
        return BinlogConfigError(
            self.redacted(
                f"connection {self.connection_label()} to {settings['host']}:{settings['port']}: {err.args[-1]}. "
                "Fix the server's certificate or the extras tls / ssl_ca of the connection (docs/connection.md, "
                "TLS); a retry cannot succeed before that."
            )
        )

    @contextmanager
    def cursor(self) -> Iterator[pymysql.cursors.Cursor]:
        """Yield a cursor on a fresh connection and close both afterwards.

        :raises SourcePrivilegeError: when the server denies a statement for a missing privilege (no
            retry; the message holds the GRANT statements, see :meth:`privilege_error`).
        :raises SourceUnreachableError: when the connection is lost or a read or write waits longer than
            ``read_timeout`` (retryable).
        """
        import pymysql

        from airflow_provider_binlog.source.connect import LOST_CONNECTION_ERRORS

        conn = self.get_conn()
        cur = conn.cursor()
        try:
            yield cur
        except pymysql.err.MySQLError as err:
            code = err.args[0] if err.args else None
            if code in ACCESS_DENIED_ERRORS:
                statement = str(getattr(cur, "_executed", None) or "SQL")
                shown = statement if len(statement) <= 60 else statement[:57] + "..."
                raise self.privilege_error(err, f"run {shown}") from err
            if code in LOST_CONNECTION_ERRORS:
                settings = self.sql_settings()
                raise SourceUnreachableError(
                    f"lost the SQL connection to the source {settings['host']}:{settings['port']} (connection "
                    f"{self.connection_label()}; read_timeout={settings['read_timeout']} s): {err}. The task "
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

        from airflow_provider_binlog.source.grants import Grants, parse_role_list

        strategy = self.strategy(cur)
        flavor = strategy.name
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
        return flavor, version, Grants.parse(current_user, lines, strategy.privileges(version), roles)

    def check_privileges(self, tables: Iterable[str] | None = None) -> PrivilegeReport:
        """Check every privilege the pipeline needs: binlog stream, binlog status, SELECT on ``tables``.

        See :mod:`airflow_provider_binlog.source.grants` for the privileges of each flavor and the sources.

        :param tables: the table selection (``db.table`` names or patterns); None checks only the global
            privileges (the connection test knows no tables).
        :returns: the report; its ``missing`` verdicts carry the ``GRANT`` statement that fixes each.
        :raises BinlogConfigError: on a refused login.
        :raises SourceUnreachableError: when the server cannot be reached.
        """
        from airflow_provider_binlog.contract.names import TablePattern
        from airflow_provider_binlog.pipeline.tables import split_selection
        from airflow_provider_binlog.source.grants import PrivilegeReport, table_levels

        selection, _ = split_selection(tables or [])  # an exclusion needs no privilege
        with self.cursor() as cur:
            flavor, version, grants = self.read_grants(cur)
            databases: list[str] = []
            if not all(TablePattern.parse(t).db_literal for t in selection):
                cur.execute("SELECT SCHEMA_NAME FROM information_schema.SCHEMATA")
                databases = [str(row[0]) for row in cur.fetchall()]
        requirements = grants.privileges.requirements(table_levels(selection, databases))
        return PrivilegeReport(flavor, version, grants, grants.check(requirements))

    def privilege_error(self, err: Exception, action: str) -> SourcePrivilegeError:
        """Return the error for an access-denied answer of the source, with the GRANTs that fix it.

        The source answered ``action`` with one of :data:`~airflow_provider_binlog.source.grants.ACCESS_DENIED_ERRORS`
        (the privilege was revoked after validation, or is not checked by it). The error lists the
        statements for every privilege the pipeline needs and lacks (read again from ``SHOW GRANTS`` on a
        new connection) and the one the server's message names. A retry cannot succeed before an
        administrator runs them, so the error fails the task at once.
        """
        from airflow_provider_binlog.source.grants import fix_from_error, quote_string

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
            fixes = [v.fix for v in grants.check(grants.privileges.requirements()) if v.missing]
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
            self.redacted(
                f"the source {where} refused to let {account} {action} (connection {self.connection_label()}): "
                f"{err}. {advice}\nA retry cannot succeed before that, so the task fails without retrying."
            )
        )

    def flavor(self, cur: pymysql.cursors.Cursor) -> str:
        """Return ``mariadb`` or ``mysql`` (from the connection extra, else ``SELECT VERSION()``)."""
        return self.strategy(cur).name

    def strategy(self, cur: pymysql.cursors.Cursor) -> SourceFlavor:
        """Return the flavor strategy of the source: the extra ``flavor``, else detected from ``SELECT VERSION()``."""
        forced = self.extras().flavor
        if forced:
            return flavor_named(forced)
        cur.execute("SELECT VERSION()")
        return flavor_of_version(str(cur.fetchone()[0]))

    def head_position(self, cur: pymysql.cursors.Cursor, flavor: str) -> BinlogPosition:
        """Return the position after the last committed transaction (:meth:`SourceFlavor.read_head`).

        :raises BinlogConfigError: when binary logging is off (no status row).
        """
        head = flavor_named(flavor).read_head(cur)
        if head is None:
            raise BinlogConfigError("binary logging is off on the source: start the server with --log-bin")
        return head

    def server_state(self) -> ServerState:
        """Read flavor, version, binlog settings, files, head and GTID sets in one connection.

        See :func:`~airflow_provider_binlog.source.server.read_server_state`.

        :raises BinlogConfigError: on a refused login.
        :raises SourcePrivilegeError: when the user may not read the binlog head or files.
        :raises SourceUnreachableError: when the server cannot be reached.
        """
        with self.cursor() as cur:
            return read_server_state(cur, self.strategy(cur))

    def validate_source(
        self, *, allow_minimal_row_metadata: bool = False, tables: Iterable[str] | None = None
    ) -> ServerState:
        """Check that the server can be a CDC source for the user and return its state.

        Checks the user's privileges (:meth:`check_privileges`) before the settings, so a missing grant
        fails here instead of in a later run. The settings are judged by
        :func:`~airflow_provider_binlog.source.server.setting_findings`.

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
        wrong = [
            f
            for f in setting_findings(state, allow_minimal_row_metadata=allow_minimal_row_metadata)
            if f.wrong
        ]
        listing = "\n".join(f"  - {f.explain()}." for f in wrong)
        if report.missing:
            settings = f"\nIts settings are wrong too:\n{listing}" if wrong else ""
            raise SourcePrivilegeError(self._privileges_message(report) + settings)
        if wrong:
            raise BinlogConfigError(
                f"the source {state.flavor} {state.version} (connection {self.connection_label()}) cannot be "
                f"used for CDC:\n{listing}"
            )
        return state

    def _privileges_message(self, report: PrivilegeReport) -> str:
        """Return the error text for the missing privileges of ``report``, one GRANT per line."""
        return (
            f"the user {report.grants.account} of connection {self.connection_label()} lacks privileges the "
            f"pipeline needs on the source {report.flavor} {report.version}:\n{report.describe_missing()}\n"
            "Run the statements as an administrator of the source, then run the task again."
        )

    def registered_replicas(self, cur: pymysql.cursors.Cursor) -> list[ReplicaHost]:
        """Return the replicas registered with the source (:meth:`SourceFlavor.replicas`).

        :raises pymysql.err.OperationalError: 1227 when the user may not list replicas (MySQL needs
            REPLICATION SLAVE, MariaDB 10.5.2+ REPLICATION MASTER ADMIN).
        """
        return self.strategy(cur).replicas(cur)

    def check_server_id(self) -> list[ReplicaHost] | None:
        """Check that no replica of the source and not the source itself uses :attr:`server_id`.

        Each replica's ``server_id`` must differ from the source's and from every other replica's
        (MySQL manual, "Setting the Replica Configuration"), and a source runs one binlog dump per id: a
        new dump ends the running dump with the same id (MySQL's "zombie" dump threads; measured on
        MariaDB 10.11). A pipeline sharing a real replica's id would break that replica's replication
        and be broken by it in turn.

        The provider's own dumps and probe streams do not register (they send no ``COM_REGISTER_SLAVE``:
        :func:`~airflow_provider_binlog.extract.connections.open_dump`, and mysql-replication without
        ``report_slave`` for :meth:`open_stream`), so a registered replica
        is never an earlier stream of this pipeline, alive or crashed, and needs no exemption. By the
        same token two pipelines sharing a ``server_id`` are invisible here; the derived ids keep them
        apart unless the extra sets one id for several pipelines.

        :returns: the registered replicas checked; None when the user may not list them (then only
            the source's own ``@@server_id`` was compared).
        :raises BinlogConfigError: naming the colliding server and the fix.
        """
        server_id = self.server_id
        source_id, replicas = self.taken_server_ids()
        taken = [source_id, *(r.server_id for r in replicas or [])]
        if server_id == source_id:
            raise BinlogConfigError(
                f"server_id {server_id} ({self.server_id_origin()}) is the source's own @@server_id: "
                f"every server and replica of a topology needs its own id. {self._server_id_fix(taken)}"
            )
        clashes = [r for r in replicas or [] if r.server_id == server_id]
        if clashes:
            raise BinlogConfigError(
                f"server_id {server_id} ({self.server_id_origin()}) is already used by the replica "
                f"{clashes[0]} registered with the source: the source keeps one binlog dump per server_id "
                f"and would disconnect one of the two. {self._server_id_fix(taken)}"
            )
        return replicas

    def taken_server_ids(self) -> tuple[int, list[ReplicaHost] | None]:
        """Return the source's ``@@server_id`` and its registered replicas (None: the user may not list them)."""
        import pymysql

        with self.cursor() as cur:
            cur.execute("SELECT @@GLOBAL.server_id")
            source_id = int(cur.fetchone()[0])
            try:
                return source_id, self.registered_replicas(cur)
            except pymysql.err.OperationalError as err:
                if err.args and err.args[0] in ACCESS_DENIED_ERRORS:
                    return source_id, None
                raise

    def _server_id_fix(self, taken: Iterable[int]) -> str:
        used = ", ".join(str(i) for i in sorted(set(taken)))
        return (
            f"Set the extra server_id of connection {self.connection_label()} to a value in "
            f"{SERVER_ID_MIN}..{SERVER_ID_MAX} that nothing uses (in use: {used}); it then applies to every "
            "pipeline using that connection."
        )

    def test_connection(self) -> tuple[bool, str]:
        """Log in, check every binlog setting, the ``server_id`` and the user's privileges (the Test button).

        The report is returned (the UI and the API show it) and logged at INFO. ``airflow connections
        test`` prints a returned message only on failure and silences logs without ``--verbose``, so under
        that command a successful report is printed too (:func:`~airflow_provider_binlog.hooks.connection_report.tested_by_the_cli`). Testing is off in
        Airflow by default; ``[core] test_connection = Enabled`` (``AIRFLOW__CORE__TEST_CONNECTION=Enabled``)
        turns it on for the UI, the API and the CLI.

        :returns: ``(ok, message)``: a header line naming the server and the connection
            (:meth:`connection_label`), one ``subject=value: verdict`` line per
            :class:`~airflow_provider_binlog.source.findings.Finding` (the settings, the binlog retention,
            the ``server_id``, one ``privilege=...`` line per privilege the pipeline needs; when a missing
            privilege keeps the server from showing the settings, a ``settings=?: not checked`` line stands
            for them) and the binlog head, separated by a semicolon and a newline (readable whether the UI
            keeps line breaks or not); ``ok`` is False when any line is WRONG or the server cannot be
            reached. Secrets never appear in it.
        """
        from airflow_provider_binlog.hooks.connection_report import connection_report, tested_by_the_cli

        self.testing_connection = True
        try:
            ok, message = connection_report(self)
        finally:
            self.testing_connection = False
        log.info("connection test:\n%s", message)
        if ok and tested_by_the_cli(self):
            print(message.replace(";\n", "\n"))  # the CLI shows nothing else of a successful test
        return ok, message

    def redacted(self, text: str) -> str:
        """Return ``text`` with the connection's password and TLS key password replaced by ``***``."""
        settings = self._settings or {}
        secrets = (settings.get("passwd"), (settings.get("ssl") or {}).get("password"))
        for secret in secrets:
            if secret and len(str(secret)) >= MIN_REDACTED_SECRET_LENGTH:
                text = text.replace(str(secret), "***")
        return text

    def describe_tables(self, selection: Iterable[str]) -> dict[str, TableInfo]:
        """Resolve a table selection to existing base tables (see :func:`~airflow_provider_binlog.pipeline.tables.select_tables`).

        :param selection: ``db.table`` names and shell patterns (``shop.*``); entries starting with ``!``
            exclude the tables they match, after the includes.
        :returns: ``{"db.table": TableInfo}`` with columns in ordinal order and primary key columns
            (:func:`~airflow_provider_binlog.source.schema.tables_info`: two queries for any number of tables).
        :raises BinlogConfigError: when a plain name matches no table, a pattern matches nothing or the
            exclusions leave no table.
        """
        from airflow_provider_binlog.pipeline.tables import select_tables

        with self.cursor() as cur:
            chosen = select_tables(selection, base_tables(cur), case_sensitive=names_case_sensitive(cur))
            return tables_info(cur, chosen)

    def foreign_keys(self, tables: Iterable[str]) -> list[ForeignKey]:
        """Return the foreign keys with CASCADE or SET NULL actions whose child is one of ``tables``.

        What a SELECT-only user sees (:func:`~airflow_provider_binlog.source.foreign_keys.read_foreign_keys`);
        the parent may be any table of the server.

        :param tables: ``db.table`` names (the resolved selection).
        """
        from airflow_provider_binlog.source.foreign_keys import read_foreign_keys

        with self.cursor() as cur:
            return read_foreign_keys(cur, tables)

    def open_stream(self, start: BinlogPosition, *, server_id: int, **kwargs: Any) -> BinLogStreamReader:
        """Open a non-blocking stream from ``start`` by coordinates with ``server_id``, unchecked.

        For short reads under an id of their own (:meth:`probe_stream`); window reads open their dumps with
        :func:`~airflow_provider_binlog.extract.connections.pipeline_dump`. ``kwargs`` go to ``BinLogStreamReader`` (``only_events``, ...). Its
        connections log in within ``connect_timeout`` (``pymysql_wrapper`` defaults to
        :class:`~airflow_provider_binlog.source.connect.LoginTimeoutConnection`); afterwards the source sends
        heartbeats and every read and write waits at most the read timeout of :meth:`stream_timeouts`
        (pymysql then raises ``OperationalError`` 2013, "Lost connection ... (timed out)").

        :raises BinlogConfigError: when the extra ``heartbeat_period`` is malformed.
        """
        from pymysqlreplication import BinLogStreamReader

        from airflow_provider_binlog.source.connect import LoginTimeoutConnection

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

    @contextmanager
    def probe_stream(self, file: str, pos: int, events: Sequence[type]) -> Iterator[BinLogStreamReader]:
        """Yield a stream of ``events`` from ``file``:``pos`` for :mod:`~airflow_provider_binlog.source.probes`.

        It registers with a fresh :func:`~airflow_provider_binlog.source.probes.probe_server_id` of this hook's
        pipeline (so probes running at the same time never end each other) and is closed after the block. Errors inside the block leave as the provider's: a denied
        privilege as :meth:`privilege_error`; ER_MASTER_FATAL_ERROR_READING_BINLOG (1236, MySQL manual,
        "Server Error Message Reference": the source cannot open the file or position, e.g. purged
        meanwhile) and :class:`~airflow_provider_binlog.source.probes.BinlogGoneError` as
        :class:`BinlogPurgedError`; a failed TLS as :meth:`tls_error`; other server errors as
        :class:`SourceUnreachableError`.
        """
        import pymysql

        from airflow_provider_binlog.source.connect import FATAL_READING_BINLOG, TlsConnectionError
        from airflow_provider_binlog.source.probes import BinlogGoneError, probe_server_id

        stream = self.open_stream(
            BinlogPosition(file=file, pos=pos),
            server_id=probe_server_id(self.pipeline),
            only_events=list(events),
        )
        try:
            yield stream
        except BinlogGoneError as err:
            raise BinlogPurgedError(str(err)) from err
        except TlsConnectionError as err:
            raise self.tls_error(err) from err
        except pymysql.err.OperationalError as err:
            code = err.args[0] if err.args else None
            if code in ACCESS_DENIED_ERRORS:
                raise self.privilege_error(err, f"read binlog {file} from position {pos}") from err
            if code == FATAL_READING_BINLOG:
                raise BinlogPurgedError(
                    f"the source cannot serve binlog {file} from position {pos}: {err.args[1]}"
                ) from err
            raise SourceUnreachableError(
                f"binlog probe of {file}:{pos} via {self.binlog_conn_id!r} failed: {err}"
            ) from err
        finally:
            stream.close()
