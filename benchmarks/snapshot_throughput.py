"""Snapshot throughput: our chunked snapshot (``run_snapshot`` on local Spark) vs. a plain ``mariadb-dump``.

Both read the same sysbench-like table (``id INT PRIMARY KEY, k INT, c CHAR(120), pad CHAR(60)``) on a
private MariaDB in one run of this script (the machines are shared and noisy: compare ratios within one
run). The table is loaded once with the sequence engine, without binlogging; the buffer pool is large
enough to hold it and the source checksum query warms it before either reader runs.

- **mariadb-dump**: ``--single-transaction --quick --skip-lock-tables --no-create-info`` of the table
  over TCP into a file (what an operator would run for a one-off copy), ``--dump-runs`` times; the
  fastest run is the yardstick;
- **ours**: ``plan_snapshot`` (the key walk that finds chunk bounds), then ``run_snapshot``: chunks
  read by ``--connections`` Spark tasks into zstd Parquet, then written into the Delta table (a first load
  without a merge, ADR 0026). The read phase is the manifest's ``read_seconds``; end to end is plan + read +
  write (the Spark session start is reported apart). ``--spark local`` starts a ``local[2]`` application (the
  snapshot is its first Python job: cold); ``--spark connect`` a local Spark Connect server that runs one
  no-op Python job first, as a long-lived server has (warm), and reports apart what a new session's first
  Python job costs there (the server starts Python workers per session: what each Airflow task pays once).
  ``--spark connect-task`` runs the snapshot in such a new session instead (as an Airflow task does), so its
  read phase includes that start.
  With ``local`` the Spark tasks the application ran come from ``SparkContext.statusTracker()``.

The target is then checked against the source (row count, distinct ids, sums and a CRC32 of every row);
the script exits non-zero when they differ.

    .venv/bin/python benchmarks/snapshot_throughput.py [--rows 1000000] [--connections 2] [--dump-runs 3]
        [--spark local|connect|connect-task] [--write-docs]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path
from typing import Any

from results_doc import write_block

REPO = Path(__file__).resolve().parent.parent
DB, TABLE = "sbtest", "sbtest1"
PIPELINE = "bench"


def load_table(server: Any, rows: int) -> float:
    """Create and fill ``sbtest.sbtest1`` with ``rows`` rows; return the seconds it took."""
    started = time.monotonic()
    server.execute(
        "SET SESSION sql_log_bin = 0",
        f"CREATE DATABASE {DB}",
        f"CREATE TABLE {DB}.{TABLE} (id INT NOT NULL PRIMARY KEY, k INT NOT NULL, "
        "c CHAR(120) NOT NULL, pad CHAR(60) NOT NULL) ENGINE=InnoDB",
        f"INSERT INTO {DB}.{TABLE} SELECT seq, (seq * 2654435761) % 1000000, "
        "SUBSTRING(REPEAT(MD5(seq), 4), 1, 119), SUBSTRING(REPEAT(SHA1(seq), 2), 1, 59) "
        f"FROM {DB}.seq_1_to_{rows}",
        f"ANALYZE TABLE {DB}.{TABLE}",
    )
    return time.monotonic() - started


def source_checksum(server: Any) -> dict[str, int]:
    """Return count, distinct ids, sums and ``BIT_XOR(CRC32(id|k|c|pad))`` of the source table."""
    ((rows, ids, sum_id, sum_k, crc),) = server.execute(
        "SELECT COUNT(*), COUNT(DISTINCT id), SUM(id), SUM(k), "
        f"BIT_XOR(CRC32(CONCAT_WS('|', id, k, c, pad))) FROM {DB}.{TABLE}"
    )
    return {"rows": int(rows), "ids": int(ids), "sum_id": int(sum_id), "sum_k": int(sum_k), "crc": int(crc)}


def target_checksum(target: str) -> dict[str, int]:
    """Return the same figures as :func:`source_checksum` for the live rows of the target table."""
    import pyarrow.compute as pc
    from deltalake import DeltaTable

    from airflow_provider_binlog.contract.columns import DELETED_COLUMN
    from airflow_provider_binlog.contract.uris import table_uri

    # deltalake directly: airflow_provider_binlog.target imports Airflow (which would create ~/airflow).
    data = DeltaTable(table_uri(target, f"{DB}.{TABLE}")).to_pyarrow_table()
    data = data.filter(pc.invert(pc.fill_null(data[DELETED_COLUMN], False)))
    crc = 0
    columns = (data[c].to_pylist() for c in ("id", "k", "c", "pad"))
    for id_, k, c, pad in zip(*columns, strict=True):
        crc ^= zlib.crc32(f"{id_}|{k}|{c}|{pad}".encode())
    return {
        "rows": data.num_rows,
        "ids": int(pc.count_distinct(data["id"]).as_py()),
        "sum_id": int(pc.sum(data["id"]).as_py()),
        "sum_k": int(pc.sum(data["k"]).as_py()),
        "crc": crc,
    }


def run_dump(server: Any, out: Path) -> dict[str, Any]:
    """Dump the table with mariadb-dump over TCP into ``out``; return seconds, rows seen and bytes."""
    from airflow_provider_binlog.testing.mariadb import find_binary

    command = [
        find_binary("mariadb-dump", "mysqldump"),
        "--no-defaults",
        "--protocol=TCP",
        "--host=127.0.0.1",
        f"--port={server.port}",
        "--user=root",
        "--single-transaction",
        "--quick",
        "--skip-lock-tables",
        "--no-create-info",
        f"--result-file={out}",
        DB,
        TABLE,
    ]
    env = {**os.environ, "MYSQL_PWD": server.root_password}  # no password on the command line
    started = time.monotonic()
    subprocess.run(command, check=True, env=env)
    seconds = time.monotonic() - started
    body = out.read_bytes()
    # Extended INSERTs: one "INSERT INTO" per statement, "),(" or "),\n(" between rows (the data has
    # no parentheses).
    rows = body.count(b"INSERT INTO") + body.count(b"),(") + body.count(b"),\n(")
    return {"seconds": seconds, "rows": rows, "bytes": len(body)}


def spark_tasks(spark: Any) -> dict[str, int]:
    """Return the jobs, stages and tasks (completed + failed attempts) the application has run so far."""
    tracker = spark.sparkContext.statusTracker()
    jobs = list(tracker.getJobIdsForGroup(None))
    stages: set[int] = set()
    for job in jobs:
        info = tracker.getJobInfo(job)
        if info is not None:
            stages.update(info.stageIds)
    tasks = ran = 0
    for stage in stages:
        stage_info = tracker.getStageInfo(stage)
        if stage_info is not None and stage_info.numCompletedTasks + stage_info.numFailedTasks:
            ran += 1
            tasks += stage_info.numCompletedTasks + stage_info.numFailedTasks
    return {"jobs": len(jobs), "stages": ran, "tasks": tasks}


def read_again(
    spark: Any, workdir: Path, plan: dict[str, Any], source: dict[str, Any], connections: int, plan_rows: int
) -> float:
    """Read the planned chunks (``plan_rows`` rows) again into another folder; return the seconds it took.

    The first Python job of a Spark application starts its Python workers (measured: a no-op
    ``mapInArrow`` took 3.6 s as the first job of a local[2] session, 0.14 s as the second). This read
    shows the read phase of a snapshot whose Spark application or Spark Connect server already runs
    them. The folder is deleted afterwards; nothing is merged.
    """
    from airflow_provider_binlog.jobs.snapshot import read_chunks
    from airflow_provider_binlog.snapshot.plan import TablePlan

    again = workdir / "staging" / PIPELINE / "snapshot=again"
    again.mkdir(parents=True)
    tables = [TablePlan.from_json(t) for t in plan["tables"]]
    started = time.monotonic()
    results, _, _ = read_chunks(spark, f"file://{again}", plan, tables, source, max_connections=connections)
    seconds = time.monotonic() - started
    shutil.rmtree(again)
    rows = sum(r.rows for r in results)
    if rows != plan_rows:
        raise SystemExit(f"the second read returned {rows} rows, not {plan_rows}")
    return seconds


def local_session() -> tuple[Any, Any]:
    """Start a ``local[2]`` Spark application in this process; return (session, its stop function)."""
    from pyspark.sql import SparkSession

    from airflow_provider_binlog.contract.types import SPARK_SQL_CONF

    os.environ["PYSPARK_PYTHON"] = sys.executable  # Python workers run this interpreter, as the operators do
    builder: Any = SparkSession.builder.master("local[2]").appName("bench-snapshot")
    builder = builder.config("spark.ui.enabled", "false")
    for key, value in SPARK_SQL_CONF.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark, spark.stop


def connect_session(*, task: bool = False) -> tuple[Any, Any, float | None]:
    """Start a local Spark Connect server (``local[2]``) and open a client session; return (session, stop, s).

    A long-lived server has run Python jobs before: one no-op ``mapInArrow`` job starts its Python workers
    before the snapshot (its seconds are logged, not counted). The server keys its Python workers by session,
    so an Airflow task, which opens a session of its own, starts a Python daemon and workers again: the
    seconds of a no-op job as the first of another session on the warm server are returned apart. With
    ``task`` the returned session is a new one that ran no job (as an Airflow task's), and no seconds.
    """
    from pyspark.sql import SparkSession

    from airflow_provider_binlog.contract.types import SPARK_SQL_CONF
    from airflow_provider_binlog.testing.spark_connect import LocalSparkConnect

    server = LocalSparkConnect(cores=2).start()
    spark = SparkSession.builder.remote(server.url).getOrCreate()
    for key, value in SPARK_SQL_CONF.items():
        spark.conf.set(key, value)
    started = time.monotonic()
    spark.range(0, 2, 1, 2).mapInArrow(lambda batches: batches, "id long").collect()
    logging.info("Spark Connect: first Python job (no-op mapInArrow) %.1f s", time.monotonic() - started)
    other = SparkSession.builder.remote(server.url).create()
    if task:
        for key, value in SPARK_SQL_CONF.items():
            other.conf.set(key, value)

        def stop_both() -> None:
            other.stop()
            spark.stop()
            server.stop()

        return other, stop_both, None
    started = time.monotonic()
    other.range(0, 2, 1, 2).mapInArrow(lambda batches: batches, "id long").collect()
    new_session_seconds = time.monotonic() - started
    other.stop()
    logging.info("Spark Connect: a new session's first Python job %.1f s", new_session_seconds)

    def stop() -> None:
        spark.stop()
        server.stop()

    return spark, stop, new_session_seconds


def run_ours(server: Any, workdir: Path, chunk_rows: int, connections: int, mode: str) -> dict[str, Any]:
    """Start Spark (``mode`` ``local`` or ``connect``), plan and run the snapshot; return timings and counts."""
    from airflow_provider_binlog.contract.manifest import MANIFEST_NAME
    from airflow_provider_binlog.jobs.snapshot import run_snapshot
    from airflow_provider_binlog.testing.snapshots import write_plan

    started = time.monotonic()
    new_session_seconds = None
    if mode == "local":
        spark, stop = local_session()
    else:
        spark, stop, new_session_seconds = connect_session(task=mode == "connect-task")
    session_seconds = time.monotonic() - started
    try:
        snapshot_dir = workdir / "staging" / PIPELINE / "snapshot=1"
        snapshot_dir.mkdir(parents=True)
        snapshot_uri = f"file://{snapshot_dir}"  # not Path.as_uri(): Spark would not unquote "%3D"
        target = str(workdir / "target")
        started = time.monotonic()
        plan = write_plan(
            server.connection_kwargs(),
            snapshot_uri,
            pipeline=PIPELINE,
            keys={f"{DB}.{TABLE}": ["id"]},
            run_id="bench",
            chunk_rows=chunk_rows,
        )
        plan_seconds = time.monotonic() - started
        before = spark_tasks(spark) if mode == "local" else None
        started = time.monotonic()
        summary = run_snapshot(
            spark,
            snapshot_uri,
            target,
            pipeline=PIPELINE,
            source=server.connection_kwargs(),
            max_connections=connections,
        )
        run_seconds = time.monotonic() - started
        after = spark_tasks(spark) if mode == "local" else None
        rows = json.loads((snapshot_dir / MANIFEST_NAME).read_text())["stats"]["rows"]
        warm_read_seconds = read_again(spark, workdir, plan, server.connection_kwargs(), connections, rows)
    finally:
        stop()
    manifest = json.loads((snapshot_dir / MANIFEST_NAME).read_text())
    return {
        "session_seconds": session_seconds,
        "new_session_seconds": new_session_seconds,
        "plan_seconds": plan_seconds,
        "run_seconds": run_seconds,
        "warm_read_seconds": warm_read_seconds,
        "stats": manifest["stats"],
        "spark": None
        if after is None or before is None
        else {name: after[name] - before[name] for name in after},
        "summary": summary,
        "target": target,
    }


def render(
    rows: int,
    chunk_rows: int,
    connections: int,
    version: str,
    dump: dict[str, Any],
    dump_runs: int,
    ours: dict[str, Any],
    mode: str,
) -> str:
    stats, spark = ours["stats"], ours["spark"]
    dump_rate = dump["rows"] / dump["seconds"]
    read_rate = stats["rows"] / stats["read_seconds"]
    warm_rate = stats["rows"] / ours["warm_read_seconds"]
    end_to_end = ours["plan_seconds"] + ours["run_seconds"]
    e2e_rate = stats["rows"] / end_to_end
    merge_seconds = ours["run_seconds"] - stats["read_seconds"]
    loaded = next(iter(ours["summary"]["tables"].values()), {}).get("first_load")
    write = "first load" if loaded else "merge"
    lines = [
        "| reader | rows | seconds | rows/s | vs. mariadb-dump |",
        "|---|---:|---:|---:|---:|",
        f"| mariadb-dump (one connection, {dump['bytes'] / 2**20:,.0f} MiB SQL file, fastest of {dump_runs}) | "
        f"{dump['rows']} | "
        f"{dump['seconds']:.1f} | {dump_rate:,.0f} | 1.00x |",
        f"| ours: read phase ({stats['chunks']} chunks, {stats['read_tasks']} Spark tasks) | {stats['rows']} | "
        f"{stats['read_seconds']:.1f} | {read_rate:,.0f} | {read_rate / dump_rate:.2f}x |",
        f"| ours: read phase again (same chunks, same Spark application: its Python workers run) | "
        f"{stats['rows']} | {ours['warm_read_seconds']:.1f} | {warm_rate:,.0f} | {warm_rate / dump_rate:.2f}x |",
        f"| ours: end to end (plan {ours['plan_seconds']:.1f} s + read + {write} {merge_seconds:.1f} s) | "
        f"{stats['rows']} | {end_to_end:.1f} | {e2e_rate:,.0f} | {e2e_rate / dump_rate:.2f}x |",
    ]
    spark_label = {
        "local": "local[2] Spark started by the benchmark (cold: the snapshot is its first Python job)",
        "connect": "a local[2] Spark Connect server that already ran a Python job (warm, as a long-lived server)",
        "connect-task": "a new session (as an Airflow task opens) of a local[2] Spark Connect server that already "
        "ran a Python job in another session: the read phase includes the session's Python worker start",
    }[mode]
    header = (
        f"sysbench-like table, {rows} rows, chunk_rows {chunk_rows}, {connections} connections, "
        f"MariaDB {version}, {spark_label}, one run on {os.cpu_count()} cores ({time.strftime('%Y-%m-%d %H:%M')} "
        f"UTC, 1-minute load average {os.getloadavg()[0]:.1f} at the end)\n\n"
    )
    counted = (
        f"the snapshot ran {spark['tasks']} Spark tasks in {spark['stages']} stages of {spark['jobs']} jobs "
        f"({stats['read_tasks']} of them read the chunks); "
        if spark
        else ""
    )
    new_session = (
        ""
        if ours["new_session_seconds"] is None
        else f"a no-op Python job as the first of another session on the warm server (what an Airflow task's "
        f"session pays once) {ours['new_session_seconds']:.1f} s; "
    )
    footer = (
        f"\n\nSpark: session start {ours['session_seconds']:.1f} s (not in the times above); {new_session}{counted}the chunks' "
        f"own times (connect, watermark, SELECT, Parquet) add up to {stats['chunk_seconds']:.1f} s. Target "
        f"checked: {stats['rows']} rows, distinct ids, sums and CRC32 equal to the source."
    )
    return header + "\n".join(lines) + footer


def write_docs(table: str, mode: str) -> None:
    name = {"local": "snapshot_throughput", "connect": "snapshot_throughput_connect"}.get(
        mode, "snapshot_throughput_connect_task"
    )
    write_block(name, "Snapshot throughput (`benchmarks/snapshot_throughput.py`)", table)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000, help="rows in the table")
    parser.add_argument("--connections", type=int, default=2, help="max_connections (Spark read tasks)")
    parser.add_argument("--chunk-rows", type=int, default=50_000, help="rows per chunk")
    parser.add_argument(
        "--dump-runs", type=int, default=3, help="mariadb-dump runs (the fastest is the yardstick)"
    )
    parser.add_argument(
        "--spark",
        choices=("local", "connect", "connect-task"),
        default="local",
        help="local: a local[2] application started for the run; connect: a local Spark Connect server, warm; "
        "connect-task: a new session of that warm server, as an Airflow task",
    )
    parser.add_argument("--write-docs", action="store_true", help="put the results into docs/benchmarks.md")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("py4j").setLevel(logging.WARNING)

    from airflow_provider_binlog.testing.mariadb import CDC_SETTINGS, LocalMariaDB

    workdir = Path(tempfile.mkdtemp(prefix="binlog-bench-snapshot-"))
    # A buffer pool that holds the whole table: both readers read from memory, not from the disk.
    options = {**CDC_SETTINGS, "innodb-buffer-pool-size": f"{max(1, args.rows * 400 // 2**30 + 1)}G"}
    try:
        with LocalMariaDB(options=options, base_dir=workdir / "mariadb") as server:
            version = str(server.execute("SELECT VERSION()")[0][0]).split("-")[0]
            print(f"loaded {args.rows:,} rows in {load_table(server, args.rows):.1f} s", flush=True)
            expected = source_checksum(server)
            if expected["rows"] != args.rows:
                raise SystemExit(f"the source has {expected['rows']} rows, not {args.rows}")
            # The fastest of several dumps: the machine is noisy, and the best dump is the hardest yardstick.
            dumps = [run_dump(server, workdir / "dump.sql") for _ in range(args.dump_runs)]
            dump = min(dumps, key=lambda d: d["seconds"])
            print(
                f"mariadb-dump: {dump} (fastest of {[round(d['seconds'], 2) for d in dumps]} s)", flush=True
            )
            if dump["rows"] != args.rows:
                raise SystemExit(f"mariadb-dump wrote {dump['rows']} rows, not {args.rows}")
            ours = run_ours(server, workdir, args.chunk_rows, args.connections, args.spark)
            print(f"ours: {json.dumps({k: v for k, v in ours.items() if k != 'summary'}, default=str)}")
        got = target_checksum(ours["target"])
        if got != expected:
            raise SystemExit(f"the target differs from the source: target {got}, source {expected}")
        print(f"target matches the source: {got}")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    table = render(
        args.rows, args.chunk_rows, args.connections, version, dump, args.dump_runs, ours, args.spark
    )
    print(table)
    if args.write_docs:
        write_docs(table, args.spark)
    return 0


if __name__ == "__main__":
    sys.exit(main())
