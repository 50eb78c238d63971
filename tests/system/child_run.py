"""Run one DAG run with dag.test() in this process and SIGKILL it at a chosen point (fault injection).

Kill points: ``extract`` (after the first Parquet batch of the window is written), ``before_merge``,
``spark`` (the whole process group, Spark included, as soon as the merge job writes its first data
file into the target), ``first_commit`` (the whole process group once the merge job has committed the
window to one table, before the tables after it), ``before_commit``, ``snapshot`` (the whole process
group once the snapshot's Spark tasks have finished 3 chunks), or ``none``. The parent test re-runs the
same run afterwards, or starts the next run. ``hold_merge`` kills nothing: the merge task waits until the
parent creates :data:`RELEASE` beside the staging folder, so the run holds its window while the parent acts.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pendulum

#: The file (beside the staging folder) that lets a ``hold_merge`` run go on.
RELEASE = "release-held-run"


def die(group: bool = False) -> None:
    if group:
        os.killpg(os.getpgid(0), signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)


def kill_in_extract() -> None:
    from airflow_provider_binlog.extract.writer import TableWriter

    original = TableWriter.write

    def write(self: Any, *args: Any, **kwargs: Any) -> Any:
        original(self, *args, **kwargs)
        die()

    TableWriter.write = write  # type: ignore[method-assign]


def kill_at_start(cls: Any) -> None:
    def execute(self: Any, context: Any) -> Any:
        die()

    cls.execute = execute


def kill_during_merge(seen: Callable[[float], bool]) -> None:
    """Kill the whole process group (Spark included) once ``seen(merge start time)`` holds during the merge."""
    from airflow_provider_binlog.operators import BinlogMergeOperator

    original = BinlogMergeOperator.execute

    def watch(started: float) -> None:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            try:
                if seen(started):
                    die(group=True)
            except OSError:  # Spark removes its job folders while they are walked
                pass
            time.sleep(0.02)
        die(group=True)

    def execute(self: Any, context: Any) -> Any:
        threading.Thread(target=watch, args=(time.time(),), daemon=True).start()
        return original(self, context)

    BinlogMergeOperator.execute = execute  # type: ignore[method-assign]


def hold_merge(release: Path) -> None:
    """Make the merge task wait (up to 300 s) until ``release`` exists, then merge as usual."""
    from airflow_provider_binlog.operators import BinlogMergeOperator

    original = BinlogMergeOperator.execute

    def execute(self: Any, context: Any) -> Any:
        deadline = time.monotonic() + 300
        while not release.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        return original(self, context)

    BinlogMergeOperator.execute = execute  # type: ignore[method-assign]


def first_data_file(target: str) -> Callable[[float], bool]:
    """The merge job has written a data file into the target (nothing committed yet)."""
    return lambda started: any(p.stat().st_mtime > started for p in Path(target).rglob("*.parquet"))


def first_window_commit(target: str) -> Callable[[float], bool]:
    """The merge job has committed the window to one table (a Delta commit holding an app transaction)."""
    return lambda started: any(
        p.stat().st_mtime > started and '"txn"' in p.read_text()
        for p in Path(target).glob("*/*/_delta_log/*.json")
    )


def kill_during_snapshot(staging: str, chunks: int = 3) -> None:
    def watch() -> None:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            if len(list(Path(staging).rglob("chunk-*.json"))) >= chunks:
                die(group=True)
            time.sleep(0.02)
        die(group=True)

    threading.Thread(target=watch, daemon=True).start()


def install(kill_at: str, conf: dict[str, Any]) -> None:
    from airflow_provider_binlog.operators import BinlogCommitOperator, BinlogMergeOperator

    if kill_at == "extract":
        kill_in_extract()
    elif kill_at == "before_merge":
        kill_at_start(BinlogMergeOperator)
    elif kill_at == "spark":
        kill_during_merge(first_data_file(conf["target"]))
    elif kill_at == "first_commit":
        kill_during_merge(first_window_commit(conf["target"]))
    elif kill_at == "snapshot":
        kill_during_snapshot(conf["staging"])
    elif kill_at == "before_commit":
        kill_at_start(BinlogCommitOperator)
    elif kill_at == "hold_merge":
        hold_merge(Path(conf["staging"]).parent / RELEASE)
    elif kill_at != "none":
        raise SystemExit(f"unknown kill point {kill_at!r}")


def main() -> None:
    parser = argparse.ArgumentParser()
    for name in ("--dag-file", "--dag-id", "--logical-date", "--run-after", "--conf", "--kill-at"):
        parser.add_argument(name, required=True)
    args = parser.parse_args()
    conf = json.loads(args.conf)
    spec = importlib.util.spec_from_file_location("child_dag_file", args.dag_file)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    dag = next(v for v in vars(module).values() if getattr(v, "dag_id", None) == args.dag_id)
    install(args.kill_at, conf)
    run = dag.test(
        logical_date=pendulum.parse(args.logical_date),
        run_after=pendulum.parse(args.run_after),
        run_conf={k: v for k, v in conf.items() if k in dag.params},
    )
    raise SystemExit(0 if run.state == "success" else 1)


if __name__ == "__main__":
    main()
