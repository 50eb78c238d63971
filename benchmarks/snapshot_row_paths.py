"""Row paths into Arrow for snapshot chunks: drivers and conversions compared against ``mariadb-dump``.

Every candidate reads the same sysbench-like table as ``snapshot_throughput.py`` (``id INT PRIMARY KEY,
k INT, c CHAR(120), pad CHAR(60)``) over one connection in this process with one ``SELECT ... ORDER BY
id``, into Arrow record batches of 10,000 rows with the staged types (int32, int32, string, string), and
keeps nothing (no Parquet). ``mariadb-dump`` reads the same table over TCP in the same run (one
connection, C). Each candidate and ``mariadb-dump`` run ``--repeat`` times; the table gives the fastest
run of each (the machine is shared and noisy).

Candidates:

- **pymysql, typed, row-wise** (the snapshot's path before): pymysql's unbuffered cursor with its
  decoders (Python parses every packet and value), then one ``pa.array`` of Python values per column;
- **pymysql, raw, column-wise**: :class:`~airflow_provider_binlog.snapshot.rows.RowReader` with the
  pymysql driver (the path of sources with TLS settings): every value as sent, staged column by column;
- **mysqlclient, typed, row-wise**: mysqlclient's unbuffered cursor with its converters, then
  ``pa.array`` per column;
- **mysqlclient, raw, column-wise, GC on**: as below, but with Python's garbage collector running;
- **mysqlclient, raw, column-wise** (the snapshot's path now): ``RowReader`` with mysqlclient;
- **connectorx** (Rust, binary protocol, straight into Arrow): when the package is installed.

    .venv/bin/python benchmarks/snapshot_row_paths.py [--rows 1000000] [--repeat 2] [--write-docs]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
from results_doc import write_block
from snapshot_throughput import DB, TABLE, load_table, run_dump

BATCH_ROWS = 10_000
SQL = f"SELECT id, k, c, pad FROM {DB}.{TABLE} WHERE id > %s ORDER BY id"
TYPES = [pa.int32(), pa.int32(), pa.string(), pa.string()]

EXACTNESS = {
    "pymysql, typed, row-wise (before)": "exact, with per-value fixes after pymysql's decoders",
    "pymysql, raw, column-wise (TLS sources)": "exact: the same stagers as the row below",
    "mysqlclient, typed, row-wise": "its converters return Python values like pymysql's: the same per-value fixes needed",
    "mysqlclient, raw, column-wise, GC on": "exact: as below",
    "mysqlclient, raw, column-wise (now)": "exact: every type of `tests/integration/test_snapshot_rows.py` and "
    "`test_type_fidelity.py` equals the binlog path",
    "connectorx": "not exact, measured on MariaDB 10.11: DECIMAL(65,30) and zero dates panic, negative TIME "
    "panics, DECIMAL(10,2) comes as decimal128(38,10), BIT(64) as bytes, UUID/INET6 as text; no session "
    "settings (`time_zone`) and TLS only through the URL",
}


def typed_rows(connection: Any, cursor_class: Any) -> int:
    """Read with a driver's own converters, then build one Arrow array per column from the Python values."""
    rows = 0
    cur = connection.cursor(cursor_class)
    cur.execute(SQL, (0,))
    while batch := cur.fetchmany(BATCH_ROWS):
        arrays = [pa.array([row[i] for row in batch], type) for i, type in enumerate(TYPES)]
        rows += len(arrays[0])
    cur.close()
    return rows


def pymysql_typed(source: dict[str, Any], columns: Any) -> int:
    import pymysql.cursors

    connection = pymysql.connect(**source)
    try:
        return typed_rows(connection, pymysql.cursors.SSCursor)
    finally:
        connection.close()


def mysqlclient_typed(source: dict[str, Any], columns: Any) -> int:
    import MySQLdb
    import MySQLdb.cursors

    settings = {k: v for k, v in source.items() if k in ("host", "port", "user", "password")}
    connection = MySQLdb.connect(**settings, charset="utf8mb4", autocommit=True)
    try:
        return typed_rows(connection, MySQLdb.cursors.SSCursor)
    finally:
        connection.close()


def row_reader(driver: str) -> Callable[[dict[str, Any], Any], int]:
    """Return a candidate reading through ``RowReader`` with ``driver``."""

    def read(source: dict[str, Any], columns: Any) -> int:
        from airflow_provider_binlog.snapshot.rows import RowReader

        reader = RowReader(source, driver)
        try:
            return sum(batch.num_rows for batch, _ in reader.batches(SQL, [0], columns, BATCH_ROWS))
        finally:
            reader.close()

    return read


