"""Many tables: what one window costs when it changes a few or all of hundreds of selected tables (issue 32).

Runs the example DAG ``binlog_cdc`` (history off) on a private MariaDB and a local Spark Connect server
(local[2]) over a database of ``--tables`` small tables (``id INT PRIMARY KEY, v VARCHAR(20), n INT``, ``--rows``
rows each, 4 by default), selected by the pattern ``many.*``:

1. the first run snapshots every table;
2. a window that changes 10 rows in each of ``--changed`` tables (5 by default);
3. a window that changes 10 rows in every table.

For each run it prints the DAG run's seconds, the seconds of its extract, merge and commit tasks, and the Spark
jobs the run started (read from the server's REST API). Compare ``--tables 500`` with ``--tables 5`` for the cost
of a window that changes 5 tables of a 500-table selection against a 5-table selection; the ratio is what
``docs/benchmarks.md`` quotes (one run each, one machine, back to back).

    .venv/bin/python benchmarks/many_tables.py [--tables 500] [--changed 5] [--rows 4] [--write-docs]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from results_doc import publish, write_docs_argument

REPO = Path(__file__).resolve().parent.parent
DB = "many"


def demo_module() -> Any:
    """Import ``scripts/demo.py``: its environment, DAG loading and task timing helpers."""
    spec = importlib.util.spec_from_file_location("binlog_demo", REPO / "scripts" / "demo.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def spark_jobs(ui_port: int) -> int:
    """Return how many Spark jobs the Connect server's application has started so far."""
    base = f"http://127.0.0.1:{ui_port}/api/v1/applications"
    with urllib.request.urlopen(base, timeout=10) as response:
        app = json.load(response)[0]["id"]
    with urllib.request.urlopen(f"{base}/{app}/jobs", timeout=30) as response:
        return len(json.load(response))


def create_tables(server: Any, count: int, rows: int) -> list[str]:
    """Create ``count`` tables of ``rows`` rows each (ids 1..rows) in database ``many``; return their names."""
    names = [f"t{i:04d}" for i in range(count)]
    server.execute(f"DROP DATABASE IF EXISTS {DB}", f"CREATE DATABASE {DB}")
    statements = []
    for name in names:
        statements.append(f"CREATE TABLE {name} (id INT PRIMARY KEY, v VARCHAR(20), n INT)")
        # MariaDB's Sequence engine: the table seq_1_to_N holds 1..N
        statements.append(f"INSERT INTO {name} SELECT seq, CONCAT('v', seq), seq FROM seq_1_to_{rows}")
    server.execute(*statements, database=DB)
    return names


def change(server: Any, tables: list[str], round_: int, rows: int) -> None:
    """Change 10 rows of each of ``tables`` (of ``rows`` rows), one transaction per table.

    4 updates, 5 inserts above the tables' ids, 1 delete of one of them.
    """
    statements = []
    for name in tables:
        first = rows + 100 * round_
        statements += [
            "BEGIN",
            f"UPDATE {name} SET n = n + 1, v = 'r{round_}' WHERE id <= 4",
            *(f"INSERT INTO {name} VALUES ({first + i}, 'new', {i})" for i in range(5)),
            f"DELETE FROM {name} WHERE id = {first}",
            "COMMIT",
        ]
    server.execute(*statements, database=DB)


def timed_run(demo: Any, dag: Any, number: int, ui_port: int) -> dict[str, float]:
    """Run the DAG once; return its seconds, its tasks' seconds and the Spark jobs it started."""
    jobs = spark_jobs(ui_port)
    result = demo.run_window(dag, number)
    tasks = task_durations(dag.dag_id)
    print(
        f"run {number}: " + ", ".join(f"{task} {seconds:.1f} s" for task, seconds in tasks.items()),
        flush=True,
    )
    return {
        "run": result["seconds"],
        "extract": tasks.get("extract", 0.0),
        "merge": result["merge_seconds"],
        "rows": float(result["rows"]),
        "jobs": float(spark_jobs(ui_port) - jobs),
    }


