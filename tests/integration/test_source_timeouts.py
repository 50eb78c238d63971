"""Every connection to the source gives up in time: TCP connect, login and each SQL read."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator

import pymysql
import pytest

from airflow_provider_binlog.contract.positions import BinlogPosition
from airflow_provider_binlog.exceptions import SourceUnreachableError
from airflow_provider_binlog.extract.connections import pipeline_dump
from airflow_provider_binlog.hooks.binlog import BinlogHook
from airflow_provider_binlog.testing.mariadb import LocalMariaDB

pytestmark = pytest.mark.integration

CONNECT_TIMEOUT = 2
MARGIN_SECONDS = 1.5


@pytest.fixture
def silent_listener() -> Iterator[int]:
    """A TCP listener on 127.0.0.1 that accepts connections and never sends a byte (no handshake)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.settimeout(0.2)
    stop = threading.Event()
    accepted: list[socket.socket] = []

    def accept() -> None:
        while not stop.is_set():
            try:
                accepted.append(server.accept()[0])
            except TimeoutError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield int(server.getsockname()[1])
    finally:
        stop.set()
        thread.join()
        for conn in accepted:
            conn.close()
        server.close()


def use_connection(monkeypatch: pytest.MonkeyPatch, port: int, **extra: object) -> None:
    connection = {
        "conn_type": "mysqlbinlog",
        "host": "127.0.0.1",
        "port": port,
        "login": "root",
        "password": "irrelevant-pw",
        "extra": extra,
    }
    monkeypatch.setenv("AIRFLOW_CONN_BINLOG_DEFAULT", json.dumps(connection))


def test_a_server_that_never_sends_the_handshake_fails_within_connect_timeout(
    silent_listener: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    use_connection(monkeypatch, silent_listener, connect_timeout=CONNECT_TIMEOUT)
    started = time.monotonic()
    with pytest.raises(SourceUnreachableError) as caught:
        BinlogHook().server_state()
    elapsed = time.monotonic() - started
    print(caught.value)
    assert CONNECT_TIMEOUT - 0.2 <= elapsed < CONNECT_TIMEOUT + MARGIN_SECONDS
    message = str(caught.value)
    assert f"cannot reach the source 127.0.0.1:{silent_listener} (connection 'binlog_default')" in message
    assert f"connect_timeout={CONNECT_TIMEOUT} s" in message
    assert "timed out" in message


def test_the_test_button_does_not_hang_on_a_silent_server(
    silent_listener: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    use_connection(monkeypatch, silent_listener, connect_timeout=CONNECT_TIMEOUT)
    started = time.monotonic()
    ok, message = BinlogHook().test_connection()
    assert time.monotonic() - started < CONNECT_TIMEOUT + MARGIN_SECONDS
    assert not ok
    assert f"127.0.0.1:{silent_listener}" in message
    assert "irrelevant-pw" not in message


def test_the_replication_login_is_bounded_too(silent_listener: int, monkeypatch: pytest.MonkeyPatch) -> None:
    use_connection(monkeypatch, silent_listener, connect_timeout=CONNECT_TIMEOUT)
    hook = BinlogHook()
    stream = hook.open_stream(BinlogPosition("mariadb-bin.000001", 4), server_id=4242)  # a probe's stream
    started = time.monotonic()
    with pytest.raises(Exception, match="timed out"):
        stream.fetchone()
    assert time.monotonic() - started < CONNECT_TIMEOUT + MARGIN_SECONDS
    stream.close()
    started = time.monotonic()  # a window's dump
    with pytest.raises(Exception, match="timed out"):  # noqa: PT012
        with pipeline_dump(hook, BinlogPosition("mariadb-bin.000001", 4), flavor="mariadb") as raw:
            next(raw)
    assert time.monotonic() - started < CONNECT_TIMEOUT + MARGIN_SECONDS


def test_a_query_slower_than_read_timeout_fails_retryably(
    mariadb: LocalMariaDB, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_BINLOG_DEFAULT", mariadb.uri() + "?read_timeout=1")
    hook = BinlogHook()
    started = time.monotonic()
    with pytest.raises(SourceUnreachableError) as caught, hook.cursor() as cur:
        cur.execute("SELECT SLEEP(5)")
    assert time.monotonic() - started < 1 + MARGIN_SECONDS
    assert f"lost the SQL connection to the source 127.0.0.1:{mariadb.port}" in str(caught.value)
    assert "read_timeout=1 s" in str(caught.value)
    assert isinstance(caught.value.__cause__, pymysql.err.OperationalError)


def test_sql_connections_get_the_read_timeout_and_streams_the_heartbeat_timeout(
    mariadb: LocalMariaDB, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_BINLOG_DEFAULT", mariadb.uri())
    hook = BinlogHook()
    assert (hook.sql_settings()["read_timeout"], hook.sql_settings()["write_timeout"]) == (60, 60)
    assert "read_timeout" not in hook.connection_settings()
    stream = hook.open_stream(BinlogPosition("mariadb-bin.000001", 4), server_id=4243)
    settings = stream._BinLogStreamReader__connection_settings  # type: ignore[attr-defined]
    assert (settings["read_timeout"], settings["write_timeout"], stream.slave_heartbeat) == (45, 45, 15)
    conn = hook.get_conn()
    try:
        assert conn._sock.gettimeout() == 10  # the login ran under connect_timeout
        with conn.cursor() as cur:
            cur.execute("SELECT 1")
        assert conn._sock.gettimeout() == 60  # queries run under read_timeout
    finally:
        conn.close()
