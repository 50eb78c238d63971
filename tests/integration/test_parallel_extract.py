"""A window spanning several binlog files, read file by file in worker processes, stages what a serial read stages.

A private MariaDB with a small ``max_binlog_size`` (and ``FLUSH BINARY LOGS`` where a statement must land in a
given file) so each window spans four files or more.
"""

from __future__ import annotations

import glob
import logging
import os
import signal
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pyarrow.parquet as pq
import pymysql
import pytest

from airflow_provider_binlog.contract.positions import BinlogPosition
from airflow_provider_binlog.exceptions import ReplicationConnectionLostError
from airflow_provider_binlog.extract.parallel import SPOOLED_FILES
from airflow_provider_binlog.extract.reader import ReaderState, SnapshotCover, TableTarget, WindowReader
from airflow_provider_binlog.extract.window import extract_window
from airflow_provider_binlog.hooks.binlog import BinlogHook
from airflow_provider_binlog.pipeline.ledger import Window, now_iso
from airflow_provider_binlog.pipeline.staging import window_path
from airflow_provider_binlog.testing.mariadb import CDC_SETTINGS, LocalMariaDB

pytestmark = pytest.mark.integration
TABLES = {"p.a": ["id"], "p.b": ["id"], "p.c": ["id"]}


@pytest.fixture(scope="module")
def server() -> Iterator[LocalMariaDB]:
    """A private server rotating its binlog every 64 KiB."""
    with LocalMariaDB(options={**CDC_SETTINGS, "max-binlog-size": "65536"}) as db:
        yield db


@pytest.fixture
def source(server: LocalMariaDB, monkeypatch: pytest.MonkeyPatch) -> Iterator[LocalMariaDB]:
    """Tables ``p.a``, ``p.b``, ``p.c`` (selected) and ``p.u`` (not), dropped afterwards."""
    monkeypatch.setenv("AIRFLOW_CONN_BINLOG_DEFAULT", server.uri())
    server.execute(
        "CREATE DATABASE p",
        "CREATE TABLE p.a (id INT PRIMARY KEY, v VARCHAR(40), n INT)",
        "CREATE TABLE p.b (id INT PRIMARY KEY, amount DECIMAL(10,2), note TEXT)",
        "CREATE TABLE p.c (id INT PRIMARY KEY, s VARCHAR(20))",
        "CREATE TABLE p.u (id INT PRIMARY KEY, s VARCHAR(20))",
    )
    yield server
    server.execute("DROP DATABASE p")


def head() -> BinlogPosition:
    position = BinlogHook(pipeline="test").server_state().head
    assert position is not None
    return position


def run(server: LocalMariaDB, *statements: str, statement_format: bool = False) -> None:
    """Run ``statements`` in one session (``binlog_format=STATEMENT`` when asked), autocommit."""
    conn = pymysql.connect(**server.connection_kwargs())
    try:
        with conn.cursor() as cur:
            if statement_format:
                cur.execute("SET SESSION binlog_format = 'STATEMENT'")
            for statement in statements:
                cur.execute(statement)
    finally:
        conn.close()


def rows_workload(server: LocalMariaDB, base: int, count: int = 300) -> None:
    """Single-row inserts into ``a`` and ``b``, one transaction of many rows, updates (a key move), deletes."""
    conn = pymysql.connect(**server.connection_kwargs(autocommit=False))
    try:
        with conn.cursor() as cur:
            for i in range(base, base + count):
                cur.execute("INSERT INTO p.a (id, v, n) VALUES (%s, %s, %s)", (i, f"v{i}" * 3, i % 7))
                cur.execute("INSERT INTO p.b VALUES (%s, %s, %s)", (i, f"{i}.25", "note " * (i % 9)))
                conn.commit()
            cur.executemany(
                "INSERT INTO p.c VALUES (%s, %s)", [(i, f"c{i}") for i in range(base, base + count)]
            )
            cur.execute("UPDATE p.a SET n = n + 1 WHERE id BETWEEN %s AND %s", (base, base + 40))
            conn.commit()  # a transaction of several hundred rows over two tables
            cur.execute("UPDATE p.a SET id = id + 100000 WHERE id = %s", (base + 1,))  # the key moves
            cur.execute("DELETE FROM p.b WHERE id BETWEEN %s AND %s", (base, base + 10))
            conn.commit()
            cur.execute("INSERT INTO p.a (id, v, n) VALUES (%s, 'rolled back', 0)", (base + 50_000,))
            conn.rollback()
    finally:
        conn.close()


