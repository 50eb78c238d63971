"""Which windows are read in parallel, cut how, and how many rows the serial reader would hold per file."""

from __future__ import annotations

import subprocess
import sys

import pytest

from airflow_provider_binlog.contract.positions import BinlogPosition as P
from airflow_provider_binlog.extract import parallel
from airflow_provider_binlog.extract.file_worker import FileRange
from airflow_provider_binlog.extract.parallel import PARALLEL_MIN_BYTES, file_ranges, held_after, worker_count
from airflow_provider_binlog.extract.reader import BATCH_ROWS

FILES = [("bin.000007", 900), ("bin.000008", 1000), ("bin.000009", 1000), ("bin.000010", 500)]


def test_a_window_is_cut_at_file_boundaries_where_the_rotate_moves_the_reader() -> None:
    assert file_ranges(P("bin.000007", 300), P("bin.000010", 200), FILES) == [
        FileRange(P("bin.000007", 300), P("bin.000008", 4)),
        FileRange(P("bin.000008", 4), P("bin.000009", 4)),
        FileRange(P("bin.000009", 4), P("bin.000010", 4)),
        FileRange(P("bin.000010", 4), P("bin.000010", 200)),
    ]


def test_a_window_ending_at_a_file_start_has_no_range_in_that_file() -> None:
    assert file_ranges(P("bin.000008", 4), P("bin.000009", 4), FILES) == [
        FileRange(P("bin.000008", 4), P("bin.000009", 4))
    ]


def test_a_window_with_a_file_not_listed_is_not_cut() -> None:
    assert file_ranges(P("bin.000007", 4), P("bin.000010", 4), [FILES[0], FILES[2], FILES[3]]) == []
    assert file_ranges(P("bin.000006", 4), P("bin.000008", 4), FILES) == []


@pytest.mark.parametrize(
    ("files", "binlog_bytes", "max_workers", "cpus", "expected"),
    [
        (4, 10**9, None, 2, 2),  # min(files, CPUs)
        (2, 10**9, None, 8, 2),
        (4, 10**9, 3, 8, 3),  # the operator's cap
        (1, 10**9, None, 8, 0),  # one file: serial
        (4, 10**9, 1, 8, 0),  # off
        (4, 1000, None, 8, 0),  # too small to pay for the workers' start
        (4, 10**9, None, 1, 0),  # one CPU
    ],
)
def test_worker_count(
    files: int,
    binlog_bytes: int,
    max_workers: int | None,
    cpus: int,
    expected: int,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(parallel.os, "cpu_count", lambda: cpus)
    ranges = [FileRange(P(f"bin.{i:06d}", 4), P(f"bin.{i + 1:06d}", 4)) for i in range(1, files + 1)]
    assert worker_count(ranges, binlog_bytes, max_workers=max_workers, min_bytes=64 << 20) == expected


def test_held_rows_follow_the_serial_readers_flushes() -> None:
    assert held_after(0, [3, 4]) == 7
    assert held_after(BATCH_ROWS - 5, [3]) == BATCH_ROWS - 2
    assert held_after(BATCH_ROWS - 5, [3, 2, 6]) == 6  # the commit reaching BATCH_ROWS hands all to the sink
    assert held_after(100, [5, -1, 0, 7]) == 7  # a spill hands the rows held to the sink
    assert held_after(100, []) == 100


def test_the_operator_refuses_fewer_than_one_worker() -> None:
    from airflow_provider_binlog.operators import BinlogExtractOperator

    common = {"task_id": "extract", "pipeline": "p", "tables": "db.t", "staging_uri": "/tmp/s"}
    assert BinlogExtractOperator(**common).max_extract_workers is None  # default: one worker per CPU
    assert BinlogExtractOperator(**common, max_extract_workers=1).max_extract_workers == 1  # off
    with pytest.raises(ValueError, match="max_extract_workers"):
        BinlogExtractOperator(**common, max_extract_workers=0)


def test_the_parallel_read_threshold_comes_from_the_argument_else_the_binlog_setting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from airflow_provider_binlog.operators import BinlogExtractOperator

    common = {"task_id": "extract", "pipeline": "p", "tables": "db.t", "staging_uri": "/tmp/s"}
    monkeypatch.delenv("AIRFLOW__BINLOG__PARALLEL_READ_MIN_BYTES", raising=False)
    # The provider's configuration default, or None (the extract's PARALLEL_MIN_BYTES) where it is not loaded.
    assert BinlogExtractOperator(**common).parallel_read_min_bytes in (None, PARALLEL_MIN_BYTES)
    monkeypatch.setenv("AIRFLOW__BINLOG__PARALLEL_READ_MIN_BYTES", str(8 << 20))
    assert BinlogExtractOperator(**common).parallel_read_min_bytes == 8 << 20
    assert BinlogExtractOperator(**common, parallel_read_min_bytes=0).parallel_read_min_bytes == 0
    with pytest.raises(ValueError, match="parallel_read_min_bytes"):
        BinlogExtractOperator(**common, parallel_read_min_bytes=-1)


def test_a_shifted_seq_column_adds_the_offset_also_to_a_slice_and_imports_no_pandas() -> None:
    """``_shifted`` reads the column's data buffer, so a slice's offset counts; ``Array.to_numpy`` imported pandas."""
    code = """
import sys
import pyarrow as pa
from airflow_provider_binlog.contract.columns import SEQ_COLUMN
from airflow_provider_binlog.extract.batches import lean_arrow
from airflow_provider_binlog.extract.parallel import _shifted
lean_arrow()
seqs = pa.array([1, 2, 3, 5, 8, 13], pa.int64())
batch = pa.RecordBatch.from_arrays([pa.array(list("abcdef"), pa.string()), seqs], names=["v", SEQ_COLUMN]).slice(2, 3)
shifted = _shifted(batch, 1000)
assert shifted.column(SEQ_COLUMN).to_pylist() == [1003, 1005, 1008], shifted
assert shifted.column("v").to_pylist() == ["c", "d", "e"]
assert shifted.schema == batch.schema
assert "pandas" not in sys.modules
"""
    subprocess.run([sys.executable, "-c", code], check=True)
