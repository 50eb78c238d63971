"""The one module that touches pymysql's private API, with the contract it relies on.

pymysql has no public API for two things the provider needs: a login bounded by ``connect_timeout``, and
the packet layer a COM_BINLOG_DUMP reader frames itself. Everything of pymysql that is not public and that
the provider uses is here, listed in :data:`PRIVATE_API` and checked against the installed pymysql by
``tests/unit/test_pymysql_contract.py`` (which also fails when any other module of the package touches one
of these names, or a private attribute of mysql-replication). ``pyproject.toml`` pins pymysql to the
releases this contract was tested on (1.1 and 1.2); a new release is admitted after that test passes on it.

The contract (pymysql 1.1, 1.2: ``pymysql/connections.py``):

- ``Connection._read_timeout`` / ``_write_timeout``: the timeouts pymysql applies to the socket before each
  read or write (``_read_packet``, ``_write_bytes``), when they differ from the socket's current one.
- ``Connection._create_ssl_ctx(sslp)``: builds the TLS context of the ``ssl`` options at each connect.
- ``Connection._read_packet()``: reads one packet (sets the socket's read timeout first) and returns a
  ``MysqlPacket``, raising the server's error for an error packet.
- ``Connection._rfile``: the buffered socket file (``read``, ``read1``) that packets are read from.
- ``Connection._next_seq_id``: the sequence id the next packet read must carry (and the next write gets).
- ``Connection._force_close()``: closes the socket without COM_QUIT (after a broken read).

**Logins bounded by connect_timeout.** pymysql passes ``connect_timeout`` to ``socket.create_connection``
only. Right after the TCP connection is up it calls ``sock.settimeout(self._read_timeout)``, ``None`` unless
``read_timeout`` is given, and then reads the server's handshake (``_get_server_information``),
authenticates (``_request_authentication``) and sends ``SET NAMES`` and ``SET AUTOCOMMIT`` with that
timeout. Against a peer that accepts TCP but never sends the handshake (a hung server, a proxy whose backend
is gone, a firewall that answers the SYN) the login therefore waits until the peer or the kernel closes the
socket: 38-43 s were measured with ``connect_timeout=3``, and a peer that keeps the socket open makes it wait
forever. :class:`LoginTimeoutConnection` applies ``connect_timeout`` to every read and write of the login
too, then hands the socket the connection's own ``read_timeout`` / ``write_timeout``.

**Packets.** :class:`PacketChannel` is the packet layer under an open connection: send a command, read one
packet, and the socket file, sequence id and forced close that a reader framing packets itself needs
(:func:`~airflow_provider_binlog.extract.events.feeds.packet_batches`).

This module imports nothing from Airflow: snapshot chunks open their connections with it inside Spark tasks.
"""

from __future__ import annotations

from typing import IO, Any

import pymysql

LOST_CONNECTION_ERRORS = frozenset({1053, 1927, 2003, 2006, 2013, 2055})
"""Error codes meaning the connection to the source is gone: 2003 can't connect, 2006 server has gone
away, 2013 lost connection during query (also a read that timed out), 2055 lost connection (system
error) (MySQL manual, "Client Error Message Reference"); 1053 server shutdown in progress (MySQL manual,
"Server Error Message Reference"); 1927 connection was killed (MariaDB KB, "MariaDB Error Code
Reference")."""
FATAL_READING_BINLOG = 1236
"""ER_MASTER_FATAL_ERROR_READING_BINLOG: the source cannot serve a dump from the file, position or GTID position
asked for (purged, not in its binlog) (MySQL manual, "Server Error Message Reference")."""
PRIVATE_API = (
    "_read_timeout",
    "_write_timeout",
    "_create_ssl_ctx",
    "_read_packet",
    "_rfile",
    "_next_seq_id",
    "_force_close",
)
"""The names of ``pymysql.connections.Connection`` this module uses that pymysql does not make public."""
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


class PacketChannel:
    """The packet layer of an open pymysql ``connection``, for commands pymysql has no method for.

    A client that sends such a command (COM_BINLOG_DUMP) frames the answer's packets itself. Packets: 3-byte payload length, 1-byte sequence id, payload (MySQL internals, "MySQL Packets"). A command
    starts a new sequence at 0; each packet of the answer carries the next id.
    """

    __slots__ = ("connection",)

    def __init__(self, connection: pymysql.connections.Connection) -> None:
        self.connection = connection

    def send_command(self, command: bytes) -> None:
        """Send ``command`` (command byte and arguments, under 16 MiB) as a new command's one packet.

        :raises pymysql.err.OperationalError: 2006 when the write fails (the connection is closed then).
        """
        self.connection._next_seq_id = 0
        self.connection.write_packet(command)

    def read_packet(self) -> bytes:
        """Read the next packet (its read timeout applied) and return its payload.

        :raises pymysql.err.MySQLError: the server's error for an error packet; ``OperationalError`` 2013 when
            the connection breaks or the read times out.
        """
        return bytes(self.connection._read_packet().get_all_data())

    @property
    def socket_file(self) -> IO[bytes]:
        """Return the connection's buffered socket file (``read``, ``read1``), positioned after the packets read."""
        return self.connection._rfile  # type: ignore[no-any-return]

    @property
    def sequence_id(self) -> int:
        """Return the sequence id the next packet read must carry."""
        return int(self.connection._next_seq_id)

    @sequence_id.setter
    def sequence_id(self, value: int) -> None:
        self.connection._next_seq_id = value

    def force_close(self) -> None:
        """Close the socket without COM_QUIT (after a broken or abandoned read); ``connection.open`` is False then."""
        self.connection._force_close()
