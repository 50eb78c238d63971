"""The one module that touches pymysql's private API, with the contract it relies on.

pymysql has no public API for two things the provider needs: a login bounded by ``connect_timeout``, and
the packet layer a COM_BINLOG_DUMP reader frames itself. Everything of pymysql that is not public and that
the provider uses is here, listed in :data:`PRIVATE_API` and checked against the installed pymysql by
``tests/unit/test_pymysql_contract.py`` (which also fails when any other module of the package touches one
of these names, or a private attribute of mysql-replication). ``pyproject.toml`` pins pymysql to the
releases this contract was tested on (1.2); a new release is admitted after that test passes on it. 1.1 is
excluded: given TLS options it goes on in plaintext when the server does not offer TLS (a stripped TLS
downgrades silently), where 1.2 raises 2026 "SSL is required but the server doesn't support it".

The contract (pymysql 1.2: ``pymysql/connections.py``):

- ``Connection._read_timeout`` / ``_write_timeout``: the timeouts pymysql applies to the socket before each
  read or write (``_read_packet``, ``_write_bytes``), when they differ from the socket's current one.
- ``Connection._create_ssl_ctx(sslp)``: builds the TLS context of the ``ssl`` options at each connect.
- ``Connection._read_packet()``: reads one packet (sets the socket's read timeout first) and returns a
  ``MysqlPacket``, raising the server's error for an error packet.
- ``Connection._rfile``: the buffered socket file (``read``, ``read1``) that packets are read from.
- ``Connection._next_seq_id``: the sequence id the next packet read must carry (and the next write gets).
- ``Connection._force_close()``: closes the socket without COM_QUIT (after a broken read).
- ``OperationalError.original_exception`` (public, undocumented): the ``OSError`` behind a failed connect,
  an ``ssl.SSLError`` for a failed handshake (:func:`_tls_problem`; ``tests/integration/test_tls.py``).

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

**TLS.** Every connection of the provider is a :class:`LoginTimeoutConnection`, so its keyword ``tls_mode``
(:data:`~airflow_provider_binlog.source.config.TLS_MODES`, set by the hook from the extra ``tls``) applies to
all of them alike: :func:`tls_context` builds the context of the mode, and a handshake or verification
failure, or a server without TLS under a mode that requires it, raises :class:`TlsConnectionError`.

This module imports nothing from Airflow: snapshot chunks open their connections with it inside Spark tasks.
"""

from __future__ import annotations

import socket
import ssl
from typing import IO, Any

import pymysql
from pymysql.constants import CR

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
_shared_contexts: dict[str, ssl.SSLContext] = {}
"""The contexts of modes without TLS files (``preferred``, ``required``), made once per process."""


class TlsConnectionError(pymysql.err.OperationalError):
    """A connection's TLS failed: the handshake, the server's certificate, or a server without TLS.

    ``args`` are ``(2026, message)`` (CR_SSL_CONNECTION_ERROR, MySQL manual, "Client Error Message
    Reference"), so code that sorts pymysql's errors by code sees neither a lost connection nor a denied
    login. A retry cannot succeed before the certificates or the mode change: the hook raises it as a
    :class:`~airflow_provider_binlog.exceptions.BinlogConfigError`. The message names the mode and the
    problem (``certificate verify failed: self-signed certificate``).

    :ivar mode: the TLS mode of the connection.
    :ivar problem: what failed, and the server's address when the connect failed.
    """

    def __init__(self, mode: str, problem: str) -> None:
        super().__init__(CR.CR_SSL_CONNECTION_ERROR, f"TLS (mode {mode}) failed: {problem}")
        self.mode, self.problem = mode, problem

    def __reduce__(self) -> tuple[type[TlsConnectionError], tuple[str, str]]:
        """Pickle by the constructor's arguments (a parallel read's worker or a Spark task sends it back)."""
        return type(self), (self.mode, self.problem)


def tls_context(mode: str, options: dict[str, Any]) -> ssl.SSLContext | None:
    """Return the client TLS context of ``mode`` (None for ``disabled``).

    ``preferred`` and ``required`` verify nothing (``CERT_NONE``, no host name check) and load no CA
    certificates; ``verify_ca`` requires a server certificate signed by ``options``' ``ca`` / ``capath``;
    ``verify_identity`` also requires it to name the host connected to (its subjectAltName: DNS name or IP
    address). X.509 strict mode is off as in pymysql (certificates MySQL generates itself fail it).

    :param mode: one of :data:`~airflow_provider_binlog.source.config.TLS_MODES`.
    :param options: ``ca``, ``capath``, ``cert``, ``key``, ``password``, ``cipher`` (all optional).
    :raises TlsConnectionError: when a file cannot be read (naming it and this machine) or is not a valid
        certificate or key.
    """
    if mode == "disabled":
        return None
    if not options and mode in _shared_contexts:
        return _shared_contexts[mode]
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.verify_flags &= ~ssl.VERIFY_X509_STRICT
    try:
        if mode in ("verify_ca", "verify_identity"):
            context.load_verify_locations(cafile=options.get("ca"), capath=options.get("capath"))
            context.check_hostname = mode == "verify_identity"
        else:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        if options.get("cert"):
            context.load_cert_chain(options["cert"], options.get("key"), options.get("password"))
        if options.get("cipher"):
            context.set_ciphers(options["cipher"])
    except OSError as err:  # FileNotFoundError, PermissionError, ssl.SSLError (a malformed file)
        files = ", ".join(f"{k}={options[k]}" for k in ("ca", "capath", "cert", "key") if options.get(k))
        raise TlsConnectionError(
            mode,
            f"cannot load the TLS files ({files}) on {socket.gethostname()}: {err}. The files must exist "
            "on every machine that connects (Airflow workers, and Spark executors for snapshot reads).",
        ) from err
    if not options:
        _shared_contexts[mode] = context
    return context


