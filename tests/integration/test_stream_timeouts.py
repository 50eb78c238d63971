"""A binlog stream never hangs: a silent network fails it within three heartbeat periods, a quiet source does not.

The reader talks to the private server through :class:`SilentRelay`, which can stop forwarding without
closing the connection (a dropped NAT entry, a failover that leaves the socket open). The connection's
``heartbeat_period`` is 1 s, so the stream's read timeout is 3 s.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from airflow_provider_binlog.contract.positions import BinlogPosition
from airflow_provider_binlog.exceptions import BinlogConfigError, ReplicationConnectionLostError
from airflow_provider_binlog.extract.connections import pipeline_dump
from airflow_provider_binlog.extract.events.stream import EventReader, RowsEvent
from airflow_provider_binlog.extract.reader import TableTarget
from airflow_provider_binlog.extract.window import extract_window
from airflow_provider_binlog.hooks.binlog import BinlogHook
from airflow_provider_binlog.pipeline.ledger import Window, now_iso
from airflow_provider_binlog.pipeline.staging import window_path
from airflow_provider_binlog.testing.mariadb import LocalMariaDB
from airflow_provider_binlog.testing.relay import SilentRelay

pytestmark = pytest.mark.integration

HEARTBEAT = 1
READ_TIMEOUT = 3 * HEARTBEAT
MARGIN_SECONDS = 2.0
ROWS = 2_500
PAD = "x" * 3000


@pytest.fixture(scope="module")
def window_table(mariadb: LocalMariaDB) -> Iterator[tuple[str, BinlogPosition, BinlogPosition]]:
    """A table written in one window of ~20 MB of binlog (few, large rows: little to decode): ``(db.table, window start, window end)``."""
    with mariadb.scratch_database("hb") as db:
        mariadb.execute(f"CREATE TABLE `{db}`.t (id INT PRIMARY KEY, pad TEXT)")
        start = _head(mariadb)
        values = ",".join(f"({i}, '{PAD}')" for i in range(ROWS))
        mariadb.execute(
            f"INSERT INTO `{db}`.t VALUES {values}", f"UPDATE `{db}`.t SET pad = CONCAT(pad, 'y')"
        )
        yield f"{db}.t", start, _head(mariadb)


def _head(mariadb: LocalMariaDB) -> BinlogPosition:
    file, pos = mariadb.execute("SHOW MASTER STATUS")[0][:2]
    return BinlogPosition(str(file), int(pos))


def _through(relay: SilentRelay, mariadb: LocalMariaDB, monkeypatch: pytest.MonkeyPatch) -> BinlogHook:
    """Point ``binlog_default`` at the relay, with a 1 s heartbeat; return a hook on it."""
    connection = {
        "conn_type": "mysqlbinlog",
        "host": "127.0.0.1",
        "port": relay.port,
        "login": "root",
        "password": mariadb.root_password,
        "extra": {"heartbeat_period": HEARTBEAT, "connect_timeout": 2},
    }
    monkeypatch.setenv("AIRFLOW_CONN_BINLOG_DEFAULT", json.dumps(connection))
    hook = BinlogHook(pipeline="heartbeat")
    assert hook.stream_timeouts() == (HEARTBEAT, READ_TIMEOUT)
    return hook


def _extract(hook: BinlogHook, table: str, start: BinlogPosition, end: BinlogPosition, staging: Path) -> int:
    window = Window(seq=1, start=(start), end=(end), run_id="r", cut_at=now_iso())
    manifest = extract_window(
        hook,
        pipeline="heartbeat",
        window=window,
        tables={table: TableTarget(table, ["id"])},
        window_dir=window_path(str(staging), "heartbeat", 1),
        server=hook.server_state(),
    )
    return int(manifest.stats["rows"])


def test_a_network_that_goes_silent_mid_window_fails_the_extract_within_three_heartbeats(
    mariadb: LocalMariaDB,
    window_table: tuple[str, BinlogPosition, BinlogPosition],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    table, start, end = window_table
    relay = SilentRelay(("127.0.0.1", mariadb.port), silent_after_bytes=5_000_000)
    try:
        hook = _through(relay, mariadb, monkeypatch)
        with pytest.raises(ReplicationConnectionLostError) as caught:
            _extract(hook, table, start, end, tmp_path)
        failed_at = time.monotonic()
        assert relay.silent_since is not None, "the relay never went silent: the window was too small"
        waited = failed_at - relay.silent_since
    finally:
        relay.close()
    print(f"failed {waited:.2f} s after the network went silent: {caught.value}")
    assert READ_TIMEOUT - 0.5 <= waited < READ_TIMEOUT + MARGIN_SECONDS
    message = str(caught.value)
    assert "lost the replication connection to the source while reading window 1" in message
    assert "timed out" in message
    assert "heartbeat_period" in message


def test_the_same_window_through_a_live_relay_is_read_whole(
    mariadb: LocalMariaDB,
    window_table: tuple[str, BinlogPosition, BinlogPosition],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    table, start, end = window_table
    relay = SilentRelay(("127.0.0.1", mariadb.port))
    try:
        rows = _extract(_through(relay, mariadb, monkeypatch), table, start, end, tmp_path)
    finally:
        relay.close()
    staged = pq.read_table(tmp_path / "heartbeat" / "window=1" / table).to_pylist()
    assert rows == len(staged) == 2 * ROWS
    source = dict(mariadb.execute(f"SELECT id, pad FROM {table}"))
    last = {row["id"]: row["pad"] for row in sorted(staged, key=lambda r: r["_binlog_seq"])}
    assert last == source


def test_heartbeats_keep_a_stream_that_waits_on_a_quiet_source_alive(
    mariadb: LocalMariaDB, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stream waiting at the binlog end for longer than its read timeout gets heartbeats, not an error.

    The extract reads non-blocking (the source ends the dump at the binlog end instead of waiting), so the
    dump thread of a window never waits; this dump is opened blocking so that it does, the one moment a
    live source sends nothing but heartbeats.
    """
    relay = SilentRelay(("127.0.0.1", mariadb.port))
    with mariadb.scratch_database("quiet") as db:
        mariadb.execute(f"CREATE TABLE `{db}`.t (id INT PRIMARY KEY)")
        try:
            hook = _through(relay, mariadb, monkeypatch)
            quiet = 2.5 * READ_TIMEOUT
            heard: list[int] = []  # bytes from the source after 1 s (caught up) and when the write comes

            def write() -> None:
                heard.append(relay.forwarded)
                mariadb.execute(f"INSERT INTO `{db}`.t VALUES (7)")

            timers = [
                threading.Timer(1.0, lambda: heard.append(relay.forwarded)),
                threading.Timer(quiet, write),
            ]
            started = time.monotonic()
            for timer in timers:
                timer.start()
            try:
                with pipeline_dump(hook, _head(mariadb), flavor="mariadb", blocking=True) as raw:
                    event = next(e.data for e in EventReader().events(raw) if isinstance(e.data, RowsEvent))
            finally:
                for timer in timers:
                    timer.join()
            waited = time.monotonic() - started
        finally:
            relay.close()
    assert event.kind == "write"
    assert event.table == "t"
    assert [row[0] for row in event.image_rows()] == [7]
    assert waited >= quiet
    heartbeat_bytes = heard[1] - heard[0]
    print(f"{heartbeat_bytes} bytes of heartbeats in {quiet - 1:.1f} quiet seconds")
    assert heartbeat_bytes >= 20 * int(quiet - 1 - HEARTBEAT)  # a heartbeat event is 40-odd bytes


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("soon", "extra heartbeat_period='soon' is not an integer"),
        (0, "extra heartbeat_period=0 must be in 1..600"),
        (601, "extra heartbeat_period=601 must be in 1..600"),
    ],
)
def test_a_malformed_heartbeat_period_is_refused(
    monkeypatch: pytest.MonkeyPatch, value: object, expected: str
) -> None:
    connection = {"conn_type": "mysqlbinlog", "host": "127.0.0.1", "extra": {"heartbeat_period": value}}
    monkeypatch.setenv("AIRFLOW_CONN_BINLOG_DEFAULT", json.dumps(connection))
    with pytest.raises(BinlogConfigError, match=expected):
        BinlogHook().stream_timeouts()


def test_the_default_heartbeat_is_15_s_and_a_stream_waits_45_s(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_BINLOG_DEFAULT", json.dumps({"conn_type": "mysqlbinlog"}))
    assert BinlogHook().stream_timeouts() == (15, 45)