def mysqlclient_gc_on(source: dict[str, Any], columns: Any) -> int:
    """``RowReader``'s mysqlclient connection and ``rows_to_batch``, without pausing the garbage collector."""
    from airflow_provider_binlog.snapshot.rows import RowReader, rows_to_batch

    reader = RowReader(source, "mysqlclient")
    try:
        rows = 0
        cur = reader.connection.cursor(reader._cursor_class)
        cur.execute(SQL, (0,))
        while batch := cur.fetchmany(BATCH_ROWS):
            rows += rows_to_batch(columns, batch)[0].num_rows
        cur.close()
        return rows
    finally:
        reader.close()


def connectorx(source: dict[str, Any], columns: Any) -> int:
    import connectorx as cx

    url = f"mysql://{source['user']}:{source['password']}@{source['host']}:{source['port']}/{DB}"
    return int(cx.read_sql(url, SQL.replace("%s", "0"), return_type="arrow").num_rows)


CANDIDATES: dict[str, Callable[[dict[str, Any], Any], int]] = {
    "pymysql, typed, row-wise (before)": pymysql_typed,
    "pymysql, raw, column-wise (TLS sources)": row_reader("pymysql"),
    "mysqlclient, typed, row-wise": mysqlclient_typed,
    "mysqlclient, raw, column-wise, GC on": mysqlclient_gc_on,
    "mysqlclient, raw, column-wise (now)": row_reader("mysqlclient"),
    "connectorx": connectorx,
}


def measure(source: dict[str, Any], columns: Any, rows: int, repeat: int) -> dict[str, float | None]:
    """Return each candidate's fastest seconds over ``repeat`` runs (None when its package is missing)."""
    seconds: dict[str, float | None] = {}
    for name, read in CANDIDATES.items():
        if name == "connectorx" and importlib.util.find_spec("connectorx") is None:
            seconds[name] = None
            continue
        best = float("inf")
        for _ in range(repeat):
            started = time.monotonic()
            got = read(source, columns)
            best = min(best, time.monotonic() - started)
            if got != rows:
                raise SystemExit(f"{name} read {got} rows, not {rows}")
        seconds[name] = best
        print(f"{name}: {best:.2f} s", flush=True)
    return seconds


def render(
    rows: int, repeat: int, version: str, dump: dict[str, Any], seconds: dict[str, float | None]
) -> str:
    dump_rate = rows / dump["seconds"]
    lines = [
        "| row path (one connection, into Arrow) | seconds | rows/s | vs. mariadb-dump | type exactness |",
        "|---|---:|---:|---:|---|",
        f"| mariadb-dump (into a {dump['bytes'] / 2**20:,.0f} MiB SQL file) | {dump['seconds']:.2f} | "
        f"{dump_rate:,.0f} | 1.00x | |",
    ]
    for name, took in seconds.items():
        if took is None:
            lines.append(f"| {name} | | | | not installed |")
            continue
        rate = rows / took
        lines.append(f"| {name} | {took:.2f} | {rate:,.0f} | {rate / dump_rate:.2f}x | {EXACTNESS[name]} |")
    header = (
        f"sysbench-like table, {rows} rows, MariaDB {version}, best of {repeat} runs per reader, one run "
        f"of the script on {os.cpu_count()} cores ({time.strftime('%Y-%m-%d')}, 1-minute load average "
        f"{os.getloadavg()[0]:.1f} at the end)\n\n"
    )
    return header + "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000, help="rows in the table")
    parser.add_argument("--repeat", type=int, default=2, help="runs per row path (the fastest is reported)")
    parser.add_argument("--write-docs", action="store_true", help="put the results into docs/benchmarks.md")
    args = parser.parse_args()

    import pymysql

    from airflow_provider_binlog.snapshot.rows import describe_columns
    from airflow_provider_binlog.testing.mariadb import CDC_SETTINGS, LocalMariaDB

    workdir = Path(tempfile.mkdtemp(prefix="binlog-bench-row-paths-"))
    options = {**CDC_SETTINGS, "innodb-buffer-pool-size": "1G"}
    try:
        with LocalMariaDB(options=options, base_dir=workdir / "mariadb") as server:
            version = str(server.execute("SELECT VERSION()")[0][0]).split("-")[0]
            print(f"loaded {args.rows:,} rows in {load_table(server, args.rows):.1f} s", flush=True)
            server.execute(f"SELECT COUNT(*), SUM(LENGTH(c)) FROM {DB}.{TABLE}")  # warm the buffer pool
            dump = min(
                (run_dump(server, workdir / "dump.sql") for _ in range(args.repeat)),
                key=lambda d: d["seconds"],
            )
            print(f"mariadb-dump: {dump}", flush=True)
            source = server.connection_kwargs()
            conn = pymysql.connect(**source)
            try:
                with conn.cursor() as cur:
                    columns = describe_columns(cur, DB, TABLE)
            finally:
                conn.close()
            seconds = measure(source, columns, args.rows, args.repeat)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    table = render(args.rows, args.repeat, version, dump, seconds)
    print(table)
    if args.write_docs:
        write_block("snapshot_row_paths", "Snapshot row paths (`benchmarks/snapshot_row_paths.py`)", table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
