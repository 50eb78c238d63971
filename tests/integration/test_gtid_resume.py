"""A GTID position of a primary is located exactly in a replica's binlog (the resume point after a failover).

Two private MariaDB servers with GTID replication (``MASTER_USE_GTID=slave_pos``, ``log_slave_updates``): the
primary writes transactions in two GTID domains while both rotate their binlogs at different times, so the same
transaction boundary has other coordinates on each. For every boundary recorded on the primary, the replica's
coordinates are located as the least-privileged pipeline user (REPLICATION SLAVE, BINLOG MONITOR, SELECT), and
a read of the replica's binlog from them must yield exactly the transactions the primary committed after it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from itertools import count

import pymysql
import pytest

from airflow_provider_binlog.contract.positions import BinlogPosition
from airflow_provider_binlog.exceptions import BinlogPurgedError, LostTransactionsError
from airflow_provider_binlog.extract.connections import open_dump
from airflow_provider_binlog.extract.events.stream import EventReader
from airflow_provider_binlog.extract.resume import locate_mariadb_gtid_position
from airflow_provider_binlog.source.flavor import MARIADB, ReplicaLag
from airflow_provider_binlog.source.gtid import GtidSet
from airflow_provider_binlog.source.server import read_server_state, setting_findings
from airflow_provider_binlog.testing.mariadb import CDC_SETTINGS, LocalMariaDB

pytestmark = pytest.mark.integration

USER, PASSWORD = "cdc_resume", "cdc-resume-pw-1"
_ids = count(1)


@pytest.fixture(scope="module")
def pair() -> Iterator[tuple[LocalMariaDB, LocalMariaDB]]:
    """A primary (server_id 1) and a replica of it (server_id 2) with the pipeline's least-privileged user."""
    primary = LocalMariaDB().start()
    replica = LocalMariaDB(options={**CDC_SETTINGS, "server-id": "2", "log-slave-updates": "1"})
    try:
        replica.start()
        grants = [
            f"CREATE USER '{USER}'@'127.0.0.1' IDENTIFIED BY '{PASSWORD}'",
            f"GRANT REPLICATION SLAVE, BINLOG MONITOR, SELECT ON *.* TO '{USER}'@'127.0.0.1'",
        ]
        primary.execute(*grants)  # replicated: the user exists on both
        replica.execute(
            f"CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT={primary.port}, MASTER_USER='root', "
            f"MASTER_PASSWORD='{primary.root_password}', MASTER_USE_GTID=slave_pos",
            "START SLAVE",
        )
        caught_up(primary, replica)
        yield primary, replica
    finally:
        replica.stop()
        primary.stop()


def gtid_pos(server: LocalMariaDB) -> GtidSet:
    return GtidSet.parse(str(server.execute("SELECT @@GLOBAL.gtid_binlog_pos")[0][0]), "mariadb")


def caught_up(primary: LocalMariaDB, replica: LocalMariaDB, timeout_seconds: float = 30) -> None:
    deadline = time.monotonic() + timeout_seconds
    while gtid_pos(replica) != gtid_pos(primary):
        assert time.monotonic() < deadline, (
            f"the replica is at {gtid_pos(replica)}, the primary at {gtid_pos(primary)}"
        )
        time.sleep(0.05)


def settings(server: LocalMariaDB) -> dict[str, object]:
    return {
        "host": "127.0.0.1",
        "port": server.port,
        "user": USER,
        "password": PASSWORD,
        "connect_timeout": 10,
    }


def gtids_after(server: LocalMariaDB, at: BinlogPosition) -> list[str]:
    """Return the GTIDs of the transactions ``server``'s binlog holds after ``at`` (read with our reader)."""
    with open_dump(settings(server), server_id=0, start=at, flavor="mariadb") as raw:
        return [str(e.data.gtid) for e in EventReader().events(raw) if e.name == "MARIADB_GTID"]


