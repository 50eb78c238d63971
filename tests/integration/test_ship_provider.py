"""Snapshots on a Spark side whose Python does not have the provider: shipped over Spark Connect and spark-submit.

The Spark workers here run a Python that sees this environment's packages except the provider, its MySQL
drivers and mysql-replication (a wrapper that starts Python without ``site`` and with a folder of links to
every other installed package), with pyspark's own daemon. Only the shipped archive can then give them the
snapshot's code (``airflow_provider_binlog.jobs.shipping``, ADR 0014).
"""

from __future__ import annotations

import json
import os
import site
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("deltalake")

from test_snapshot_first_load import delta_state  # noqa: E402  (pytest's rootdir import)

from airflow_provider_binlog.contract.uris import write_json  # noqa: E402
from airflow_provider_binlog.exceptions import BinlogConfigError  # noqa: E402
from airflow_provider_binlog.hooks.binlog import BinlogHook  # noqa: E402
from airflow_provider_binlog.jobs.shipping import SHIPPED_PACKAGES  # noqa: E402
from airflow_provider_binlog.operators.snapshot import SNAPSHOT_APPLICATION  # noqa: E402
from airflow_provider_binlog.operators.spark import CONNECT_MODE_ENV, SparkJobOperator  # noqa: E402
from airflow_provider_binlog.snapshot.chunks import SOURCE_ENV  # noqa: E402
from airflow_provider_binlog.snapshot.plan import PLAN_NAME  # noqa: E402
from airflow_provider_binlog.testing.mariadb import LocalMariaDB  # noqa: E402
from airflow_provider_binlog.testing.snapshots import write_plan  # noqa: E402
from airflow_provider_binlog.testing.spark_connect import LocalSparkConnect  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.slow]

#: What the bare Python must not find: the shipped packages, and mysqlclient (its C driver, not shipped).
HIDDEN = {*SHIPPED_PACKAGES, "MySQLdb"}
ROWS = 3000
PIPELINE = "shipped"


class SnapshotJob(SparkJobOperator):
    """The snapshot application run as the snapshot operator runs it, without the operator's planning."""

    job_module = "airflow_provider_binlog.jobs.snapshot"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(application=str(SNAPSHOT_APPLICATION), **kwargs)


def bare_python(folder: Path) -> str:
    """Return a Python executable that imports this environment's packages except :data:`HIDDEN`."""
    packages = folder / "site-packages"
    packages.mkdir(parents=True)
    for installed in site.getsitepackages():
        for entry in Path(installed).iterdir():
            if entry.name.split(".")[0].split("-")[0] not in HIDDEN and not (packages / entry.name).exists():
                (packages / entry.name).symlink_to(entry)
    wrapper = folder / "python"
    # -S: no site, so no .pth file (the editable install of the provider) is processed; cd: `python -m`
    # would otherwise find the provider in the working directory (the repository).
    wrapper.write_text(
        f'#!/bin/sh\ncd "{folder}"\n'
        f'PYTHONPATH="{packages}${{PYTHONPATH:+:$PYTHONPATH}}" exec {sys.executable} -S "$@"\n'
    )
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    return str(wrapper)


@pytest.fixture(scope="module")
def bare(tmp_path_factory: pytest.TempPathFactory) -> str:
    python = bare_python(tmp_path_factory.mktemp("bare"))
    for module in HIDDEN:  # the premise: without shipping, the workers cannot import the snapshot's code
        found = subprocess.run(
            [python, "-c", f"import {module}"], capture_output=True, text=True, check=False
        )
        assert "ModuleNotFoundError" in found.stderr, (module, found.stderr)
    subprocess.run([python, "-c", "import pyarrow, pyspark"], check=True)
    return python


@pytest.fixture(scope="module")
def bare_connect(bare: str) -> Iterator[LocalSparkConnect]:
    """A Spark Connect server whose Python workers run :func:`bare_python` under pyspark's own daemon."""
    conf = {"spark.python.daemon.module": "pyspark.daemon", "spark.sql.shuffle.partitions": "4"}
    with LocalSparkConnect(conf=conf, python=bare) as server:
        yield server


