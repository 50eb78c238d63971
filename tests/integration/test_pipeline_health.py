"""Purge risk of a new pipeline, lag and purge risk with a snapshot in progress, and the health summary.

Ledger states are built with the real state code (cut, mark, begin snapshot) against a private MariaDB
whose retention the tests change; no Spark and no DAG run is needed.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pendulum
import pytest

from airflow_provider_binlog.contract.positions import BinlogPosition
from airflow_provider_binlog.exceptions import PurgeRiskError
from airflow_provider_binlog.hooks.binlog import BinlogHook
from airflow_provider_binlog.monitoring.health import pipeline_health
from airflow_provider_binlog.monitoring.measure import lag_of, retention_of
from airflow_provider_binlog.monitoring.retention import purge_risk_verdict
from airflow_provider_binlog.monitoring.snapshot_estimate import SNAPSHOT_OVERHEAD_SECONDS
from airflow_provider_binlog.pipeline.ledger import PipelineState
from airflow_provider_binlog.pipeline.lock import SourceStateLock
from airflow_provider_binlog.pipeline.state import StateManager, variable_key
from airflow_provider_binlog.pipeline.windows import advance_checkpoint, cut_window, mark_window
from airflow_provider_binlog.sensors import BinlogPurgeRiskSensor
from airflow_provider_binlog.snapshot.ledger import begin_snapshot, finish_snapshot
from airflow_provider_binlog.testing.mariadb import LocalMariaDB
from airflow_provider_binlog.testing.stores import DictStore

pytestmark = pytest.mark.integration

ROWS = 1000


class Runs:
    """Airflow run states as the scheduler would report them (``missing`` for any other run)."""

    def __init__(self, states: dict[str, str], failures: dict[str, str]) -> None:
        self.states, self.failures = states, failures

    def state(self, dag_id: str | None, run_id: str) -> str:
        return self.states.get(run_id, "missing")

    def failure(self, dag_id: str | None, run_id: str) -> str | None:
        return self.failures.get(run_id)


@pytest.fixture(scope="module")
def server() -> Iterator[LocalMariaDB]:
    """A server of its own: these tests shorten retention."""
    with LocalMariaDB() as instance:
        instance.execute("CREATE DATABASE h")
        instance.execute(
            "CREATE TABLE big (id INT PRIMARY KEY, v INT)",
            f"INSERT INTO big SELECT seq, seq FROM seq_1_to_{ROWS}",
            "ANALYZE TABLE big",
            "CREATE TABLE log (id INT PRIMARY KEY, v INT)",
            database="h",
        )
        yield instance


@pytest.fixture
def hook(server: LocalMariaDB, monkeypatch: pytest.MonkeyPatch) -> Iterator[BinlogHook]:
    monkeypatch.setenv("AIRFLOW_CONN_HEALTH_SRC", server.uri())
    server.execute("SET GLOBAL binlog_expire_logs_seconds = 0")
    yield BinlogHook("health_src", pipeline="p_health")
    server.execute("SET GLOBAL binlog_expire_logs_seconds = 0")


def head(hook: BinlogHook) -> BinlogPosition:
    position = hook.server_state().head
    assert position is not None
    return position


def write(server: LocalMariaDB, n: int = 3) -> None:
    for _ in range(n):
        server.execute(f"INSERT INTO h.log VALUES ({uuid.uuid4().int % 10**9}, 0)")


def sensor(pipeline: str, **kwargs: Any) -> BinlogPurgeRiskSensor:
    return BinlogPurgeRiskSensor(
        task_id="purge_risk", pipeline=pipeline, binlog_conn_id="health_src", tables="h.*, !h.log", **kwargs
    )


def store_for_sensors(monkeypatch: pytest.MonkeyPatch, state: PipelineState) -> None:
    """Make the state readable by the sensors outside a task (Variables from the environment)."""
    monkeypatch.setenv(f"AIRFLOW_VAR_{variable_key(state.pipeline).upper()}", state.model_dump_json())


def test_purge_risk_sensor_passes_a_new_pipeline_whose_head_is_retained(hook: BinlogHook) -> None:
    server = hook.server_state()
    report = sensor(f"new_{uuid.uuid4().hex[:6]}").poke({}).xcom_value
    assert report["new_pipeline"] is True
    assert report["needed_file"] == server.binlog_files[-1][0]  # the head's file
    assert report["purged"] is False
    assert report["snapshot"]["tables"] == ["h.big"]
    assert report["snapshot"]["rows"] == ROWS
    assert report["snapshot"]["rate_source"] == "default"
    assert report["headroom_seconds"] is None  # binlogs never expire by age: safe whatever the snapshot


def test_purge_risk_sensor_fails_a_new_pipeline_whose_snapshot_outlasts_the_retention(
    hook: BinlogHook, server: LocalMariaDB
) -> None:
    server.execute("SET GLOBAL binlog_expire_logs_seconds = 3600")
    pipeline = f"new_{uuid.uuid4().hex[:6]}"
    # 1000 rows at 0.5 rows/s: 2000 s + overhead, leaving under 1500 s of the 3600 s retention
    with pytest.raises(PurgeRiskError, match="until its snapshot is merged") as failure:
        sensor(pipeline, min_headroom_seconds=1500, snapshot_rows_per_second=0.5).poke({})
    assert "h.big" in str(failure.value)
    assert "binlog_expire_logs_seconds" in str(failure.value)
    # a faster snapshot, or a smaller minimum, fits: 3600 - (120 + 1000/0.5) = 1480 s left
    fits = sensor(pipeline, min_headroom_seconds=1400, snapshot_rows_per_second=0.5).poke({}).xcom_value
    expected = 3600 - (SNAPSHOT_OVERHEAD_SECONDS + ROWS / 0.5)
    assert fits["headroom_after_snapshot_seconds"] == pytest.approx(expected)
    assert sensor(pipeline, min_headroom_seconds=3000).poke({}).is_done  # default 5000 rows/s: 120.2 s


def test_a_measured_snapshot_rate_replaces_the_default(
    hook: BinlogHook, server: LocalMariaDB, monkeypatch: pytest.MonkeyPatch
) -> None:
    server.execute("SET GLOBAL binlog_expire_logs_seconds = 3600")
    manager = StateManager(f"measured_{uuid.uuid4().hex[:6]}", store=DictStore())
    source = hook.server_state()
    state = manager.initial(source.server_identity, source.flavor, head(hook))
    state, snapshot = begin_snapshot(
        state, run_id="r1", tables=["h.other"], mode="requested", head=head(hook), staging_uri=str
    )
    assert snapshot is not None
    started = pendulum.now("UTC").subtract(seconds=int(SNAPSHOT_OVERHEAD_SECONDS) + 100)
    state = finish_snapshot(
        state, snapshot.seq, 50_000, "/lake", written=[]
    )  # 500 rows/s once overhead is off
    state = state.model_copy(
        update={
            "snapshots": [s.model_copy(update={"started_at": started.isoformat()}) for s in state.snapshots]
        }
    )
    store_for_sensors(monkeypatch, state)
    report = sensor(state.pipeline, min_headroom_seconds=60).poke({}).xcom_value
    assert report["snapshot"]["rate_source"] == f"measured on snapshot {snapshot.seq}"
    assert report["snapshot"]["rows_per_second"] == pytest.approx(500, rel=0.05)
    assert report["snapshot"]["tables"] == ["h.big"]  # h.big has no snapshot yet; h.other has


def _pipeline_with_snapshot_in_progress(hook: BinlogHook, server: LocalMariaDB) -> PipelineState:
    """Window 1 merged, snapshot (running 10 minutes, held by a running run), window 2 held by a failed run."""
    manager = StateManager(f"busy_{uuid.uuid4().hex[:6]}", store=DictStore(), lock=SourceStateLock(hook))
    source = hook.server_state()
    state = manager.initial(source.server_identity, source.flavor, head(hook))
    write(server)
    state, first, _ = cut_window(state, run_id="scheduled__1", head=head(hook))
    state = mark_window(state, first.seq, status="merged", last_commit_ts=pendulum.now("UTC").isoformat())
    state = state.model_copy(update={"checkpoint": advance_checkpoint(state, state.window(first.seq))})
    state, snapshot = begin_snapshot(
        state,
        run_id="manual__resnapshot",
        tables=["h.big"],
        mode="requested",
        head=head(hook),
        staging_uri=lambda seq: f"/staging/snapshot={seq}",
        dag_id="binlog_resnapshot",
    )
    assert snapshot is not None
    ten_minutes_ago = pendulum.now("UTC").subtract(minutes=10).isoformat()
    state = state.model_copy(
        update={"snapshots": [s.model_copy(update={"started_at": ten_minutes_ago}) for s in state.snapshots]}
    )
    write(server)
    state, second, _ = cut_window(state, run_id="scheduled__2", head=head(hook))
    state = mark_window(state, second.seq, status="extracted")
    return manager.save(state, expected_revision=None)


def test_lag_and_purge_risk_count_a_snapshot_in_progress(hook: BinlogHook, server: LocalMariaDB) -> None:
    state = _pipeline_with_snapshot_in_progress(hook, server)
    (snapshot,) = state.snapshots
    started = pendulum.DateTime.fromisoformat(snapshot.started_at).in_timezone("UTC")
    source, read_at = hook.server_state(), pendulum.now("UTC")
    lag = lag_of(hook, state.pipeline, source, state, read_at)
    assert lag.snapshots_running == ((snapshot.seq, started),)
    assert lag.pending_since == started  # older than the pending binlog transactions
    assert lag.seconds >= 600
    assert not lag.covers(started.add(seconds=1))
    assert f"snapshot {snapshot.seq} in progress since" in lag.describe()

    server.execute("SET GLOBAL binlog_expire_logs_seconds = 3600")
    retention = retention_of(hook, state.pipeline, hook.server_state(), state, snapshot_rows_per_second=0.5)
    assert retention.needed_file == state.checkpoint.position.file
    assert retention.snapshot is not None
    assert retention.snapshot.running == (snapshot.seq,)
    # need 120 + 1000/0.5 = 2120 s, 600 s done: about 1520 s still to go of the 3600 s headroom
    assert retention.snapshot.seconds == pytest.approx(1520, abs=5)
    assert retention.headroom_after_snapshot == pytest.approx(2080, abs=5)
    assert purge_risk_verdict(retention, 1800)[0] == "safe"
    status, message = purge_risk_verdict(retention, 2500)
    assert status == "low"
    assert f"snapshot {snapshot.seq} in progress" in message


def test_health_summary_names_open_windows_snapshots_and_the_next_step(
    hook: BinlogHook, server: LocalMariaDB
) -> None:
    state = _pipeline_with_snapshot_in_progress(hook, server)
    store = DictStore()
    store.set(variable_key(state.pipeline), state.model_dump_json())
    runs = Runs(
        {"manual__resnapshot": "running", "scheduled__2": "failed"}, {"scheduled__2": "failed tasks: merge"}
    )
    health = pipeline_health(hook, state.pipeline, runs, store=store, tables=["h.big"])
    merged, held = state.windows
    (snapshot,) = state.snapshots
    assert health.checkpoint is not None
    assert (health.checkpoint.file, health.checkpoint.pos) == (merged.end.file, merged.end.pos)
    assert health.checkpoint.window == merged.seq
    assert health.last_merged is not None
    assert health.last_merged.seq == merged.seq
    assert health.last_merged.age_seconds is not None
    assert health.last_merged.age_seconds < 60
    assert [(h.kind, h.seq, h.run_id, h.run_state) for h in health.held] == [
        ("window", held.seq, "scheduled__2", "failed"),
        ("snapshot", snapshot.seq, "manual__resnapshot", "running"),
    ]
    assert health.held[1].age_seconds >= 600
    assert health.lag is not None
    assert health.lag["snapshots_running"][0]["seq"] == snapshot.seq
    assert health.retention is not None
    assert health.retention["purged"] is False
    assert health.last_error == "run scheduled__2: failed tasks: merge"
    assert health.needs_attention
    assert health.next_step.startswith(f"window {held.seq} (extracted) held by failed run scheduled__2")
    text = health.render()
    for expected in (
        f"checkpoint: {merged.end.file}:{merged.end.pos}",
        f"open window {held.seq} (extracted): held by run scheduled__2 (failed)",
        f"open snapshot {snapshot.seq} (running): held by run manual__resnapshot (running)",
        f"last merged window: {merged.seq} by run scheduled__1",
        "lag: pipeline",
        "headroom: pipeline",
        "last error: run scheduled__2: failed tasks: merge",
        f"next: window {held.seq}",
    ):
        assert expected in text, expected
    print(text)


def test_health_command_prints_json_from_the_metadata_database(
    hook: BinlogHook, server: LocalMariaDB, airflow_db: object, capsys: pytest.CaptureFixture[str]
) -> None:
    from airflow_provider_binlog import admin

    state = _pipeline_with_snapshot_in_progress(hook, server)
    admin.MetadataVariableStore().set(variable_key(state.pipeline), state.model_dump_json())
    code = admin.main(["health", "--pipeline", state.pipeline, "--binlog-conn-id", "health_src", "--json"])
    summary = json.loads(capsys.readouterr().out)
    assert code == 1  # the holder runs are not in this Airflow: they ended, someone must look
    assert summary["pipeline"] == state.pipeline
    assert [h["run_state"] for h in summary["held"]] == ["missing", "missing"]
    assert summary["checkpoint"]["window"] == state.checkpoint.window
    assert summary["needs_attention"] is True
    admin.main(["health", "--pipeline", state.pipeline, "--binlog-conn-id", "health_src"])
    assert f"pipeline {state.pipeline}" in capsys.readouterr().out
