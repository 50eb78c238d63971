"""Extract throughput: our window extract (to Parquet) vs. a raw mysql-replication loop vs. mariadb-binlog.

All three read the same binlog range, written by sysbench ``oltp_write_only`` on a private MariaDB,
in one run of this script (the machines are shared and noisy: compare ratios within one run).
Each reader runs in its own process; its peak RSS comes from ``wait4``. Results are printed as a
Markdown table and, with ``--write-docs``, written to ``docs/benchmarks.md``.

    python benchmarks/extract_throughput.py --events 60000 --write-docs
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
    """Run a reader process; return (its JSON report, wall seconds, peak RSS in KiB)."""
    started = time.monotonic()
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, env=os.environ.copy())
    out = proc.stdout.read() if proc.stdout else b""
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{command[:3]} failed with {proc.returncode}")
    report = json.loads(out.decode().strip().splitlines()[-1]) if out.strip() else {}
    return report, time.monotonic() - started, int(usage.ru_maxrss)


def reader_ours(args: argparse.Namespace) -> dict:
    from airflow_provider_binlog.extract.reader import TableTarget
    from airflow_provider_binlog.extract.window import extract_window
    from airflow_provider_binlog.hooks.binlog import BinlogHook
    from airflow_provider_binlog.staging import window_path
    from airflow_provider_binlog.state import Position, Window, now_iso

    hook = BinlogHook(pipeline="bench")
    window = Window(
        seq=1, start=Position(**args.start), end=Position(**args.end), run_id="bench", cut_at=now_iso()
    )
    tables = {f"sbtest.sbtest{i}": TableTarget(f"sbtest.sbtest{i}", ["id"]) for i in range(1, TABLES + 1)}
    started = time.monotonic()
    manifest = extract_window(
        hook,
        pipeline="bench",
        window=window,
        tables=tables,
        window_dir=window_path(args.staging, "bench", 1),
        server=hook.server_state(),
    )
    return {"rows": manifest["stats"]["rows"], "seconds": time.monotonic() - started}


def reader_raw(args: argparse.Namespace) -> dict:
    from pymysqlreplication import BinLogStreamReader
    from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

    from airflow_provider_binlog.source.positions import BinlogPosition

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
    parser.add_argument("--reader", choices=["ours", "raw"])
    parser.add_argument("--start", type=json.loads)
    parser.add_argument("--end", type=json.loads)
    parser.add_argument("--port", type=int)
    parser.add_argument("--password")
    parser.add_argument("--staging")
    args = parser.parse_args()
    if args.reader:
        result = reader_ours(args) if args.reader == "ours" else reader_raw(args)
        print(json.dumps(result))
        return 0
    return run_benchmark(args)


def run_benchmark(args: argparse.Namespace) -> int:
    from airflow_provider_binlog.testing.mariadb import LocalMariaDB

    if shutil.which("sysbench") is None:
        raise SystemExit("sysbench is not installed: apt-get install sysbench (make benchmark does)")
    workdir = Path(tempfile.mkdtemp(prefix="binlog-bench-"))
    with LocalMariaDB(base_dir=workdir / "mariadb") as server:
        server.execute("CREATE DATABASE sbtest")
        sysbench(server, "prepare")
        start = head(server)
        sysbench(server, "run", f"--events={args.events}", "--time=0", "--threads=2", "--rand-seed=1")
        end = head(server)
        os.environ["AIRFLOW_CONN_BINLOG_DEFAULT"] = server.uri()
        common = [f"--start={json.dumps(start)}", f"--end={json.dumps(end)}", f"--port={server.port}"]
        common += [f"--password={server.root_password}", f"--staging={workdir / 'staging'}"]
        me = [sys.executable, __file__]
        results = {
            "ours (extract to Parquet)": measure([*me, "--reader", "ours", *common]),
            "raw mysql-replication loop": measure([*me, "--reader", "raw", *common]),
            "mariadb-binlog --verbose (C)": measure(mariadb_binlog_command(server, start, end)),
        }
    shutil.rmtree(workdir, ignore_errors=True)
    table = render(results, args.events)
    print(table)
    if args.write_docs:
        write_docs(table)
    return 0


def render(results: dict[str, tuple[dict, float, int]], events: int) -> str:
    raw_rate = None
    lines = [
        "| reader | row changes | seconds | rows/s | vs. raw loop | peak RSS (MiB) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    rates = {}
    for name, (report, wall, _rss) in results.items():
        seconds = report.get("seconds", wall)
        rates[name] = report["rows"] / seconds
    raw_rate = rates["raw mysql-replication loop"]
    for name, (report, wall, rss) in results.items():
        seconds = report.get("seconds", wall)
        lines.append(
            f"| {name} | {report['rows']} | {seconds:.1f} | {rates[name]:,.0f} | "
            f"{rates[name] / raw_rate:.2f}x | {rss / 1024:.0f} |"
        )
    header = (
        f"sysbench oltp_write_only, {events} events, {TABLES} tables, MariaDB 10.11, one run on "
        f"{os.cpu_count()} cores ({time.strftime('%Y-%m-%d')})\n\n"
    )
    return header + "\n".join(lines)


def write_docs(table: str) -> None:
    write_block("extract_throughput", "Extract throughput (`benchmarks/extract_throughput.py`)", table)


if __name__ == "__main__":
    sys.exit(main())