def task_durations(dag_id: str) -> dict[str, float]:
    """Return the seconds each task of the DAG's newest run took."""
    from airflow.models.dagrun import DagRun
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        run_id = session.scalar(
            select(DagRun.run_id).where(DagRun.dag_id == dag_id).order_by(DagRun.id.desc()).limit(1)
        )
        rows = session.execute(
            select(TaskInstance.task_id, TaskInstance.duration).where(
                TaskInstance.dag_id == dag_id, TaskInstance.run_id == run_id
            )
        ).all()
    return {task: float(duration or 0.0) for task, duration in rows}


def measure(tables: int, changed: int, rows: int, workdir: Path) -> dict[str, dict[str, float]]:
    """Run the three runs over ``tables`` tables of ``rows`` rows; return each run's numbers."""
    demo = demo_module()
    demo.prepare_environment(workdir, "off")
    os.environ["BINLOG_CDC_TABLES"] = f"{DB}.*"
    os.environ["BINLOG_CDC_PIPELINE"] = f"many_{tables}"

    from airflow_provider_binlog.testing.mariadb import LocalMariaDB, free_port
    from airflow_provider_binlog.testing.spark_connect import LocalSparkConnect
    from airflow_provider_binlog.verify import compare_table

    ui_port = free_port()
    server = LocalMariaDB(base_dir=workdir / "mariadb").start()
    conf = {"spark.sql.shuffle.partitions": "4", "spark.ui.enabled": "true", "spark.ui.port": str(ui_port)}
    spark = LocalSparkConnect(conf=conf)
    try:
        os.environ["AIRFLOW_CONN_SPARK_DEFAULT"] = spark.start().connection_json()
        os.environ["AIRFLOW_CONN_BINLOG_DEFAULT"] = server.uri()
        names = create_tables(server, tables, rows)
        dag = demo.load_dag()
        results = {"snapshot": timed_run(demo, dag, 0, ui_port)}
        change(server, names[:changed], 1, rows)
        results[f"{changed} tables changed"] = timed_run(demo, dag, 1, ui_port)
        change(server, names, 2, rows)
        results["every table changed"] = timed_run(demo, dag, 2, ui_port)
        import pymysql

        with pymysql.connect(**server.connection_kwargs()) as conn:
            bad = [
                str(r)
                for r in (compare_table(conn, os.environ["BINLOG_CDC_TARGET"], f"{DB}.{n}") for n in names)
                if not r.matched
            ]
        if bad:
            raise SystemExit(f"{len(bad)} tables differ from their source: {bad[:3]}")
        return results
    finally:
        spark.stop()
        server.stop()


def render(tables: int, rows: int, results: dict[str, dict[str, float]]) -> str:
    lines = [
        f"| run ({tables} tables of {rows} rows selected) | row changes | DAG run (s) | extract task (s) | merge task (s) | Spark jobs |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, r in results.items():
        lines.append(
            f"| {name} | {r['rows']:.0f} | {r['run']:.1f} | {r['extract']:.1f} | {r['merge']:.1f} | {r['jobs']:.0f} |"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", type=int, default=500, help="tables the pipeline selects")
    parser.add_argument("--changed", type=int, default=5, help="tables the second window changes")
    parser.add_argument("--rows", type=int, default=4, help="rows of each table before the first run")
    write_docs_argument(parser)
    args = parser.parse_args()
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="many-tables-") as scratch:
        results = measure(args.tables, args.changed, args.rows, Path(scratch))
    print(f"benchmark took {time.monotonic() - started:.0f} s")
    title = f"Many tables: windows over a {args.tables}-table selection of {args.rows}-row tables"
    key = f"many_tables_{args.tables}" + ("" if args.rows == 4 else f"_rows_{args.rows}")
    publish(key, title, render(args.tables, args.rows, results), write_docs=args.write_docs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
