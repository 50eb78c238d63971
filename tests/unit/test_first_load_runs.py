"""How a first load cuts the chunks' rows into files, and what it refuses (``snapshot/first_load.py``)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_provider_binlog.contract.columns import DELETED_COLUMN
from airflow_provider_binlog.snapshot.first_load import FileRun, FirstLoadRefused, plan_runs, write_run


def test_runs_cut_the_rows_at_the_file_size_across_chunks_and_read_the_row_before() -> None:
    runs = plan_runs(3, [("a", 4), ("empty", 0), ("b", 5), ("c", 2)], 5)

    assert runs == [
        FileRun(3, 0, (("a", 0, 4), ("b", 0, 1)), lead=0),
        FileRun(3, 1, (("b", 0, 5), ("c", 0, 1)), lead=1),  # row 4 (b's first) only to compare keys
        FileRun(3, 2, (("c", 0, 2),), lead=1),
    ]
    assert [r.rows for r in runs] == [5, 5, 1]


def test_no_rows_make_no_runs() -> None:
    assert plan_runs(0, [("a", 0)], 10) == []


def write_chunk(path: Path, ids: list[int | None]) -> str:
    pq.write_table(pa.table({"id": pa.array(ids, pa.uint32()), "v": pa.array([str(i) for i in ids])}), path)
    return str(path)


SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string()), (DELETED_COLUMN, pa.bool_())])


def test_a_run_is_written_in_storage_types_with_live_rows(tmp_path: Path) -> None:
    chunk = write_chunk(tmp_path / "c.parquet", [1, 2, 3, 4])
    (run,) = plan_runs(0, [(chunk, 4)], 10)

    rows = write_run(run, str(tmp_path / "out.parquet"), SCHEMA, ["id"])

    written = pq.read_table(tmp_path / "out.parquet")
    assert rows == 4
    assert written.schema.equals(SCHEMA)
    assert written.to_pydict() == {
        "id": [1, 2, 3, 4],
        "v": ["1", "2", "3", "4"],
        DELETED_COLUMN: [False] * 4,
    }


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ([1, 2, 3], [3, 4]),  # a key repeats across the chunks (a named key that is not unique)
        ([1, 5, 3], [6, 7]),  # not in the order the file must keep
        ([1, 2, None], [6, 7]),  # a null key
    ],
)
def test_a_run_whose_key_does_not_strictly_increase_is_refused(
    tmp_path: Path, first: list[int | None], second: list[int]
) -> None:
    chunks = [
        (write_chunk(tmp_path / "a.parquet", first), 3),
        (write_chunk(tmp_path / "b.parquet", second), 2),
    ]
    runs = plan_runs(0, chunks, 3)  # the second run starts at the second chunk and reads the row before

    refused = []
    for n, run in enumerate(runs):
        try:
            write_run(run, str(tmp_path / f"out-{n}.parquet"), SCHEMA, ["id"])
        except FirstLoadRefused:
            refused.append(n)

    assert refused
    assert not any((tmp_path / f"out-{n}.parquet").exists() for n in refused)  # refused files are deleted