def _tls_problem(err: BaseException) -> str | None:
    """Return the TLS problem behind a failed connect (None: not a TLS failure).

    pymysql turns an ``OSError`` of the connect, ``ssl.SSLError`` included, into ``OperationalError`` 2003
    and keeps it as ``original_exception`` (``Connection.connect``); a server without TLS under a mode that
    requires it is ``OperationalError`` 2026. An EOF or reset during the handshake is left out: the network,
    not the configuration, may have caused it.
    """
    if err.args and err.args[0] == CR.CR_SSL_CONNECTION_ERROR:
        return (
            f"{err.args[1]}; start the server with --ssl-cert and --ssl-key, or set the extra tls=preferred"
        )
    cause = getattr(err, "original_exception", None)
    if not isinstance(cause, ssl.SSLError) or isinstance(cause, ssl.SSLEOFError | ssl.SSLZeroReturnError):
        return None
    if isinstance(cause, ssl.SSLCertVerificationError):
        return f"certificate verify failed: {cause.verify_message or cause}"
    return str(cause)


class LoginTimeoutConnection(pymysql.connections.Connection):
    """A pymysql connection whose TCP connect and login both give up after ``connect_timeout`` seconds.

    Takes ``pymysql.connect()``'s keyword arguments. After the login, reads and writes wait at most
    ``read_timeout`` / ``write_timeout`` seconds (None: no limit, pymysql's default).
    """

    _read_timeout: float | None
    _write_timeout: float | None
    tls_mode: str | None = None
    """The connection's TLS mode (None: pymysql's own handling of ``ssl``, for callers without a mode)."""
    _preferred_context: ssl.SSLContext | None = None

    def __init__(self, *, tls_mode: str | None = None, **kwargs: Any) -> None:
        """Take ``pymysql.connect()``'s keyword arguments and ``tls_mode``, and connect unless ``defer_connect``.

        With ``tls_mode``, ``ssl`` holds the TLS files only (``ca``, ``capath``, ``cert``, ``key``,
        ``password``, ``cipher``) and the mode decides the rest (:func:`tls_context`): ``disabled`` never
        negotiates TLS; ``preferred`` negotiates it when the server offers it (pymysql 1.2's PREFERRED mode);
        the other modes refuse a server without TLS (pymysql 1.2's required mode, error 2026).

        :raises TlsConnectionError: as :func:`tls_context`, and when the connect fails for TLS.
        """
        if tls_mode is not None:
            self.tls_mode = tls_mode
            context = tls_context(tls_mode, dict(kwargs.pop("ssl", None) or {}))
            if context is None:
                kwargs["ssl_disabled"] = True
            elif tls_mode == "preferred":
                self._preferred_context = context
            else:
                kwargs["ssl"] = context
        super().__init__(**kwargs)

    def _create_ssl_ctx(self, sslp: Any) -> Any:
        """Return the TLS context of ``sslp`` (pymysql's ``ssl`` dict); the one for ``{}`` is made once per process.

        pymysql 1.2 tries TLS on every connection without TLS options (PREFERRED mode) and builds its context
        each time with ``ssl.create_default_context()``, which loads the system's CA certificates (17-40 ms per
        connection, measured) for a context that verifies nothing (``CERT_NONE``, no hostname check). That
        context holds no per-connection state, so one serves every such connection; contexts of TLS options
        (files that may change) are built per connection as pymysql does. A ``preferred`` connection with a
        client certificate gets the context :func:`tls_context` made of it.
        """
        global _preferred_tls
        if sslp:
            return super()._create_ssl_ctx(sslp)
        if self._preferred_context is not None:
            return self._preferred_context
        if _preferred_tls is None:
            _preferred_tls = super()._create_ssl_ctx(sslp)
        return _preferred_tls

    def connect(self, sock: Any = None) -> None:
        """Connect and log in, every socket operation bounded by ``connect_timeout``.

        :raises pymysql.err.OperationalError: 2003 ("Can't connect ... (timed out)") when the TCP connect
            takes longer than ``connect_timeout``, 2013 ("Lost connection ... (timed out)") when a read of
            the login does, 2006 when a write does.
        :raises TlsConnectionError: when a connection with a ``tls_mode`` fails for TLS (:func:`_tls_problem`).
        """
        read_timeout, write_timeout = self._read_timeout, self._write_timeout
        self._read_timeout = self._write_timeout = self.connect_timeout
        try:
            super().connect(sock)
        except pymysql.err.OperationalError as err:
            problem = _tls_problem(err) if self.tls_mode is not None else None
            if problem is None:
                raise
            raise TlsConnectionError(
                self.tls_mode or "", f"{problem} (server {self.host}:{self.port})"
            ) from err
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


def tls_state(cursor: Any) -> str:
    """Return the TLS of the session of ``cursor`` as the server sees it (``TLSv1.3 TLS_AES_...`` or ``plaintext``).

    Reads the session status ``Ssl_version`` and ``Ssl_cipher`` (empty on a plaintext connection; MariaDB KB,
    "SSL/TLS Status Variables"; MySQL manual, "Server Status Variables"). Works for any DB-API cursor.
    """
    cursor.execute("SHOW SESSION STATUS WHERE Variable_name IN ('Ssl_version', 'Ssl_cipher')")
    status = {_text(name): _text(value) for name, value in cursor.fetchall()}
    cipher, version = status.get("Ssl_cipher", ""), status.get("Ssl_version", "")
    return f"{version} {cipher}" if cipher else "plaintext"


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
