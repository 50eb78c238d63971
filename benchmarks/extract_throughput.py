"""Extract throughput: our window extract (to Parquet) vs. a raw mysql-replication loop vs. mariadb-binlog.

All readers read the same binlog range, written on a private MariaDB by sysbench ``oltp_write_only``
(``--workload oltp``) or by this script on a table of 24 columns of mixed types (``--workload mixed``:
per event one insert, one update of a whole row and one delete), in one run of this script (the machines
are shared and noisy: compare ratios within one run). A fourth reader is our event reader alone
(``extract/events``: COM_BINLOG_DUMP, decode every row of the selected tables, no output), to show what
the extract spends beyond decoding (batches, Parquet). Each reader runs in its own process; its peak RSS comes
from ``wait4``. Results are printed as a Markdown table and, with ``--write-docs``, written to
``docs/benchmarks.md``.

With ``--files N`` the workload is written in N equal parts with ``FLUSH BINARY LOGS`` between them, so the
window spans N binlog files, and only our extract runs: once serially and once with its files read in
parallel (``extract/parallel.py``, ADR 0025), in one run; the table gives both and their ratio.

    python benchmarks/extract_throughput.py --events 60000 --write-docs
    python benchmarks/extract_throughput.py --workload mixed --events 30000
    python benchmarks/extract_throughput.py --files 4 --events 60000 --write-docs
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from results_doc import write_block

REPO = Path(__file__).resolve().parent.parent
TABLES = 4
C_DECODER = "mariadb-binlog --verbose (C)"
RAW_LOOP = "raw mysql-replication loop"
OURS = "ours (extract to Parquet)"
MIXED_DDL = """CREATE TABLE mixed.t (
  id INT PRIMARY KEY, ti TINYINT, su SMALLINT UNSIGNED, mi MEDIUMINT, i INT, bu BIGINT UNSIGNED,
  d DECIMAL(12,4), f FLOAT, db DOUBLE, y YEAR, da DATE, dt DATETIME(6), ts TIMESTAMP(3) NULL, t TIME,
  vc VARCHAR(64), ch CHAR(20), txt TEXT, vb VARBINARY(32), en ENUM('new','paid','shipped','done'),
  st SET('a','b','c','d'), bt BIT(8), j JSON, bl BLOB, k INT
) DEFAULT CHARSET=utf8mb4"""
"""The ``--workload mixed`` table: 24 columns of the types the decoder handles."""


def workload_tables(workload: str) -> list[str]:
    """Return the ``db.table`` names the workload writes."""
    if workload == "mixed":
        return ["mixed.t"]
    return [f"sbtest.sbtest{i}" for i in range(1, TABLES + 1)]


def mixed_row(key: int) -> tuple:  # type: ignore[type-arg]
    """Return the values of row ``key`` of the mixed table (deterministic, every column set)."""
    return (
        key, key % 128, key % 65536, key % 8388608 - 4194304, key * 7, key * 1_000_003,
        f"{key % 100000}.{key % 10000:04d}", key / 7, key / 13, 1901 + key % 250,
        f"20{key % 30:02d}-{1 + key % 12:02d}-{1 + key % 28:02d}",
        f"2024-{1 + key % 12:02d}-{1 + key % 28:02d} 12:{key % 60:02d}:{key % 60:02d}.{key % 1000000:06d}",
        f"2021-{1 + key % 12:02d}-{1 + key % 28:02d} 10:00:{key % 60:02d}.{key % 1000:03d}",
        f"{key % 800}:{key % 60:02d}:{key % 60:02d}", f"name-{key}", f"c{key % 1000}",
        "text " * (key % 20), bytes([key % 256]) * 8, ("new", "paid", "shipped", "done")[key % 4],
        ",".join(m for n, m in enumerate("abcd") if key >> n & 1), key % 256,
        json.dumps({"key": key, "tags": ["x", "y"]}), bytes([key % 251]) * 16, key,
    )  # fmt: skip


MIXED_NAMES = ["id", "ti", "su", "mi", "i", "bu", "d", "f", "db", "y", "da", "dt", "ts", "t", "vc", "ch", "txt", "vb",
               "en", "st", "bt", "j", "bl", "k"]  # fmt: skip


def mixed_run(server, events: int, first: int = 0) -> None:  # type: ignore[no-untyped-def]
    """Write ``events`` transactions to ``mixed.t``: insert row ``1000 + n``, update all its columns, delete row ``n``.

    ``n`` runs from ``first`` (a later part of the workload) to ``first + events``.

    The table is loaded with rows 0..999 first (before the measured range); 3 row changes per event.
    """
    import pymysql

    marks = ", ".join(["%s"] * len(MIXED_NAMES))
    assignments = ", ".join(f"{name} = %s" for name in MIXED_NAMES[1:])
    conn = pymysql.connect(**server.connection_kwargs(database="mixed"))
    try:
        with conn.cursor() as cur:
            for n in range(first, first + events):
                key = 1000 + n
                cur.execute(f"INSERT INTO t VALUES ({marks})", mixed_row(key))
                cur.execute(f"UPDATE t SET {assignments} WHERE id = %s", (*mixed_row(key + 7)[1:], key))
                cur.execute("DELETE FROM t WHERE id = %s", (n,))
                conn.commit()
    finally:
        conn.close()


def mixed_prepare(server) -> None:  # type: ignore[no-untyped-def]
    """Create ``mixed.t`` and load rows 0..999."""
    import pymysql

    server.execute("CREATE DATABASE mixed")
    server.execute(MIXED_DDL)
    conn = pymysql.connect(**server.connection_kwargs(database="mixed"))
    try:
        with conn.cursor() as cur:
            marks = ", ".join(["%s"] * len(MIXED_NAMES))
            cur.executemany(f"INSERT INTO t VALUES ({marks})", [mixed_row(k) for k in range(1000)])
        conn.commit()
    finally:
        conn.close()


def sysbench(server, command: str, *extra: str) -> None:  # type: ignore[no-untyped-def]
    args = [
        "sysbench",
        "--db-driver=mysql",
        "--mysql-host=127.0.0.1",
        f"--mysql-port={server.port}",
        "--mysql-user=root",
        f"--mysql-password={server.root_password}",
        "--mysql-db=sbtest",
        f"--tables={TABLES}",
        "--table-size=20000",
        *extra,
        "oltp_write_only",
        command,
    ]
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL)


def head(server) -> dict:  # type: ignore[no-untyped-def]
    file, pos = server.execute("SHOW MASTER STATUS")[0][:2]
    return {"file": str(file), "pos": int(pos)}


def measure(command: list[str]) -> tuple[dict, float, int]:
    """Run a reader process; return (its JSON report, wall seconds, peak RSS in KiB).

    The report gets ``cpu_seconds``: user + system time of the process and its children (``wait4``), which
    other jobs on a shared machine disturb less than wall time.
    """
    started = time.monotonic()
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, env=os.environ.copy())
    out = proc.stdout.read() if proc.stdout else b""
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{command[:3]} failed with {proc.returncode}")
    report = json.loads(out.decode().strip().splitlines()[-1]) if out.strip() else {}
    report["cpu_seconds"] = usage.ru_utime + usage.ru_stime
    return report, time.monotonic() - started, int(usage.ru_maxrss)


def server_cpu_seconds(server) -> float:  # type: ignore[no-untyped-def]
    """Return the CPU seconds (user + system) the source server's process has used so far (``/proc/<pid>/stat``)."""
    fields = Path(f"/proc/{server.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure_with_server(command: list[str], server) -> tuple[dict, float, int]:  # type: ignore[no-untyped-def]
    """:func:`measure`, with the source server's CPU seconds during the run in the report (``server_cpu_seconds``)."""
    before = server_cpu_seconds(server)
    report, wall, rss = measure(command)
    report["server_cpu_seconds"] = server_cpu_seconds(server) - before
    return report, wall, rss


def reader_ours(args: argparse.Namespace) -> dict:
    from airflow_provider_binlog.contract.positions import BinlogPosition
    from airflow_provider_binlog.extract.reader import TableTarget
    from airflow_provider_binlog.extract.window import extract_window
    from airflow_provider_binlog.hooks.binlog import BinlogHook
    from airflow_provider_binlog.pipeline.ledger import Window, now_iso
    from airflow_provider_binlog.pipeline.staging import window_path

    hook = BinlogHook(pipeline="bench")
    window = Window(
        seq=1,
        start=BinlogPosition(**args.start),
        end=BinlogPosition(**args.end),
        run_id="bench",
        cut_at=now_iso(),
    )
    tables = {name: TableTarget(name, ["id"]) for name in workload_tables(args.workload)}
    started = time.monotonic()
    manifest = extract_window(
        hook,
        pipeline="bench",
        window=window,
        tables=tables,
        window_dir=window_path(args.staging, "bench", 1),
        server=hook.server_state(),
        max_workers=args.workers,
        parallel_min_bytes=0,
    )
    return {"rows": manifest.stats["rows"], "seconds": time.monotonic() - started}


def reader_raw(args: argparse.Namespace) -> dict:
    from pymysqlreplication import BinLogStreamReader
    from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

    from airflow_provider_binlog.contract.positions import BinlogPosition

    end = BinlogPosition(args.end["file"], args.end["pos"])
    settings = {"host": "127.0.0.1", "port": args.port, "user": "root", "passwd": args.password}
    started, rows = time.monotonic(), 0
    stream = BinLogStreamReader(
        connection_settings=settings,
        server_id=4242,
        log_file=args.start["file"],
        log_pos=args.start["pos"],
        resume_stream=True,
        blocking=False,
        only_events=[WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent],
        enable_logging=False,
    )
    for event in stream:
        if BinlogPosition(stream.log_file, event.packet.log_pos).key > end.key:
            break
        for _row in event.rows:
            rows += 1
    stream.close()
    return {"rows": rows, "seconds": time.monotonic() - started}


def reader_events(args: argparse.Namespace) -> dict:
    """Read the range with our event reader over COM_BINLOG_DUMP and decode every row of the workload's tables."""
    import pymysql

    from airflow_provider_binlog.contract.positions import BinlogPosition
    from airflow_provider_binlog.extract.events.feeds import read_binlog_socket
    from airflow_provider_binlog.extract.events.stream import EventReader, RowsEvent

    end = BinlogPosition(args.end["file"], args.end["pos"])
    wanted = set(workload_tables(args.workload))
    started, rows = time.monotonic(), 0
    conn = pymysql.connect(host="127.0.0.1", port=args.port, user="root", password=args.password)
    raw = read_binlog_socket(conn, server_id=4243, file=args.start["file"], position=args.start["pos"])
    for event in EventReader().events(raw):
        if BinlogPosition(event.file, event.start).key >= end.key:
            break
        data = event.data
        if isinstance(data, RowsEvent) and data.table_map.name in wanted:
            rows += len(data.rows())
    conn.close()
    return {"rows": rows, "seconds": time.monotonic() - started}


def mariadb_binlog_command(server, start: dict, end: dict) -> list[str]:  # type: ignore[no-untyped-def]
    files = [name for name, _ in server.execute("SHOW BINARY LOGS")]
    chosen = files[files.index(start["file"]) : files.index(end["file"]) + 1]
    return [
        "sh",
        "-c",
        f"mariadb-binlog --verbose --base64-output=DECODE-ROWS --start-position={start['pos']} "
        f"--stop-position={end['pos']} "
        + " ".join(str(server.datadir / f) for f in chosen)
        + " | grep -cE '^### (INSERT|UPDATE|DELETE)' | sed 's/.*/{\"rows\": &}/'",
    ]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=60_000, help="sysbench events (4 row changes each)")
    parser.add_argument("--write-docs", action="store_true")
    parser.add_argument("--workload", choices=["oltp", "mixed"], default="oltp")
    parser.add_argument("--reader", choices=["ours", "raw", "events"])
    parser.add_argument("--start", type=json.loads)
    parser.add_argument("--end", type=json.loads)
    parser.add_argument("--port", type=int)
    parser.add_argument("--password")
    parser.add_argument("--staging")
    parser.add_argument(
        "--files", type=int, default=1, help="binlog files the window spans (> 1: serial vs. parallel)"
    )
    parser.add_argument("--rounds", type=int, default=2, help="(--files) serial/parallel pairs to run")
    parser.add_argument("--workers", type=int, default=1, help="(reader process) the extract's max_workers")
    args = parser.parse_args()
    if args.reader:
        readers = {
            "ours": reader_ours,
            "raw": reader_raw,
            "events": reader_events,
        }
        result = readers[args.reader](args)
        print(json.dumps(result))
        return 0
    return run_benchmark(args)


