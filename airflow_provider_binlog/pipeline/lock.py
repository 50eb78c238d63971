"""A named lock on the pipeline's source server, held across every read-modify-write of its state.

Airflow Variables have no compare-and-set, and Task SDK workers cannot reach the metadata database, so
the state Variable cannot guard itself (``docs/adr/0012-state-lock-on-the-source.md``). Every pipeline has
a source connection, and MySQL and MariaDB offer named locks that no privilege guards: ``GET_LOCK(name,
timeout)`` returns 1 when the session got the lock, 0 when another session held it for ``timeout``
seconds; the lock is released by ``RELEASE_LOCK`` or when the session ends, for whatever reason (MySQL
manual, "Locking Functions"; MariaDB KB, "GET_LOCK"). A killed worker therefore cannot leave the lock
held: the server ends its session when the socket closes. A worker host that vanishes without closing
its socket (power loss, a network partition) leaves the session idle, and the lock connection's session
``wait_timeout`` (:data:`STATE_LOCK_LEASE_SECONDS`) ends it.

No privilege guards a lock name either, so any account on the source that knows the name can take the lock
and stall every state write of the pipeline. The name therefore carries a secret part
(``docs/adr/0035-state-lock-name-with-a-secret.md``): an HMAC of the pipeline name keyed by the connection's
extra ``state_lock_secret``, else by its password: what only Airflow and the pipeline's own account know.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from airflow_provider_binlog.exceptions import (
    SourceUnreachableError,
    StateConflictError,
    StateLockTimeoutError,
)

if TYPE_CHECKING:
    import pymysql

    from airflow_provider_binlog.hooks.binlog import BinlogHook

log = logging.getLogger(__name__)

STATE_LOCK_WAIT_SECONDS = 30
"""How long a state update waits for the lock (holders keep it for the few Variable reads and writes of
one update)."""
STATE_LOCK_LEASE_SECONDS = 300
"""``wait_timeout`` of the lock's session: the server ends a session idle this long, releasing the lock of a
holder whose host vanished. A holder idle that long finds its lock lost before it writes."""
LOCK_NAME_MAX_LENGTH = 64
"""MySQL 5.7+ refuses longer lock names (ER_USER_LOCK_WRONG_NAME, MySQL manual, "Locking Functions")."""
_PREFIX = "airflow_provider_binlog.state."
"""Kept from when the state lived in ``airflow_provider_binlog.state``, so an operator looking at the source's
sessions still recognises the lock; the name is a fixed value, not this module's path."""
_SECRET_PREFIX = "airflow_provider_binlog.lock."
"""Prefix of the names with a secret part (:func:`lock_name`): never one of the names :func:`legacy_lock_name` gave."""
LOCK_SECRET_EXTRA = "state_lock_secret"
"""The connection extra keying the lock name (:func:`lock_name`); the connection's password when it is unset."""


def lock_name(pipeline: str, secret: str) -> str:
    """Return the name of ``pipeline``'s state lock: a prefix and an HMAC-SHA256 of the name keyed by ``secret``.

    A source account that does not know ``secret`` cannot tell the name, so cannot take the lock ahead of the
    pipeline (ADR 0035). 34 hex digits (136 bits) of the HMAC fill the 64 characters the server allows.

    :param pipeline: the pipeline's name.
    :param secret: the connection's ``state_lock_secret`` extra, else its password ("" when it has neither: the
        name is then computable by anyone; the lock warns).
    """
    digest = hmac.new(secret.encode(), pipeline.encode(), hashlib.sha256).hexdigest()
    return _SECRET_PREFIX + digest[: LOCK_NAME_MAX_LENGTH - len(_SECRET_PREFIX)]


def legacy_lock_name(pipeline: str) -> str:
    """Return the name provider versions before ADR 0035 used: the pipeline's name, readable (hashed when long).

    Anyone can compute it; it is kept for the upgrade check and docs only (``docs/operating.md``, 'State lock').
    """
    name = _PREFIX + pipeline
    if len(name) <= LOCK_NAME_MAX_LENGTH:
        return name
    return _PREFIX + hashlib.sha256(pipeline.encode()).hexdigest()[: LOCK_NAME_MAX_LENGTH - len(_PREFIX)]


def lock_secret(hook: BinlogHook) -> str:
    """Return the secret keying the lock name of ``hook``'s pipeline (:func:`lock_name`).

    The connection's ``state_lock_secret`` extra, else its password, else "" (logged as a warning: the lock name
    can then be computed by anyone).
    """
    extra = hook.get_connection(hook.binlog_conn_id).extra_dejson.get(LOCK_SECRET_EXTRA)
    secret = str(extra) if extra else str(hook.sql_settings().get("password") or "")
    if not secret:
        log.warning(
            "connection %r has no password and no %r extra: the state lock name of pipeline %r can be computed by "
            "any account on the source, which could hold it and stall the pipeline's state writes. Set the extra "
            "%r to a random value (docs/operating.md, 'State lock')",
            hook.binlog_conn_id, LOCK_SECRET_EXTRA, hook.pipeline, LOCK_SECRET_EXTRA,
        )  # fmt: skip
    return secret


