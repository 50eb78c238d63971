"""Merge scaling: the cost of one window against tables of 1M and 10M rows (key-range layout, ADR 0020).

A sysbench-like table (``id BIGINT PRIMARY KEY, k INT, c CHAR(120), pad CHAR(60)``) is built straight into
the target's layout with Spark ``range()`` (rows sorted by key, split at the target file size, one Delta
commit), then one staged window is merged with ``merge_window`` on local[2] Spark:

- **scaling**: 10,000 changes, 80% inserts of new keys above the table's largest and 20% updates of keys
  among the newest 1%, into the 1M-row and the 10M-row table: wall time of the merge, rows and files
  written. Before ADR 0020 (hash buckets) both windows rewrote the whole table (issue 12: 208k rows written
  into 200k, 2,008k into 2M);
- **random updates**: 10,000 updates of uniformly random keys of the 10M-row table: the files the commit
  removed against the files that held those keys (read from the files themselves), which must be equal.

The rows are checked after each merge (count of live rows, the updated values). The tables are deleted at
the end. Compare the ratio within one run (the machine is shared and noisy).

    .venv/bin/python benchmarks/merge_scaling.py [--sizes 1000000 10000000] [--target-file-mb 128] [--write-docs]
    .venv/bin/python benchmarks/merge_scaling.py --merge-on-read --sizes 10000000 50000000 [--write-docs]

``--merge-on-read`` merges windows with ``write_mode="merge_on_read"`` (ADR 0037) instead: 10,000 uniformly
random updates, 5,000 random updates + 5,000 deletes, and the append-heavy window above, each with its bytes
written against the staged window's bytes and the deletion vector files it added; then full-scan read times
(``read_table``) after 0, 3 and 10 windows and after a compaction.

``--read-cost 1 10 50`` merges 50 windows of 10,000 random updates on read into the first size's table and times
full reads (``read_table``, DuckDB's ``delta_scan``) after 1, 10 and 50 of them and after a compaction, which
runs in its own process so that its peak RSS can be reported.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import logging
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from results_doc import write_block

TABLE = "sbtest.sbtest1"
PIPELINE = "bench"
CHANGES = 10_000
T0 = dt.datetime(2024, 5, 1, tzinfo=dt.timezone.utc)


def staged_schema() -> Any:
    import pyarrow as pa

    from airflow_provider_binlog.contract.columns import CHANGE_FIELDS

    source = pa.schema([("id", pa.int64()), ("k", pa.int32()), ("c", pa.string()), ("pad", pa.string())])
    return source, pa.schema([*source, *CHANGE_FIELDS])


def row(i: int, tag: str = "") -> dict[str, Any]:
    """Return the sysbench-like row of key ``i`` (``tag`` marks a later version of it; as :func:`build_table`)."""
    c = (hashlib.md5(f"{tag}{i}".encode()).hexdigest() * 4)[:119]
    pad = (hashlib.sha1(str(i).encode()).hexdigest() * 2)[:59]
    return {"id": i, "k": (i * 2654435761) % 1_000_000, "c": c, "pad": pad}


def stage(staging: Path, seq: int, changes: list[tuple[str, dict[str, Any]]]) -> str:
    """Write window ``seq`` of ``changes`` in the staging contract format; return its folder."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from airflow_provider_binlog.contract.manifest import WINDOW_KIND, Manifest, TableEntry, write_manifest
    from airflow_provider_binlog.contract.positions import BinlogPosition

    source, schema = staged_schema()
    rows = [
        {**r, "_binlog_op": op, "_binlog_window": seq, "_binlog_seq": n, "_binlog_gtid": f"0-1-{n}",
         "_binlog_file": "mysql-bin.000001", "_binlog_pos": 4 + n, "_binlog_ts": T0}
        for n, (op, r) in enumerate(changes, start=1)
    ]  # fmt: skip
    folder = staging / PIPELINE / f"window={seq}"
    (folder / TABLE).mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), folder / TABLE / "part-0.parquet")
    entry = TableEntry(
        files=(f"{TABLE}/part-0.parquet",),
        rows=len(rows),
        ops={op: sum(1 for o, _ in changes if o == op) for op in "cud"},
        primary_key=("id",),
        columns=tuple({"name": f.name, "mysql_type": "?", "arrow_type": str(f.type)} for f in source),
    )
    manifest = Manifest(
        pipeline=PIPELINE,
        window=seq,
        start=BinlogPosition("mysql-bin.000001", 4),
        end=BinlogPosition("mysql-bin.000001", 4 + len(rows)),
        tables={TABLE: entry},
        kind=WINDOW_KIND,
    )
    write_manifest(str(folder), manifest)
    return str(folder)


