"""`make demo`: the example CDC DAG end to end on a private MariaDB under a concurrent write workload.

Starts a private MariaDB with binary logging, creates a small shop schema and loads rows into it,
then starts concurrent writes and runs the ``binlog_cdc`` DAG: its first run takes a snapshot of the
existing rows (key chunks read by Spark while the writes go on) and every run stages and merges one
binlog window (extract -> Spark merge -> commit). At the end it compares every target table with its
source row by row and prints the result and throughput. Everything it started is stopped at the end.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--windows", type=int, default=4, help="windows to run while the workload writes")
    parser.add_argument(
        "--transactions", type=int, default=100_000, help="most transactions the workload writes"
    )
    parser.add_argument(
        "--preload", type=int, default=4_000, help="transactions written before the pipeline starts"
    )
    parser.add_argument("--pause", type=float, default=0.01, help="seconds between workload transactions")
    parser.add_argument(
        "--backlog",
        type=int,
        default=4_000,
        help="transactions written at full speed after the workload stops, then caught up by one window",
    )
    parser.add_argument(
        "--spark",
        choices=("connect", "submit"),
        default="connect",
        help="run merges and snapshots on one local Spark Connect server (default) or spark-submit each",
    )
    parser.add_argument(
        "--history",
        default="changelog,scd2",
        help="history kept beside the tables (BINLOG_CDC_HISTORY): changelog,scd2 (default), changelog, scd2 or off",
    )
    parser.add_argument(
        "--workdir", default=str(REPO / ".work" / "demo"), help="scratch folder (wiped first)"
    )
    return parser.parse_args()


def prepare_environment(workdir: Path, history: str) -> None:
    """Point Airflow at a private home and the pipeline at scratch folders (before importing Airflow)."""
    shutil.rmtree(workdir, ignore_errors=True)
    (workdir / "airflow").mkdir(parents=True)
    os.environ.update(
        {
            "AIRFLOW_HOME": str(workdir / "airflow"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "example_dags"),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{workdir / 'airflow' / 'airflow.db'}",
            "AIRFLOW__LOGGING__LOGGING_LEVEL": "WARNING",
            "BINLOG_CDC_PIPELINE": "shop_demo",
            "BINLOG_CDC_TABLES": "shop.*",
            "BINLOG_CDC_STAGING": str(workdir / "staging"),
            "BINLOG_CDC_TARGET": str(workdir / "target"),
            "BINLOG_CDC_SNAPSHOT_CHUNK_ROWS": "1000",
            "BINLOG_CDC_HISTORY": history,
            "BINLOG_CDC_ARCHIVE": str(workdir / "archive"),
            "AIRFLOW_CONN_SPARK_DEFAULT": '{"conn_type": "spark", "host": "local[2]"}',
            "TZ": "UTC",
        }
    )
    subprocess.run(
        [str(Path(sys.executable).parent / "airflow"), "db", "migrate"], check=True, capture_output=True
    )


def load_dag(name: str = "binlog_cdc"):  # type: ignore[no-untyped-def]
    """Import the example DAG file ``<name>.py`` the way a user's Airflow would parse it."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"{name}_example", REPO / "example_dags" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.dag


def run_window(dag, number: int) -> dict:  # type: ignore[no-untyped-def]
    """Run the DAG once (one window) and return the extract task's XCom, the snapshot's under ``snapshot``."""
    import pendulum

    started = time.monotonic()
    run = dag.test(logical_date=pendulum.datetime(2026, 1, 1, tz="UTC").add(minutes=15 * number))
    if run.state != "success":
        raise SystemExit(f"DAG run {run.run_id} ended {run.state}; see the task logs above")
    extract = task_result(dag, run, "extract")
    extract["snapshot"] = task_result(dag, run, "snapshot")
    extract["seconds"] = time.monotonic() - started
    extract["merge_seconds"] = task_seconds(dag, run, "merge")
    return extract


def run_archive(archiver, number: int) -> dict:  # type: ignore[no-untyped-def]
    """Run the example DAG ``binlog_archive`` once; return its task's XCom."""
    import pendulum

    run = archiver.test(logical_date=pendulum.datetime(2026, 1, 1, tz="UTC").add(minutes=15 * number))
    if run.state != "success":
        raise SystemExit(f"binlog_archive run {run.run_id} ended {run.state}; see the task logs above")
    return task_result(archiver, run, "archive")


def purge_mid_way(server, archiver, number: int) -> dict:  # type: ignore[no-untyped-def]
    """Rotate, let the archive DAG finish the files, and purge them all from the source, unread ones included.

    Returns the archive run's XCom.
    """
    server.execute("FLUSH BINARY LOGS")
    archived = run_archive(archiver, number)
    current = str(server.execute("SHOW MASTER STATUS")[0][0])
    purged = [str(name) for name, *_ in server.execute("SHOW BINARY LOGS") if str(name) < current]
    server.purge_binlogs_to(current)
    files = purged[0] if len(purged) == 1 else f"{len(purged)} binlog files, {purged[0]} to {purged[-1]}"
    print(
        f"demo: the source purged {files}, holding changes the pipeline has not read yet; binlog_archive had "
        "copied it, so the next window reads them from the archive"
    )
    return archived