def workload_in_parts(
    server: LocalMariaDB, *, count: int = 300, unselected_statements: bool = False
) -> tuple[BinlogPosition, BinlogPosition]:
    """Run :func:`rows_workload` 4 times, each part ending with ``FLUSH BINARY LOGS``; return its window.

    :param unselected_statements: also a statement-based write to the unselected ``p.u`` in each part.
    """
    start = head()
    for part in range(4):
        rows_workload(server, base=part * 2000, count=count)
        if unselected_statements:
            run(server, f"INSERT INTO p.u VALUES ({part}, 'statement')", statement_format=True)
        run(server, "FLUSH BINARY LOGS")
    return start, head()


def extract(
    staging: Path,
    start: BinlogPosition,
    end: BinlogPosition,
    *,
    workers: int,
    history: tuple[str, ...] = (),
    **kwargs: Any,
) -> dict[str, Any]:
    hook = BinlogHook(pipeline="test")
    window = Window(seq=3, start=(start), end=(end), run_id="r", cut_at=now_iso())
    return extract_window(
        hook,
        pipeline="test",
        window=window,
        tables={name: TableTarget(name, key, history=history) for name, key in TABLES.items()},
        window_dir=window_path(str(staging), "test", 3),
        server=hook.server_state(),
        max_workers=workers,
        parallel_min_bytes=0,
        **kwargs,
    ).to_json()