def build_table(spark: Any, staging: Path, target: str, rows: int, target_file_bytes: int) -> float:
    """Create the table with window 1 (one row), then replace its rows by ids 1..rows in one commit."""
    from pyspark.sql import functions as F

    from airflow_provider_binlog.contract.delta import delta_arrow_schema, open_table
    from airflow_provider_binlog.contract.uris import table_uri
    from airflow_provider_binlog.jobs.merge.delta import commit_window, current_files
    from airflow_provider_binlog.jobs.merge.files import FileLayout, write_sorted_files
    from airflow_provider_binlog.jobs.merge.job import merge_window
    from airflow_provider_binlog.jobs.merge.layout import SEGMENT_COLUMN, write_partitions
    from airflow_provider_binlog.jobs.merge.transforms import spark_type

    started = time.monotonic()
    merge_window(spark, stage(staging, 1, [("c", row(1))]), target, pipeline=PIPELINE,
                 target_file_bytes=target_file_bytes)  # fmt: skip
    uri = table_uri(target, TABLE)
    dt_ = open_table(uri)
    assert dt_ is not None
    schema = delta_arrow_schema(dt_)
    id_ = F.col("id")
    values = {
        "id": id_,
        "k": F.pmod(id_ * F.lit(2654435761), F.lit(1_000_000)),
        "c": F.substring(F.repeat(F.md5(id_.cast("string")), 4), 1, 119),
        "pad": F.substring(F.repeat(F.sha1(id_.cast("string")), 2), 1, 59),
        "_binlog_op": F.lit("c"),
        "_binlog_window": F.lit(1),
        "_binlog_seq": id_,
        "_binlog_gtid": F.concat(F.lit("0-1-"), id_.cast("string")),
        "_binlog_file": F.lit("mysql-bin.000001"),
        "_binlog_pos": id_ + F.lit(4),
        "_binlog_ts": F.lit(T0),
        "_binlog_deleted": F.lit(False),
    }
    frame = spark.range(1, rows + 1).select(
        *[values[f.name].cast(spark_type(f.type)).alias(f.name) for f in schema]
    )
    rows_per_file = target_file_bytes // 110  # about 110 bytes per row in Parquet (hex strings)
    layout = FileLayout(keys=["id"], stats_columns=["id"], partition={}, rows_per_file=rows_per_file)
    placed = write_sorted_files(
        frame.withColumn(SEGMENT_COLUMN, F.lit(0)), uri, schema, seq=1, layout=layout,
        partitions=write_partitions(rows, rows_per_file),
    )  # fmt: skip
    commit_window(dt_, current_files(dt_, ["id"]), placed, pipeline=PIPELINE, seq=1, custom_metadata={})
    return time.monotonic() - started


def held_by(target: str, keys: set[int]) -> tuple[set[str], int]:
    """Return the current files that hold any of ``keys`` (read from the files) and the file count."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq
    from deltalake import DeltaTable

    from airflow_provider_binlog.contract.uris import table_uri

    uri = table_uri(target, TABLE)
    paths = pa.table(DeltaTable(uri).get_add_actions(flatten=True))["path"].to_pylist()
    wanted = pa.array(sorted(keys), pa.int64())
    holding = {
        p
        for p in paths
        if pc.any(pc.is_in(pq.read_table(f"{uri}/{p}", columns=["id"])["id"], wanted)).as_py()
    }
    return holding, len(paths)


def commit_removed(target: str) -> set[str]:
    """Return the files the table's newest commit removed (its log entry)."""
    from deltalake import DeltaTable

    from airflow_provider_binlog.contract.uris import table_uri

    uri = table_uri(target, TABLE)
    log = Path(uri) / "_delta_log" / f"{DeltaTable(uri).version():020d}.json"
    actions = [json.loads(x) for x in log.read_text().splitlines() if x.strip()]
    return {a["remove"]["path"] for a in actions if "remove" in a}


