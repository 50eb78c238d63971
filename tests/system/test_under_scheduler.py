"""The example DAG under a real scheduler (``airflow standalone``: scheduler, dag-processor, API server,
LocalExecutor workers using the Task SDK), where tasks reach Variables through the execution API."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pendulum
import pymysql
import pytest

from airflow_provider_binlog.testing.mariadb import LocalMariaDB, free_port
from airflow_provider_binlog.verify import compare_table

pytestmark = pytest.mark.system
REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


class Standalone:
    """``airflow standalone`` in its own home and process group, stopped by the fixture."""

    def __init__(self, home: Path, env: dict[str, str]) -> None:
        self.home = home
        self.env = env
        self.log = home / "standalone.log"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout_seconds: float = 240) -> None:
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(
                [str(BIN / "airflow"), "standalone"],
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.wait_for(
            lambda: b"Airflow is ready" in self.log.read_bytes(), timeout_seconds, "Airflow to start"
        )

    def wait_for(self, condition, timeout_seconds: float, what: str):  # type: ignore[no-untyped-def]
        deadline = time.monotonic() + timeout_seconds
        while True:
            assert self.process is not None
            if self.process.poll() is not None:
                raise AssertionError(f"airflow standalone exited while waiting for {what}:\n{self.tail()}")
            value = condition()
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}:\n{self.tail()}")
            time.sleep(1)

    def tail(self) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-40:])

    def query(self, sql: str, *args: object) -> list[tuple[object, ...]]:
        with sqlite3.connect(self.home / "airflow.db", timeout=30) as db:
            try:
                return list(db.execute(sql, args))
            except sqlite3.OperationalError:
                return []

    def cli(self, *args: str) -> str:
        """Run an ``airflow`` command; sqlite's "database is locked" (the scheduler writing) is retried."""
        for _ in range(5):
            result = subprocess.run(
                [str(BIN / "airflow"), *args], env=self.env, capture_output=True, text=True
            )
            if result.returncode == 0 or "database is locked" not in result.stderr:
                break
            time.sleep(2)
        assert result.returncode == 0, result.stderr[-2000:]
        return result.stdout

    def run_dag(self, dag_id: str, timeout_seconds: float = 300, conf: dict[str, Any] | None = None) -> str:
        run_id = f"system_{uuid.uuid4().hex[:8]}"
        self.cli(
            "dags", "trigger", dag_id, "--run-id", run_id, *(("--conf", json.dumps(conf)) if conf else ())
        )

        def finished() -> str | None:
            rows = self.query("SELECT state FROM dag_run WHERE dag_id = ? AND run_id = ?", dag_id, run_id)
            state = rows[0][0] if rows else None
            return str(state) if state in ("success", "failed") else None

        return str(self.wait_for(finished, timeout_seconds, f"run {run_id}"))

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()


@contextmanager
def running_standalone(
    mariadb: LocalMariaDB, tmp_path: Path, *, airflow_env: Mapping[str, str] | None = None, **settings: str
) -> Iterator[tuple[Standalone, str, Path]]:
    """Start ``airflow standalone`` over the example DAG with ``BINLOG_CDC_*`` ``settings``; stop it after.

    ``airflow_env`` adds or replaces environment variables of Airflow (``AIRFLOW__...``, ``AIRFLOW_CONN_...``).
    """
    home = tmp_path / "airflow"
    (home / "dags").mkdir(parents=True)
    (home / "dags" / "binlog_cdc.py").symlink_to(REPO / "example_dags" / "binlog_cdc.py")
    db = f"sched_{uuid.uuid4().hex[:8]}"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "BINLOG_CDC"))}
    api_port = free_port()
    env.update(
        {
            "PATH": f"{BIN}{os.pathsep}{env.get('PATH', '')}",
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DAGS_FOLDER": str(home / "dags"),
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
            "AIRFLOW__API__PORT": str(api_port),
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://localhost:{api_port}/execution/",
            "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port()),
            "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(free_port()),
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
            "AIRFLOW_CONN_BINLOG_DEFAULT": mariadb.uri(),
            "AIRFLOW_CONN_SPARK_DEFAULT": '{"conn_type": "spark", "host": "local[2]"}',
            "BINLOG_CDC_PIPELINE": f"p_{db}",
            "BINLOG_CDC_TABLES": f"{db}.*",
            "BINLOG_CDC_STAGING": str(tmp_path / "staging"),
            "BINLOG_CDC_TARGET": str(tmp_path / "target"),
            "BINLOG_CDC_SCHEDULE": "none",
            **{f"BINLOG_CDC_{name.upper()}": value for name, value in settings.items()},
            **(airflow_env or {}),
        }
    )
    mariadb.execute(
        f"CREATE DATABASE {db}", f"CREATE TABLE {db}.items (id INT PRIMARY KEY, v JSON, d DECIMAL(9,3))"
    )
    server = Standalone(home, env)
    try:
        server.start()
        server.wait_for(
            lambda: server.query("SELECT 1 FROM dag WHERE dag_id = 'binlog_cdc'"), 120, "the DAG to be parsed"
        )
        yield server, db, tmp_path / "target"
    finally:
        server.stop()
        mariadb.execute(f"DROP DATABASE IF EXISTS {db}")


