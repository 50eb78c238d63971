from __future__ import annotations

import contextlib
import importlib.util
import itertools
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pendulum
import pytest

from airflow_provider_binlog.contract.names import qualified_name, table_folder

REPO = Path(__file__).resolve().parents[2]
_LOGICAL_DATES = itertools.count(1)


TASK_SETTINGS = {
    "pipeline": "pipeline",
    "tables": "tables",
    "selection": "selection",
    "staging": "staging_uri",
    "target": "target_path",
    "keys": "keys",
    "keyless_tables": "keyless_tables",
    "write_mode": "write_mode",
    "archive": "archive",
}
"""The operator argument of each pipeline setting (conf key) of the example DAGs."""
SETTINGS_ENV = {
    "pipeline": "BINLOG_CDC_PIPELINE",
    "tables": "BINLOG_CDC_TABLES",
    "selection": "BINLOG_CDC_TABLES",
    "staging": "BINLOG_CDC_STAGING",
    "target": "BINLOG_CDC_TARGET",
    "keys": "BINLOG_CDC_KEYS",
    "keyless_tables": "BINLOG_CDC_KEYLESS_TABLES",
    "write_mode": "BINLOG_CDC_WRITE_MODE",
    "archive": "BINLOG_CDC_ARCHIVE",
}
"""The pipeline settings the example DAGs take from the environment when their file is parsed, never from a
run's configuration (ADR 0034), by the conf key the tests give them under."""


