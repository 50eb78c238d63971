"""Read a planned snapshot in parallel Spark tasks, stage it, and merge it into the Delta tables (PySpark app).

Run it with ``spark-submit jobs/snapshot.py --snapshot-uri <staging>/<pipeline>/snapshot=<seq> --target
<target> --pipeline <name> [--max-connections 4] [--target-file-bytes N] [--storage-option KEY=VALUE ...]``; the source's pymysql settings come
in the environment variable ``BINLOG_SNAPSHOT_SOURCE`` (JSON), so the password is on no command line.
The plan (``plan.json``, written by
:class:`~airflow_provider_binlog.operators.snapshot.BinlogSnapshotOperator`) lists every table's key
chunks. Steps:

1. Chunks not read yet (no stats file) are spread over at most ``--max-connections`` Spark tasks, so at
   most that many source connections are open at once; each task reads its chunks one by one
   (:func:`~airflow_provider_binlog.snapshot.chunks.read_chunk`). The driver logs progress (chunks done of
   total, rows, rows/s) every few seconds from the stats files.
2. The manifest is written last, in the window manifest format with ``"kind": "snapshot"``.
3. Tables the target does not hold yet get their files straight from the chunk files, without a shuffle
   (:func:`~airflow_provider_binlog.jobs.first_load.load_first`, ``docs/adr/0026-first-load-without-a-shuffle.md``).
4. The staged snapshot is merged like a window (:func:`~airflow_provider_binlog.jobs.merge.job.merge_window`,
   which replaces each table's rows, see ``apply_window``'s ``refresh_seq``); tables of step 3 are skipped
   there as already merged.

It prints one JSON summary line to stdout and exits non-zero on failure. It needs
``airflow_provider_binlog`` importable by the driver's and executors' Python (true in local mode, where
they run the operator's interpreter; on a cluster, install the provider there or ship it with
``py_files``), but not Airflow.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pyarrow.fs as pafs

from airflow_provider_binlog.contract.columns import OP_SNAPSHOT
from airflow_provider_binlog.contract.history import history_kinds
from airflow_provider_binlog.contract.manifest import (
    SNAPSHOT_KIND,
    Manifest,
    TableEntry,
    read_manifest,
    write_manifest,
)
from airflow_provider_binlog.contract.names import table_of_folder
from airflow_provider_binlog.contract.positions import BinlogPosition
from airflow_provider_binlog.contract.uris import StorageOptions, filesystem_for, join_uri, read_json
from airflow_provider_binlog.jobs.actions import start_detached
from airflow_provider_binlog.jobs.application import (
    Application,
    MergeJobError,
    add_storage_option_argument,
    configure_session,
    job_storage_options,
    run_application,
)
from airflow_provider_binlog.jobs.first_load import load_first
from airflow_provider_binlog.jobs.merge.job import merge_window
from airflow_provider_binlog.snapshot.chunks import SOURCE_ENV, ChunkResult, finished, read_task, refusal
from airflow_provider_binlog.snapshot.plan import PLAN_NAME, TablePlan

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

PROGRESS_SECONDS = 5.0


def load_plan(
    snapshot_uri: str, storage_options: StorageOptions | None = None
) -> tuple[dict[str, Any], list[TablePlan]]:
    """Return the plan document and its table plans.

    :raises MergeJobError: when the snapshot folder has no plan.
    """
    plan = read_json(join_uri(snapshot_uri, PLAN_NAME), storage_options)
    if plan is None:
        raise MergeJobError(f"{join_uri(snapshot_uri, PLAN_NAME)} does not exist: run the snapshot operator")
    return plan, [TablePlan.from_json(t) for t in plan["tables"]]


#: Spark schema of the rows the read job returns (one per chunk).
CHUNK_DONE_SCHEMA = "table_name string, chunk_index long, rows long"


class Progress:
    """Log chunks done of total, rows and rows/s of a snapshot every :data:`PROGRESS_SECONDS` seconds."""

    def __init__(
        self, snapshot_uri: str, tables: list[TablePlan], storage_options: StorageOptions | None = None
    ) -> None:
        self.snapshot_uri = snapshot_uri
        self.storage_options = storage_options
        self.total = sum(len(t.chunks) for t in tables)
        self.seen: dict[tuple[str, int], ChunkResult] = {}
        self.started = time.monotonic()
        self.rows_at_start = 0
        self.logged: tuple[int, int] | None = None
        """(chunks done, rows) of the last line logged."""

    @property
    def rows(self) -> int:
        """Return the rows of the chunks finished so far."""
        return sum(r.rows for r in self.seen.values())

    def scan(self) -> None:
        """Read the stats files of chunks finished since the last scan."""
        fs, root = filesystem_for(self.snapshot_uri, self.storage_options)
        selector = pafs.FileSelector(root, recursive=True, allow_not_found=True)
        for info in fs.get_file_info(selector):
            name = info.base_name
            if not (name.startswith("chunk-") and name.endswith(".json")):
                continue
            table = table_of_folder(info.path.rsplit("/", 2)[-2])
            index = int(name[len("chunk-") : -len(".json")])
            if (table, index) not in self.seen:
                done = finished(self.snapshot_uri, table, index, self.storage_options)
                if done is not None:
                    self.seen[(table, index)] = done

    def log_line(self) -> str:
        """Scan and return the progress line."""
        self.scan()
        rows = self.rows
        elapsed = max(time.monotonic() - self.started, 1e-6)
        rate = (rows - self.rows_at_start) / elapsed
        self.logged = (len(self.seen), rows)
        return f"snapshot progress: {len(self.seen)}/{self.total} chunks, {rows:,} rows, {rate:,.0f} rows/s"

    def final_line(self) -> str | None:
        """Scan and return the last progress line, or None when the last line logged said the same."""
        self.scan()
        return None if self.logged == (len(self.seen), self.rows) else self.log_line()


def read_chunks(
    spark: SparkSession,
    snapshot_uri: str,
    plan: dict[str, Any],
    tables: list[TablePlan],
    source: dict[str, Any],
    *,
    max_connections: int,
    storage_options: StorageOptions | None = None,
) -> tuple[list[ChunkResult], int, dict[str, dict[str, Any]]]:
    """Read every chunk not read yet, at most ``max_connections`` at a time.

    :returns: ``(results of the tables read, tasks used, {"db.table": refusal})``: a table with a refused chunk
        (:func:`~airflow_provider_binlog.snapshot.chunks.refusal`) is left out of the results.
    :raises MergeJobError: when a chunk is still missing after the Spark job (it failed).
    """
    progress = Progress(snapshot_uri, tables, storage_options)
    progress.scan()
    progress.rows_at_start = progress.rows
    pending = [
        (table_index, c)
        for table_index, t in enumerate(tables)
        for c in t.chunks
        if (t.name, c.index) not in progress.seen
        and refusal(snapshot_uri, t.name, c.index, storage_options) is None
    ]
    if progress.seen:
        log.info(
            "resuming snapshot %s: %d of %d chunks were read before",
            plan["seq"],
            len(progress.seen),
            progress.total,
        )
    tasks = min(max_connections, len(pending))
    if pending:
        log.info(
            "reading %d chunks of %d tables in %d Spark tasks (at most %d source connections)",
            len(pending),
            len(tables),
            tasks,
            max_connections,
        )
        read = read_task(
            source, plan["flavor"], snapshot_uri, int(plan["seq"]), storage_options, tables, pending, tasks
        )
        job = spark.range(0, tasks, 1, tasks).mapInArrow(read, CHUNK_DONE_SCHEMA)
        # A deferrable task leaves the chunk reads to the server; run again, this job finds them read.
        start_detached(job, description=f"reading {len(pending)} chunks of snapshot {plan['seq']}")
        failure: list[BaseException] = []

        def run() -> None:
            try:
                job.collect()
            except BaseException as err:  # reported on the driver's main thread below
                failure.append(err)

        worker = threading.Thread(target=run, name="snapshot-read")
        worker.start()
        worker.join(PROGRESS_SECONDS)
        while worker.is_alive():
            log.info(progress.log_line())
            worker.join(PROGRESS_SECONDS)
        if failure:
            raise MergeJobError(
                f"reading the snapshot's chunks failed (a retry resumes after the finished ones): {failure[0]}"
            )
    if (line := progress.final_line()) is not None:
        log.info(line)
    results: list[ChunkResult] = []
    refused: dict[str, dict[str, Any]] = {}
    for table in tables:
        for chunk in table.chunks:
            done = progress.seen.get((table.name, chunk.index))
            if done is not None:
                results.append(done)
            elif (record := refusal(snapshot_uri, table.name, chunk.index, storage_options)) is not None:
                refused.setdefault(table.name, record)
            else:
                raise MergeJobError(f"chunk {chunk.index} of {table.name} was not read")
    for name, record in refused.items():
        log.warning("snapshot %s leaves %s out (it is quarantined): %s", plan["seq"], name, record["error"])
    return [r for r in results if r.table not in refused], tasks, refused


def snapshot_manifest(
    plan: dict[str, Any],
    tables: list[TablePlan],
    results: list[ChunkResult],
    read_seconds: float,
    tasks: int,
    refused: dict[str, dict[str, Any]] | None = None,
) -> Manifest:
    """Return the staged snapshot's manifest (``kind`` :data:`~airflow_provider_binlog.contract.manifest.SNAPSHOT_KIND`).

    :param refused: ``{"db.table": refusal}`` of the tables whose read was refused: they have no entry in
        ``tables`` (the merge leaves them alone) and are listed under ``resnapshots`` with ``cause``
        ``quarantine`` and ``since`` the snapshot's start (where their targets stay).
    """
    refused = refused or {}
    entries: dict[str, TableEntry] = {}
    for table in (t for t in tables if t.name not in refused):
        mine = sorted((r for r in results if r.table == table.name), key=lambda r: r.index)
        rows = sum(r.rows for r in mine)
        entries[table.name] = TableEntry(
            files=tuple(r.file for r in mine),
            rows=rows,
            ops={OP_SNAPSHOT: rows} if rows else {},
            primary_key=tuple(table.key),
            columns=tuple(table.columns),
            zero_dates=sum(r.zero_dates for r in mine),
            chunks=len(mine),
            history=history_kinds((plan.get("history") or {}).get(table.name)),
        )
    marks = sorted((r.watermark for r in results), key=lambda w: w.key)
    rows = sum(r.rows for r in results)
    return Manifest(
        kind=SNAPSHOT_KIND,
        pipeline=plan["pipeline"],
        window=int(plan["seq"]),
        run_id=plan["run_id"],
        start=BinlogPosition.from_dict(plan["start"]),
        tables=entries,
        watermarks={
            "lowest": marks[0] if marks else None,
            "highest": marks[-1] if marks else None,
        },
        resnapshots=[
            {
                "table": name,
                "since": dict(plan["start"]),
                "gtid": None,
                "reason": record["reason"],
                "statement": "",
                "window": int(plan["seq"]),
                "cause": "quarantine",
                "column": record.get("column"),
                "error": record["error"],
                "probe": record.get("probe"),
            }
            for name, record in sorted(refused.items())
        ],
        stats={
            "rows": rows,
            "chunks": len(results),
            "read_tasks": tasks,
            "read_seconds": round(read_seconds, 3),
            "chunk_seconds": round(sum(r.seconds for r in results), 3),
        },
    )


def run_snapshot(
    spark: SparkSession,
    snapshot_uri: str,
    target: str,
    *,
    pipeline: str,
    source: dict[str, Any],
    max_connections: int = 4,
    target_file_bytes: int | None = None,
    storage_options: StorageOptions | None = None,
    first_load: bool = True,
) -> dict[str, Any]:
    """Read (or finish reading) the planned snapshot, write its manifest, merge it; return the summary.

    :param storage_options: storage options of the staging and target stores.
    :param first_load: write the tables the target does not hold yet without the merge
        (:func:`~airflow_provider_binlog.jobs.first_load.load_first`); False merges every table.

    :raises MergeJobError: if the plan is missing or belongs to another pipeline, a chunk fails, or the
        merge fails.
    """
    if max_connections < 1:
        raise MergeJobError(f"max_connections must be >= 1, got {max_connections}")
    configure_session(spark)
    plan, tables = load_plan(snapshot_uri, storage_options)
    if plan["pipeline"] != pipeline:
        raise MergeJobError(
            f"snapshot {snapshot_uri} belongs to pipeline {plan['pipeline']!r}, not {pipeline!r}"
        )
    manifest = read_manifest(snapshot_uri, storage_options)
    if manifest is None:
        started = time.monotonic()
        results, tasks, refused = read_chunks(
            spark,
            snapshot_uri,
            plan,
            tables,
            source,
            max_connections=max_connections,
            storage_options=storage_options,
        )
        manifest = snapshot_manifest(plan, tables, results, time.monotonic() - started, tasks, refused)
        write_manifest(snapshot_uri, manifest, storage_options)
    stats = manifest.stats
    log.info(
        "snapshot %s staged: %s rows in %s chunks, read in %.1f s by %s Spark tasks (%.0f rows/s)",
        plan["seq"],
        stats["rows"],
        stats["chunks"],
        stats["read_seconds"],
        stats["read_tasks"],
        stats["rows"] / max(stats["read_seconds"], 1e-6),
    )
    loaded = {}
    if first_load:
        loaded = load_first(
            spark,
            snapshot_uri,
            manifest,
            target,
            pipeline=pipeline,
            target_file_bytes_default=target_file_bytes,
            storage_options=storage_options,
        )
    summary = merge_window(
        spark,
        snapshot_uri,
        target,
        pipeline=pipeline,
        target_file_bytes=target_file_bytes,
        storage_options=storage_options,
    )
    summary["tables"].update(loaded)
    return {**summary, "snapshot": stats}


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parse the command line of the snapshot application."""
    parser = argparse.ArgumentParser(
        description="Read a planned snapshot and merge it into Delta Lake tables."
    )
    parser.add_argument(
        "--snapshot-uri", required=True, help="snapshot folder <staging>/<pipeline>/snapshot=<seq>"
    )
    parser.add_argument("--target", required=True, help="target root; table db.t is at <target>/db/t")
    parser.add_argument("--pipeline", required=True, help="pipeline name (must match the plan)")
    parser.add_argument(
        "--max-connections", type=int, default=4, help="source connections (read tasks) at most"
    )
    parser.add_argument(
        "--target-file-bytes", type=int, default=None, help="target data file size of tables created now"
    )
    add_storage_option_argument(parser)
    parser.add_argument("--log-level", default="INFO")
    return parser.parse_args(argv)


def application(argv: Sequence[str]) -> Application:
    """Bind the snapshot application to its command line (see :func:`parse_args`).

    The source's connection settings come from the environment variable :data:`SOURCE_ENV` (set for the
    submit process, or in the worker for a Spark Connect run), read when the job runs.

    :param argv: arguments without the program name.
    """
    args = parse_args(argv)

    def job(spark: SparkSession) -> dict[str, Any]:
        source_text = os.environ.get(SOURCE_ENV)
        if not source_text:
            raise MergeJobError(
                f"the environment variable {SOURCE_ENV} with the source's connection settings is not set"
            )
        return run_snapshot(
            spark,
            args.snapshot_uri,
            args.target,
            pipeline=args.pipeline,
            source=json.loads(source_text),
            max_connections=args.max_connections,
            target_file_bytes=args.target_file_bytes,
            storage_options=job_storage_options(args.storage_option),
        )

    return Application(f"binlog-snapshot-{args.pipeline}", args.log_level, job)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the snapshot application under spark-submit; print the JSON summary line; return the exit code."""
    return run_application(application(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    sys.exit(main())