def check(target: str, rows: int, updated: dict[int, str]) -> None:
    """Check the live row count and the updated rows' values; raise SystemExit on a difference.

    The table is streamed in record batches (deletion vectors applied), so a table of 50M rows is checked in
    bounded memory.
    """
    import pyarrow as pa
    import pyarrow.compute as pc
    from deltalake import DeltaTable

    from airflow_provider_binlog.contract.delta_log import supports_deletion_vectors
    from airflow_provider_binlog.contract.uris import table_uri

    dt = DeltaTable(table_uri(target, TABLE))
    columns = ["id", "c", "_binlog_deleted"]
    batches = (
        pa.RecordBatchReader.from_stream(dt.scan(columns=columns))
        if supports_deletion_vectors(dt)
        else dt.to_pyarrow_dataset().to_batches(columns=columns)
    )
    sample = dict(list(updated.items())[:200])
    wanted = pa.array(list(sample), pa.int64())
    live, got = 0, {}
    plain = pa.schema([("id", pa.int64()), ("c", pa.string()), ("_binlog_deleted", pa.bool_())])
    for scanned in batches:
        batch = pa.Table.from_batches([scanned]).cast(plain)  # the scan gives string_view
        batch = batch.filter(pc.invert(batch.column("_binlog_deleted")))
        live += batch.num_rows
        for r in batch.filter(pc.is_in(batch.column("id"), wanted)).to_pylist():
            got[r["id"]] = r["c"]
    if live != rows:
        raise SystemExit(f"the table holds {live} live rows, not {rows}")
    if got != sample:
        raise SystemExit("updated rows do not hold their new values")


