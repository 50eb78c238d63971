"""A TCP relay on 127.0.0.1 that can go silent without closing: a dead network, as a reader sees it.

A dropped NAT entry or a failover that leaves the socket open looks the same to both ends: the
connection stays established and no byte arrives any more. :class:`SilentRelay` forwards between its
clients and one upstream server until :meth:`SilentRelay.go_silent` (or a byte threshold) stops it; from
then on it reads and forwards nothing but keeps every socket open until :meth:`SilentRelay.close`.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time

POLL_SECONDS = 0.05
"""How often idle relay threads look at the stop and silence flags."""


class SilentRelay:
    """Forward TCP connections from a local port to ``upstream``; stop forwarding on demand.

    Each direction of each connection is pumped by a thread of its own, so a peer that reads slowly holds
    up only its own connection.

    :param upstream: ``(host, port)`` of the server.
    :param silent_after_bytes: go silent once this many bytes were forwarded from the server on one
        connection (None: only :meth:`go_silent` does).

    Attributes: ``port`` (where clients connect), ``silent_since`` (``time.monotonic()`` when forwarding
    stopped, None before) and ``forwarded`` (bytes sent to clients, all connections).
    """

    def __init__(self, upstream: tuple[str, int], *, silent_after_bytes: int | None = None) -> None:
        self.upstream = upstream
        self.silent_after_bytes = silent_after_bytes
        self.silent_since: float | None = None
        self.forwarded = 0
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(POLL_SECONDS)
        self.port = int(self._listener.getsockname()[1])
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._accept, name="relay-accept", daemon=True)]
        self._threads[0].start()

    def go_silent(self) -> None:
        """Stop forwarding in both directions; every socket stays open."""
        if self.silent_since is None:
            self.silent_since = time.monotonic()

    def close(self) -> None:
        """Stop the relay and close every socket (the peers see the connections end)."""
        self._stop.set()
        for thread in self._threads:
            thread.join()
        for sock in [self._listener, *self._sockets]:
            sock.close()

    def _accept(self) -> None:
        while not self._stop.is_set():
            if self.silent_since is not None:  # a dead network completes no login either
                time.sleep(POLL_SECONDS)
                continue
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            server = socket.create_connection(self.upstream)
            self._sockets += [client, server]
            for source, destination, from_server in ((client, server, False), (server, client, True)):
                source.settimeout(POLL_SECONDS)
                thread = threading.Thread(
                    target=self._pump, args=(source, destination, from_server), daemon=True
                )
                self._threads.append(thread)
                thread.start()

    def _pump(self, source: socket.socket, destination: socket.socket, from_server: bool) -> None:
        """Copy ``source`` to ``destination`` until either closes, the relay stops or goes silent."""
        sent = 0
        while not self._stop.is_set() and self.silent_since is None:
            try:
                data = source.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                data = b""
            if self.silent_since is not None:
                break
            if not data:  # one side closed: end the other direction too, as a live network path would
                with contextlib.suppress(OSError):
                    destination.shutdown(socket.SHUT_WR)
                break
            self._send(destination, data)
            if from_server:
                sent += len(data)
                with self._lock:
                    self.forwarded += len(data)
                if self.silent_after_bytes is not None and sent >= self.silent_after_bytes:
                    self.go_silent()

    def _send(self, destination: socket.socket, data: bytes) -> None:
        """Send ``data`` whole, however slowly the peer reads (until the relay stops)."""
        view = memoryview(data)
        while view and not self._stop.is_set():
            try:
                view = view[destination.send(view) :]
            except TimeoutError:
                continue