def staged(staging: Path, manifest: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """Return every staged row per table, file by file in the manifest's order (all ``_binlog_*`` columns)."""
    folder = staging / "test" / "window=3"
    return {
        table: [row for name in entry["files"] for row in pq.read_table(folder / name).to_pylist()]
        for table, entry in manifest["tables"].items()
    }


def without_timings(manifest: dict[str, Any]) -> dict[str, Any]:
    body = {k: v for k, v in manifest.items() if k != "created_at"}
    body["stats"] = {k: v for k, v in manifest["stats"].items() if k != "read_seconds"}
    return body


def files_between(start: BinlogPosition, end: BinlogPosition) -> int:
    return int(end.file.rsplit(".", 1)[1]) - int(start.file.rsplit(".", 1)[1]) + 1


def test_parallel_read_stages_the_serial_reads_rows_keys_and_manifest(
    source: LocalMariaDB, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    start, end = workload_in_parts(source, unselected_statements=True)
    assert files_between(start, end) >= 4

    history = {"p.unselected": []}  # the schema history of a table no longer selected: not carried on
    serial = extract(tmp_path / "serial", start, end, workers=1, schemas=history)
    with caplog.at_level(logging.INFO, logger="airflow_provider_binlog.extract.parallel"):
        parallel = extract(tmp_path / "parallel", start, end, workers=2, schemas=history)

    files = files_between(start, end)
    assert caplog.text.count("read by a worker") == files // 2  # the task process reads every other file
    assert caplog.text.count("read by the task process") == files - files // 2 - 1  # and the last, to the end
    assert "serial reader reads from" not in caplog.text
    assert "read on" not in caplog.text
    assert without_timings(parallel) == without_timings(serial)
    assert serial["stats"]["statements_ignored"] == 4
    assert staged(tmp_path / "parallel", parallel) == staged(tmp_path / "serial", serial)
    seqs = sorted(r["_binlog_seq"] for rows in staged(tmp_path / "serial", serial).values() for r in rows)
    assert seqs == list(range(1, len(seqs) + 1))


def test_with_history_every_update_is_staged_with_its_before_image_in_parallel_as_serially(
    source: LocalMariaDB, tmp_path: Path
) -> None:
    start, end = workload_in_parts(source, count=100)
    plain = extract(tmp_path / "plain", start, end, workers=1)
    serial = extract(tmp_path / "serial", start, end, workers=1, history=("changelog",))
    parallel = extract(tmp_path / "parallel", start, end, workers=2, history=("changelog",))
    assert without_timings(parallel) == without_timings(serial)
    assert staged(tmp_path / "parallel", parallel) == staged(tmp_path / "serial", serial)
    assert all(entry["history"] == ["changelog"] for entry in serial["tables"].values())
    with_history, without = (
        staged(tmp_path / "serial", serial)["p.a"],
        staged(tmp_path / "plain", plain)["p.a"],
    )
    # The same rows at the same order keys as without history, each with the before image of its update
    assert [{k: v for k, v in r.items() if k != "_binlog_before"} for r in with_history] == without
    assert "_binlog_before" not in without[0]
    updates = [r for r in with_history if r["_binlog_op"] == "u"]
    assert updates
    by_seq = {r["_binlog_seq"]: r for r in with_history}
    moves = 0
    for update in updates:
        before = update["_binlog_before"]
        assert set(before) == {k for k in update if not k.startswith("_binlog_")}
        if before["id"] == update["id"]:  # UPDATE ... SET n = n + 1
            assert before["n"] == update["n"] - 1
            continue
        moves += 1  # the key moved: the delete staged before it carries the same before image
        delete = by_seq[update["_binlog_seq"] - 1]
        assert delete["_binlog_op"] == "d"
        assert delete["_binlog_before"] == before
        assert {k: delete[k] for k in before} == before
    assert moves
    assert all(r["_binlog_before"] is None for r in with_history if r["_binlog_op"] == "c")

    # The statements of the rows events (MariaDB's ANNOTATE_ROWS events, asked for because a table keeps a change
    # log): the same entries read in parallel as serially, one per rows event of each table, the text once per
    # statement and table; a read without history records none.
    assert "statements" not in plain
    entries = {
        how: sorted(
            pq.read_table(tmp_path / how / "test" / "window=3" / manifest["statements"]).to_pylist(),
            key=lambda e: (e["_binlog_file"], e["_binlog_pos"], e["_binlog_table"]),
        )
        for how, manifest in (("serial", serial), ("parallel", parallel))
    }
    assert entries["parallel"] == entries["serial"]
    events = {(e["_binlog_table"], e["_binlog_file"], e["_binlog_pos"]) for e in entries["serial"]}
    assert len(events) == len(entries["serial"])
    for table, rows in staged(tmp_path / "serial", serial).items():
        assert {(table, r["_binlog_file"], r["_binlog_pos"]) for r in rows} <= events, table
    # each entry names the event's first change-log row: its first staged row, or the update after a moved row's delete
    by_seq = {
        r["_binlog_seq"]: (table, r)
        for table, rows in staged(tmp_path / "serial", serial).items()
        for r in rows
    }
    for e in entries["serial"]:
        table, row = by_seq[e["_binlog_seq"]]
        assert (table, row["_binlog_file"], row["_binlog_pos"]) == (
            e["_binlog_table"],
            e["_binlog_file"],
            e["_binlog_pos"],
        )
        assert row["_binlog_op"] != "d" or row["_binlog_before"] is None
        previous = by_seq.get(e["_binlog_seq"] - 1)
        assert (
            previous is None
            or previous[1]["_binlog_pos"] != row["_binlog_pos"]
            or previous[1]["_binlog_op"] == "d"
        )
    texts = Counter(
        (e["_binlog_table"], e["_binlog_file"], e["_binlog_statement_pos"])
        for e in entries["serial"]
        if e["_binlog_statement"]
    )
    assert set(texts.values()) == {1}
    assert set(texts) == {
        (e["_binlog_table"], e["_binlog_file"], e["_binlog_statement_pos"]) for e in entries["serial"]
    }


@pytest.mark.parametrize("reader", ["a worker", "the task process"])
def test_ddl_in_a_middle_file_reads_from_there_serially_and_stages_the_same(
    source: LocalMariaDB, tmp_path: Path, caplog: pytest.LogCaptureFixture, reader: str
) -> None:
    """A DDL of a selected table in a file a worker reads (it stops) or the task process reads (it reads on)."""
    start = head()
    rows_workload(source, base=0)
    run(source, "INSERT INTO p.u VALUES (1, 'statement')", statement_format=True)  # unselected: parallel
    run(source, "FLUSH BINARY LOGS")
    rows_workload(source, base=1000)
    run(source, "FLUSH BINARY LOGS")
    rows_workload(source, base=2000, count=100)
    ddl_at = head()
    run(source, "ALTER TABLE p.a ADD COLUMN extra INT")  # a DDL of a selected table in a middle file
    run(source, "INSERT INTO p.a VALUES (5000, 'after the DDL', 1, 42)")
    run(source, "FLUSH BINARY LOGS")
    rows_workload(source, base=3000)
    run(source, "TRUNCATE TABLE p.b")
    run(source, "INSERT INTO p.b VALUES (1, 1.50, 'after truncate')")
    run(source, "UPDATE p.c SET s = 'statement' WHERE id < 10", statement_format=True)  # covered below
    rows_workload(source, base=4000, count=100)
    end = head()
    # With two readers the task process reads the files at even distances from the window's first file.
    if (files_between(start, ddl_at) - 1) % 2 != (reader == "a worker"):
        start = BinlogPosition(f"{start.file[:-6]}{int(start.file[-6:]) + 1:06d}", 4)
    assert files_between(start, end) >= 4
    assert start.file < ddl_at.file < end.file
    covers = {"p.c": SnapshotCover(seq=9, start=end)}  # a snapshot after the window covers the statement

    serial = extract(tmp_path / "serial", start, end, workers=1, covers=covers)
    with caplog.at_level(logging.INFO, logger="airflow_provider_binlog.extract.parallel"):
        parallel = extract(tmp_path / "parallel", start, end, workers=2, covers=covers)

    assert caplog.text.count(" read by ") == files_between(start, ddl_at) - 1  # the files before the DDL's
    if reader == "a worker":
        assert "a DDL statement of a selected table" in caplog.text
    else:
        assert f"{ddl_at.file} holds a statement whose effect depends on earlier files" in caplog.text
    assert without_timings(parallel) == without_timings(serial)
    assert [e["query"] for e in serial["ddl"]] == [
        "ALTER TABLE p.a ADD COLUMN extra INT",
        "TRUNCATE TABLE p.b",
    ]
    assert serial["covered_tables"] == {"p.c": 9}
    assert staged(tmp_path / "parallel", parallel) == staged(tmp_path / "serial", serial)


def kill_first_worker(stop: threading.Event, killed: list[int]) -> None:
    """Kill (SIGKILL) the first worker process that shows up: a fork of this process (the server is not)."""
    me = psutil.Process()
    command = me.cmdline()
    while not stop.is_set():
        for child in me.children():
            try:
                if child.cmdline() == command:
                    os.kill(child.pid, signal.SIGKILL)
                    killed.append(child.pid)
                    return
            except psutil.Error:
                continue
        time.sleep(0.002)


def test_a_killed_worker_fails_the_read_retryably_and_the_retry_stages_the_same(
    source: LocalMariaDB, tmp_path: Path
) -> None:
    start, end = workload_in_parts(source, count=1500)
    serial = extract(tmp_path / "serial", start, end, workers=1)

    stop, killed = threading.Event(), []  # type: ignore[var-annotated]
    killer = threading.Thread(target=kill_first_worker, args=(stop, killed))
    killer.start()
    try:
        with pytest.raises(ReplicationConnectionLostError, match="ended without a result"):
            extract(tmp_path / "parallel", start, end, workers=2)
    finally:
        stop.set()
        killer.join()
    assert killed
    folder = tmp_path / "parallel" / "test" / "window=3"
    assert not (folder / "manifest.json").exists()

    retried = extract(tmp_path / "parallel", start, end, workers=2)  # the retry clears the folder first
    assert without_timings(retried) == without_timings(serial)
    assert staged(tmp_path / "parallel", retried) == staged(tmp_path / "serial", serial)


def most_spooled_while_the_task_lags(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, start: BinlogPosition, end: BinlogPosition, lag: float
) -> int:
    """Extract the window in parallel with the task process ``lag`` seconds slower per file of its own; return
    the most files a worker held spooled at once, and check the staged rows against a serial read's."""
    serial = extract(tmp_path / "serial", start, end, workers=1)
    spool_root = tmp_path / "tmp"
    spool_root.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(spool_root))  # the workers are forks: they inherit it
    hold = WindowReader.hold  # how the task process's reader ends a file of its own

    def slow_hold(self: WindowReader) -> ReaderState:
        time.sleep(lag)
        return hold(self)

    monkeypatch.setattr(WindowReader, "hold", slow_hold)
    stop, most = threading.Event(), [0]

    def watch() -> None:
        while not stop.is_set():
            files = glob.glob(f"{spool_root}/binlog-parallel-*/*/*.arrow")  # ignores folders going away
            spooled = {os.path.dirname(path) for path in files}
            most[0] = max(most[0], len(spooled))
            time.sleep(0.002)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        parallel = extract(tmp_path / "parallel", start, end, workers=2)
    finally:
        stop.set()
        watcher.join()
    assert without_timings(parallel) == without_timings(serial)
    assert staged(tmp_path / "parallel", parallel) == staged(tmp_path / "serial", serial)
    return most[0]


def test_a_worker_holds_at_most_two_spooled_files_while_the_task_lags(
    source: LocalMariaDB, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker reads ahead of the task only while fewer than ``SPOOLED_FILES`` of its files wait in the spool."""
    start, end = workload_in_parts(source)
    assert files_between(start, end) >= 10  # the worker's share: 5 files or more
    most = most_spooled_while_the_task_lags(tmp_path, monkeypatch, start, end, lag=0.3)
    assert most == SPOOLED_FILES  # it did read ahead, and no further


def test_a_worker_reads_its_next_file_while_the_result_of_a_large_file_waits_for_the_task(
    source: LocalMariaDB, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker's result is larger than a pipe's buffer once its file holds some 16,000 transactions (its trace:
    4 bytes each); sent through the pipe, it kept the worker waiting until the task took it."""
    run(source, "SET GLOBAL max_binlog_size = 67108864")  # 64 MiB: each part below stays in one file
    try:
        run(
            source,
            "CREATE PROCEDURE p.fill(first INT, n INT) BEGIN DECLARE i INT DEFAULT 0; "
            "WHILE i < n DO INSERT INTO p.c VALUES (first + i, 'one'); SET i = i + 1; END WHILE; END",
        )
        start = head()
        for part, transactions in enumerate([10, 18_000, 10, 18_000]):  # the worker reads parts 1 and 3
            run(source, f"CALL p.fill({part * 100_000}, {transactions})", "FLUSH BINARY LOGS")
        end = head()
    finally:
        run(source, "SET GLOBAL max_binlog_size = 65536")
    assert files_between(start, end) == 5  # the four parts, and the empty file after them
    # The task ends each file of its own 3 s late: time for the worker to read parts 1 and 3 (about 1 s each
    # on an idle machine, up to twice that under load) before the task takes part 1 (1 s was too short under load).
    most = most_spooled_while_the_task_lags(tmp_path, monkeypatch, start, end, lag=3.0)
    assert most == 2  # the worker read part 3 while the task had not taken part 1 yet


def test_a_one_file_window_is_read_serially(
    source: LocalMariaDB, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    run(source, "FLUSH BINARY LOGS")
    start = head()
    run(source, "INSERT INTO p.a VALUES (1, 'one', 1)", "UPDATE p.a SET n = 2 WHERE id = 1")
    end = head()
    assert start.file == end.file
    with caplog.at_level(logging.INFO, logger="airflow_provider_binlog.extract"):
        manifest = extract(tmp_path, start, end, workers=2)
    assert "worker" not in caplog.text
    assert manifest["tables"]["p.a"]["rows"] == 2
