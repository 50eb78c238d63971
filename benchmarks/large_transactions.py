"""Large transactions: the extract's peak RSS and time for one transaction of 100k, 1M and 5M rows (issue 32).

A private MariaDB (binlog ROW, full images) holds ``big (id INT PRIMARY KEY, grp INT, pad VARCHAR(300))``. For
each size the benchmark writes one transaction inserting that many rows, then one transaction updating every one
of them (before and after images: twice the bytes), and extracts each as its own window in a child process
(``extract_window``, serial reader, the default spill threshold), which reports its peak RSS (``VmHWM``) and
its seconds. Every window must stage exactly the transaction's rows. The transactions' binlog bytes are reported
too. Compare the peaks within one run: the target is **flat, at most 512 MiB** whatever the size.

With ``--merge`` each window is then merged into a Delta target by the merge job (``merge_window``, write mode
``auto``) in another child process, a Spark Connect client of a local server (local[2], 4 shuffle partitions, the
JVM's default 1 GiB heap: the tests' settings), which reports its seconds and its peak RSS: the merge job's driver
collects nothing that grows with the window, so this peak is flat too. The server JVM's peak RSS (``VmHWM``, since
its start) is reported beside it. After each size's update window the target is compared with the source row by
row.

    .venv/bin/python benchmarks/large_transactions.py [--sizes 100000 1000000 5000000] [--merge] [--write-docs]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from results_doc import publish, write_docs_argument

PAD_CHARS = 300
DB = "bench"


def child(spec: dict[str, Any]) -> None:
    """Extract one window (``spec``: start, end, staging) and print its manifest numbers and peak RSS."""
    import pyarrow.parquet as pq

    from airflow_provider_binlog.contract.names import table_folder
    from airflow_provider_binlog.contract.positions import BinlogPosition
    from airflow_provider_binlog.extract.reader import TableTarget
    from airflow_provider_binlog.extract.window import extract_window
    from airflow_provider_binlog.hooks.binlog import BinlogHook
    from airflow_provider_binlog.pipeline.ledger import Window, now_iso
    from airflow_provider_binlog.pipeline.staging import window_path

    hook = BinlogHook(pipeline="bench")
    server = hook.server_state()
    window = Window(
        seq=spec["seq"],
        start=BinlogPosition.from_dict(spec["start"]),
        end=BinlogPosition.from_dict(spec["end"]),
        run_id="bench",
        cut_at=now_iso(),
    )
    started = time.monotonic()
    manifest = extract_window(
        hook,
        pipeline="bench",
        window=window,
        tables={f"{DB}.big": TableTarget(f"{DB}.big", ["id"])},
        window_dir=window_path(spec["staging"], "bench", spec["seq"]),
        server=server,
    )
    seconds = time.monotonic() - started
    folder = Path(spec["staging"]) / "bench" / f"window={spec['seq']}" / table_folder(f"{DB}.big")
    staged = sum(pq.read_metadata(p).num_rows for p in folder.glob("*.parquet"))
    print(
        json.dumps(
            {
                "rows": manifest.tables[f"{DB}.big"].rows,
                "staged": staged,
                "seconds": seconds,
                "peak_kib": peak_kib(),
            }
        )
    )


def merge_child(spec: dict[str, Any]) -> None:
    """Merge one staged window (``spec``: url, window, target) and print its seconds, engine and peak RSS."""
    from pyspark.sql import SparkSession

    from airflow_provider_binlog.jobs.merge.job import merge_window

    spark = SparkSession.builder.remote(spec["url"]).getOrCreate()
    started = time.monotonic()
    summary = merge_window(spark, spec["window"], spec["target"], pipeline="bench")
    seconds = time.monotonic() - started
    table = summary["tables"][f"{DB}.big"]
    print(
        json.dumps(
            {
                "merge_seconds": seconds,
                "engine": table["engine"],
                "write_mode": table["write_mode"],
                "merge_peak_kib": peak_kib(),
            }
        )
    )


def peak_kib(pid: int | str = "self") -> int:
    """Return a process's peak resident set (``VmHWM`` of ``/proc/<pid>/status``) in KiB.

    Not ``ru_maxrss``: Linux carries it over from the parent's memory at the fork and across ``execve``
    (``exec_mmap`` keeps the old image's high-water mark), so a child of a large parent would report the parent's
    size; ``VmHWM`` is the high-water mark of the process's own image since its ``execve``.
    """
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmHWM in /proc/{pid}/status")


def head(server: Any) -> dict[str, Any]:
    from airflow_provider_binlog.hooks.binlog import BinlogHook

    position = BinlogHook(pipeline="bench").server_state().head
    assert position is not None
    return position.to_dict()


def in_child(option: str, spec: dict[str, Any]) -> dict[str, Any]:
    """Run this script with ``option spec`` in a fresh interpreter; return the JSON it printed last."""
    result = subprocess.run(
        [sys.executable, __file__, option, json.dumps(spec)], check=True, capture_output=True, text=True
    )
    return dict(json.loads(result.stdout.strip().splitlines()[-1]))


def extract(seq: int, start: dict[str, Any], end: dict[str, Any], staging: Path) -> dict[str, Any]:
    """Run :func:`child` in a fresh interpreter; return what it printed."""
    return in_child("--child", {"seq": seq, "start": start, "end": end, "staging": str(staging)})


def binlog_bytes(server: Any, start: dict[str, Any], end: dict[str, Any]) -> int:
    """Return the binlog bytes between two heads (files of one server, in order)."""
    sizes = {str(name): int(size) for name, size, *_ in server.execute("SHOW BINARY LOGS")}
    if start["file"] == end["file"]:
        return int(end["pos"] - start["pos"])
    names = sorted(n for n in sizes if start["file"] <= n <= end["file"])
    return sizes[start["file"]] - start["pos"] + sum(sizes[n] for n in names[1:-1]) + end["pos"]


def measure(sizes: list[int], workdir: Path, spark: Any = None) -> list[dict[str, Any]]:
    """Write, extract (and with ``spark``, a started LocalSparkConnect, merge) each size's two transactions."""
    import pymysql

    from airflow_provider_binlog.pipeline.staging import window_path
    from airflow_provider_binlog.testing.mariadb import CDC_SETTINGS, LocalMariaDB
    from airflow_provider_binlog.verify import compare_table

    results = []
    options = {**CDC_SETTINGS, "max-binlog-size": "1073741824", "innodb-buffer-pool-size": "1073741824"}
    with LocalMariaDB(base_dir=workdir / "mariadb", options=options) as server:
        os.environ["AIRFLOW_CONN_BINLOG_DEFAULT"] = server.uri()
        seq = 0
        for size in sizes:
            server.execute(f"DROP DATABASE IF EXISTS {DB}", f"CREATE DATABASE {DB}")
            server.execute(
                f"CREATE TABLE big (id INT PRIMARY KEY, grp INT NOT NULL, pad VARCHAR({PAD_CHARS}) NOT NULL)",
                database=DB,
            )
            writes = {
                "insert": f"INSERT INTO big SELECT seq, seq % 97, CONCAT(LPAD(seq, 10, '0'), "
                f"REPEAT(CHAR(97 + seq % 26), {PAD_CHARS - 10})) FROM seq_1_to_{size}",
                "update every row": "UPDATE big SET grp = grp + 1",
            }
            for kind, statement in writes.items():
                start = head(server)
                written = time.monotonic()
                server.execute("BEGIN", statement, "COMMIT", database=DB)
                written = time.monotonic() - written
                end = head(server)
                seq += 1
                got = extract(seq, start, end, workdir / "staging")
                if got["rows"] != size or got["staged"] != size:
                    raise SystemExit(f"{kind} of {size} rows staged {got['rows']} ({got['staged']} in files)")
                got.update(size=size, kind=kind, binlog=binlog_bytes(server, start, end), written=written)
                if spark is not None:
                    target = str(workdir / f"target-{size}")
                    window = str(window_path(str(workdir / "staging"), "bench", seq))
                    got.update(
                        in_child("--merge-child", {"url": spark.url, "window": window, "target": target})
                    )
                    got["jvm_peak_kib"] = peak_kib(spark.process.pid)
                print(json.dumps(got), flush=True)
                results.append(got)
            if spark is not None:
                with pymysql.connect(**server.connection_kwargs()) as conn:
                    compared = compare_table(conn, target, f"{DB}.big")
                if not compared.matched:
                    raise SystemExit(f"the target of {size} rows differs from the source: {compared}")
    return results


def render(results: list[dict[str, Any]]) -> str:
    merged = "merge_seconds" in results[0]
    lines = [
        "| transaction | rows | binlog bytes | write (s) | extract (s) | extract rows/s | extract peak RSS (MiB) |"
        + (
            " merge (s) | merge engine | merge job peak RSS (MiB) | Spark JVM peak RSS (MiB) |"
            if merged
            else ""
        ),
        "|---|---:|---:|---:|---:|---:|---:|" + ("---:|---|---:|---:|" if merged else ""),
    ]
    for r in results:
        line = (
            f"| {r['kind']} | {r['size']:,} | {r['binlog'] / 2**20:,.0f} MiB | {r['written']:.1f} | "
            f"{r['seconds']:.1f} | {r['size'] / r['seconds']:,.0f} | {r['peak_kib'] / 1024:.0f} |"
        )
        if merged:
            line += (
                f" {r['merge_seconds']:.1f} | {r['engine']}, {r['write_mode']} | {r['merge_peak_kib'] / 1024:.0f} |"
                f" {r['jvm_peak_kib'] / 1024:.0f} |"
            )
        lines.append(line)
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000, 5_000_000])
    parser.add_argument("--merge", action="store_true", help="merge each window too (local Spark Connect)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--merge-child", help=argparse.SUPPRESS)
    write_docs_argument(parser)
    args = parser.parse_args()
    if args.child:
        child(json.loads(args.child))
        return 0
    if args.merge_child:
        merge_child(json.loads(args.merge_child))
        return 0
    from airflow_provider_binlog.testing.spark_connect import LocalSparkConnect

    with tempfile.TemporaryDirectory(prefix="large-transactions-") as scratch:
        if args.merge:
            with LocalSparkConnect(conf={"spark.sql.shuffle.partitions": "4"}) as spark:
                results = measure(args.sizes, Path(scratch), spark)
        else:
            results = measure(args.sizes, Path(scratch))
    key, title = ("large_transactions", "Large transactions: the extract's peak RSS")
    if args.merge:
        key, title = ("large_transactions_merged", "Large transactions: extract and merge")
    publish(key, title, render(results), write_docs=args.write_docs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