def test_each_boundary_of_the_primary_is_located_exactly_on_the_replica(
    pair: tuple[LocalMariaDB, LocalMariaDB],
) -> None:
    primary, replica = pair
    boundaries: list[tuple[GtidSet, list[str]]] = []  # (position after a transaction, GTIDs committed later)
    with primary.scratch_database("resume") as db:
        # two tables flow, one of them named as an attacker with CREATE could name it (a dot, a backtick)
        tables = [f"`{db}`.t", f"`{db}`.`u.v``w`"]
        primary.execute(*(f"CREATE TABLE {t} (id INT PRIMARY KEY, v INT)" for t in tables))
        committed: list[str] = []
        for n in range(12):
            domain = 1 if n % 3 == 2 else 0  # a second GTID domain, as a multi-source or multi-writer set-up
            row = primary.execute(
                f"SET SESSION gtid_domain_id = {domain}",
                f"INSERT INTO {tables[n % 2]} VALUES ({n}, {n})",
                "SELECT @@SESSION.last_gtid",
            )
            committed.append(str(row[0][0]))
            boundaries.append((gtid_pos(primary), []))
            if n % 4 == 1:
                primary.execute("FLUSH BINARY LOGS")  # the two servers rotate at different transactions
            if n % 5 == 3:
                caught_up(primary, replica)
                replica.execute("FLUSH BINARY LOGS")
        caught_up(primary, replica)
        for index, (_, later) in enumerate(boundaries):
            later.extend(committed[index + 1 :])
    caught_up(primary, replica)  # the DROP DATABASE is the one transaction after the last insert
    differ = 0
    for position, later in boundaries:
        located = locate_mariadb_gtid_position(settings(replica), position)
        assert located.gtid_set == position.to_position()
        read = gtids_after(replica, located)
        assert read[:-1] == later, f"from {located} (position {position})"
        on_primary = locate_mariadb_gtid_position(settings(primary), position)
        assert gtids_after(primary, on_primary) == read
        differ += (located.file, located.pos) != (on_primary.file, on_primary.pos)
    assert differ, "the two servers' coordinates never differ: the test would show nothing"


def test_the_head_position_is_located_at_the_head(pair: tuple[LocalMariaDB, LocalMariaDB]) -> None:
    primary, replica = pair
    caught_up(primary, replica)
    replica.execute("FLUSH BINARY LOGS")  # the head is in a file after the last transaction's
    located = locate_mariadb_gtid_position(settings(replica), gtid_pos(replica))
    file, pos = replica.execute("SHOW MASTER STATUS")[0][:2]
    assert (located.file, located.pos) == (str(file), int(pos))
    assert gtids_after(replica, located) == []


def test_transactions_the_replica_never_received_are_named(pair: tuple[LocalMariaDB, LocalMariaDB]) -> None:
    primary, replica = pair
    replica.execute("STOP SLAVE")
    try:
        with primary.scratch_database("lost") as db:
            primary.execute(f"CREATE TABLE `{db}`.t (id INT PRIMARY KEY)")
            lost = [
                str(primary.execute(f"INSERT INTO `{db}`.t VALUES ({n})", "SELECT @@SESSION.last_gtid")[0][0])
                for n in range(2)
            ]
            position = gtid_pos(primary)
            with pytest.raises(LostTransactionsError) as caught:
                locate_mariadb_gtid_position(settings(replica), position)
    finally:
        replica.execute("START SLAVE")
    missing = GtidSet.parse(caught.value.missing, "mariadb")
    assert all(missing.contains_gtid(gtid) for gtid in lost)
    assert missing.count() == 4  # the CREATE DATABASE, the CREATE TABLE, then the two inserts
    assert "a failover lost them" in str(caught.value)
    caught_up(primary, replica)