def run_benchmark(args: argparse.Namespace) -> int:
    from airflow_provider_binlog.testing.mariadb import LocalMariaDB

    if args.workload == "oltp" and shutil.which("sysbench") is None:
        raise SystemExit("sysbench is not installed: apt-get install sysbench (make benchmark does)")
    workdir = Path(tempfile.mkdtemp(prefix="binlog-bench-"))
    with LocalMariaDB(base_dir=workdir / "mariadb") as server:
        if args.workload == "mixed":
            mixed_prepare(server)
            server.execute("FLUSH BINARY LOGS")
            start = head(server)
            events = args.events // args.files
            for part in range(args.files):
                if part:
                    server.execute("FLUSH BINARY LOGS")
                mixed_run(server, events, first=part * events)
        else:
            server.execute("CREATE DATABASE sbtest")
            sysbench(server, "prepare")
            server.execute("FLUSH BINARY LOGS")
            start = head(server)
            for part in range(args.files):
                if part:
                    server.execute("FLUSH BINARY LOGS")
                events = args.events // args.files
                sysbench(
                    server, "run", f"--events={events}", "--time=0", "--threads=2", f"--rand-seed={part + 1}"
                )
        end = head(server)
        os.environ["AIRFLOW_CONN_BINLOG_DEFAULT"] = server.uri()
        common = [f"--start={json.dumps(start)}", f"--end={json.dumps(end)}", f"--port={server.port}"]
        common += [f"--password={server.root_password}", f"--staging={workdir / 'staging'}"]
        common += [f"--workload={args.workload}"]
        me = [sys.executable, __file__]
        load_before = os.getloadavg()[0]
        if args.files > 1:
            size = binlog_bytes(start, end, server)
            rounds = []  # serial and parallel alternate, so a change in the machine's load hits both
            for _ in range(args.rounds):
                serial = measure_with_server([*me, "--reader", "ours", "--workers", "1", *common], server)
                parallel = measure_with_server(
                    [*me, "--reader", "ours", "--workers", str(args.files), *common], server
                )
                rounds.append((serial, parallel, spin_ceiling()))
        else:
            results = {
                OURS: measure([*me, "--reader", "ours", *common]),
                "our event reader alone (decode, no output)": measure([*me, "--reader", "events", *common]),
                RAW_LOOP: measure([*me, "--reader", "raw", *common]),
                C_DECODER: measure(mariadb_binlog_command(server, start, end)),
            }
        load = (load_before, os.getloadavg()[0])
    shutil.rmtree(workdir, ignore_errors=True)
    if args.files > 1:
        table = render_parallel(rounds, args, load, size)
        print(table)
        if args.write_docs:
            write_block(
                "extract_parallel", "Parallel catch-up (`benchmarks/extract_throughput.py --files`)", table
            )
        return 0
    table = render(results, args.events, args.workload, load)
    print(table)
    if args.write_docs:
        write_docs(table, args.workload)
    return 0