CATCH_UP_ROWS = 150
"""Rows of 96 kB each that the catch-up test inserts: 14 MiB of row images, 20 MiB with its updates and deletes."""


@pytest.fixture(scope="module")
def standalone(
    mariadb: LocalMariaDB, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Standalone, str, Path]]:
    """One ``airflow standalone`` for the tests of the example DAG's defaults (its start takes a minute)."""
    # A catch-up window of 4 MiB is read in parallel: the catch-up test writes 20 MiB, not the default's 64 MiB.
    parallel = {"AIRFLOW__BINLOG__PARALLEL_READ_MIN_BYTES": str(4 << 20)}
    with running_standalone(mariadb, tmp_path_factory.mktemp("standalone"), airflow_env=parallel) as running:
        yield running


def test_example_dag_under_a_real_scheduler(
    mariadb: LocalMariaDB, standalone: tuple[Standalone, str, Path]
) -> None:
    server, db, target = standalone
    assert server.run_dag("binlog_cdc") == "success", server.tail()
    # A run triggered with a configuration naming another pipeline, tables, staging and target (ADR 0034).
    elsewhere = target.parent / "elsewhere"
    conf = {
        "pipeline": "evil",
        "tables": "mysql.*",
        "staging": str(elsewhere / "s"),
        "target": str(elsewhere / "t"),
    }
    assert server.run_dag("binlog_cdc", conf=conf) == "success", server.tail()
    assert not elsewhere.exists()
    variables = [row[0] for row in server.query('SELECT "key" FROM variable')]
    assert variables == [f"binlog_state__p_{db}"]  # the example's own pipeline only
    mariadb.execute(
        f"INSERT INTO {db}.items VALUES (1, '{{\"a\": 1}}', 1.5), (2, NULL, -2.25), (3, '[]', 0)",
        f"UPDATE {db}.items SET d = 9.125 WHERE id = 1",
        f"DELETE FROM {db}.items WHERE id = 2",
        f"UPDATE {db}.items SET id = 4 WHERE id = 3",
    )
    assert server.run_dag("binlog_cdc") == "success", server.tail()
    with pymysql.connect(**mariadb.connection_kwargs()) as conn:
        result = compare_table(conn, str(target), f"{db}.items")
    assert result.matched, str(result)
    assert result.source_rows == 2


