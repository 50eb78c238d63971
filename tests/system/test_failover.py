"""The pipeline follows its source through a failover (docs/failover.md): GTID resume, never a full re-snapshot.

Each test starts its own primary and a GTID replica of it (``log_slave_updates``), runs the example DAG as the
least-privileged user (REPLICATION SLAVE, BINLOG MONITOR, SELECT) under a concurrent shop workload, switches the
Airflow connection to the promoted replica and checks that the target equals the new source row by row.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pymysql
import pytest
from conftest import DagRunner, Pipeline, mark_run, stored_state, task_states

from airflow_provider_binlog.admin import MetadataVariableStore
from airflow_provider_binlog.hooks.binlog import BinlogHook
from airflow_provider_binlog.monitoring.health import pipeline_health
from airflow_provider_binlog.monitoring.measure import lag_of, read_pipeline, retention_of
from airflow_provider_binlog.source.gtid import GtidSet
from airflow_provider_binlog.testing.mariadb import CDC_SETTINGS, LocalMariaDB
from airflow_provider_binlog.testing.workload import SHOP_TABLES, ShopWorkload, create_shop_schema
from airflow_provider_binlog.verify import compare_table

pytestmark = pytest.mark.system

USER, PASSWORD = "cdc_failover", "cdc-failover-pw-1"


class NoRuns:
    """No DAG run holds a window or snapshot (the health summary asks)."""

    def state(self, dag_id: str | None, run_id: str) -> str:
        return "success"

    def failure(self, dag_id: str | None, run_id: str) -> str | None:
        return None


NO_RUNS = NoRuns()


class Topology:
    """A primary and its GTID replica; the Airflow connection ``binlog_default`` points at one of them."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.monkeypatch = monkeypatch
        self.primary = LocalMariaDB().start()
        self.replica = LocalMariaDB(options={**CDC_SETTINGS, "server-id": "2", "log-slave-updates": "1"})
        self.replica.start()
        self.primary.execute(  # replicated: the user exists on both servers
            f"CREATE USER '{USER}'@'127.0.0.1' IDENTIFIED BY '{PASSWORD}'",
            f"GRANT REPLICATION SLAVE, BINLOG MONITOR, SELECT ON *.* TO '{USER}'@'127.0.0.1'",
        )
        replicate(self.replica, self.primary)
        self.caught_up()

    def point_at(self, server: LocalMariaDB) -> None:
        self.monkeypatch.setenv(
            "AIRFLOW_CONN_BINLOG_DEFAULT", f"mysql://{USER}:{PASSWORD}@127.0.0.1:{server.port}"
        )

    def caught_up(self) -> None:
        caught_up(self.primary, self.replica)

    def promote_replica(self) -> None:
        """Make the replica a primary of its own (what an orchestrator or a managed service does)."""
        self.replica.execute("STOP SLAVE", "RESET SLAVE ALL", "SET GLOBAL read_only = 0")

    def stop(self) -> None:
        self.replica.stop()
        self.primary.stop()


def gtid_pos(server: LocalMariaDB) -> str:
    return str(server.execute("SELECT @@GLOBAL.gtid_binlog_pos")[0][0])


def caught_up(primary: LocalMariaDB, replica: LocalMariaDB, timeout_seconds: float = 60) -> None:
    """Wait until ``replica`` has applied everything ``primary`` logged (it may hold more: errant ones)."""
    deadline = time.monotonic() + timeout_seconds
    while not GtidSet.parse(gtid_pos(replica), "mariadb").contains(
        GtidSet.parse(gtid_pos(primary), "mariadb")
    ):
        assert time.monotonic() < deadline, (gtid_pos(replica), gtid_pos(primary))
        time.sleep(0.05)


def replicate(replica: LocalMariaDB, primary: LocalMariaDB) -> None:
    """Make ``replica`` replicate from ``primary`` by GTID (``slave_pos``: it continues where it stands)."""
    replica.execute(
        f"CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT={primary.port}, MASTER_USER='root', "
        f"MASTER_PASSWORD='{primary.root_password}', MASTER_USE_GTID=slave_pos",
        "START SLAVE",
    )


