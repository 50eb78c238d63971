"""pymysql connections whose login is bounded by ``connect_timeout``, not only the TCP connect.

pymysql (1.1, 1.2: ``Connection.connect`` in ``pymysql/connections.py``) passes ``connect_timeout`` to
``socket.create_connection`` only. Right after the TCP connection is up it calls
``sock.settimeout(self._read_timeout)``, ``None`` unless ``read_timeout`` is given, and then reads the
server's handshake (``_get_server_information``), authenticates (``_request_authentication``) and sends
``SET NAMES`` and ``SET AUTOCOMMIT`` with that timeout. Against a peer that accepts TCP but never sends
the handshake (a hung server, a proxy whose backend is gone, a firewall that answers the SYN) the login
therefore waits until the peer or the kernel closes the socket: 38-43 s were measured with
``connect_timeout=3``, and a peer that keeps the socket open makes it wait forever.

:class:`LoginTimeoutConnection` applies ``connect_timeout`` to every read and write of the login too,
then hands the socket the connection's own ``read_timeout`` / ``write_timeout`` (pymysql re-applies
them before the next read or write when they differ from the socket's current timeout,
``Connection._read_packet`` / ``_write_bytes``). This module imports nothing from Airflow: snapshot
chunks open their connections with it inside Spark tasks.
"""

from __future__ import annotations

from typing import Any

import pymysql

LOST_CONNECTION_ERRORS = frozenset({1053, 1927, 2003, 2006, 2013, 2055})
"""Error codes meaning the connection to the source is gone: 2003 can't connect, 2006 server has gone
away, 2013 lost connection during query (also a read that timed out), 2055 lost connection (system
error) (MySQL manual, "Client Error Message Reference"); 1053 server shutdown in progress (MySQL manual,
"Server Error Message Reference"); 1927 connection was killed (MariaDB KB, "MariaDB Error Code
Reference")."""
_preferred_tls: Any = None
"""The TLS context of connections without TLS options (pymysql 1.2's PREFERRED mode), made once per process."""


class LoginTimeoutConnection(pymysql.connections.Connection):
    """A pymysql connection whose TCP connect and login both give up after ``connect_timeout`` seconds.

    Takes ``pymysql.connect()``'s keyword arguments. After the login, reads and writes wait at most
    ``read_timeout`` / ``write_timeout`` seconds (None: no limit, pymysql's default).
    """

    _read_timeout: float | None
    _write_timeout: float | None

    def _create_ssl_ctx(self, sslp: Any) -> Any:
        """Return the TLS context of ``sslp`` (pymysql's ``ssl`` dict); the one for ``{}`` is made once per process.

        pymysql 1.2 tries TLS on every connection without TLS options (PREFERRED mode) and builds its context
        each time with ``ssl.create_default_context()``, which loads the system's CA certificates (17-40 ms per
        connection, measured) for a context that verifies nothing (``CERT_NONE``, no hostname check). That
        context holds no per-connection state, so one serves every such connection; contexts of TLS options
        (files that may change) are built per connection as pymysql does.
        """
        global _preferred_tls
        if sslp:
            return super()._create_ssl_ctx(sslp)
        if _preferred_tls is None:
            _preferred_tls = super()._create_ssl_ctx(sslp)
        return _preferred_tls

    def connect(self, sock: Any = None) -> None:
        """Connect and log in, every socket operation bounded by ``connect_timeout``.

        :raises pymysql.err.OperationalError: 2003 ("Can't connect ... (timed out)") when the TCP connect
            takes longer than ``connect_timeout``, 2013 ("Lost connection ... (timed out)") when a read of
            the login does, 2006 when a write does.
        """
        read_timeout, write_timeout = self._read_timeout, self._write_timeout
        self._read_timeout = self._write_timeout = self.connect_timeout
        try:
            super().connect(sock)
        finally:
            self._read_timeout, self._write_timeout = read_timeout, write_timeout