def task_seconds(dag, run, task_id: str) -> float:  # type: ignore[no-untyped-def]
    """Return the wall seconds a task of the run took (start to end, as Airflow recorded them)."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        duration = session.scalar(
            select(TaskInstance.duration).where(
                TaskInstance.dag_id == dag.dag_id,
                TaskInstance.run_id == run.run_id,
                TaskInstance.task_id == task_id,
            )
        )
    return float(duration or 0.0)


def task_result(dag, run, task_id: str) -> dict:  # type: ignore[no-untyped-def]
    """Return the XCom a task of the run returned (empty when none)."""
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        query = XComModel.get_many(
            run_id=run.run_id, dag_ids=dag.dag_id, task_ids=task_id, key="return_value"
        )
        row = session.scalars(query).first()
        return dict(XComModel.deserialize_value(row)) if row is not None else {}


def print_history(target: str, catch_up: dict | None) -> None:
    """Print the change log of the most changed order created after the snapshot; the catch-up's history bytes."""
    import collections

    import pyarrow.compute as pc

    from airflow_provider_binlog.contract.history import (
        AFTER_COLUMN,
        BEFORE_COLUMN,
        MERGE_WINDOW_COLUMN,
        STATEMENT_COLUMN,
    )
    from airflow_provider_binlog.history import read_changes, verify_history

    changes = read_changes(target, "shop.orders")
    snapshotted = {r["id"] for r in changes.filter(pc.equal(changes.column("_binlog_op"), "r")).to_pylist()}
    counts = collections.Counter(i for i in changes.column("id").to_pylist() if i not in snapshotted)
    busiest, _ = (counts or collections.Counter(changes.column("id").to_pylist())).most_common(1)[0]
    rows = read_changes(target, "shop.orders", key={"id": busiest}).to_pylist()
    print(f"\nhistory of shop.orders id={busiest}, in order ({len(rows)} changes; docs/history.md):")
    names = {"c": "insert", "u": "update", "d": "delete", "r": "snapshot read", "t": "truncate"}
    images = [i for r in rows for i in (r[BEFORE_COLUMN], r[AFTER_COLUMN]) if i]
    varying = [k for k in images[0] if len({repr(i.get(k)) for i in images}) > 1] or ["id"]
    for row in rows[:8]:
        before, after = row[BEFORE_COLUMN], row[AFTER_COLUMN]
        if after is None:
            what = "row deleted"
        elif before is None:
            what = ", ".join(f"{k}={after[k]}" for k in varying)
        else:
            what = ", ".join(f"{k}: {before[k]} -> {after[k]}" for k in varying if before[k] != after[k])
        gtid = row["_binlog_gtid"] or "-"
        print(f"  {row['_binlog_ts']:%H:%M:%S.%f}  {names[row['_binlog_op']]:<13}  gtid {gtid:<10}  {what}")
        statement = " ".join((row[STATEMENT_COLUMN] or "").split())
        if statement:
            print(f"  {'':<15}  by: {statement[:90]}{'...' if len(statement) > 90 else ''}")
    report = verify_history(target, "shop.orders")
    print(f"  {report}")
    if catch_up is not None:
        added = [p for p in Path(target, "shop").glob(f"*~*/w{catch_up['window']}-*.parquet")]
        logged = pc.sum(pc.equal(changes.column(MERGE_WINDOW_COLUMN), catch_up["window"])).as_py() or 0
        print(
            f"  the catch-up window wrote {sum(p.stat().st_size for p in added)} bytes in {len(added)} files into the "
            f"history tables ({logged} change-log rows of shop.orders)"
        )