@pytest.fixture
def topology(airflow_db: object, spark_connect: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[Topology]:
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", spark_connect.connection_json())
    monkeypatch.setenv("BINLOG_CDC_SNAPSHOT_CHUNK_ROWS", "200")
    servers = Topology(monkeypatch)
    try:
        servers.point_at(servers.primary)
        yield servers
    finally:
        servers.stop()


class FailoverPipeline(Pipeline):
    """The example DAG over a shop database; ``server`` is whichever server the connection reaches."""

    def workload(self, seed: int, server: LocalMariaDB | None = None) -> ShopWorkload:
        """Return a workload writing to ``server`` (default: the one the connection reaches)."""
        server = server or self.server
        return ShopWorkload(
            connect=lambda: pymysql.connect(**server.connection_kwargs(autocommit=False)),
            db=self.db,
            seed=seed,
            first_number=seed * 1_000_000,
        )

    def state(self) -> dict[str, Any]:
        state = stored_state(self.name)
        assert state is not None
        return state

    def run_ok(self, dates: Any = None) -> Any:
        run = self.runner.run(dates)
        assert run.state == "success", task_states(run)
        return run

    def run_under_writes(self, seed: int, runs: int = 2, writer: LocalMariaDB | None = None) -> float:
        """Run the DAG ``runs`` times while a workload writes (to ``writer``, default the source); return the
        seconds the first run took."""
        workload = self.workload(seed, writer)
        workload.start(100_000, pause_seconds=0.002)
        try:
            started = time.monotonic()
            self.run_ok()
            first = time.monotonic() - started
            for _ in range(runs - 1):
                self.run_ok()
        finally:
            written = workload.stop()
        assert sum(written.values()) > 20, "the workload barely wrote: the test would show little"
        return first

    def assert_exact(self) -> None:
        self.run_window()  # the writes after the last run, then compare every table
        assert self.mismatches(*SHOP_TABLES) == []


@pytest.fixture
def shop(topology: Topology, pipeline_dirs: dict[str, str]) -> FailoverPipeline:
    db = f"fo_{uuid.uuid4().hex[:8]}"
    with pymysql.connect(**topology.primary.connection_kwargs()) as conn:
        create_shop_schema(conn, db)
    pipeline = FailoverPipeline(topology.primary, db, pipeline_dirs)
    pipeline.workload(seed=3).run(400)  # rows that exist before the pipeline does
    return pipeline


def test_a_planned_switchover_is_followed_by_gtid_without_a_snapshot(
    topology: Topology, shop: FailoverPipeline
) -> None:
    shop.run_under_writes(seed=4)
    old = shop.state()
    topology.primary.execute(
        "SET GLOBAL read_only = 1"
    )  # the switchover: writes stop, the replica catches up
    topology.caught_up()
    topology.promote_replica()
    topology.point_at(topology.replica)
    shop.server = topology.replica
    topology.replica.execute(f"UPDATE `{shop.db}`.customers SET name = 'after the switch' WHERE id % 5 = 0")
    # before the next run the sensors and the health summary measure from the checkpoint as found on the new
    # server, and write nothing
    hook, store = BinlogHook(pipeline=shop.name), MetadataVariableStore()
    server, rebased, read_at = read_pipeline(hook, shop.name, store)
    assert rebased is not None
    lag = lag_of(hook, shop.name, server, rebased, read_at)
    behind = GtidSet.parse(gtid_pos(topology.replica), "mariadb") - GtidSet.parse(
        old["checkpoint"]["position"]["gtid_set"], "mariadb"
    )
    assert lag.transactions == behind.count() > 1  # the workload's last writes, then the update
    assert lag.checkpoint.gtid_set == old["checkpoint"]["position"]["gtid_set"]
    assert lag.bytes > 0
    assert not retention_of(hook, shop.name, server, rebased).purged
    health = pipeline_health(hook, shop.name, NO_RUNS, store=store)
    assert health.source_switch is not None
    assert "the next run of the pipeline follows it" in health.source_switch
    assert shop.state() == old

    seconds = shop.run_under_writes(seed=5)

    state = shop.state()
    (switch,) = state["switches"]
    assert (
        switch["from_identity"] == old["source_identity"] != state["source_identity"] == switch["to_identity"]
    )
    assert switch["old_checkpoint"] == old["checkpoint"]["position"]
    assert switch["checkpoint"]["gtid_set"] == old["checkpoint"]["position"]["gtid_set"]
    assert (switch["lost"], switch["resnapshot"], switch["dropped_windows"]) == ("", [], [])
    assert [s["reason"] for s in state["snapshots"]] == ["initial"]  # no re-snapshot
    shop.assert_exact()
    print(f"planned switchover: first window merged {seconds:.1f} s after the switch")


def test_a_crash_failover_with_lost_transactions_resnapshots_only_the_tables_they_changed(
    topology: Topology, shop: FailoverPipeline
) -> None:
    shop.run_under_writes(seed=4)
    shop.run_window()
    topology.caught_up()
    topology.replica.execute(
        "STOP SLAVE"
    )  # the replica's applier stops: what follows reaches only the primary
    shop.sql(
        "UPDATE customers SET name = 'lost with the primary' WHERE id % 3 = 0",
        "DELETE FROM customers WHERE id % 7 = 0",
    )
    shop.run_window()  # the target now holds changes the replica never received
    topology.primary.process.kill()  # the primary crashes
    topology.primary.process.wait()
    topology.promote_replica()
    topology.point_at(topology.replica)
    shop.server = topology.replica

    seconds = shop.run_under_writes(seed=5)  # the new primary writes over the lost sequence numbers

    state = shop.state()
    (switch,) = state["switches"]
    assert switch["lost"], switch
    assert switch["resnapshot"] == [f"{shop.db}.customers"]
    lost_snapshots = [s for s in state["snapshots"] if s["reason"] == "lost_transactions"]
    assert [s["tables"] for s in lost_snapshots] == [[f"{shop.db}.customers"]]
    shop.assert_exact()
    print(f"crash failover, lost transactions: first window merged {seconds:.1f} s after the switch")


@pytest.mark.parametrize(("kill_at", "status"), [("extract", "cut"), ("before_merge", "extracted")])
def test_a_window_cut_or_extracted_on_the_old_server_is_merged_after_the_switch(
    topology: Topology, shop: FailoverPipeline, pipeline_dirs: dict[str, str], kill_at: str, status: str
) -> None:
    shop.run_ok()  # the snapshot and an empty first window
    topology.replica.execute(
        "FLUSH BINARY LOGS"
    )  # the replica's coordinates of the window differ from the primary's
    shop.workload(seed=4).run(300)
    dates = DagRunner.next_dates()
    assert shop.runner.run_in_child(dates, kill_at) == -9, "the fault was not injected"
    held = shop.state()["windows"][-1]
    assert held["status"] == status
    mark_run(shop.dag.dag_id, held["run_id"], "failed")  # as the scheduler does for a run whose worker died
    topology.caught_up()
    topology.promote_replica()
    topology.point_at(topology.replica)
    shop.server = topology.replica
    folders = Path(pipeline_dirs["staging"]) / shop.name
    staged = sorted(p.name for p in folders.glob(f"window={held['seq']}*"))

    started = time.monotonic()
    shop.run_ok()
    print(f"window {status} on the old server: merged {time.monotonic() - started:.1f} s after the switch")

    state = shop.state()
    window = next(w for w in state["windows"] if w["seq"] == held["seq"])  # the same window, adopted
    assert window["status"] == "merged"
    assert window["rows"] > 0
    assert (window["start"]["gtid_set"], window["end"]["gtid_set"]) == (
        held["start"]["gtid_set"],
        held["end"]["gtid_set"],
    )
    assert (window["end"]["file"], window["end"]["pos"]) != (held["end"]["file"], held["end"]["pos"])
    after = sorted(p.name for p in folders.glob(f"window={held['seq']}*"))
    if status == "extracted":  # merged as staged on the old server: no new staging folder of it
        assert (after, window["rows"]) == (staged, held["rows"])
    else:  # read again on the new server, into a folder of its own
        assert len(after) == len(staged) + 1
    shop.assert_exact()


def test_a_pipeline_reading_a_replica_goes_on_when_the_replicas_primary_is_replaced(
    topology: Topology, shop: FailoverPipeline
) -> None:
    topology.point_at(topology.replica)  # the pipeline spares the primary: it reads the replica
    shop.server = topology.replica
    topology.caught_up()
    other = LocalMariaDB(options={**CDC_SETTINGS, "server-id": "3", "log-slave-updates": "1"}).start()
    try:
        replicate(other, topology.primary)
        shop.run_under_writes(seed=4, writer=topology.primary)
        caught_up(topology.primary, other)
        topology.primary.process.kill()  # the primary dies; the other replica becomes the primary
        topology.primary.process.wait()
        other.execute("STOP SLAVE", "RESET SLAVE ALL")
        topology.replica.execute("STOP SLAVE")
        replicate(topology.replica, other)  # the pipeline's replica now follows the new primary

        shop.run_under_writes(seed=5, writer=other)

        caught_up(other, topology.replica)
        shop.assert_exact()
        state = shop.state()
        assert state["switches"] == []  # the pipeline's source is the same server throughout
        assert [s["reason"] for s in state["snapshots"]] == ["initial"]
        with pymysql.connect(**other.connection_kwargs()) as conn:
            results = [compare_table(conn, shop.target, f"{shop.db}.{t}") for t in SHOP_TABLES]
        assert [str(r) for r in results if not r.matched] == []  # the target equals the new primary too
    finally:
        other.stop()


def test_a_binlog_reset_with_its_gtid_state_kept_is_followed_on_the_same_server(
    topology: Topology, shop: FailoverPipeline
) -> None:
    topology.replica.execute("STOP SLAVE")  # the primary alone takes part
    shop.run_ok()  # the snapshot and the first window
    shop.workload(seed=4).run(100)
    shop.run_window()
    old = shop.state()
    checkpoint = old["checkpoint"]["position"]
    gtid_state = topology.primary.execute("SELECT @@GLOBAL.gtid_binlog_state")[0][0]
    topology.primary.execute("RESET MASTER", f"SET GLOBAL gtid_binlog_state = '{gtid_state}'")
    workload = shop.workload(seed=5)
    while shop.head()["pos"] <= checkpoint["pos"]:  # the old coordinates now name another place of the binlog
        workload.run(50)
        workload.first_number += 50_000
    assert shop.head()["file"] == checkpoint["file"]

    started = time.monotonic()
    shop.run_ok()
    print(f"binlog reset: first window merged {time.monotonic() - started:.1f} s after it")

    state = shop.state()
    (switch,) = state["switches"]
    assert switch["from_identity"] == switch["to_identity"] == old["source_identity"]
    assert switch["lost"] == ""
    assert switch["old_checkpoint"] == checkpoint
    assert [s["reason"] for s in state["snapshots"]] == ["initial"]
    shop.assert_exact()


def test_a_crash_under_concurrent_writes_ends_exact_whatever_the_replica_received(
    topology: Topology, shop: FailoverPipeline
) -> None:
    shop.run_under_writes(seed=4, runs=1)
    workload = shop.workload(seed=6)
    workload.start(100_000, pause_seconds=0.001)
    time.sleep(1)
    topology.primary.process.kill()  # the primary crashes mid-write: the replica has what it had received
    topology.primary.process.wait()
    with pytest.raises(RuntimeError, match="the workload failed"):
        workload.stop()  # its connection died with the primary
    seen, deadline = "", time.monotonic() + 30  # the replica applies what it received, then it is promoted
    while (now := gtid_pos(topology.replica)) != seen and time.monotonic() < deadline:
        seen = now
        time.sleep(1)
    topology.promote_replica()
    topology.point_at(topology.replica)
    shop.server = topology.replica

    seconds = shop.run_under_writes(seed=5)

    state = shop.state()
    (switch,) = state["switches"]
    assert {s["reason"] for s in state["snapshots"]} <= {"initial", "lost_transactions"}
    assert bool(switch["lost"]) == any(s["reason"] == "lost_transactions" for s in state["snapshots"])
    shop.assert_exact()
    print(
        f"crash under writes: lost {switch['lost'] or 'nothing'}, re-snapshotted {switch['resnapshot']}, first "
        f"window merged {seconds:.1f} s after the switch"
    )


def test_errant_transactions_written_on_the_replica_reach_the_target_after_the_switch(
    topology: Topology, shop: FailoverPipeline
) -> None:
    shop.run_ok()  # the snapshot and the first window
    topology.caught_up()
    errant = f"UPDATE `{shop.db}`.customers SET name = 'written on the replica' WHERE id % 11 = 0"
    topology.replica.execute("SET SESSION gtid_domain_id = 5", errant)  # the primary never has it
    shop.workload(seed=4).run(
        100
    )  # the primary writes on: the checkpoint's boundary lies after the errant one
    shop.run_window()
    old = shop.state()
    topology.caught_up()
    topology.promote_replica()
    topology.point_at(topology.replica)
    shop.server = topology.replica

    started = time.monotonic()
    shop.run_ok()
    print(f"errant transactions: first window merged {time.monotonic() - started:.1f} s after the switch")

    (switch,) = shop.state()["switches"]
    assert switch["lost"] == ""
    # the read starts before the errant transaction, at a GTID state the old checkpoint contains
    assert GtidSet.parse(old["checkpoint"]["position"]["gtid_set"], "mariadb").contains(
        GtidSet.parse(switch["checkpoint"]["gtid_set"], "mariadb")
    )
    assert switch["checkpoint"]["gtid_set"] != old["checkpoint"]["position"]["gtid_set"]
    assert shop.sql("SELECT COUNT(*) FROM customers WHERE name = 'written on the replica'")[0][0] > 0
    shop.assert_exact()
