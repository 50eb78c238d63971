"""Row decoding micro benchmark: mysql-replication's ``event.rows`` (+ our converters) vs ``RowDecoder``.

Writes ``--rows`` inserts and as many updates to a sysbench-like table on a private MariaDB, then
reads the same binlog range with each reader in one process and prints rows/s of each reader:

* ``library raw, uncached``: ``event.rows`` only, the library parsing every table map (a raw
  mysql-replication loop, the baseline of the throughput goal);
* ``library raw``: the same with the extractor's table-map cache;
* ``library + converters``: ``event.rows`` then :func:`columns.converter` per value (the extractor today);
* ``RowDecoder``: one decoder per table layout (cached by ``layout_key``), ``decode`` / ``decode_updates`` per event.

All but the first read with the extractor's table-map cache (``extract/tablemaps.py``).

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


def stream(server: Any, start: tuple[str, int], cached_table_maps: bool = True) -> Any:
    """Open a non-blocking stream of the table's row events from ``start``."""
    from pymysqlreplication import BinLogStreamReader
    from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

    from airflow_provider_binlog.extract.tablemaps import CACHED_TABLE_MAP_EVENTS

    kwargs = server.connection_kwargs()
    settings = {k: kwargs[k] for k in ("host", "port", "user", "password")}
    return BinLogStreamReader(
        connection_settings=settings,
        server_id=4242,
        log_file=start[0],
        log_pos=start[1],
        resume_stream=True,
        blocking=False,
        only_schemas=["sbtest"],
        only_events=[
            *(CACHED_TABLE_MAP_EVENTS if cached_table_maps else []),
            WriteRowsEvent,
            UpdateRowsEvent,
            DeleteRowsEvent,
        ],
        enable_logging=False,
    )


def library_raw(event: Any) -> int:
    """Decode with the library only."""
    return len(event.rows)


def library_converted(event: Any, cache: dict[Any, Any]) -> int:
    """Decode with the library, then convert each value as the extractor does today."""
    from pymysqlreplication.row_event import UpdateRowsEvent

    from airflow_provider_binlog.extract.columns import converter

    key = id(event.columns)
    if key not in cache:
        cache[key] = [(c.name, converter(c)) for c in event.columns]
    convs = cache[key]
    if isinstance(event, UpdateRowsEvent):
        images = [
            (r[f"{side}_values"], r[f"{side}_none_sources"])
            for r in event.rows
            for side in ("before", "after")
        ]
    else:
        images = [(r["values"], r["none_sources"]) for r in event.rows]
    for values, none_sources in images:
        [convert(values[name], none_sources.get(name)) for name, convert in convs]
    return len(event.rows)


def ours(event: Any, cache: Any) -> int:
    """Decode with one RowDecoder per layout (cached by ``layout_key``)."""
    from pymysqlreplication.row_event import UpdateRowsEvent

    from airflow_provider_binlog.extract.decoder import RowDecoder, layout_key

    key = layout_key(event.columns)
    decoder = cache.get(key) or cache.setdefault(key, RowDecoder(event.columns))
    if isinstance(event, UpdateRowsEvent):
        return len(decoder.decode_updates(event))
    return len(decoder.decode(event))


def measure(
    server: Any, start: tuple[str, int], decode: Callable[[Any], int], cached_table_maps: bool = True
) -> tuple[int, float, float]:
    """Return (rows, stream seconds, decode seconds) of one pass over the range."""
    from contextlib import nullcontext

    from pymysqlreplication.row_event import RowsEvent

    from airflow_provider_binlog.extract.tablemaps import table_map_cache

    rows, decoding = 0, 0.0
    reader = stream(server, start, cached_table_maps)
    started = time.perf_counter()
    try:
        with table_map_cache() if cached_table_maps else nullcontext():
            for event in reader:
                if not isinstance(event, RowsEvent):
                    continue
                before = time.perf_counter()
                rows += decode(event)
                decoding += time.perf_counter() - before
    finally:
        reader.close()
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
        converted_cache: dict[Any, Any] = {}
        decoder_cache: dict[Any, Any] = {}
        readers: dict[str, tuple[Callable[[Any], int], bool]] = {
            "library raw, uncached": (library_raw, False),
            "library raw": (library_raw, True),
            "library + converters": (lambda e: library_converted(e, converted_cache), True),
            "RowDecoder": (lambda e: ours(e, decoder_cache), True),
        }
        results = {}
        for name, (decode, cached) in readers.items():
            passes = [measure(server, start, decode, cached) for _ in range(args.repeat)]
            results[name] = min(passes, key=lambda r: r[1])
        print(f"{'reader':24s} {'rows':>8s} {'stream rows/s':>14s} {'decode rows/s':>14s}")
        for name, (rows, total, decoding) in results.items():
            print(f"{name:24s} {rows:8d} {rows / total:14,.0f} {rows / decoding:14,.0f}")
        mine = results["RowDecoder"]
        for name in ("library raw, uncached", "library raw", "library + converters"):
            other = results[name]
            print(f"RowDecoder vs {name}: stream x{other[1] / mine[1]:.2f}, decode x{other[2] / mine[2]:.2f}")


if __name__ == "__main__":
    main()
