"""Guarantee 3 of issue 3: source restarts and rotations, with the example DAG, a real MariaDB and real Spark.

1. The server restarts while a window is being read. The reader never resumes on a new connection
   (mysql-replication would reconnect silently at the last event it received, often inside a transaction,
   to whatever server answers): the extract try fails with the retryable ``ReplicationConnectionLostError``,
   Airflow's retry re-reads exactly the same window into a cleared staging folder, and the next window,
   which spans the restart (the old file ends with a Stop event, not a Rotate), is read across it.
   Without the reconnect, a reader that pauses longer than the server's ``net_write_timeout`` must not be
   disconnected either (the reader's session raises that timeout); that one test calls the extract directly.
2. ``FLUSH BINARY LOGS`` many times inside one window, between transactions and while a workload writes:
   the window spans every file the rotations made and the target is exact.
3. A window spanning dozens of binlog files (``max_binlog_size`` at its minimum, 4096 bytes), one of them
   holding a transaction larger than the limit (a transaction is never split across files).

The DAG tests end with a row-by-row compare of every table with the source and check the checkpoint.
"""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pymysql
import pytest
from conftest import Pipeline as BasePipeline
from conftest import stored_state

from airflow_provider_binlog.contract.positions import file_index
from airflow_provider_binlog.testing.mariadb import LocalMariaDB
from airflow_provider_binlog.testing.workload import SHOP_TABLES, ShopWorkload, create_shop_schema

pytestmark = pytest.mark.system

ITEMS = 10_000
"""Narrow rows committed first in the restarted window: their Parquet file appearing means the read is on."""
BLOB_TRANSACTIONS = 20
BLOB_ROWS = 1_000
"""Rows per blob transaction."""
BLOB_CHARS = 2_000
"""Width of a blob row: 20 x 1,000 x 2,000 bytes ~ 40 MB of binlog after the first staged batch. The server
sends ahead of the reader only what the socket buffers hold (on Linux at most ``tcp_rmem`` max, 32 MiB here,
plus ``tcp_wmem`` max, 4 MiB), so a restart there is always seen by the reader before the window end."""
STALL_SECONDS = 4.0
"""How long the slow reader stops taking bytes: longer than the ``net_write_timeout`` (1 s) of the test."""
MIN_BINLOG_SIZE = 4096
"""The smallest ``max_binlog_size`` (MariaDB KB, "Replication and Binary Log System Variables")."""


class Pipeline(BasePipeline):
    """The shared pipeline harness; ``staged`` returns the records' op, id and order."""

    def staged(self, window: dict[str, Any], table: str) -> list[dict[str, Any]]:
        """Return the table's staged change records (``_binlog_op``, ``id``, ``_binlog_seq``)."""
        return self.staged_records(window, table, ["_binlog_op", "id", "_binlog_seq"])

    def mismatches(self, *tables: str) -> list[str]:
        """Compare each table with the target; the source must hold rows for the check to mean anything."""
        assert sum(int(self.sql(f"SELECT COUNT(*) FROM `{t}`")[0][0]) for t in tables) > 0
        return super().mismatches(*tables)


@pytest.fixture
def pipeline(connections: LocalMariaDB, scratch_db: str, pipeline_dirs: dict[str, str]) -> Pipeline:
    return Pipeline(connections, scratch_db, pipeline_dirs)


def files_spanned(manifest: dict[str, Any]) -> int:
    """Return how many binlog files the window touches (1 when it starts and ends in the same file)."""
    return file_index(manifest["end"]["file"]) - file_index(manifest["start"]["file"]) + 1


# --------------------------------------------------------------------------------------------------
# 1. A server restart in the middle of a window read (and a reader that pauses, which must not lose it)
# --------------------------------------------------------------------------------------------------


def write_wide_window(server: LocalMariaDB, db: str) -> None:
    """Narrow ``items`` rows first (staged after ~130 kB of binlog), then ~2 MB blob transactions."""
    server.execute(
        f"INSERT INTO items SELECT seq, CONCAT('v', seq), seq FROM {db}.seq_1_to_{ITEMS}", database=db
    )
    for t in range(BLOB_TRANSACTIONS):
        low, high = t * BLOB_ROWS + 1, (t + 1) * BLOB_ROWS
        server.execute(
            f"INSERT INTO blobs SELECT seq, REPEAT(CHAR(65 + seq % 26), {BLOB_CHARS}) "
            f"FROM {db}.seq_{low}_to_{high}",
            database=db,
        )