class SourceStateLock:
    """``GET_LOCK`` on the source of ``hook``, named after ``hook.pipeline`` and a secret (see :func:`lock_name`).

    :param hook: the pipeline's hook (its connection and pipeline name).
    :param wait_seconds: how long :meth:`held` waits for another holder; capped one second below the
        connection's ``read_timeout`` so the client does not give up first.
    """

    def __init__(self, hook: BinlogHook, *, wait_seconds: int = STATE_LOCK_WAIT_SECONDS) -> None:
        self.hook = hook
        self.wait_seconds = wait_seconds
        self._name: str | None = None

    @property
    def name(self) -> str:
        """Return the lock's name (:func:`lock_name`), looking the connection up on first use, not at creation."""
        if self._name is None:
            self._name = lock_name(self.hook.pipeline, lock_secret(self.hook))
        return self._name

    @contextmanager
    def held(self) -> Iterator[Callable[[], None]]:
        """Hold the lock for the ``with`` block; yield a check to call right before writing.

        The check raises :class:`StateConflictError` when the lock was lost meanwhile (the session ended:
        the source restarted, or the block sat idle past :data:`STATE_LOCK_LEASE_SECONDS`).

        :raises StateLockTimeoutError: when another session held the lock for the whole wait (retryable).
        :raises SourceUnreachableError: when the source cannot be reached (retryable).
        """
        conn = self.hook.get_conn()
        try:
            wait = max(1, min(self.wait_seconds, int(self.hook.sql_settings()["read_timeout"]) - 1))
            self._sql(conn, f"SET SESSION wait_timeout = {STATE_LOCK_LEASE_SECONDS}")
            (got,) = self._sql(conn, "SELECT GET_LOCK(%s, %s)", (self.name, wait))
            if got != 1:
                raise self._timeout(conn, wait)
            yield lambda: self._confirm(conn)
            with contextlib.suppress(SourceUnreachableError):  # the write is done; closing frees it too
                self._sql(conn, "SELECT RELEASE_LOCK(%s)", (self.name,))
        finally:
            conn.close()  # ends the session, which releases the lock if the block raised

    def _confirm(self, conn: pymysql.connections.Connection) -> None:
        try:
            (ours,) = self._sql(conn, "SELECT IS_USED_LOCK(%s) = CONNECTION_ID()", (self.name,))
        except SourceUnreachableError as err:
            raise self._lost(str(err)) from err
        if ours != 1:
            raise self._lost("another session holds it now")

    def _lost(self, detail: str) -> StateConflictError:
        return StateConflictError(
            f"pipeline {self.hook.pipeline!r} lost its state lock on the source before writing the "
            f"state ({detail}); nothing was written. A state update (StateManager.transact) reads the state again and "
            f"retries; a single write fails."
        )

    def _timeout(self, conn: pymysql.connections.Connection, wait: int) -> StateLockTimeoutError:
        (holder,) = self._sql(conn, "SELECT IS_USED_LOCK(%s)", (self.name,))
        where = ""
        if holder is not None:
            rows = self._sql_all(
                conn, "SELECT USER, HOST FROM information_schema.PROCESSLIST WHERE ID = %s", (holder,)
            )
            where = f" ({rows[0][0]}@{rows[0][1]})" if rows else ""
        return StateLockTimeoutError(
            f"pipeline {self.hook.pipeline!r}: the state lock on the source (connection "
            f"{self.hook.binlog_conn_id!r}) was held by session {holder}{where} for {wait} s. Another task of "
            f"the pipeline is updating its state; the task retries. If it persists, look for that session "
            f"on the source (SHOW PROCESSLIST); a session idle for {STATE_LOCK_LEASE_SECONDS} s ends by itself."
        )

    def _sql(self, conn: pymysql.connections.Connection, sql: str, args: Any = None) -> tuple[Any, ...]:
        rows = self._sql_all(conn, sql, args)
        return rows[0] if rows else ()

    def _sql_all(self, conn: pymysql.connections.Connection, sql: str, args: Any = None) -> list[Any]:
        import pymysql

        from airflow_provider_binlog.source.connect import LOST_CONNECTION_ERRORS

        try:
            with conn.cursor() as cur:
                cur.execute(sql, args)
                return list(cur.fetchall())
        except pymysql.err.OperationalError as err:
            if err.args and err.args[0] in LOST_CONNECTION_ERRORS:
                raise SourceUnreachableError(
                    f"lost the connection holding the state lock of pipeline "
                    f"{self.hook.pipeline!r} (connection {self.hook.binlog_conn_id!r}): {err}. The task retries."
                ) from err
            raise
