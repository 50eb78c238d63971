"""Row decoding micro benchmark: mysql-replication's ``event.rows`` vs our event reader + ``RowDecoder``.

Writes ``--rows`` inserts and as many updates to a sysbench-like table on a private MariaDB, then
reads the same binlog range with each reader in one process and prints rows/s of each reader:

* ``library raw``: mysql-replication's ``event.rows`` only (a raw mysql-replication loop, the baseline of
  the throughput goal);
* ``ours``: our event reader over COM_BINLOG_DUMP (``extract/events``), one ``RowDecoder`` per table
  layout (cached by ``layout_key``), ``rows_with`` per event, as the window reader decodes.

"stream" counts the whole loop (socket, event headers, table maps), "decode" only the row decoding.
The machines are shared and noisy: compare the ratios within one run.

    python benchmarks/decoder_micro.py --rows 200000 --rows-per-statement 20
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

TABLE_DDL = """CREATE TABLE sbtest.sbtest1 (
  id INT NOT NULL AUTO_INCREMENT PRIMARY KEY,
  k INT NOT NULL DEFAULT 0,
  c CHAR(120) NOT NULL DEFAULT '',
  pad CHAR(60) NOT NULL DEFAULT '',
  KEY k_1 (k)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4"""


def fill(server: Any, rows: int, per_statement: int) -> tuple[str, int]:
    """Create the table, write ``rows`` inserts and ``rows`` updates; return the start position."""
    import pymysql

    server.execute("DROP DATABASE IF EXISTS sbtest", "CREATE DATABASE sbtest", TABLE_DDL)
    file, pos = server.execute("SHOW MASTER STATUS")[0][:2]
    conn = pymysql.connect(**server.connection_kwargs(database="sbtest"))
    try:
        with conn.cursor() as cur:
            for first in range(0, rows, per_statement):
                count = min(per_statement, rows - first)
                values = ",".join(
                    f"({(n * 7919) % 100000}, '{n:011d}-{n * 31:011d}-{'x' * 90}', '{n:011d}-{'y' * 40}')"
                    for n in range(first, first + count)
                )
                cur.execute(f"INSERT INTO sbtest1 (k, c, pad) VALUES {values}")
            for first in range(1, rows + 1, per_statement):
                cur.execute(
                    f"UPDATE sbtest1 SET k = k + 1 WHERE id BETWEEN {first} AND {first + per_statement - 1}"
                )
    finally:
        conn.close()
    return str(file), int(pos)


def library_raw(server: Any, start: tuple[str, int]) -> tuple[int, float, float]:
    """Return (rows, stream seconds, decode seconds) of mysql-replication decoding every row of the range."""
    from pymysqlreplication import BinLogStreamReader
    from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

    kwargs = server.connection_kwargs()
    settings = {k: kwargs[k] for k in ("host", "port", "user", "password")}
    reader = BinLogStreamReader(
        connection_settings=settings,
        server_id=4242,
        log_file=start[0],
        log_pos=start[1],
        resume_stream=True,
        blocking=False,
        only_schemas=["sbtest"],
        only_events=[WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent],
        enable_logging=False,
    )
    rows, decoding = 0, 0.0
    started = time.perf_counter()
    try:
        for event in reader:
            before = time.perf_counter()
            rows += len(event.rows)
            decoding += time.perf_counter() - before
    finally:
        reader.close()
    return rows, time.perf_counter() - started, decoding


def ours(server: Any, start: tuple[str, int]) -> tuple[int, float, float]:
    """Return (rows, stream seconds, decode seconds) of our event reader + RowDecoder over the range."""
    import pymysql

    from airflow_provider_binlog.extract.decoder import RowDecoder, layout_key
    from airflow_provider_binlog.extract.events.feeds import read_binlog_socket
    from airflow_provider_binlog.extract.events.stream import EventReader, RowsEvent

    cache: dict[Any, RowDecoder] = {}
    rows, decoding = 0, 0.0
    conn = pymysql.connect(**server.connection_kwargs())
    started = time.perf_counter()
    try:
        raw = read_binlog_socket(conn, server_id=4243, file=start[0], position=start[1])
        for event in EventReader().events(raw):
            data = event.data
            if not isinstance(data, RowsEvent) or data.schema != "sbtest":
                continue
            before = time.perf_counter()
            key = layout_key(data.columns)
            decoder = cache.get(key) or cache.setdefault(key, RowDecoder(data.columns))
            rows += len(data.rows_with(decoder))
            decoding += time.perf_counter() - before
    finally:
        conn.close()
    return rows, time.perf_counter() - started, decoding


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--rows-per-statement", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=2, help="passes per reader; the best one counts")
    args = parser.parse_args()

    from airflow_provider_binlog.testing.mariadb import LocalMariaDB

    with LocalMariaDB() as server:
        start = fill(server, args.rows, args.rows_per_statement)
        readers: dict[str, Callable[[Any, tuple[str, int]], tuple[int, float, float]]] = {
            "library raw": library_raw,
            "ours": ours,
        }
        results = {}
        for name, read in readers.items():
            passes = [read(server, start) for _ in range(args.repeat)]
            results[name] = min(passes, key=lambda r: r[1])
        print(f"{'reader':24s} {'rows':>8s} {'stream rows/s':>14s} {'decode rows/s':>14s}")
        for name, (rows, total, decoding) in results.items():
            print(f"{name:24s} {rows:8d} {rows / total:14,.0f} {rows / decoding:14,.0f}")
        mine, other = results["ours"], results["library raw"]
        print(f"ours vs library raw: stream x{other[1] / mine[1]:.2f}, decode x{other[2] / mine[2]:.2f}")


if __name__ == "__main__":
    main()