class RestartAtFirstStagedBatch:
    """Restart the server from inside the extract, right after it staged its first batch (first try only).

    The reader is mid-window then, by construction: it has written rows and has the rest of the window to
    read; it goes on reading after the restart returns.
    """

    def __init__(self, server: LocalMariaDB) -> None:
        self.server = server
        self.restarts = 0
        self.restart_seconds = 0.0

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from airflow_provider_binlog.extract.writer import TableWriter

        original = TableWriter.write

        def write(writer: TableWriter, *args: Any) -> None:
            original(writer, *args)
            if not self.restarts:
                self.restarts += 1
                started = time.monotonic()
                self.server.restart()
                self.restart_seconds = time.monotonic() - started

        monkeypatch.setattr(TableWriter, "write", write)


@pytest.mark.slow
def test_a_restart_during_the_read_fails_the_try_and_the_retry_rereads_the_window(
    pipeline: Pipeline, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    server, db = pipeline.server, pipeline.db
    pipeline.sql(
        "CREATE TABLE items (id INT PRIMARY KEY, v VARCHAR(40), n BIGINT)",
        f"CREATE TABLE blobs (id INT PRIMARY KEY, pad VARCHAR({BLOB_CHARS}))",
    )
    pipeline.run_window()  # a new pipeline starts at the head: empty first window
    write_wide_window(server, db)
    pipeline.sql("UPDATE items SET n = n + 1 WHERE id % 3 = 0", "DELETE FROM items WHERE id % 7 = 0")
    files_before = len(server.execute("SHOW BINARY LOGS"))

    # The extract stages the items (committed first) after ~130 kB of the window's ~40 MB: restart then.
    restarter = RestartAtFirstStagedBatch(server)
    restarter.install(monkeypatch)
    pipeline.runner.dag.task_dict["extract"].retry_delay = dt.timedelta(seconds=2)
    capfd.readouterr()
    window = pipeline.run_window(pipeline.runner.next_dates())
    output = "".join(capfd.readouterr())
    assert restarter.restarts == 1
    print(f"restart took {restarter.restart_seconds:.1f} s")
    assert len(server.execute("SHOW BINARY LOGS")) == files_before + 1, "no new binlog file after the restart"

    # The first try failed on the lost connection, with the message a user sees; the retry read it all.
    assert "ReplicationConnectionLostError" in output, (
        "the restart did not break the read (fault not injected)"
    )
    print(next(line for line in output.splitlines() if "lost the replication connection" in line))
    assert f"while reading window {window['seq']}" in output
    assert "re-reads the same window from its start" in output
    assert "Re-request the connection" not in output, "mysql-replication reconnected silently"
    tries = {ti.task_id: ti.try_number for ti in pipeline.last_run.get_task_instances()}
    assert tries == {"purge_risk": 1, "snapshot": 1, "extract": 2, "merge": 1, "commit": 1, "quarantine": 1}
    run_state = stored_state(pipeline.name)
    assert run_state is not None
    assert len(run_state["windows"]) == 2, "the retry cut a new window instead of re-reading its own"

    # Staged exactly once each, in one gapless order: nothing of the failed try leaked into the retry's files.
    manifest = pipeline.manifest(window)
    print(f"retry read {manifest['stats']['binlog_bytes']} bytes in {manifest['stats']['read_seconds']} s")
    assert manifest["tables"][f"{db}.items"]["ops"] == {"c": ITEMS, "u": ITEMS // 3, "d": ITEMS // 7}
    assert manifest["tables"][f"{db}.blobs"]["ops"] == {"c": BLOB_TRANSACTIONS * BLOB_ROWS}
    items, blobs = pipeline.staged(window, "items"), pipeline.staged(window, "blobs")
    assert Counter((r["_binlog_op"], r["id"]) for r in items) == Counter(
        [("c", i) for i in range(1, ITEMS + 1)]
        + [("u", i) for i in range(3, ITEMS + 1, 3)]
        + [("d", i) for i in range(7, ITEMS + 1, 7)]
    )
    assert sorted(r["id"] for r in blobs) == list(range(1, BLOB_TRANSACTIONS * BLOB_ROWS + 1))
    seqs = sorted(r["_binlog_seq"] for r in items + blobs)
    assert seqs == list(range(1, len(seqs) + 1))
    assert pipeline.mismatches("items", "blobs") == []

    # The next window starts before the restart and ends after it: read across the Stop event.
    pipeline.sql(
        "INSERT INTO items VALUES (0, 'after the restart', 0)", "UPDATE blobs SET pad = 'x' WHERE id = 1"
    )
    after = pipeline.run_window()
    assert files_spanned(pipeline.manifest(after)) == 2
    assert pipeline.manifest(after)["tables"][f"{db}.items"]["ops"] == {"c": 1}
    assert pipeline.mismatches("items", "blobs") == []


def test_a_reader_slower_than_net_write_timeout_keeps_its_connection(
    pipeline: Pipeline, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The source drops a dump connection it could not write to for ``net_write_timeout`` seconds; with no
    reconnect that would fail every retry of a window whose reader pauses (writing a large committed
    transaction to staging). The reader's session raises the timeout, so a pause is harmless."""
    from airflow_provider_binlog.extract.reader import TableTarget
    from airflow_provider_binlog.extract.window import extract_window
    from airflow_provider_binlog.extract.writer import TableWriter
    from airflow_provider_binlog.hooks.binlog import BinlogHook
    from airflow_provider_binlog.pipeline.ledger import Window, now_iso
    from airflow_provider_binlog.pipeline.staging import window_path

    server, db = pipeline.server, pipeline.db
    pipeline.sql(
        "CREATE TABLE items (id INT PRIMARY KEY, v VARCHAR(40), n BIGINT)",
        f"CREATE TABLE blobs (id INT PRIMARY KEY, pad VARCHAR({BLOB_CHARS}))",
    )
    hook = BinlogHook(pipeline=pipeline.name)
    start = hook.server_state().head
    assert start is not None
    write_wide_window(server, db)
    state = hook.server_state()
    assert state.head is not None
    window = Window(seq=1, start=(start), end=(state.head), run_id="r", cut_at=now_iso())
    stalls: list[float] = []
    original = TableWriter.write

    def slow_write(self: TableWriter, *args: Any) -> None:
        if not stalls:  # the first write: the reader stops taking bytes for 4 s
            stalls.append(STALL_SECONDS)
            time.sleep(STALL_SECONDS)
        original(self, *args)

    monkeypatch.setattr(TableWriter, "write", slow_write)
    previous = server.execute("SELECT @@GLOBAL.net_write_timeout")[0][0]
    server.execute("SET GLOBAL net_write_timeout = 1")
    try:
        manifest = extract_window(
            hook,
            pipeline=pipeline.name,
            window=window,
            tables={
                f"{db}.items": TableTarget(f"{db}.items", ["id"]),
                f"{db}.blobs": TableTarget(f"{db}.blobs", ["id"]),
            },
            window_dir=window_path(str(tmp_path / "staging"), pipeline.name, 1),
            server=state,
        ).to_json()
    finally:
        server.execute(f"SET GLOBAL net_write_timeout = {previous}")
    assert stalls == [STALL_SECONDS]
    assert manifest["tables"][f"{db}.items"]["rows"] == ITEMS
    assert manifest["tables"][f"{db}.blobs"]["rows"] == BLOB_TRANSACTIONS * BLOB_ROWS


# --------------------------------------------------------------------------------------------------
# 2. FLUSH BINARY LOGS inside a window, between transactions and while a workload writes
# --------------------------------------------------------------------------------------------------


@pytest.fixture
def shop(pipeline: Pipeline) -> Pipeline:
    with pymysql.connect(**pipeline.server.connection_kwargs()) as conn:
        create_shop_schema(conn, pipeline.db)
    return pipeline


class Flusher(threading.Thread):
    """Run ``FLUSH BINARY LOGS`` every ``every_seconds`` until stopped; count the flushes."""

    def __init__(self, server: LocalMariaDB, every_seconds: float) -> None:
        super().__init__(name="flusher", daemon=True)
        self.server = server
        self.every_seconds = every_seconds
        self.flushes = 0
        self.error: BaseException | None = None
        self.stopped = threading.Event()

    def run(self) -> None:
        try:
            while not self.stopped.wait(self.every_seconds):
                self.server.execute("FLUSH BINARY LOGS")
                self.flushes += 1
        except BaseException as err:  # surfaced by stop()
            self.error = err

    def stop(self) -> int:
        """Stop, wait for the last flush and return the count."""
        self.stopped.set()
        self.join(timeout=60)
        assert self.error is None, self.error
        return self.flushes


def test_flush_binary_logs_inside_a_window_while_a_workload_writes(shop: Pipeline) -> None:
    server = shop.server
    shop.run_window()
    # Between transactions of one session: the window starts with rotations.
    shop.sql("INSERT INTO products VALUES ('flush-1', 'before', 1.00, 1, NULL, NULL)")
    server.execute("FLUSH BINARY LOGS")
    shop.sql("UPDATE products SET title = 'between two flushes' WHERE sku = 'flush-1'")
    server.execute("FLUSH BINARY LOGS")
    # While a workload commits from another session.
    workload = ShopWorkload(
        connect=lambda: pymysql.connect(**server.connection_kwargs(autocommit=False)), db=shop.db, seed=3
    )
    flusher = Flusher(server, every_seconds=0.15)
    workload.start(100_000, pause_seconds=0.002)
    flusher.start()
    time.sleep(3)
    flushes = flusher.stop()
    counts = workload.stop()
    server.execute("FLUSH BINARY LOGS")  # the window ends at the first transaction boundary of a new file
    shop.sql("DELETE FROM products WHERE sku = 'flush-1'")

    window = shop.run_window()
    manifest = shop.manifest(window)
    print(
        f"{sum(counts.values())} transactions, {flushes} concurrent flushes, {files_spanned(manifest)} files"
    )
    assert flushes >= 10
    assert sum(counts.values()) >= 100
    assert manifest["start"]["file"] != manifest["end"]["file"]
    # Every rotation is inside the window: the two between transactions, the concurrent ones, the last one.
    assert files_spanned(manifest) == 1 + 2 + flushes + 1
    assert (window["start"], window["end"]) == (manifest["start"], manifest["end"])
    assert shop.mismatches(*SHOP_TABLES) == []


# --------------------------------------------------------------------------------------------------
# 3. A window spanning dozens of binlog files
# --------------------------------------------------------------------------------------------------


@pytest.fixture
def tiny_binlogs(connections: LocalMariaDB) -> Iterator[None]:
    """Make the server rotate its binlog after every ~4 kB; restore the limit afterwards."""
    previous = int(connections.execute("SELECT @@GLOBAL.max_binlog_size")[0][0])
    connections.execute(f"SET GLOBAL max_binlog_size = {MIN_BINLOG_SIZE}")
    try:
        yield
    finally:
        connections.execute(f"SET GLOBAL max_binlog_size = {previous}")


def test_a_window_spanning_dozens_of_binlog_files(shop: Pipeline, tiny_binlogs: None) -> None:
    server = shop.server
    shop.sql("CREATE TABLE bulk (id INT PRIMARY KEY, v VARCHAR(40))")
    shop.run_window()
    workload = ShopWorkload(
        connect=lambda: pymysql.connect(**server.connection_kwargs(autocommit=False)), db=shop.db, seed=5
    )
    workload.run(300)
    # One transaction much larger than max_binlog_size: it goes whole into one file, which outgrows the limit.
    shop.sql(f"INSERT INTO bulk SELECT seq, CONCAT('bulk', seq) FROM {shop.db}.seq_1_to_5000")
    for key in range(1, 41):  # and small transactions after it, in files of their own again
        shop.sql(f"UPDATE bulk SET v = 'updated {key}' WHERE id = {key * 100}")

    window = shop.run_window()
    manifest = shop.manifest(window)
    low, high = file_index(manifest["start"]["file"]), file_index(manifest["end"]["file"])
    sizes = {f: int(size) for f, size in server.execute("SHOW BINARY LOGS") if low <= file_index(f) <= high}
    print(f"window spans {files_spanned(manifest)} binlog files; largest {max(sizes.values())} bytes")
    assert files_spanned(manifest) >= 20
    assert len(sizes) == files_spanned(manifest)
    assert max(sizes.values()) > 10 * MIN_BINLOG_SIZE  # the 5,000-row transaction, whole in one file
    assert manifest["tables"][f"{shop.db}.bulk"]["ops"] == {"c": 5000, "u": 40}
    assert manifest["stats"]["binlog_bytes"] > 20 * MIN_BINLOG_SIZE
    assert shop.mismatches(*SHOP_TABLES, "bulk") == []
