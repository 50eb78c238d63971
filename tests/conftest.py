"""Shared fixtures: an isolated Airflow home, a private MariaDB with binary logging, connections."""

from __future__ import annotations

import atexit
import base64
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

# Speed lives in benchmarks, never in timed tests: Hypothesis's per-example deadline (200 ms) failed a property
# test on a loaded 2-core machine (299 ms) although the property held.
settings.register_profile("no-deadline", deadline=None)
settings.load_profile("no-deadline")

REPO = Path(__file__).resolve().parent.parent
_AIRFLOW_HOME = Path(tempfile.mkdtemp(prefix="binlog-airflow-home-"))
os.environ["AIRFLOW_HOME"] = str(_AIRFLOW_HOME)
os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
_DAGS = _AIRFLOW_HOME / "dags"
_DAGS.mkdir()
for _dag_file in [*(REPO / "example_dags").glob("*.py"), *(REPO / "tests" / "system" / "dags").glob("*.py")]:
    (_DAGS / _dag_file.name).symlink_to(_dag_file)
os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(_DAGS)
os.environ["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] = f"sqlite:///{_AIRFLOW_HOME / 'airflow.db'}"
os.environ.setdefault("TZ", "UTC")
# One Fernet key for this process and every child it starts (airflow CLI, child DAG runs): Variables
# one process encrypts must decrypt in the others.
os.environ["AIRFLOW__CORE__FERNET_KEY"] = base64.urlsafe_b64encode(os.urandom(32)).decode()
atexit.register(shutil.rmtree, _AIRFLOW_HOME, True)

from airflow_provider_binlog.testing.mariadb import LocalMariaDB  # noqa: E402


@pytest.fixture(scope="session")
def mariadb() -> Iterator[LocalMariaDB]:
    """A private MariaDB with ROW/FULL/metadata FULL binlogs and GTID strict mode."""
    server = LocalMariaDB().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def airflow_db() -> Path:
    """Create the Airflow metadata database (sqlite) of this test session once."""
    subprocess.run(
        [str(Path(sys.executable).parent / "airflow"), "db", "migrate"],
        check=True,
        capture_output=True,
        env=os.environ.copy(),
    )
    return _AIRFLOW_HOME


@pytest.fixture
def connections(mariadb: LocalMariaDB, spark_connect: Any, monkeypatch: pytest.MonkeyPatch) -> LocalMariaDB:
    """Point ``binlog_default`` at the private server and ``spark_default`` at the shared Spark Connect server.

    Merges and snapshots of DAG runs then share one JVM per test process. The spark-submit path keeps
    its own tests (``test_merge.py``, ``test_checkpoint_safety.py``, ``test_under_scheduler.py``), which
    set a ``spark`` connection themselves.
    """
    monkeypatch.setenv("AIRFLOW_CONN_BINLOG_DEFAULT", mariadb.uri())
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", spark_connect.connection_json())
    return mariadb


@pytest.fixture
def source_db(mariadb: LocalMariaDB) -> Iterator[str]:
    """A fresh database on the private server, dropped afterwards."""
    with mariadb.scratch_database("t") as name:
        yield name


@pytest.fixture(scope="session")
def spark_connect() -> Iterator[Any]:
    """A private Spark Connect server (``local[2]``) shared by the tests of this process."""
    from airflow_provider_binlog.testing.spark_connect import LocalSparkConnect

    with LocalSparkConnect(conf={"spark.sql.shuffle.partitions": "4"}) as server:
        yield server


@pytest.fixture(scope="session")
def spark(spark_connect: Any) -> Iterator[Any]:
    """A Spark Connect client session of the shared server, with the settings the merge relies on.

    One JVM per test process serves the in-process merges and the DAG runs' merges and snapshots alike:
    pyspark allows no classic session beside a Connect one in a process (``SESSION_ALREADY_EXIST``), and
    the Airflow task processes of production start none. Snapshot chunks are read in the server's Python
    workers, which run this interpreter (:class:`LocalSparkConnect`).
    """
    from pyspark.sql import SparkSession

    session = SparkSession.builder.remote(spark_connect.url).getOrCreate()
    session.conf.set("spark.sql.session.timeZone", "UTC")
    session.conf.set("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
    yield session
    session.stop()


LONGEST_MODULES = ("test_under_scheduler", "test_guarantees_large", "test_packaging", "test_ddl_sequences")
"""Modules measured as the longest (``--durations`` of CI, a few minutes each), started first."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Order the modules longest first, so that ``-n 2 --dist loadfile`` does not end on one long module.

    With ``--no-loadscope-reorder`` (the Makefile's) xdist hands out modules in collection order as workers free
    up (by default it orders them by their number of tests, which puts one-test modules of minutes last): a long
    module handed out last runs alone while the other worker idles. Order: :data:`LONGEST_MODULES`, then modules with a ``slow`` test, then
    system, integration and unit tests (many short modules fill the end). Tests keep their order within a
    module.
    """
    slow = {item.module.__name__ for item in items if item.get_closest_marker("slow") and item.module}
    tiers = {"system": 0, "integration": 1, "unit": 2}

    def weight(item: pytest.Item) -> tuple[int, int]:
        module = item.module.__name__ if item.module else ""
        if module in LONGEST_MODULES:
            return (0, LONGEST_MODULES.index(module))
        return (1 if module in slow else 2, tiers.get(item.path.parent.name, 3))

    items.sort(key=weight)


class ParseTimeAccess(AssertionError):
    pass


@pytest.fixture
def no_io_at_parse_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make any connection, Variable or database access during parsing fail loudly."""
    import pymysql
    from airflow.sdk import BaseHook, Variable

    def forbidden(*args: object, **kwargs: object) -> None:
        raise ParseTimeAccess(f"parsing touched {args!r}")

    monkeypatch.setattr(BaseHook, "get_connection", classmethod(forbidden))
    monkeypatch.setattr(Variable, "get", staticmethod(forbidden))
    monkeypatch.setattr(pymysql, "connect", forbidden)
