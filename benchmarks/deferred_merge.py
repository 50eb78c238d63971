"""Deferred merge: worker-slot seconds and wall time of one window, merged in the worker or deferred (ADR 0024).

A sysbench-like table of ``--rows`` rows is built once (as in ``merge_scaling.py``) on a private local[2] Spark
Connect server and copied, then the same staged window (``--changes`` inserts of new keys) is merged into each
copy by ``BinlogMergeOperator`` over Spark Connect:

- **in the worker** (``deferrable=False``): ``execute`` holds the worker slot for the whole merge;
- **deferred** (``deferrable=True``): ``execute`` submits the write and defers, the trigger
  (``SparkConnectOperationTrigger``, run here in line as ``dag.test()`` does) watches it, ``execute_complete``
  re-plans and commits. Worker-slot seconds are the time spent in ``execute``/``execute_complete``; the
  trigger's time is reported apart.

A first merge into a third copy warms the server up and is not measured. Both targets are checked to hold the
same rows. Compare the numbers within one run (shared, noisy machine).

    .venv/bin/python benchmarks/deferred_merge.py [--rows 1000000] [--changes 200000] [--write-docs]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from merge_scaling import PIPELINE, TABLE, build_table, row, stage
from results_doc import publish, write_docs_argument


def run_trigger(trigger: Any) -> dict[str, Any]:
    """Run a trigger to its one event, as the triggerer (or ``dag.test()``) does; return the payload."""

    async def first() -> dict[str, Any]:
        async for event in trigger.run():
            return dict(event.payload)
        raise RuntimeError("the trigger ended without an event")

    return asyncio.run(first())


def merge(window: str, target: str, *, deferrable: bool) -> dict[str, Any]:
    """Merge ``window`` with the operator; return worker-slot seconds, trigger seconds, wall time, deferrals."""
    from airflow.sdk.exceptions import TaskDeferred

    from airflow_provider_binlog.operators.merge import BinlogMergeOperator

    operator = BinlogMergeOperator(
        task_id="merge",
        pipeline=PIPELINE,
        window_uri=window,
        target_path=target,
        deferrable=deferrable,
        defer_after_seconds=0,  # measure the deferral itself, not the watch before it
    )
    worker = triggered = 0.0
    deferrals = 0
    started = time.monotonic()
    step: Any = lambda: operator.execute(context={})  # noqa: E731
    while True:
        begun = time.monotonic()
        try:
            result = step()
            worker += time.monotonic() - begun
            break
        except TaskDeferred as deferred:
            worker += time.monotonic() - begun
            deferrals += 1
            begun = time.monotonic()
            event = run_trigger(deferred.trigger)
            triggered += time.monotonic() - begun
            step = lambda d=deferred, e=event: getattr(operator, d.method_name)(context={}, event=e)  # noqa: E731
    return {
        "worker_seconds": worker,
        "trigger_seconds": triggered,
        "wall_seconds": time.monotonic() - started,
        "deferrals": deferrals,
        "rows_written": result["tables"][TABLE]["rows_written"],
    }


def render(rows: int, changes: int, results: dict[str, dict[str, Any]], load: tuple[float, ...]) -> str:
    """Return the Markdown table of one run."""
    lines = [
        f"One window of {changes:,} inserts into a {rows:,}-row table over a local[2] Spark Connect server "
        f"(load average at the start {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f}, 2 cores).",
        "",
        "| merge | worker-slot seconds | trigger seconds | wall seconds | deferrals | rows written |",
        "|---|---|---|---|---|---|",
    ]
    for name, r in results.items():
        lines.append(
            f"| {name} | {r['worker_seconds']:.1f} | {r['trigger_seconds']:.1f} | {r['wall_seconds']:.1f} "
            f"| {r['deferrals']} | {r['rows_written']:,} |"
        )
    worker, deferred = results["in the worker"], results["deferred"]
    lines += [
        "",
        f"Deferred, the task held a worker slot {deferred['worker_seconds'] / worker['worker_seconds']:.2f}x as "
        f"long as in the worker, and the merge took {deferred['wall_seconds'] / worker['wall_seconds']:.2f}x the "
        "wall time (the resumed task re-plans: reads the Delta log and the staged window again).",
    ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000, help="table rows")
    parser.add_argument("--changes", type=int, default=200_000, help="inserts in the window")
    write_docs_argument(parser)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from pyspark.sql import SparkSession

    from airflow_provider_binlog.contract.types import SPARK_SQL_CONF
    from airflow_provider_binlog.target import read_table
    from airflow_provider_binlog.testing.spark_connect import LocalSparkConnect

    load = os.getloadavg()
    workdir = Path(tempfile.mkdtemp(prefix="binlog-bench-deferred-"))
    try:
        with LocalSparkConnect(cores=2, conf={"spark.driver.memory": "3g"}) as server:
            os.environ["AIRFLOW_CONN_SPARK_DEFAULT"] = server.connection_json()
            spark = SparkSession.builder.remote(server.url).create()
            for key, value in SPARK_SQL_CONF.items():
                spark.conf.set(key, value)
            built = workdir / "built"
            build_table(spark, workdir / "staging", str(built), args.rows, 128 * 1024 * 1024)
            spark.stop()
            window = stage(
                workdir / "staging",
                2,
                [("c", row(i, "v2")) for i in range(args.rows + 1, args.rows + 1 + args.changes)],
            )
            results = {}
            warm_up = (
                workdir / "warm-up"
            )  # the server's first merge pays for JIT and code generation: not measured
            shutil.copytree(built, warm_up)
            merge(window, str(warm_up), deferrable=False)
            for name, deferrable in (("in the worker", False), ("deferred", True)):
                target = workdir / name.replace(" ", "-")
                shutil.copytree(built, target)
                results[name] = merge(window, str(target), deferrable=deferrable)
            tables = [read_table(str(workdir / n.replace(" ", "-")), TABLE).sort_by("id") for n in results]
            if not tables[0].equals(tables[1]):
                raise AssertionError("the deferred merge and the merge in the worker wrote different rows")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(json.dumps(results, indent=2))
    table = render(args.rows, args.changes, results, load)
    publish("deferred_merge", "Deferred merge (ADR 0024)", table, write_docs=args.write_docs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
