"""Spark's Python daemon with the snapshot's task code imported before it forks workers.

Spark starts one Python daemon per worker factory (``python -m pyspark.daemon``) and forks a Python worker
from it for every Python task that finds no idle worker; each new worker then imports ``pyspark.worker``,
pyarrow and the task's code (unpickling the task function imports its module). A Spark Connect server keys
its worker factories by the session's artifact UUID, so every new Connect session, which is every Airflow
task run over Connect, starts a new daemon and new workers that import all of it again
(``docs/adr/0028-snapshot-tasks-with-a-warm-python-daemon.md``).

With ``spark.python.daemon.module=airflow_provider_binlog.jobs.python_daemon`` (a server setting, see
``docs/snapshots.md``), the daemon imports what the snapshot's tasks need (the chunk reader, the first
load's writer, the MySQL drivers, pyarrow, ``pyspark.worker``) once, freezes them out of the garbage
collector's generations (``gc.freeze``: forked children then share those pages instead of copying them
when a collection touches them) and runs pyspark's own daemon, whose forked workers start with all of it
imported. pyarrow is fork-safe in this way: its thread pools and its allocator's background thread are
re-created in the child (Arrow registers at-fork handlers).

Imports nothing from Airflow. Run by Spark as ``python -m airflow_provider_binlog.jobs.python_daemon
pyspark.worker``.
"""

from __future__ import annotations

import contextlib
import gc
import importlib

#: Modules imported before the first fork: what a snapshot read task and a first-load task import.
PRELOADED = (
    "pyspark.worker",
    "pyarrow",
    "pyarrow.compute",
    "pyarrow.parquet",
    "pymysql",
    "_strptime",
    "airflow_provider_binlog.source.connect",
    "airflow_provider_binlog.snapshot.chunks",
    "airflow_provider_binlog.snapshot.first_load",
)
#: Imported when installed: mysqlclient (the snapshot's row reader uses it when present; its connection module
#: is imported at the first connect).
OPTIONAL = ("MySQLdb", "MySQLdb.connections", "MySQLdb.converters", "MySQLdb.cursors")


def preload() -> list[str]:
    """Import :data:`PRELOADED` and the installed :data:`OPTIONAL` modules; return the names imported.

    Then convert one Python value to Arrow: pyarrow sets up its pandas bridge (importing pandas when
    installed) at the first conversion of Python values in a process, which was 0.2 s of a new worker's
    first chunk (the chunk's ``_binlog_*`` columns are built from Python values).

    :raises ImportError: when a module of :data:`PRELOADED` is missing (the provider is not installed in the
        server's Python).
    """
    loaded = []
    for name in PRELOADED:
        importlib.import_module(name)
        loaded.append(name)
    for name in OPTIONAL:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
            loaded.append(name)
    import pyarrow as pa

    pa.array([0])
    return loaded


def main() -> None:
    """Preload, freeze the imported objects out of the collector's generations, run pyspark's daemon."""
    preload()
    gc.collect()
    gc.freeze()
    from pyspark.daemon import manager

    manager()


if __name__ == "__main__":
    main()
