"""The replication connection of a window read: every dump is opened here, one way, and never reconnects.

A window is read over one replication connection per reader, or not at all: the serial read (and the
task process's part of a parallel read) and each parallel worker open their dumps with :func:`open_dump`,
our own COM_BINLOG_DUMP over a login-bounded pymysql connection
(:func:`~airflow_provider_binlog.extract.events.feeds.read_binlog_socket`, ADR 0018). When the connection
breaks (the source restarts, a ``KILL`` ends the dump thread, the network drops it), reading fails with
pymysql's lost-connection error, which the reader turns into the retryable
:class:`~airflow_provider_binlog.exceptions.ReplicationConnectionLostError`, and the task's retry re-reads the
same window from its start into a cleared staging folder; nothing the failed attempt staged survives. A
connection that dies silently (a dropped NAT entry, a failover that leaves the socket open) is noticed by
the stream's read timeout, three heartbeat periods (:meth:`BinlogHook.stream_timeouts
<airflow_provider_binlog.hooks.binlog.BinlogHook.stream_timeouts>`).

Nothing here resumes inside an attempt: resuming would need the checks a retry already makes (same server,
window start retained, a transaction boundary to resume at). mysql-replication, whose reader opened the
serial dump before, reconnects on its own at the end of the last event it received, most often inside a
transaction (mysql-binlog-connector-java #53 reports a server that then skips to the next group).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Any

from airflow_provider_binlog.exceptions import BinlogConfigError
from airflow_provider_binlog.extract.events.feeds import Event, read_binlog_socket
from airflow_provider_binlog.source.connect import LoginTimeoutConnection, TlsConnectionError
from airflow_provider_binlog.source.gtid import GtidSet

if TYPE_CHECKING:
    from airflow_provider_binlog.contract.positions import BinlogPosition
    from airflow_provider_binlog.hooks.binlog import BinlogHook

log = logging.getLogger(__name__)

REPLICATION_NET_WRITE_TIMEOUT_SECONDS = 3600
"""How long the source waits for the reader to take more binlog bytes before it drops the stream (seconds)."""


@contextmanager
def open_dump(
    settings: Mapping[str, Any],
    *,
    server_id: int,
    start: BinlogPosition | GtidSet,
    flavor: str,
    heartbeat_seconds: float | None = None,
    blocking: bool = False,
    annotate_rows: bool = False,
) -> Iterator[Iterator[Event]]:
    """Open a binlog dump from ``start`` on a connection of its own; yield its raw events; close it after.

    The session gets ``net_write_timeout`` = :data:`REPLICATION_NET_WRITE_TIMEOUT_SECONDS`: the dump thread
    serving it waits that long for the reader to take more bytes before it drops the connection (MySQL
    manual, "Server System Variables": ``net_write_timeout``, default 60 s; measured on MariaDB 10.11). The
    reader takes no bytes while it writes a large committed transaction to staging. The dump sends MariaDB's
    ANNOTATE_ROWS events only when asked (``annotate_rows``).

    :param settings: ``pymysql.connect()`` keyword arguments
        (:meth:`~airflow_provider_binlog.hooks.binlog.BinlogHook.dump_settings`): reads and writes after the
        login wait at most their ``read_timeout`` / ``write_timeout`` seconds.
    :param server_id: the reader's id on the source (see
        :func:`~airflow_provider_binlog.extract.events.feeds.read_binlog_socket`).
    :param start: a transaction boundary (or a file's start) to read from, or (MariaDB) the GTID position to
        read after, wherever it lies in this server's binlog (:func:`~.events.feeds.read_binlog_socket`).
    :param flavor: ``mariadb`` or ``mysql``.
    :param heartbeat_seconds: the heartbeat period asked of the source (None: none).
    :param blocking: wait at the end of the binlog for new events instead of ending there.
    :param annotate_rows: ask MariaDB for its ANNOTATE_ROWS events (the statements of the rows events, for change
        logs); MySQL sends its ROWS_QUERY events either way.
    :raises pymysql.err.OperationalError: when the login fails or times out (``connect_timeout``), for a lost
        connection (2013) while reading, and for the server's refusals (a purged file, a denied privilege).
    :raises BinlogConfigError: when TLS fails (the settings' ``tls_mode``: a certificate the CA did not sign or
        for another host, a server without TLS under a mode that requires it), without retry.
    """
    try:
        connection = LoginTimeoutConnection(**settings)
    except TlsConnectionError as err:  # a certificate or a mode a retry cannot fix
        raise BinlogConfigError(
            f"the replication connection to {settings.get('host')}:{settings.get('port')}: {err.args[-1]}. Fix "
            "the server's certificate or the connection's extras tls / ssl_ca (docs/connection.md, TLS)."
        ) from err
    try:
        with connection.cursor() as cur:
            cur.execute(f"SET SESSION net_write_timeout = {REPLICATION_NET_WRITE_TIMEOUT_SECONDS}")
        file, position, gtid = (
            ("", 4, str(start)) if isinstance(start, GtidSet) else (start.file, start.pos, None)
        )
        yield read_binlog_socket(
            connection,
            server_id=server_id,
            file=file,
            position=position,
            flavor=flavor,
            blocking=blocking,
            annotate_rows=annotate_rows,
            heartbeat_seconds=heartbeat_seconds,
            gtid_position=gtid,
        )
    finally:
        if connection.open:
            connection.close()


def pipeline_dump(
    hook: BinlogHook,
    start: BinlogPosition,
    *,
    flavor: str,
    blocking: bool = False,
    annotate_rows: bool = False,
) -> AbstractContextManager[Iterator[Event]]:
    """Return :func:`open_dump` of the pipeline of ``hook`` from ``start``: its checked ``server_id``, its settings.

    The dump runs under the hook's :attr:`~airflow_provider_binlog.hooks.binlog.BinlogHook.server_id` on a
    connection of its ``dump_settings()``, with the heartbeat period of its ``stream_timeouts()``.

    :param start: a transaction boundary to read from (by coordinates, on both flavors).
    :param flavor: the source's flavor (``mariadb`` or ``mysql``).
    :param blocking: wait at the binlog's end for new events (heartbeats keep the connection alive).
    :param annotate_rows: ask MariaDB for the statements of the rows events (:func:`open_dump`).
    :raises BinlogConfigError: when another replica or the source uses the pipeline's ``server_id``
        (``hook.check_server_id()``, one extra SQL connection, before any dump is opened).
    """
    if hook.check_server_id() is None:
        log.warning(
            "server_id %s of pipeline %r was not checked against the source's replicas: the user may "
            "not list them (grant REPLICATION MASTER ADMIN on MariaDB 10.5.2+)",
            hook.server_id,
            hook.pipeline,
        )
    return open_dump(
        hook.dump_settings(),
        server_id=hook.server_id,
        start=start,
        flavor=flavor,
        heartbeat_seconds=hook.stream_timeouts()[0],
        blocking=blocking,
        annotate_rows=annotate_rows,
    )