@pytest.fixture
def source(connections: LocalMariaDB, source_db: str, tmp_path: Path) -> dict[str, Any]:
    """A table of :data:`ROWS` rows, the snapshot job's environment and a folder for its runs."""
    connections.execute(
        f"CREATE TABLE `{source_db}`.orders (id INT PRIMARY KEY, note VARCHAR(40), total DECIMAL(10,2))",
        f"INSERT INTO `{source_db}`.orders SELECT seq, CONCAT('n', seq), seq / 7 FROM `{source_db}`.seq_1_to_{ROWS}",
    )
    table = f"{source_db}.orders"
    folder = tmp_path / "staging" / PIPELINE / "snapshot=1"
    folder.mkdir(parents=True)
    plan = write_plan(
        connections.connection_kwargs(),
        f"file://{folder}",
        pipeline=PIPELINE,
        keys={table: ["id"]},
        chunk_rows=700,
    )
    env = {SOURCE_ENV: json.dumps(BinlogHook(pipeline=PIPELINE).sql_settings())}
    return {"table": table, "plan": plan, "env": env, "root": tmp_path}


def snapshot_args(source: dict[str, Any], run: str) -> list[str]:
    """Return the job's arguments for a run of the source's one plan with its own staging folder and target.

    Every run reads the same plan (same watermark, same chunks), so their targets must be equal.
    """
    folder = source["root"] / run / PIPELINE / "snapshot=1"
    folder.mkdir(parents=True)
    write_json(f"file://{folder}/{PLAN_NAME}", source["plan"])
    target = str(source["root"] / run / "target")
    return [
        "--snapshot-uri",
        f"file://{folder}",
        "--target",
        target,
        "--pipeline",
        PIPELINE,
        "--max-connections",
        "2",
    ]


def test_snapshots_shipped_over_connect_and_spark_submit_load_identical_targets(
    bare: str, bare_connect: LocalSparkConnect, source: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = r"cannot import 'airflow_provider_binlog'.*ship_provider=True"
    over_connect = snapshot_args(source, "connect")
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", bare_connect.connection_json())
    with pytest.raises(BinlogConfigError, match=missing):
        SnapshotJob(task_id="snapshot").submit({}, over_connect, failure="snapshot failed", env=source["env"])
    SnapshotJob(task_id="snapshot", ship_provider=True).submit(
        {}, over_connect, failure="snapshot failed", env=source["env"]
    )

    over_submit = snapshot_args(source, "submit")
    connect_mode = os.environ.get(CONNECT_MODE_ENV)  # set by the Connect sessions of this process, if any
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": "local[2]"}))
    # The driver runs this interpreter (it makes the Delta commit with deltalake); the executors the bare one.
    python = {"PYSPARK_PYTHON": bare, "PYSPARK_DRIVER_PYTHON": sys.executable}
    with pytest.raises(BinlogConfigError, match=missing):
        SnapshotJob(task_id="snapshot", env_vars=python).submit(
            {}, over_submit, failure="snapshot failed", env=source["env"]
        )
    job = SnapshotJob(task_id="snapshot", ship_provider=True, env_vars=python)
    job.submit({}, over_submit, failure="snapshot failed", env=source["env"])
    assert str(job.py_files).endswith(".zip")
    assert os.environ.get(CONNECT_MODE_ENV) == connect_mode  # the submit left this process as it was

    # Same plan, same rows; only the read time (``_binlog_ts`` of a snapshot row) differs between the runs.
    a, b = (
        delta_state(args[3], source["table"], ["id"], pipeline=PIPELINE)
        for args in (over_connect, over_submit)
    )
    assert a["rows"].drop_columns("_binlog_ts").equals(b["rows"].drop_columns("_binlog_ts"))
    for what in ("schema", "configuration", "partitions", "stats", "apps"):
        assert a[what] == b[what], what
    loaded = a["rows"]
    assert loaded.num_rows == ROWS
    assert loaded.column("id").to_pylist() == list(range(1, ROWS + 1))
    assert loaded.column("note").to_pylist()[-1] == f"n{ROWS}"
