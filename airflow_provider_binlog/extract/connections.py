"""The replication connection of a window read: one connection, no silent reconnect.

A window is read over one replication connection, or not at all. When the connection breaks (the
source restarts, a ``KILL`` ends the dump thread, the network drops it), the read fails with the
retryable :class:`~airflow_provider_binlog.exceptions.ReplicationConnectionLostError` and the task's retry re-reads the same window from its
start into a cleared staging folder; nothing the failed attempt staged survives. A connection that dies
silently (a dropped NAT entry, a failover that leaves the socket open) is noticed by the stream's read
timeout, three heartbeat periods (:meth:`BinlogHook.stream_timeouts
<airflow_provider_binlog.hooks.binlog.BinlogHook.stream_timeouts>`).

mysql-replication would instead reconnect on its own (``BinLogStreamReader.fetchone``, on client errors
2006/2013) and resume at the end of the last event it received, most often inside a transaction; that
is correct only if the server serves a position inside an event group as is (MariaDB 10.11 does, as
measured; MariaDB 5.5 was reported to skip to the next group, mysql-binlog-connector-java #53) and if
the address still leads to the same server (after a failover, the coordinates mean something else).
When the server is still down, its reconnect fails with a raw ``pymysql`` 2003 instead. Resuming
inside the attempt would need the checks a retry already makes (same server, window start retained,
a transaction boundary to resume at), so the reader leaves recovery to the retry:
:class:`ReplicationConnections` turns the library's reconnect into an error, and raises the dump
session's ``net_write_timeout`` so a reader that pauses is not disconnected in the first place.
"""

from __future__ import annotations

from typing import Any

import pymysql
from pymysql.protocol import MysqlPacket

from airflow_provider_binlog.source.connect import LOST_CONNECTION_ERRORS, LoginTimeoutConnection

REPLICATION_NET_WRITE_TIMEOUT_SECONDS = 3600
"""How long the source waits for the reader to take more binlog bytes before it drops the stream (seconds)."""
_CONTROL_DATABASE = "information_schema"
"""The ``db`` mysql-replication gives its control connection (``BinLogStreamReader.__connect_to_ctl``)."""


class ConnectionLost(Exception):
    """A lost connection, raised where mysql-replication cannot catch it (it is no ``OperationalError``)."""


class ReplicationConnection(LoginTimeoutConnection):
    """A pymysql connection whose lost-connection errors mysql-replication cannot swallow.

    Its login is bounded by ``connect_timeout`` (:class:`~airflow_provider_binlog.source.connect.LoginTimeoutConnection`);
    reads after the login keep the stream's own timeout settings.

    ``BinLogStreamReader.fetchone`` (mysql-replication 1.0) catches ``OperationalError`` 2006/2013 from the
    replication connection and reconnects at the last event position it saw; this class re-raises every
    error of :data:`LOST_CONNECTION_ERRORS` as an exception the library does not catch.
    """

    def _read_packet(self, packet_type: Any = MysqlPacket) -> Any:
        try:
            return super()._read_packet(packet_type)
        except pymysql.err.OperationalError as err:
            if err.args and err.args[0] in LOST_CONNECTION_ERRORS:
                raise ConnectionLost(str(err)) from err
            raise


class ReplicationConnections:
    """Open the connections of one ``BinLogStreamReader`` (its ``pymysql_wrapper``); refuse a reconnect.

    The library opens its replication connection and its control connection (``db=information_schema``)
    once each; a second replication connection is a reconnect, however the library got there, and is
    refused, so a window is read over one connection whatever the library version does on errors.

    Connections are :class:`ReplicationConnection` s. The replication connection's session gets
    ``net_write_timeout`` = :data:`REPLICATION_NET_WRITE_TIMEOUT_SECONDS`: the dump thread serving it
    waits that long for the reader to take more bytes before it drops the connection (MySQL manual,
    "Server System Variables": ``net_write_timeout``, default 60 s; measured on MariaDB 10.11). The reader
    takes no bytes while it writes a large committed transaction to staging, and without a reconnect a
    drop there would fail every retry of the window.
    """

    def __init__(self) -> None:
        self.replication_connections = 0

    def __call__(self, **settings: Any) -> ReplicationConnection:
        """Open a connection with pymysql keyword arguments ``settings``."""
        if settings.get("db") == _CONTROL_DATABASE:
            return ReplicationConnection(**settings)
        self.replication_connections += 1
        if self.replication_connections > 1:
            raise ConnectionLost("mysql-replication tried to reopen the replication connection")
        conn = ReplicationConnection(**settings)
        with conn.cursor() as cur:
            cur.execute(f"SET SESSION net_write_timeout = {REPLICATION_NET_WRITE_TIMEOUT_SECONDS}")
        return conn