def measure(
    spark: Any, workdir: Path, rows: int, target_file_bytes: int, random_updates: bool
) -> dict[str, Any]:
    """Build a table of ``rows`` rows, merge the scaling window (and the random one); return the numbers."""
    from airflow_provider_binlog.jobs.merge.job import merge_window

    staging, target = workdir / f"staging-{rows}", str(workdir / f"target-{rows}")
    built = build_table(spark, staging, target, rows, target_file_bytes)
    rng = random.Random(rows)
    inserts = [("c", row(i, "v2")) for i in range(rows + 1, rows + 1 + CHANGES * 8 // 10)]
    newest = rng.sample(range(rows - rows // 100 + 1, rows + 1), min(CHANGES * 2 // 10, rows // 100))
    updates = [("u", row(i, "v2")) for i in newest]
    window = stage(staging, 2, inserts + updates)
    started = time.monotonic()
    summary = merge_window(spark, window, target, pipeline=PIPELINE, write_mode="copy_on_write")["tables"][
        TABLE
    ]
    seconds = time.monotonic() - started
    total = rows + len(inserts)
    check(target, total, {r["id"]: r["c"] for _, r in updates + inserts})
    result: dict[str, Any] = {
        "rows": rows, "build_seconds": built, "seconds": seconds, "rows_written": summary["rows_written"],
        "files_removed": summary["files_removed"], "files_added": summary["files_added"],
    }  # fmt: skip
    if random_updates:
        keys = set(rng.sample(range(1, total + 1), min(CHANGES, total // 2)))
        holding, files = held_by(target, keys)
        window = stage(staging, 3, [("u", row(i, "v3")) for i in sorted(keys)])
        started = time.monotonic()
        summary = merge_window(spark, window, target, pipeline=PIPELINE, write_mode="copy_on_write")
        summary = summary["tables"][TABLE]
        result["random"] = {
            "seconds": time.monotonic() - started, "files": files, "holding": len(holding),
            "removed": len(commit_removed(target)), "same_files": commit_removed(target) == holding,
            "rows_written": summary["rows_written"],
        }  # fmt: skip
        check(target, total, {i: row(i, "v3")["c"] for i in keys})
    shutil.rmtree(target, ignore_errors=True)
    shutil.rmtree(staging, ignore_errors=True)
    return result


def last_commit_bytes(target: str) -> dict[str, int]:
    """Return what the table's newest commit added: data files, their bytes, DV files and their bytes."""
    from deltalake import DeltaTable

    from airflow_provider_binlog.contract.deletion_vectors import DeletionVector
    from airflow_provider_binlog.contract.uris import table_uri

    uri = table_uri(target, TABLE)
    log = Path(uri) / "_delta_log" / f"{DeltaTable(uri).version():020d}.json"
    actions = [json.loads(x) for x in log.read_text().splitlines() if x.strip()]
    removed = {a["remove"]["path"] for a in actions if "remove" in a}
    added = [a["add"] for a in actions if "add" in a and a["add"]["path"] not in removed]
    vectors = {
        DeletionVector.from_json(a["add"]["deletionVector"]).file_uri(uri)
        for a in actions
        if "add" in a and a["add"].get("deletionVector")
    }
    return {
        "files_added": len(added),
        "bytes_added": sum(a["size"] for a in added),
        "dv_files": len(vectors),
        "dv_bytes": sum(os.path.getsize(v) for v in vectors),
    }


def timed_merge(spark: Any, window: str, target: str, mode: str) -> dict[str, Any]:
    """Merge one window in ``mode``; return its summary with wall seconds, bytes written and staged bytes."""
    from airflow_provider_binlog.jobs.merge.job import merge_window

    started = time.monotonic()
    summary = merge_window(spark, window, target, pipeline=PIPELINE, write_mode=mode)["tables"][TABLE]
    seconds = time.monotonic() - started
    staged = sum(p.stat().st_size for p in Path(window).rglob("*.parquet"))
    return {**summary, "seconds": seconds, "staged_bytes": staged, **last_commit_bytes(target)}


def full_scan_seconds(target: str) -> float:
    """Return the seconds ``read_table`` takes to read the whole table (live rows, DVs applied)."""
    from airflow_provider_binlog.target import read_table

    started = time.monotonic()
    read_table(target, TABLE)
    return time.monotonic() - started


def measure_merge_on_read(
    spark: Any, workdir: Path, rows: int, target_file_bytes: int, *, read_rows_limit: int
) -> dict[str, Any]:
    """Merge on read into a table of ``rows`` rows: random updates, updates + deletes, the append-heavy window.

    Then the read cost after those windows and after 7 more random-update windows (10 in all), a compaction,
    and the read cost after it, for tables of at most ``read_rows_limit`` rows (``read_table`` holds the
    whole table in memory). The rows are checked after each window (live count, updated values).
    """
    staging, target = workdir / f"staging-mor-{rows}", str(workdir / f"target-mor-{rows}")
    build_table(spark, staging, target, rows, target_file_bytes)
    rng = random.Random(rows + 1)
    seq, live = 1, rows
    reads = rows <= read_rows_limit
    results: dict[str, Any] = {
        "rows": rows,
        "read_seconds": {"0": full_scan_seconds(target) if reads else None},
    }

    def window(name: str, changes: list[tuple[str, dict[str, Any]]], expect_live: int) -> None:
        nonlocal seq
        seq += 1
        results[name] = timed_merge(spark, stage(staging, seq, changes), target, "merge_on_read")
        check(target, expect_live, {r["id"]: r["c"] for op, r in changes if op != "d"})

    keys = rng.sample(range(1, rows + 1), CHANGES)
    window("random_updates", [("u", row(i, "r1")) for i in keys], live)
    keys = rng.sample(range(1, rows + 1), CHANGES)
    mixed = [("u", row(i, "r2")) for i in keys[: CHANGES // 2]] + [
        ("d", row(i)) for i in keys[CHANGES // 2 :]
    ]
    live -= CHANGES // 2
    window("updates_and_deletes", mixed, live)
    inserts = [("c", row(i, "a")) for i in range(rows + 1, rows + 1 + CHANGES * 8 // 10)]
    recent = rng.sample(range(rows - rows // 100 + 1, rows + 1), CHANGES * 2 // 10)
    recent = [i for i in recent if i not in set(keys[CHANGES // 2 :])]
    live += len(inserts)
    window("append_heavy", inserts + [("u", row(i, "a")) for i in recent], live)
    if not reads:
        shutil.rmtree(target, ignore_errors=True)
        shutil.rmtree(staging, ignore_errors=True)
        return results
    results["read_seconds"]["3"] = full_scan_seconds(target)
    gone = set(keys[CHANGES // 2 :])  # an update of a deleted key would bring it back
    for _ in range(7):
        more = [i for i in rng.sample(range(1, rows + 1), CHANGES) if i not in gone]
        window("more", [("u", row(i, f"m{seq}")) for i in more], live)
    results["read_seconds"]["10"] = full_scan_seconds(target)
    from airflow_provider_binlog.contract.uris import table_uri
    from airflow_provider_binlog.maintenance import compact_table

    started = time.monotonic()
    compacted = compact_table(table_uri(target, TABLE))
    results["compaction"] = {"seconds": time.monotonic() - started, **compacted.as_dict()}
    results["read_seconds"]["compacted"] = full_scan_seconds(target)
    check(target, live, {})
    shutil.rmtree(target, ignore_errors=True)
    shutil.rmtree(staging, ignore_errors=True)
    return results


def scan_seconds(target: str) -> dict[str, float | None]:
    """Return the seconds a full read of the table's live rows takes with ``read_table`` and DuckDB.

    DuckDB reads through its ``delta`` extension (``delta_scan``, deletion vectors applied), loaded from the
    ``duckdb-extension-delta`` package of the test extra (:func:`~airflow_provider_binlog.testing.readers.duckdb_delta`);
    None when it is not installed.
    """
    from airflow_provider_binlog.contract.uris import table_uri
    from airflow_provider_binlog.testing.readers import duckdb_delta

    seconds: dict[str, float | None] = {"read_table": full_scan_seconds(target), "duckdb": None}
    con = duckdb_delta()
    if con is None:
        return seconds
    started = time.monotonic()
    query = "SELECT * FROM delta_scan(?) WHERE NOT _binlog_deleted"
    con.execute(query, [table_uri(target, TABLE)]).arrow().read_all()  # a reader: read_all() does the scan
    seconds["duckdb"] = time.monotonic() - started
    con.close()
    return seconds


_PEAK_RSS = (
    "def peak_rss():\n"  # VmHWM: the peak of this process image (ru_maxrss survives exec: it holds the parent's)
    "    line = next(x for x in open('/proc/self/status') if x.startswith('VmHWM:'))\n"
    "    return int(line.split()[1]) * 1024\n"
)


def compaction_in_a_process(target: str) -> dict[str, Any]:
    """Compact the table in a new Python process; return its result, wall seconds and the process's peak RSS.

    For comparison, ``whole_table_peak_rss_bytes`` is the peak RSS of another process that reads the table's
    live rows whole (``delta_log.live_rows``), as the compaction did before it read in key-ordered chunks.
    """
    import subprocess

    from airflow_provider_binlog.contract.uris import table_uri

    uri = table_uri(target, TABLE)
    compact = (
        _PEAK_RSS + "import json, sys\n"
        "from deltalake import DeltaTable\n"
        "from airflow_provider_binlog.maintenance import compact_table\n"
        "DeltaTable(sys.argv[1]).version()\n"
        "before = peak_rss()\n"
        "result = compact_table(sys.argv[1]).as_dict()\n"
        "print(json.dumps({**result, 'rss_before_bytes': before, 'peak_rss_bytes': peak_rss()}))\n"
    )
    whole = (
        _PEAK_RSS + "import sys\n"
        "from deltalake import DeltaTable\n"
        "from airflow_provider_binlog.contract.delta_log import live_rows\n"
        "live_rows(DeltaTable(sys.argv[1]))\n"
        "print(peak_rss())\n"
    )
    read = subprocess.run([sys.executable, "-c", whole, uri], check=True, capture_output=True, text=True)
    started = time.monotonic()
    out = subprocess.run([sys.executable, "-c", compact, uri], check=True, capture_output=True, text=True)
    return {
        **json.loads(out.stdout.splitlines()[-1]),
        "seconds": time.monotonic() - started,
        "whole_table_peak_rss_bytes": int(read.stdout.splitlines()[-1]),
    }


def measure_read_cost(
    spark: Any, workdir: Path, rows: int, target_file_bytes: int, after: list[int]
) -> dict[str, Any]:
    """Merge windows of 10,000 random updates on read; time full reads after ``after`` windows and a compaction.

    Each read is a ``read_table`` and a DuckDB ``delta_scan`` of the live rows (:func:`scan_seconds`); the
    compaction runs in its own process, whose peak RSS is reported against the table's bytes. The rows are
    checked after the last window and after the compaction.
    """
    from airflow_provider_binlog.contract.uris import table_uri

    staging, target = workdir / f"staging-reads-{rows}", str(workdir / f"target-reads-{rows}")
    build_table(spark, staging, target, rows, target_file_bytes)
    rng = random.Random(rows + 3)
    results: dict[str, Any] = {"rows": rows, "reads": {"0": scan_seconds(target)}, "merge_seconds": []}
    updated: dict[int, str] = {}
    for seq in range(2, max(after) + 2):
        changes = [("u", row(i, f"w{seq}")) for i in rng.sample(range(1, rows + 1), CHANGES)]
        merged = timed_merge(spark, stage(staging, seq, changes), target, "merge_on_read")
        results["merge_seconds"].append(merged["seconds"])
        updated.update((r["id"], r["c"]) for _, r in changes)
        shutil.rmtree(staging / f"window={seq}", ignore_errors=True)
        if seq - 1 in after:
            results["reads"][str(seq - 1)] = scan_seconds(target)
    check(target, rows, dict(list(updated.items())[-200:]))
    results["table_bytes"] = sum(p.stat().st_size for p in Path(table_uri(target, TABLE)).rglob("*.parquet"))
    results["compaction"] = compaction_in_a_process(target)
    results["reads"]["compacted"] = scan_seconds(target)
    check(target, rows, dict(list(updated.items())[-200:]))
    shutil.rmtree(target, ignore_errors=True)
    shutil.rmtree(staging, ignore_errors=True)
    return results


def render_read_cost(result: dict[str, Any], target_file_mb: int) -> str:
    reads, merges, comp = result["reads"], result["merge_seconds"], result["compaction"]

    def cell(value: float | None) -> str:
        return "n/a" if value is None else f"{value:.1f}"

    lines = [
        f"local[2] Spark, one run on {os.cpu_count()} cores ({time.strftime('%Y-%m-%d')}); a {result['rows']:,}-row "
        f"table, target file size {target_file_mb} MiB; windows of {CHANGES:,} uniformly random updates merged "
        "on read; full reads of the live rows",
        "",
        "| windows merged on read | read_table s | DuckDB delta_scan s |",
        "|---|---:|---:|",
    ]
    for name, seconds in reads.items():
        label = "after compaction" if name == "compacted" else name
        lines.append(f"| {label} | {cell(seconds['read_table'])} | {cell(seconds['duckdb'])} |")
    ordered = sorted(merges)
    lines += [
        "",
        f"Merges: first {merges[0]:.1f} s, median {ordered[len(ordered) // 2]:.1f} s, last {merges[-1]:.1f} s. "
        f"Compaction: **{comp['seconds']:.1f} s**, {comp['files_removed']} files into {comp['files_added']}, "
        f"peak RSS of its process **{comp['peak_rss_bytes'] / 2**20:,.0f} MiB** "
        f"({comp['rss_before_bytes'] / 2**20:,.0f} MiB of it before compacting: imports and the opened table) for "
        f"a table of {result['table_bytes'] / 2**20:,.0f} MiB of Parquet; a process reading the table's live rows "
        f"whole, as the compaction did before, peaks at {comp['whole_table_peak_rss_bytes'] / 2**20:,.0f} MiB.",
    ]
    return "\n".join(lines)


def measure_break_even(
    spark: Any, workdir: Path, rows: int, target_file_bytes: int, fractions: list[float]
) -> list[dict[str, Any]]:
    """Merge one window of random updates of ``fraction`` of a table's rows in each write mode; return the times.

    The table is built once and copied for each merge, so both modes merge the same window into the same files.
    """
    staging, built = workdir / "staging-even", str(workdir / "target-even")
    build_table(spark, staging, built, rows, target_file_bytes)
    rng = random.Random(rows + 2)
    results = []
    for n, fraction in enumerate(fractions, start=2):
        keys = rng.sample(range(1, rows + 1), int(rows * fraction))
        window = stage(staging, n, [("u", row(i, f"e{n}")) for i in keys])
        result: dict[str, Any] = {"fraction": fraction, "updates": len(keys)}
        for mode in ("copy_on_write", "merge_on_read"):
            target = str(workdir / f"target-even-{mode}")
            shutil.copytree(built, target)
            result[mode] = timed_merge(spark, window, target, mode)
            check(target, rows, {i: row(i, f"e{n}")["c"] for i in keys[:200]})
            shutil.rmtree(target)
        results.append(result)
    shutil.rmtree(built, ignore_errors=True)
    shutil.rmtree(staging, ignore_errors=True)
    return results


def render_break_even(rows: int, results: list[dict[str, Any]]) -> str:
    lines = [
        f"local[2] Spark, one run on {os.cpu_count()} cores ({time.strftime('%Y-%m-%d')}); one window of uniformly "
        f"random updates of a {rows:,}-row table, merged into copies of the same table in each mode",
        "",
        "| updated share of the rows | updates | copy-on-write s | merge-on-read s | MOR / COW |",
        "|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        cow, mor = r["copy_on_write"]["seconds"], r["merge_on_read"]["seconds"]
        lines.append(f"| {r['fraction']:.1%} | {r['updates']:,} | {cow:.1f} | {mor:.1f} | {mor / cow:.2f} |")
    return "\n".join(lines)


def render_merge_on_read(results: list[dict[str, Any]], target_file_mb: int) -> str:
    lines = [
        f"local[2] Spark, one run on {os.cpu_count()} cores ({time.strftime('%Y-%m-%d')}); target file size "
        f"{target_file_mb} MiB; write_mode='merge_on_read'; windows of {CHANGES:,} changes",
        "",
        "| table rows | window | merge s | rows written | bytes written | staged bytes | files added | DV files "
        "(bytes) | rows marked deleted |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        for name in ("random_updates", "updates_and_deletes", "append_heavy"):
            w = r[name]
            lines.append(
                f"| {r['rows']:,} | {name.replace('_', ' ')} | {w['seconds']:.1f} | {w['rows_written']:,} | "
                f"{w['bytes_added']:,} | {w['staged_bytes']:,} | {w['files_added']} | {w['dv_files']} "
                f"({w['dv_bytes']:,}) | {w['rows_deleted']:,} |"
            )
    if len(results) > 1:
        small, large = results[0], results[-1]
        lines += [
            "",
            f"Random updates into {large['rows']:,} rows against {small['rows']:,}: "
            f"**{large['random_updates']['seconds'] / small['random_updates']['seconds']:.2f}x** the time "
            f"({large['rows'] // small['rows']}x the rows); updates and deletes "
            f"{large['updates_and_deletes']['seconds'] / small['updates_and_deletes']['seconds']:.2f}x.",
        ]
    lines += ["", "| table rows | full read s: 0 windows | 3 windows | 10 windows | compacted | compaction s |",
              "|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    for r in results:
        s = r["read_seconds"]
        if s["0"] is None:
            lines.append(
                f"| {r['rows']:,} | not measured (read_table would hold the table in memory) | | | | |"
            )
            continue
        lines.append(
            f"| {r['rows']:,} | {s['0']:.1f} | {s['3']:.1f} | {s['10']:.1f} | {s['compacted']:.1f} | "
            f"{r['compaction']['seconds']:.1f} ({r['compaction']['files_removed']} files into "
            f"{r['compaction']['files_added']}) |"
        )
    return "\n".join(lines)


def render(results: list[dict[str, Any]], target_file_mb: int) -> str:
    small, large = results[0], results[-1]
    lines = [
        f"local[2] Spark, one run on {os.cpu_count()} cores ({time.strftime('%Y-%m-%d')}); target file size "
        f"{target_file_mb} MiB; window of {CHANGES:,} changes (80% inserts above the largest key, 20% updates "
        "among the newest 1% of keys)",
        "",
        "| table rows | merge s | rows written | files removed | files added |",
        "|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        lines.append(
            f"| {r['rows']:,} | {r['seconds']:.1f} | {r['rows_written']:,} | {r['files_removed']} | {r['files_added']} |"
        )
    lines += [
        "",
        f"Time ratio {large['rows'] // small['rows']}x the rows: **{large['seconds'] / small['seconds']:.2f}x** "
        f"(target <= 1.5x); rows written ratio {large['rows_written'] / small['rows_written']:.2f}x.",
    ]
    rnd = large.get("random")
    if rnd:
        lines += [
            "",
            f"{CHANGES:,} uniformly random updates of the {large['rows']:,}-row table ({rnd['files']} files): the "
            f"commit removed **{rnd['removed']}** files; **{rnd['holding']}** files held those keys "
            f"(same files: {rnd['same_files']}); {rnd['rows_written']:,} rows written in {rnd['seconds']:.1f} s.",
        ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000_000, 10_000_000], help="table rows")
    parser.add_argument("--target-file-mb", type=int, default=128, help="target data file size (MiB)")
    parser.add_argument("--write-docs", action="store_true", help="put the results into docs/benchmarks.md")
    parser.add_argument(
        "--merge-on-read", action="store_true", help="measure write_mode='merge_on_read' at each size instead"
    )
    parser.add_argument(
        "--break-even",
        type=float,
        nargs="+",
        metavar="SHARE",
        help="measure both write modes for windows updating these shares of the first size's rows",
    )
    parser.add_argument(
        "--read-cost",
        type=int,
        nargs="+",
        metavar="WINDOWS",
        help="time full reads after these numbers of merge-on-read windows, and a compaction, at the first size",
    )
    parser.add_argument(
        "--read-rows-limit", type=int, default=20_000_000, help="merge-on-read: measure reads up to this size"
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("py4j").setLevel(logging.WARNING)
    from pyspark.sql import SparkSession

    from airflow_provider_binlog.contract.types import SPARK_SQL_CONF

    os.environ["PYSPARK_PYTHON"] = sys.executable
    builder: Any = SparkSession.builder.master("local[2]").appName("bench-merge-scaling")
    builder = builder.config("spark.ui.enabled", "false").config("spark.driver.memory", "3g")
    for key, value in SPARK_SQL_CONF.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    workdir = Path(tempfile.mkdtemp(prefix="binlog-bench-merge-"))
    try:
        target_bytes = args.target_file_mb * 1024 * 1024
        if args.read_cost:
            results = measure_read_cost(spark, workdir, args.sizes[0], target_bytes, args.read_cost)
        elif args.break_even:
            results = measure_break_even(spark, workdir, args.sizes[0], target_bytes, args.break_even)
        elif args.merge_on_read:
            results = [
                measure_merge_on_read(
                    spark, workdir, rows, target_bytes, read_rows_limit=args.read_rows_limit
                )
                for rows in args.sizes
            ]
        else:
            results = [
                measure(spark, workdir, rows, target_bytes, random_updates=n == len(args.sizes) - 1)
                for n, rows in enumerate(args.sizes)
            ]
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
        spark.stop()
    print(json.dumps(results, indent=2, default=str))
    if args.read_cost:
        table = render_read_cost(results, args.target_file_mb)
        block = ("merge_read_cost", "Reads and compaction after merge-on-read windows")
    elif args.break_even:
        table = render_break_even(args.sizes[0], results)
        block = ("merge_break_even", "Copy-on-write against merge-on-read (break-even)")
    elif args.merge_on_read:
        table = render_merge_on_read(results, args.target_file_mb)
        block = ("merge_on_read", "Merge-on-read (deletion vectors, ADR 0037)")
    else:
        table = render(results, args.target_file_mb)
        block = ("merge_scaling", "Merge scaling (key-range layout)")
    print(table)
    if args.write_docs:
        write_block(*block, table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