def test_a_position_in_a_purged_binlog_is_refused_as_purged(pair: tuple[LocalMariaDB, LocalMariaDB]) -> None:
    primary, replica = pair
    caught_up(primary, replica)
    old = gtid_pos(replica)
    with primary.scratch_database("purged") as db:
        primary.execute(f"CREATE TABLE `{db}`.t (id INT PRIMARY KEY)", f"INSERT INTO `{db}`.t VALUES (1)")
        caught_up(primary, replica)
        replica.purge_binlogs_before_current()
    caught_up(primary, replica)
    with pytest.raises(BinlogPurgedError, match="cannot serve the binlog from the GTID position"):
        locate_mariadb_gtid_position(settings(replica), old)


def test_the_lag_of_a_replica_behind_its_primary_is_read_where_the_user_may(
    pair: tuple[LocalMariaDB, LocalMariaDB],
) -> None:
    primary, replica = pair
    caught_up(primary, replica)
    with pymysql.connect(**settings(replica)) as conn, conn.cursor() as cur:
        denied = MARIADB.replica_lag(cur)  # the pipeline's least-privileged user
    assert (denied.seconds, denied.replica) == (None, None)
    assert "may not read SHOW REPLICA STATUS" in denied.note
    replica.execute(f"GRANT SLAVE MONITOR ON *.* TO '{USER}'@'127.0.0.1'")
    try:
        with pymysql.connect(**settings(replica)) as conn, conn.cursor() as cur:
            lag = MARIADB.replica_lag(cur)
        with pymysql.connect(**primary.connection_kwargs()) as conn, conn.cursor() as cur:
            not_a_replica = MARIADB.replica_lag(cur)
    finally:
        replica.execute(f"REVOKE SLAVE MONITOR ON *.* FROM '{USER}'@'127.0.0.1'")
    assert (lag.seconds, lag.replica) == (0.0, True)
    assert not_a_replica == ReplicaLag(None, "", replica=False)
    replica.execute("STOP SLAVE SQL_THREAD")
    try:
        with pymysql.connect(**replica.connection_kwargs()) as conn, conn.cursor() as cur:
            stopped = MARIADB.replica_lag(cur)
    finally:
        replica.execute("START SLAVE SQL_THREAD")
    assert (stopped.seconds, stopped.replica) == (None, True)
    assert "applier is not running" in stopped.note


def test_a_replica_whose_binlog_lacks_what_it_applies_is_refused(
    pair: tuple[LocalMariaDB, LocalMariaDB],
) -> None:
    primary, replica = pair
    bare = LocalMariaDB(
        options={**CDC_SETTINGS, "server-id": "3"}
    )  # log_slave_updates OFF, MariaDB's default
    try:
        bare.start()
        bare.execute(
            f"CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT={primary.port}, MASTER_USER='root', "
            f"MASTER_PASSWORD='{primary.root_password}', MASTER_USE_GTID=slave_pos",
            "START SLAVE",
        )
        deadline = (
            time.monotonic() + 30
        )  # its binlog stays empty: it has applied what its gtid_slave_pos says
        while str(bare.execute("SELECT @@GLOBAL.gtid_slave_pos")[0][0]) != str(gtid_pos(primary)):
            assert time.monotonic() < deadline, "the replica without log_slave_updates did not catch up"
            time.sleep(0.05)
        findings = {}
        for name, server in (("primary", primary), ("replica", replica), ("bare", bare)):
            with pymysql.connect(**settings(server)) as conn, conn.cursor() as cur:
                state = read_server_state(cur, MARIADB)
            findings[name] = (
                state.replicating,
                [str(f) for f in setting_findings(state) if "updates" in f.subject],
            )
    finally:
        bare.stop()
    assert findings["primary"] == (False, [])
    assert findings["replica"] == (True, ["log_slave_updates=ON: ok"])
    replicating, (line,) = findings["bare"]
    assert replicating
    assert line.startswith(
        "log_slave_updates=OFF: WRONG: log_slave_updates is OFF on a server that replicates"
    )