@contextlib.contextmanager
def environment(env: Mapping[str, str]) -> Iterator[None]:
    """Set ``env`` in ``os.environ`` for the block, restoring what was there after."""
    saved = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def load_module(path: Path, env: Mapping[str, str] | None = None) -> Any:
    """Import a DAG file as the test's own module object (dag.test keeps its callbacks).

    :param env: environment variables set while the file is parsed (the example DAGs' settings).
    """
    spec = importlib.util.spec_from_file_location(f"dag_file_{path.stem}", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    with environment(env or {}):
        spec.loader.exec_module(module)
    return module


def load_example_dag(env: Mapping[str, str] | None = None) -> Any:
    return load_module(REPO / "example_dags" / "binlog_cdc.py", env).dag


def settings_env(dag: Any, conf: Mapping[str, Any]) -> dict[str, str]:
    """Return the environment that gives ``dag``'s file the settings of ``conf`` its DAG has no param for.

    A re-snapshot's ``tables`` are a param; its pipeline's selection (``selection``, else every table of the
    databases the tables name, ``db.*``) comes from the environment like the pipeline's other settings.
    """
    env = {
        SETTINGS_ENV[key]: value if isinstance(value, str) else json.dumps(value)
        for key, value in conf.items()
        if key in SETTINGS_ENV and key not in dag.params and key != "selection"
    }
    if "tables" in dag.params and "tables" in conf:
        env[SETTINGS_ENV["selection"]] = _selection(conf)
    return env


def _selection(conf: Mapping[str, Any]) -> str:
    """Return ``conf``'s ``selection``, else every table of the databases its ``tables`` name (``db.*``)."""
    databases = sorted(
        {t.strip().lstrip("!").split(".")[0] for t in str(conf["tables"]).split(",") if t.strip()}
    )
    return str(conf.get("selection") or ",".join(f"{db}.*" for db in databases))


def apply_settings(dag: Any, conf: Mapping[str, Any]) -> None:
    """Give ``dag``'s tasks the settings of ``conf`` its DAG has no param for, as if its file named them.

    What :func:`settings_env` does for a fresh parse, in place: the tests' changes to the DAG object (callbacks,
    task attributes) stay. An argument a task was built without (None, e.g. an interval pipeline's purge-risk
    ``tables``) stays None.
    """
    settings = {k: v for k, v in conf.items() if k in TASK_SETTINGS and k not in dag.params}
    if "tables" in dag.params and "tables" in conf:
        settings["selection"] = _selection(conf)
    for key, value in settings.items():
        for task in dag.tasks:
            if getattr(task, TASK_SETTINGS[key], None) is not None:
                setattr(task, TASK_SETTINGS[key], value)


def stored_state(pipeline: str) -> dict[str, Any] | None:
    """Read the pipeline's state Variable straight from the metadata database."""
    from airflow.models.variable import Variable as VariableRow
    from airflow.utils.session import create_session

    with create_session() as session:
        row = session.query(VariableRow).filter_by(key=f"binlog_state__{pipeline}").one_or_none()
        return None if row is None else json.loads(row.val)


def xcom(run: Any, task_id: str) -> Any:
    """Return the ``return_value`` XCom of task ``task_id`` in DAG run ``run`` (None when it has none)."""
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        query = XComModel.get_many(
            run_id=run.run_id, dag_ids=run.dag_id, task_ids=task_id, key="return_value"
        )
        row = session.scalars(query).first()
        return None if row is None else XComModel.deserialize_value(row)


class DagRunner:
    """Run a DAG with dag.test(), each run at a new logical date.

    ``conf`` holds the run's params and the pipeline's settings (:data:`TASK_SETTINGS`) alike: the settings the
    DAG has no param for are given to its tasks before each run (:func:`apply_settings`; a child process parses
    the file with them in its environment, :func:`settings_env`), as the example DAGs take them from the
    environment, never from a run's configuration (ADR 0034); the rest is the run's configuration.
    """

    def __init__(self, dag: Any, conf: dict[str, Any]) -> None:
        self.dag = dag
        self.conf = conf
        self.env = settings_env(dag, conf)
        self.run_conf = {k: v for k, v in conf.items() if k in dag.params}

    @staticmethod
    def next_dates() -> tuple[pendulum.DateTime, pendulum.DateTime]:
        """Return ``(logical date, run after)`` of a new run; passing them again re-runs that run."""
        logical = pendulum.datetime(2026, 1, 1, tz="UTC").add(minutes=15 * next(_LOGICAL_DATES))
        return logical, pendulum.now("UTC")

    def run(self, dates: tuple[pendulum.DateTime, pendulum.DateTime] | None = None) -> Any:
        """Run a new DAG run, or with ``dates`` clear and re-run the run of those dates (same run id)."""
        logical, run_after = dates or self.next_dates()
        apply_settings(self.dag, self.conf)
        return self.dag.test(logical_date=logical, run_after=run_after, run_conf=self.run_conf)

    def run_in_child(self, dates: tuple[pendulum.DateTime, pendulum.DateTime], kill_at: str) -> int:
        """Run the run of ``dates`` in a child process (own session) that SIGKILLs itself at ``kill_at``.

        :returns: the child's return code (``-9`` when the kill happened).
        """
        return self.start_in_child(dates, kill_at).wait(timeout=900)

    def start_in_child(
        self, dates: tuple[pendulum.DateTime, pendulum.DateTime], kill_at: str = "none"
    ) -> subprocess.Popen[bytes]:
        """Start the run of ``dates`` in a child process (see ``child_run.py``); exit code 0 on success."""
        logical, run_after = dates
        command = [
            sys.executable,
            str(Path(__file__).with_name("child_run.py")),
            "--dag-file",
            str(self.dag.fileloc),
            "--dag-id",
            self.dag.dag_id,
            "--logical-date",
            logical.isoformat(),
            "--run-after",
            run_after.isoformat(),
            "--conf",
            json.dumps(self.conf),
            "--kill-at",
            kill_at,
        ]
        # The child imports the provider of this checkout (a worktree's), not the one installed in the venv.
        path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
        return subprocess.Popen(
            command, start_new_session=True, env={**os.environ, **self.env, "PYTHONPATH": path}
        )


@pytest.fixture
def pipeline_dirs(tmp_path: Path) -> dict[str, str]:
    return {"staging": str(tmp_path / "staging"), "target": str(tmp_path / "target")}


STEP = 10
"""Seconds per data interval in the interval-window tests (``BINLOG_CDC_SCHEDULE=PT10S``)."""


def sleep_until(moment: pendulum.DateTime) -> None:
    time.sleep(max((moment - pendulum.now("UTC")).total_seconds(), 0))


def write_in_intervals(server: Any, table: str) -> pendulum.DateTime:
    """Write three intervals of changes to ``table`` (``id INT PRIMARY KEY, v JSON, ...``), later ones
    overwriting earlier ones so merge order matters; return the start of the first interval."""
    db = table.split(".")[0]
    now = pendulum.now("UTC")
    base = now.start_of("minute").add(seconds=STEP * (now.second // STEP + 1))
    batches = [
        [
            f"INSERT INTO {table} (id, v) SELECT seq, '1' FROM {db}.seq_1_to_100",
            f"INSERT INTO {table} (id, v) VALUES (500, '0')",
        ],
        [
            f"UPDATE {table} SET v = '2' WHERE id <= 50",
            f"DELETE FROM {table} WHERE id BETWEEN 90 AND 100",
            f"INSERT INTO {table} (id, v) SELECT seq, '2' FROM {db}.seq_101_to_150",
        ],
        [
            f"UPDATE {table} SET v = '3' WHERE id <= 10",
            f"UPDATE {table} SET id = 600 WHERE id = 500",
            f"INSERT INTO {table} (id, v) SELECT seq, '3' FROM {db}.seq_151_to_160",
        ],
    ]
    for number, statements in enumerate(batches):
        sleep_until(base.add(seconds=STEP * number + 1))
        server.execute(*statements)
        assert pendulum.now("UTC") < base.add(seconds=STEP * (number + 1)), (
            "the machine is too slow for the test"
        )
    return base


def staged_commit_times(manifest_uri: str) -> list[pendulum.DateTime]:
    """Return the earliest and latest ``_binlog_ts`` of every staged file of a window."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    stamps: list[pendulum.DateTime] = []
    for path in Path(manifest_uri.removeprefix("file://")).rglob("*.parquet"):
        column = pq.read_table(path, columns=["_binlog_ts"])["_binlog_ts"]
        stamps += [pendulum.instance(pc.min(column).as_py()), pendulum.instance(pc.max(column).as_py())]
    return stamps


def mark_run(dag_id: str, run_id: str, state: str) -> None:
    """Set a DAG run's state as the scheduler does for a run whose worker died (or a user marking it)."""
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session

    with create_session() as session:
        session.query(DagRun).filter_by(dag_id=dag_id, run_id=run_id).one().state = state


def delete_run(dag_id: str, run_id: str) -> None:
    """Delete a DAG run (and its task instances), as a user deleting it in the UI."""
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session

    with create_session() as session:
        session.delete(session.query(DagRun).filter_by(dag_id=dag_id, run_id=run_id).one())


def task_states(run: Any) -> dict[str, str]:
    return {ti.task_id: str(ti.state) for ti in run.get_task_instances()}


@pytest.fixture
def scratch_db(connections: Any, airflow_db: object) -> Iterator[str]:
    """A fresh database on the private server for one pipeline, dropped afterwards."""
    with connections.scratch_database("g") as db:
        yield db


class Pipeline:
    """The example DAG over every table of one database of the private server, with checks on each run.

    Guarantee tests subclass it for their own views of staging and the target.
    """

    def __init__(self, server: Any, db: str, dirs: dict[str, str]) -> None:
        self.server = server
        self.db = db
        self.name = f"p_{db}"
        self.staging = Path(dirs["staging"])
        self.target = dirs["target"]
        self.conf = {"pipeline": self.name, "tables": f"{db}.*", **dirs}
        self.dag = load_example_dag()
        self.runner = DagRunner(self.dag, self.conf)
        self.last_run: Any = None

    def connect(self, *, autocommit: bool = True) -> Any:
        import pymysql

        return pymysql.connect(**self.server.connection_kwargs(database=self.db, autocommit=autocommit))

    def sql(self, *statements: str) -> list[tuple[Any, ...]]:
        return list(self.server.execute(*statements, database=self.db))

    def transaction(self, *statements: str) -> None:
        """Run ``statements`` in one explicit transaction and commit it."""
        self.sql("BEGIN", *statements, "COMMIT")

    def head(self) -> dict[str, Any]:
        """Return the source's binlog head as the state stores it (file, pos, GTID position there).

        Waits until the head holds still for 0.3 s: after a rotation MariaDB appends a Binlog_checkpoint
        event to the new file asynchronously, once InnoDB has checkpointed the old one.
        """
        seen, deadline = None, time.monotonic() + 10
        while True:
            file, pos = self.server.execute("SHOW MASTER STATUS")[0][:2]
            if (file, pos) == seen or time.monotonic() > deadline:
                break
            seen = (file, pos)
            time.sleep(0.3)
        gtid = self.server.execute(f"SELECT BINLOG_GTID_POS('{file}', {pos})")[0][0]
        return {"file": file, "pos": int(pos), "gtid_set": gtid}

    def run_window(self, dates: tuple[pendulum.DateTime, pendulum.DateTime] | None = None) -> dict[str, Any]:
        """Run the DAG (a new run, or the run of ``dates``): it must succeed and move the checkpoint to the
        head seen just before the run. Returns the run's window from the ledger."""
        head = self.head()
        run = self.last_run = self.runner.run(dates)
        assert run.state == "success", task_states(run)
        return self.merged_window(head)

    def merged_window(self, head: dict[str, Any]) -> dict[str, Any]:
        """Return the newest window, checked merged, ending at ``head`` and tiling with the ones before."""
        state = stored_state(self.name)
        assert state is not None
        windows = state["windows"]
        window = dict(windows[-1])
        assert window["status"] == "merged"
        assert self.same_boundary(head, window["end"]), (head, window["end"])
        assert state["checkpoint"]["position"] == window["end"]
        assert state["checkpoint"]["window"] == window["seq"]
        assert all(a["end"] == b["start"] for a, b in zip(windows, windows[1:], strict=False)), (
            "gap or overlap"
        )
        return window

    def same_boundary(self, head: dict[str, Any], end: dict[str, Any]) -> bool:
        """Return True when ``end`` is ``head`` or only Binlog_checkpoint events lie between them.

        After a rotation MariaDB appends Binlog_checkpoint events to the new file asynchronously, as InnoDB
        checkpoints the older files (MariaDB KB, "Binlog Event Checkpoint"): a head read a moment later
        can be past them, and no transaction lies in between.
        """
        if end == head:
            return True
        if end["file"] != head["file"] or end["gtid_set"] != head["gtid_set"] or end["pos"] < head["pos"]:
            return False
        events = self.server.execute(f"SHOW BINLOG EVENTS IN '{head['file']}' FROM {int(head['pos'])}")
        between = [e for e in events if int(e[1]) < int(end["pos"])]
        return bool(between) and all(e[2] == "Binlog_checkpoint" for e in between)

    def window_dir(self, window: dict[str, Any]) -> Path:
        return self.staging / self.name / f"window={window['seq']}"

    def manifest(self, window: dict[str, Any]) -> dict[str, Any]:
        return dict(json.loads((self.window_dir(window) / "manifest.json").read_text()))

    def staged_records(
        self, window: dict[str, Any], table: str, columns: list[str] | None = None
    ) -> list[dict[str, Any]]:
        """Return the table's staged change records of the window (chosen columns), in window order."""
        import pyarrow.parquet as pq

        folder = self.window_dir(window) / table_folder(qualified_name(self.db, table))
        if not folder.exists():
            return []
        return sorted(pq.read_table(folder, columns=columns).to_pylist(), key=lambda r: r["_binlog_seq"])

    def mismatches(self, *tables: str) -> list[str]:
        """Compare each table with its target table row by row; return the tables that differ."""
        import pymysql

        from airflow_provider_binlog.verify import compare_table

        with pymysql.connect(**self.server.connection_kwargs()) as conn:
            results = [compare_table(conn, self.target, f"{self.db}.{t}") for t in tables]
        return [str(r) for r in results if not r.matched]


LEAST_PRIVILEGED_USER, LEAST_PRIVILEGED_PASSWORD = "cdc_least", "least-pw"


@pytest.fixture
def least_privileged(connections: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Point ``binlog_default`` at a user with only the grants the connection Test recommends."""
    user = f"'{LEAST_PRIVILEGED_USER}'@'127.0.0.1'"
    connections.execute(
        f"CREATE USER {user} IDENTIFIED BY '{LEAST_PRIVILEGED_PASSWORD}'",
        f"GRANT REPLICATION SLAVE, BINLOG MONITOR, SELECT ON *.* TO {user}",
    )
    monkeypatch.setenv(
        "AIRFLOW_CONN_BINLOG_DEFAULT",
        f"mysql://{LEAST_PRIVILEGED_USER}:{LEAST_PRIVILEGED_PASSWORD}@127.0.0.1:{connections.port}",
    )
    try:
        yield
    finally:
        connections.execute(f"DROP USER {user}")