def main() -> int:
    args = parse_args()
    workdir = Path(args.workdir)
    prepare_environment(workdir, args.history)

    import pymysql

    from airflow_provider_binlog.testing.mariadb import LocalMariaDB
    from airflow_provider_binlog.testing.spark_connect import LocalSparkConnect
    from airflow_provider_binlog.testing.workload import SHOP_TABLES, ShopWorkload, create_shop_schema
    from airflow_provider_binlog.verify import compare_table

    server = LocalMariaDB(base_dir=workdir / "mariadb").start()
    spark = LocalSparkConnect(conf={"spark.sql.shuffle.partitions": "4"}) if args.spark == "connect" else None
    try:
        if spark is not None:
            started = time.monotonic()
            os.environ["AIRFLOW_CONN_SPARK_DEFAULT"] = spark.start().connection_json()
            print(
                f"demo: Spark Connect server (local[2]) on {spark.url}, started in {time.monotonic() - started:.1f} s"
            )
        else:
            print("demo: every merge and snapshot is a spark-submit (a JVM start each)")
        os.environ["AIRFLOW_CONN_BINLOG_DEFAULT"] = server.uri()
        connect = lambda: pymysql.connect(**server.connection_kwargs(autocommit=False))  # noqa: E731
        with pymysql.connect(**server.connection_kwargs()) as conn:
            create_shop_schema(conn, "shop")
        print(
            f"demo: MariaDB on 127.0.0.1:{server.port} (binlog ROW/FULL/metadata FULL), schema shop created"
        )
        preloaded = ShopWorkload(connect=connect, db="shop", seed=1).run(args.preload)
        existing = {t: int(server.execute(f"SELECT COUNT(*) FROM shop.{t}")[0][0]) for t in SHOP_TABLES}
        print(f"demo: loaded {sum(preloaded.values())} transactions before the pipeline exists: {existing}")
        dag = load_dag()
        archiver = load_dag("binlog_archive")
        workload = ShopWorkload(connect=connect, db="shop", first_number=1_000_000)
        workload.start(args.transactions, pause_seconds=args.pause)
        results = [run_window(dag, 0)]
        snapshot = results[0]["snapshot"]
        print(
            f"demo: run 1 took snapshot {snapshot['snapshot']} of {len(snapshot['tables'])} tables "
            f"({snapshot['rows']} rows in {snapshot['chunks']} key chunks read by {snapshot['read_tasks']} Spark "
            f"tasks at {snapshot['read_rows_per_second']:.0f} rows/s while the writes went on), then window "
            f"{results[0]['window']}: {results[0]['rows']} row changes"
        )
        archived = [run_archive(archiver, 0)]
        for number in range(1, args.windows + 1):
            if number == args.windows // 2 + 1:
                archived.append(purge_mid_way(server, archiver, 100 + number))
            results.append(run_window(dag, number))
            archived.append(run_archive(archiver, number))
            print(
                f"demo: run {number + 1} (window {results[-1]['window']}): {results[-1]['rows']} row changes while writes continue"
            )
        counts = workload.stop()
        results.append(run_window(dag, args.windows + 1))
        print(
            f"demo: final run (window {results[-1]['window']}): {results[-1]['rows']} row changes after writes stopped"
        )
        print(f"demo: workload wrote {sum(counts.values())} transactions: {dict(sorted(counts.items()))}")
        print(
            f"demo: binlog_archive ran {len(archived)} times beside the pipeline: "
            f"binlog files finished: {sum(len(a['finished']) for a in archived)}, bytes copied: "
            f"{sum(a['copied_bytes'] for a in archived)} (docs/archive.md)"
        )
        catch_up = None
        if args.backlog:
            # The windows above stage what the workload wrote meanwhile, so their changes/s is its write rate;
            # a backlog written before a run measures how fast one run catches up.
            ShopWorkload(connect=connect, db="shop", seed=2, first_number=2_000_000).run(args.backlog)
            catch_up = run_window(dag, args.windows + 2)
            results.append(catch_up)
            print(
                f"demo: catch-up run (window {catch_up['window']}): a backlog of {args.backlog} transactions, "
                f"{catch_up['rows']} row changes in {catch_up['seconds']:.1f} s ({catch_up['rows'] / catch_up['seconds']:.0f} "
                f"row changes/s), its merge task {catch_up['merge_seconds']:.1f} s"
            )
        with pymysql.connect(**server.connection_kwargs()) as conn:
            comparisons = [
                compare_table(conn, os.environ["BINLOG_CDC_TARGET"], f"shop.{t}") for t in SHOP_TABLES
            ]
        rows = sum(r["rows"] for r in results)
        seconds = sum(r["seconds"] for r in results)
        read_seconds = sum(r["read_seconds"] for r in results)
        print("\nverification (source vs. target, row by row):")
        for comparison in comparisons:
            print(f"  {comparison}")
        later = results[1:-1] if catch_up else results[1:]  # the first run also takes the snapshot
        print(
            f"a window's DAG run: median {statistics.median(r['seconds'] for r in later):.1f} s, its merge task "
            f"median {statistics.median(r['merge_seconds'] for r in later):.1f} s ({args.spark} mode, runs 2-{len(later) + 1})"
        )
        print(
            f"throughput: {rows} row changes in {len(results)} windows, {seconds:.1f} s of DAG runs "
            f"({rows / seconds:.0f} row changes/s end to end, {args.spark} mode); binlog read + Parquet "
            f"staging {read_seconds:.1f} s ({rows / max(read_seconds, 1e-9):.0f} row changes/s)"
        )
        if "changelog" in args.history:
            print_history(os.environ["BINLOG_CDC_TARGET"], catch_up)
        ok = all(c.matched for c in comparisons)
        print("RESULT: every table matches its source" if ok else "RESULT: MISMATCH")
        return 0 if ok else 1
    finally:
        if spark is not None:
            spark.stop()
        server.stop(remove=False)


if __name__ == "__main__":
    sys.exit(main())
