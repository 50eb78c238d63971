"""Retention model and lag measurement against a private MariaDB whose retention the tests change."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pendulum
import pytest

from airflow_provider_binlog.contract.positions import BinlogPosition
from airflow_provider_binlog.exceptions import BinlogPurgedError
from airflow_provider_binlog.hooks.binlog import BinlogHook
from airflow_provider_binlog.monitoring.lag import lag_verdict, measure_lag
from airflow_provider_binlog.monitoring.retention import assess_retention, purge_risk_verdict
from airflow_provider_binlog.testing.mariadb import LocalMariaDB

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def server() -> Iterator[LocalMariaDB]:
    """A server of its own: these tests shorten retention and purge binlogs."""
    with LocalMariaDB() as instance:
        instance.execute("CREATE DATABASE r", "CREATE TABLE r.t (id INT PRIMARY KEY, v INT)")
        yield instance


@pytest.fixture
def hook(server: LocalMariaDB, monkeypatch: pytest.MonkeyPatch) -> Iterator[BinlogHook]:
    monkeypatch.setenv("AIRFLOW_CONN_RETENTION_SRC", server.uri())
    server.execute("SET GLOBAL binlog_expire_logs_seconds = 0")
    yield BinlogHook("retention_src", pipeline="p_retention")
    server.execute("SET GLOBAL binlog_expire_logs_seconds = 0")


def head(hook: BinlogHook) -> BinlogPosition:
    state = hook.server_state()
    assert state.head is not None
    return state.head


def insert(server: LocalMariaDB, *ids: int) -> None:
    for i in ids:
        server.execute(f"INSERT INTO r.t VALUES ({i}, {i})")


def test_unlimited_retention_is_safe_and_counts_bytes_to_read(hook: BinlogHook, server: LocalMariaDB) -> None:
    checkpoint = head(hook)
    insert(server, 1, 2)
    state = hook.server_state()
    report = assess_retention(hook, "p", checkpoint, state)
    assert not report.purged
    assert report.headroom_seconds is None
    assert report.policy.seconds is None
    assert report.bytes_to_read == state.head.pos - checkpoint.pos > 0
    assert purge_risk_verdict(report, 10**9)[0] == "safe"


def test_active_file_has_at_least_the_full_retention(hook: BinlogHook, server: LocalMariaDB) -> None:
    server.execute("SET GLOBAL binlog_expire_logs_seconds = 3600")
    checkpoint = head(hook)
    report = assess_retention(hook, "p", checkpoint, hook.server_state())
    assert report.policy.setting == "binlog_expire_logs_seconds"
    assert report.last_written_at is None
    assert report.headroom_seconds == 3600
    assert "at least: the file is still being written" in report.describe()


def test_rotated_file_headroom_counts_from_its_last_write(hook: BinlogHook, server: LocalMariaDB) -> None:
    server.execute("SET GLOBAL binlog_expire_logs_seconds = 3600")
    checkpoint = head(hook)
    insert(server, 10)
    before = pendulum.now("UTC").subtract(seconds=1)
    server.execute("FLUSH BINARY LOGS")
    after = pendulum.now("UTC").add(seconds=1)
    report = assess_retention(hook, "p", checkpoint, hook.server_state())
    assert report.last_written_at is not None
    assert before.start_of("second") <= report.last_written_at <= after
    assert report.purge_after == report.last_written_at.add(seconds=3600)
    assert 3600 - 10 < report.headroom_seconds <= 3600 + 1
    status, message = purge_risk_verdict(report, min_headroom_seconds=7200)
    assert status == "low"
    assert f"may purge binlog {checkpoint.file} after {report.purge_after}" in message
    assert "raise binlog_expire_logs_seconds to at least twice the longest expected outage" in message
    assert purge_risk_verdict(report, min_headroom_seconds=60)[0] == "safe"


def test_the_server_purges_when_the_model_says_the_headroom_is_gone(
    hook: BinlogHook, server: LocalMariaDB
) -> None:
    server.execute("SET GLOBAL binlog_expire_logs_seconds = 4")
    checkpoint = head(hook)
    insert(server, 20)
    server.execute("FLUSH BINARY LOGS")
    report = assess_retention(hook, "p", checkpoint, hook.server_state())
    assert report.headroom_seconds is not None
    assert 0 < report.headroom_seconds <= 5
    time.sleep(report.headroom_seconds + 1.5)
    overdue = assess_retention(hook, "p", checkpoint, hook.server_state())
    assert overdue.headroom_seconds is not None
    assert overdue.headroom_seconds < 0
    assert "overdue" in purge_risk_verdict(overdue, 1)[1]
    deadline = time.monotonic() + 30
    while checkpoint.file in [name for name, _ in hook.server_state().binlog_files]:
        assert time.monotonic() < deadline, "the server never expired the file the model called overdue"
        server.execute("FLUSH BINARY LOGS")  # expiry runs at rotation, once InnoDB checkpointed the file
        time.sleep(0.3)
    purged = assess_retention(hook, "p", checkpoint, hook.server_state())
    assert purged.purged
    status, message = purge_risk_verdict(purged, 1)
    assert status == "purged"
    assert (
        f"binlog {checkpoint.file} (needed from position {checkpoint.pos}) is no longer on the source"
        in message
    )
    assert "re-snapshot every table of the pipeline, which also moves its checkpoint past the gap" in message


def test_gtid_list_of_the_oldest_file_reveals_purged_transactions(
    hook: BinlogHook, server: LocalMariaDB
) -> None:
    stale = head(hook)
    insert(server, 30, 31)
    oldest = server.purge_binlogs_before_current()
    # Same file name as the oldest file, but a GTID position from before it: what a checkpoint looks
    # like after RESET MASTER or a server swap reused the file names.
    reused = BinlogPosition(file=oldest, pos=4, gtid_set=stale.gtid_set)
    report = assess_retention(hook, "p", reused, hook.server_state())
    assert report.purged
    assert f"the GTID list of the oldest binlog {oldest}" in str(report.purged_reason)
    assert f"checkpoint {stale.gtid_set} never read them" in str(report.purged_reason)


def test_lag_is_zero_at_the_head(hook: BinlogHook) -> None:
    read_at = pendulum.now("UTC")
    state = hook.server_state()
    assert state.head is not None
    report = measure_lag(hook, "p", state.head, None, state, read_at)
    assert (report.seconds, report.bytes, report.transactions, report.pending_since) == (0.0, 0, 0, None)
    assert report.covers(read_at.subtract(seconds=5))
    assert not report.covers(read_at.add(seconds=5))


def test_lag_counts_pending_transactions_and_the_age_of_the_oldest(
    hook: BinlogHook, server: LocalMariaDB
) -> None:
    checkpoint = head(hook)
    first_commit = pendulum.now("UTC")
    insert(server, 40)
    time.sleep(2.1)
    insert(server, 41, 42)
    read_at = pendulum.now("UTC")
    state = hook.server_state()
    report = measure_lag(hook, "p", checkpoint, None, state, read_at)
    assert report.transactions == 3
    assert report.bytes == state.head.pos - checkpoint.pos
    assert report.pending_since is not None
    assert first_commit.start_of("second") <= report.pending_since <= first_commit.add(seconds=1)
    assert report.seconds >= 2
    assert report.covers(first_commit.start_of("second"))
    assert not report.covers(first_commit.add(seconds=2))
    assert lag_verdict(report, max_seconds=3600, max_transactions=3)[0]
    within, message = lag_verdict(report, max_seconds=1, max_bytes=10)
    assert not within
    assert "> max_lag_seconds=1" in message
    assert "bytes > max_lag_bytes=10" in message


def test_lag_of_a_purged_checkpoint_is_a_purge_error(hook: BinlogHook, server: LocalMariaDB) -> None:
    checkpoint = head(hook)
    insert(server, 50)
    server.purge_binlogs_before_current()
    with pytest.raises(BinlogPurgedError, match="is no longer on the source"):
        measure_lag(hook, "p", checkpoint, None, hook.server_state(), pendulum.now("UTC"))


def test_probes_never_end_a_group_at_a_statement_based_dml(hook: BinlogHook, server: LocalMariaDB) -> None:
    # A statement-based transaction is BEGIN, the DML's query event (its statement's start time) and the
    # Xid (the COMMIT's start time). The probes classify query events like the reader (source.sql): the DML
    # lies inside the group, so neither the commit time nor an interval cut is taken from it.
    from airflow_provider_binlog.pipeline.windows import boundary_at
    from airflow_provider_binlog.source.probes import next_commit_at

    # A transaction right before, so the boundary before the statement-based one is its end and not the
    # start of a binlog file an earlier test just rotated to (both are the same point of the stream).
    server.execute("REPLACE INTO r.t VALUES (899, 899)")
    before = head(hook)
    started = pendulum.now("UTC")
    server.execute(
        "SET SESSION binlog_format = 'STATEMENT'",
        "BEGIN",
        "INSERT INTO r.t VALUES (900, 900)",
        "DO SLEEP(2.2)",
        "COMMIT",
    )
    inside = started.add(seconds=1.1)  # after the INSERT's start, before the COMMIT's
    committed = next_commit_at(hook, before)
    assert committed is not None
    assert committed >= inside.start_of("second")
    cut = boundary_at(hook, hook.server_state(), inside)
    assert (cut.file, cut.pos) == (before.file, before.pos)


def test_probes_running_at_the_same_time_do_not_end_each_other(
    hook: BinlogHook, server: LocalMariaDB
) -> None:
    # Two runs of one pipeline (a backfill beside the scheduled runs) probe at the same moment. Under one
    # shared server_id the second probe's dump ended the first one's (4052: "A slave with the same
    # server_uuid/server_id ..."), a retryable error that cost the run Airflow's retry delay.
    from pymysqlreplication.row_event import WriteRowsEvent

    from airflow_provider_binlog.source.probes import file_opened_at

    server.execute(
        "CREATE TABLE IF NOT EXISTS r.wide (id INT PRIMARY KEY, pad CHAR(255))", "FLUSH BINARY LOGS"
    )
    file = head(hook).file
    for first in range(0, 60_000, 20_000):  # about 15 MiB of rows events: more than the sockets buffer
        server.execute(
            f"INSERT INTO r.wide SELECT seq, REPEAT('x', 255) FROM r.seq_{first + 1}_to_{first + 20_000}"
        )

    rows = 0
    with hook.probe_stream(file, 4, [WriteRowsEvent]) as stream:
        events = iter(stream)
        rows += len(next(events).rows)
        dump = stream._stream_connection
        assert file_opened_at(hook, file) <= pendulum.now("UTC")  # another probe, while the first one reads
        rows += sum(len(event.rows) for event in events)
        # The first dump was never ended: after an ended dump mysql-replication reconnects silently (once its
        # read timeout passed) and resumes on a new connection, or the probe fails with 4052.
        assert stream._stream_connection is dump

    assert rows == 60_000