def render(
    results: dict[str, tuple[dict, float, int]],
    events: int,
    workload: str = "oltp",
    load: tuple[float, float] | None = None,
) -> str:
    """Return the Markdown table: wall and CPU rates, ratios to the raw loop (wall) and the C decoder (CPU).

    :param load: the 1-minute load average before and after the readers ran (other jobs share the cores).
    """
    lines = [
        "| reader | row changes | seconds | rows/s | vs. raw loop | CPU s | rows/CPU s | vs. C (CPU) | peak RSS (MiB) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    rates, cpu_rates = {}, {}
    for name, (report, wall, _rss) in results.items():
        rates[name] = report["rows"] / report.get("seconds", wall)
        cpu_rates[name] = report["rows"] / max(report["cpu_seconds"], 1e-9)
    for name, (report, wall, rss) in results.items():
        lines.append(
            f"| {name} | {report['rows']} | {report.get('seconds', wall):.1f} | {rates[name]:,.0f} | "
            f"{rates[name] / rates[RAW_LOOP]:.2f}x | {report['cpu_seconds']:.1f} | {cpu_rates[name]:,.0f} | "
            f"{cpu_rates[name] / cpu_rates[C_DECODER]:.2f}x | {rss / 1024:.0f} |"
        )
    what = (
        f"mixed workload (one table of 24 columns of mixed types; insert, whole-row update, delete), {events} events"
        if workload == "mixed"
        else f"sysbench oltp_write_only, {events} events, {TABLES} tables"
    )
    shared = f", load average {load[0]:.1f} before and {load[1]:.1f} after the readers" if load else ""
    header = (
        f"{what}, MariaDB 10.11, one run on {os.cpu_count()} cores{shared} ({time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC)"
        f"; ours vs. C by wall time: {rates[OURS] / rates[C_DECODER]:.2f}x\n\n"
    )
    return header + "\n".join(lines)


def binlog_bytes(start: dict, end: dict, server) -> int:  # type: ignore[no-untyped-def,type-arg]
    """Return the binlog bytes between ``start`` and ``end`` (``SHOW BINARY LOGS``)."""
    from airflow_provider_binlog.contract.positions import BinlogPosition
    from airflow_provider_binlog.monitoring.retention import binlog_bytes_between

    files = [(str(name), int(size)) for name, size, *_ in server.execute("SHOW BINARY LOGS")]
    return binlog_bytes_between(files, BinlogPosition(**start), BinlogPosition(**end))


def _spin(count: int) -> int:
    total = 0
    for i in range(count):
        total += i
    return total


def spin_ceiling(count: int = 15_000_000) -> float:
    """Return how much faster two processes of a pure-CPU loop finish than the same two loops one after the other.

    The parallel speed-up the machine allows at that moment (other jobs share its cores): a bound for the
    parallel extract, measured between its rounds.
    """
    import multiprocessing

    started = time.monotonic()
    _spin(count)
    _spin(count)
    serial = time.monotonic() - started
    started = time.monotonic()
    with multiprocessing.get_context("fork").Pool(2) as pool:
        pool.map(_spin, [count, count])
    return serial / (time.monotonic() - started)


def render_parallel(
    rounds: list[tuple[tuple[dict, float, int], tuple[dict, float, int], float]],  # type: ignore[type-arg]
    args: argparse.Namespace,
    load: tuple[float, float],
    size: int,
) -> str:
    """Return the Markdown table of one window read serially and in parallel, round by round, with the ratios.

    The last column is :func:`spin_ceiling` right after the round: what two busy processes gained on the
    machine then; the column before it, the source server's CPU seconds during the read (its dump threads share
    the 2 cores with the readers here). Seconds are the extract's (``extract_window``: from the window's first event to the manifest); the reader
    process's wall time adds its imports (about 2.5 s, the same for both). CPU seconds are the reader process's
    and its workers' (``wait4``).
    """
    lines = [
        "| round | extract | row changes | extract s | rows/s | speed-up | process wall s | CPU s (incl. workers) "
        "| peak RSS of the task process (MiB) | source server CPU s | machine's ceiling (2 spin loops) |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    ratios = []
    for number, (serial, parallel, ceiling) in enumerate(rounds, 1):
        ratios.append(serial[0]["seconds"] / parallel[0]["seconds"])
        for name, (report, wall, rss) in (
            ("serial", serial),
            (f"parallel (task + {min(args.files, os.cpu_count() or 1) - 1} worker process(es))", parallel),
        ):
            lines.append(
                f"| {number} | {name} | {report['rows']} | {report['seconds']:.2f} | "
                f"{report['rows'] / report['seconds']:,.0f} | {serial[0]['seconds'] / report['seconds']:.2f}x | "
                f"{wall:.1f} | {report['cpu_seconds']:.1f} | {rss / 1024:.0f} | {report['server_cpu_seconds']:.1f} | "
                f"{f'{ceiling:.2f}x' if report is parallel[0] else ''} |"
            )
    workload = (
        "mixed workload (24 columns)"
        if args.workload == "mixed"
        else f"sysbench oltp_write_only ({TABLES} tables)"
    )
    header = (
        f"{workload}, {args.events} events in {args.files} binlog files ({size / 2**20:.1f} MiB), MariaDB 10.11, "
        f"{len(rounds)} rounds of serial then parallel in one run on {os.cpu_count()} cores, load average "
        f"{load[0]:.1f} before and {load[1]:.1f} after the readers ({time.strftime('%Y-%m-%d %H:%M', time.gmtime())} "
        f"UTC); parallel vs. serial by extract time: {', '.join(f'{r:.2f}x' for r in ratios)}\n\n"
    )
    return header + "\n".join(lines)


def write_docs(table: str, workload: str = "oltp") -> None:
    if workload == "mixed":
        write_block(
            "extract_throughput_mixed", "Extract throughput (`benchmarks/extract_throughput.py`)", table
        )
        return
    write_block("extract_throughput", "Extract throughput (`benchmarks/extract_throughput.py`)", table)


if __name__ == "__main__":
    sys.exit(main())