def test_a_catch_up_window_of_several_files_is_read_in_parallel_inside_a_supervised_task(
    mariadb: LocalMariaDB, standalone: tuple[Standalone, str, Path]
) -> None:
    """The extract forks its worker inside a Task SDK task process (supervisor sockets, task logging) and the
    target still equals the source."""
    if (os.cpu_count() or 1) < 2:
        pytest.skip("one CPU: every window is read serially (extract.parallel.worker_count)")
    server, db, target = standalone
    mariadb.execute(f"DELETE FROM {db}.items")  # rows of the test before on the shared server
    assert server.run_dag("binlog_cdc") == "success", server.tail()
    mariadb.execute(f"SET GLOBAL max_binlog_size = {4 << 20}")  # 20 MiB of row images: 5 files or more
    try:
        with pymysql.connect(**mariadb.connection_kwargs(autocommit=True)) as conn, conn.cursor() as cur:
            for first in range(0, CATCH_UP_ROWS, 25):
                cur.executemany(
                    f"INSERT INTO {db}.items VALUES (%s, %s, %s)",
                    [
                        (i, json.dumps({"id": i, "text": f"{i:06d}" * 16_000}), f"{i}.125")
                        for i in range(first, first + 25)
                    ],
                )
            cur.execute(f"UPDATE {db}.items SET d = -d WHERE id % 7 = 0")
            cur.execute(f"DELETE FROM {db}.items WHERE id % 11 = 0")
    finally:
        mariadb.execute("SET GLOBAL max_binlog_size = 1073741824")
    assert server.run_dag("binlog_cdc") == "success", server.tail()
    with pymysql.connect(**mariadb.connection_kwargs()) as conn:
        result = compare_table(conn, str(target), f"{db}.items")
    assert result.matched, str(result)
    assert result.source_rows == CATCH_UP_ROWS - len(range(0, CATCH_UP_ROWS, 11))
    logs = "".join(p.read_text(errors="replace") for p in server.home.glob("logs/**/task_id=extract/*.log"))
    assert "the task process and 1 worker process(es) read them" in logs
    assert "read by the task process" in logs
    assert "read by a worker" in logs


@pytest.mark.slow
def test_cli_backfill_of_interval_windows_runs_backwards_and_tiles(
    mariadb: LocalMariaDB, spark_connect: Any, tmp_path: Path
) -> None:
    """The merges run on the test process's Spark Connect server (the tests above cover spark-submit under the
    scheduler): a JVM start per task would make this the longest test of the suite."""
    from conftest import STEP, sleep_until, staged_commit_times, write_in_intervals

    # paused while the data is written; unpaused after the backfill is created, since the scheduler runs
    # no task of a paused DAG (its own scheduled runs then take later, empty intervals)
    connect = {"AIRFLOW_CONN_SPARK_DEFAULT": spark_connect.connection_json()}
    with running_standalone(
        mariadb, tmp_path, airflow_env=connect, cut_by="interval", schedule=f"PT{STEP}S"
    ) as (
        server,
        db,
        target,
    ):
        server.cli("dags", "pause", "binlog_cdc")
        base = write_in_intervals(mariadb, f"{db}.items")
        sleep_until(base.add(seconds=3 * STEP + 6))
        server.cli(
            "backfill", "create", "--dag-id", "binlog_cdc", "--run-backwards", "--max-active-runs", "1",
            "--from-date", base.isoformat(), "--to-date", base.add(seconds=2 * STEP).isoformat(),
        )  # fmt: skip
        server.cli("dags", "unpause", "binlog_cdc")

        def backfill_done() -> list[tuple[object, ...]] | None:
            rows = server.query(
                "SELECT state FROM dag_run WHERE dag_id = 'binlog_cdc' AND run_type = 'backfill'"
            )
            return rows if rows and all(state in ("success", "failed") for (state,) in rows) else None

        states = server.wait_for(backfill_done, 600, "the backfill runs")
        assert [state for (state,) in states] == ["success"] * 3, server.tail()
        with pymysql.connect(**mariadb.connection_kwargs()) as conn:
            result = compare_table(conn, str(target), f"{db}.items")
        assert result.matched, str(result)
        state = json.loads(server.cli("variables", "get", f"binlog_state__p_{db}"))
        windows = sorted(
            (w for w in state["windows"] if w["run_id"].startswith("backfill")), key=lambda w: w["seq"]
        )
    assert len(windows) == 3
    assert all(a["end"] == b["start"] for a, b in zip(windows, windows[1:], strict=False))
    assert [w["cut_at"] for w in windows] == sorted((w["cut_at"] for w in windows), reverse=True)
    for window in windows:
        start, end = (pendulum.parse(window[f"data_interval_{side}"]) for side in ("start", "end"))
        assert all(start <= ts < end for ts in staged_commit_times(window["manifest_uri"]))
