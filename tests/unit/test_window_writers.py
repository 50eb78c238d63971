"""The window's Parquet writers in their own thread (``extract.writer.WindowWriters``): output, bound, errors."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from airflow.sdk import ObjectStoragePath

from airflow_provider_binlog.extract import writer as writer_module
from airflow_provider_binlog.extract.batches import ChangeBatchBuilder
from airflow_provider_binlog.extract.columns import ColumnSpec
from airflow_provider_binlog.extract.writer import TableWriter, WindowWriters

SPECS = [ColumnSpec("id", "int", pa.int32())]


def batch(first: int, count: int, op: str = "c") -> pa.RecordBatch:
    """Return a committed batch of ``count`` rows with ids and seqs from ``first`` on."""
    builder = ChangeBatchBuilder(SPECS, window=1)
    builder.add_images(op, [[i] for i in range(first, first + count)], first, "bin.000001", 100 + first)
    builder.commit("0-1-1", 1_700_000_000_000_000)
    return builder.take_committed()


def window_dir(tmp_path: Path) -> ObjectStoragePath:
    return ObjectStoragePath(f"file://{tmp_path}/window=1")


def staged_ids(tmp_path: Path, table: str) -> list[int]:
    files = sorted((tmp_path / "window=1" / table).glob("part-*.parquet"))
    return [i for f in files for i in pq.read_table(f).column("id").to_pylist()]


@pytest.mark.parametrize("threaded", [True, False])
def test_batches_of_several_tables_are_written_in_order_and_close_returns_what_was_written(
    tmp_path: Path, threaded: bool
) -> None:
    def writer_threads() -> int:  # by name: threads other tests left behind may end meanwhile
        return sum(t.name == "binlog-window-writers" and t.is_alive() for t in threading.enumerate())

    before = writer_threads()
    writers = WindowWriters(window_dir(tmp_path), threaded=threaded)
    assert writer_threads() == before + threaded  # unthreaded: nothing running when the process forks
    writers.write("db.a", batch(1, 3), SPECS, ["id"])
    writers.write("db.b", batch(4, 2, "d"), SPECS, ["id"])
    writers.write("db.a", batch(6, 2, "u"), SPECS, ["id"])
    outputs = writers.close()

    assert sorted(outputs) == ["db.a", "db.b"]
    assert (outputs["db.a"].rows, dict(outputs["db.a"].ops)) == (5, {"c": 3, "u": 2})
    assert (outputs["db.b"].rows, dict(outputs["db.b"].ops)) == (2, {"d": 2})
    assert outputs["db.a"].files == ["db.a/part-00000.parquet"]
    assert staged_ids(tmp_path, "db.a") == [1, 2, 3, 6, 7]
    assert staged_ids(tmp_path, "db.b") == [4, 5]


@pytest.mark.parametrize("threaded", [True, False])
def test_discard_removes_a_tables_files_after_the_batches_handed_over_before(
    tmp_path: Path, threaded: bool
) -> None:
    writers = WindowWriters(window_dir(tmp_path), threaded=threaded)
    writers.write("db.a", batch(1, 3), SPECS, ["id"])
    writers.write("db.b", batch(4, 1), SPECS, ["id"])
    writers.discard("db.a")
    outputs = writers.close()

    assert sorted(outputs) == ["db.b"]
    assert not list((tmp_path / "window=1" / "db.a").glob("*.parquet"))
    assert staged_ids(tmp_path, "db.b") == [4]


def test_an_error_of_the_thread_is_raised_by_the_next_call_and_nothing_is_written_after_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = TableWriter.write
    written: list[int] = []
    gate, failed = threading.Event(), threading.Event()
    disk_full = OSError(28, "No space left on device")

    def write(self: TableWriter, data: pa.RecordBatch, columns: Any) -> None:
        first = data.column("id")[0].as_py()
        if first == 4:
            gate.wait()  # the next batch is handed over before this one fails
            failed.set()
            raise disk_full
        written.append(first)
        original(self, data, columns)

    monkeypatch.setattr(TableWriter, "write", write)
    writers = WindowWriters(window_dir(tmp_path))
    writers.write("db.a", batch(1, 3), SPECS, ["id"])
    writers.write("db.a", batch(4, 1), SPECS, ["id"])
    writers.write("db.a", batch(5, 1), SPECS, ["id"])  # queued behind the batch that fails
    gate.set()
    failed.wait()
    while writers._error is None:  # recorded just after the raise, under the queue's lock
        time.sleep(0.01)
    with pytest.raises(OSError) as raised:  # the caller's next call raises the thread's exception itself
        writers.write("db.a", batch(6, 1), SPECS, ["id"])
    assert raised.value is disk_full
    with pytest.raises(OSError) as raised_again:
        writers.close()
    assert raised_again.value is disk_full
    assert written == [1]  # the batches after the failed one were never written


def test_an_error_met_while_the_caller_waits_for_room_is_raised_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = TableWriter.write
    gate = threading.Event()
    broken = RuntimeError("the object store refused the write")

    def write(self: TableWriter, data: pa.RecordBatch, columns: Any) -> None:
        gate.wait()
        if data.column("id")[0].as_py() == 1:
            raise broken
        original(self, data, columns)

    monkeypatch.setattr(TableWriter, "write", write)
    monkeypatch.setattr(writer_module, "QUEUE_BYTES", 1)  # room for one batch: the second write waits
    writers = WindowWriters(window_dir(tmp_path))
    writers.write("db.a", batch(1, 1), SPECS, ["id"])
    outcome: list[BaseException] = []

    def second() -> None:
        try:
            writers.write("db.a", batch(2, 1), SPECS, ["id"])
        except BaseException as err:
            outcome.append(err)

    caller = threading.Thread(target=second)
    caller.start()
    caller.join(0.5)
    assert caller.is_alive(), "the second write did not wait for room (the queue is unbounded)"
    gate.set()
    caller.join()
    assert outcome == [broken]
    writers.abort()
    assert staged_ids(tmp_path, "db.a") == []


def test_abort_stops_the_thread_and_drops_what_was_handed_over(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = TableWriter.write
    gate = threading.Event()
    written: list[int] = []

    def write(self: TableWriter, data: pa.RecordBatch, columns: Any) -> None:
        gate.wait()
        written.append(data.column("id")[0].as_py())
        original(self, data, columns)

    monkeypatch.setattr(TableWriter, "write", write)
    writers = WindowWriters(window_dir(tmp_path))
    writers.write("db.a", batch(1, 1), SPECS, ["id"])
    writers.write("db.a", batch(2, 1), SPECS, ["id"])
    threading.Timer(0.2, gate.set).start()  # the thread is inside its first write when abort is called
    writers.abort()
    assert written in ([1], [])  # the write under way (if taken) finishes; the queued one is dropped
    assert not writers._thread.is_alive()
