"""Writing a first load's target files straight from the snapshot's chunk files (no shuffle, no merge).

A snapshot's chunks are disjoint key ranges read in key order (``ORDER BY`` the key, chunks planned by
walking it), so for a table the target does not hold yet, the merge's shuffle (newest change per key) and
range-partitioned write (sorted by key) would only put the rows back in the order they already have. The
driver (:mod:`airflow_provider_binlog.jobs.first_load`) cuts the chunks' rows, in key order, into runs of the
table's rows per file, one run per target file (:func:`plan_runs`); a Spark task streams each run's rows from
the chunk files into one data file of the table's schema (:func:`write_run`): the columns cast to their
storage types and ``_binlog_deleted = false``, as ``conform_changes`` gives them to the merge. The task checks
that the key has no null and strictly increases over the run, from the last row of the run before, in the
order Parquet statistics and Spark compare values: if not (a named key that repeats, strings the source's
collation orders otherwise than their bytes), the table is refused (:class:`FirstLoadRefused`) and the driver
merges it the usual way.

Imports nothing from Airflow or Spark: it runs in Spark's Python workers
(``docs/adr/0026-first-load-without-a-shuffle.md``).
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from airflow_provider_binlog.contract.columns import DELETED_COLUMN
from airflow_provider_binlog.contract.uris import StorageOptions, filesystem_for, join_uri
from airflow_provider_binlog.snapshot.parquet import dictionary_columns

ROW_GROUP_ROWS = 131_072
"""Most rows of one row group of a first-load file (chunk files are read batch by batch and written in groups
of up to this many rows)."""
READ_ROWS = 65_536
"""Rows read from a chunk file per batch."""
WRITTEN_SCHEMA = "table_index long, path string, rows long, refused string"
"""Spark schema of what :func:`write_task` returns: one row per file written (or refused)."""


_WRITTEN = pa.schema(
    [
        pa.field("table_index", pa.int64()),
        pa.field("path", pa.string()),
        pa.field("rows", pa.int64()),
        pa.field("refused", pa.string()),
    ]
)


class FirstLoadRefused(Exception):
    """A table's staged rows are not in strictly increasing key order, or a key is null: it needs the merge."""


@dataclass(frozen=True)
class FileRun:
    """The rows of chunk files that become one target file.

    :param table_index: index of the table in the driver's list of first-load tables.
    :param file_index: index of the file within its table (in its name).
    :param parts: ``(chunk file, first row, rows)`` slices, in key order.
    :param lead: rows at the start of the parts that belong to the file before (0 or 1: its last row, read
        only to check that the key increases across the two files).
    """

    table_index: int
    file_index: int
    parts: tuple[tuple[str, int, int], ...]
    lead: int = 0

    @property
    def rows(self) -> int:
        """Return the rows the file gets."""
        return sum(p[2] for p in self.parts) - self.lead


def plan_runs(table_index: int, chunks: Sequence[tuple[str, int]], rows_per_file: int) -> list[FileRun]:
    """Cut a table's chunk rows, in key order, into files of ``rows_per_file`` rows (the last one fewer).

    The merge cuts a new table's files at the same size (``maxRecordsPerFile``).

    :param table_index: the table's index (copied into the runs).
    :param chunks: ``(chunk file, rows)`` in key order.
    :param rows_per_file: most rows of one file (at least 1).
    """
    per_file = max(1, rows_per_file)
    offsets = []
    start = 0
    for uri, count in chunks:
        offsets.append((uri, start, count))
        start += count
    runs = []
    for file_index, low in enumerate(range(0, start, per_file)):
        first = max(low - 1, 0)
        high = min(low + per_file, start)
        parts = tuple(
            (uri, max(first - at, 0), min(high, at + count) - max(first, at))
            for uri, at, count in offsets
            if count and at < high and at + count > first
        )
        runs.append(FileRun(table_index, file_index, parts, lead=low - first))
    return runs


def _strictly_increasing(keys: pa.Table) -> bool:
    """Return whether the rows of ``keys`` (the key columns) strictly increase, lexicographically."""
    if keys.num_rows < 2:
        return True
    before = keys.slice(0, keys.num_rows - 1)
    after = keys.slice(1)
    less = pa.repeat(pa.scalar(False), keys.num_rows - 1)
    equal = pa.repeat(pa.scalar(True), keys.num_rows - 1)
    for name in keys.column_names:
        a, b = before[name], after[name]
        less = pc.or_(less, pc.and_(equal, pc.less(a, b)))
        equal = pc.and_(equal, pc.equal(a, b))
    return bool(pc.all(less).as_py())


def _conformed(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """Return a staged batch shaped like the table's data files (``conform_changes`` on the Spark side)."""
    columns = []
    for f in schema:
        if f.name == DELETED_COLUMN:
            columns.append(pa.repeat(pa.scalar(False), batch.num_rows))
        else:
            columns.append(pc.cast(batch.column(f.name), f.type))
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def _slices(
    parts: Sequence[tuple[str, int, int]], storage_options: StorageOptions | None
) -> Iterator[pa.RecordBatch]:
    """Yield the rows of ``(chunk file, first row, rows)`` slices, batch by batch."""
    for uri, first, count in parts:
        fs, path = filesystem_for(uri, storage_options)
        with fs.open_input_file(path) as source:
            at = 0
            for batch in pq.ParquetFile(source).iter_batches(batch_size=READ_ROWS):
                low, high = max(first - at, 0), min(first + count - at, batch.num_rows)
                at += batch.num_rows
                if high > low:
                    yield batch.slice(low, high - low)
                if at >= first + count:
                    break


def write_run(
    run: FileRun,
    destination: str,
    schema: pa.Schema,
    keys: Sequence[str],
    storage_options: StorageOptions | None = None,
) -> int:
    """Stream a run's rows from the chunk files into one data file of the table; return its rows.

    :param run: the rows, in key order.
    :param destination: the file's location (inside the table folder, uncommitted: the driver commits it).
    :param schema: the table's data schema (storage types, ``_binlog_deleted`` last), as the file is written.
    :param keys: the key columns.
    :param storage_options: storage options of the staging and target stores.
    :raises FirstLoadRefused: when a key column is null or the key does not strictly increase over the run
        (the file is deleted).
    """
    fs, path = filesystem_for(destination, storage_options)
    key_schema = pa.schema([schema.field(k) for k in keys])
    last: pa.Table | None = None
    skip = run.lead
    written = 0
    group: list[pa.RecordBatch] = []
    writer: pq.ParquetWriter | None = None
    try:
        with fs.open_output_stream(path) as out:
            for batch in _slices(run.parts, storage_options):
                rows = _conformed(batch, schema)
                key_rows = pa.Table.from_batches([rows.select(list(keys))], schema=key_schema)
                if any(key_rows[k].null_count for k in keys):
                    raise FirstLoadRefused(f"a key column of {list(keys)} is null")
                joined = key_rows if last is None else pa.concat_tables([last, key_rows])
                if not _strictly_increasing(joined):
                    raise FirstLoadRefused(f"the key {list(keys)} does not strictly increase in the chunks")
                last = key_rows.slice(key_rows.num_rows - 1)
                rows = rows.slice(min(skip, rows.num_rows))
                skip -= batch.num_rows - rows.num_rows
                if writer is None and rows.num_rows:  # not on the lead row of the file before alone
                    writer = pq.ParquetWriter(
                        out, schema, compression="zstd", use_dictionary=dictionary_columns(rows)
                    )
                group.append(rows)
                written += rows.num_rows
                if writer is not None and sum(b.num_rows for b in group) >= ROW_GROUP_ROWS:
                    writer.write_table(pa.Table.from_batches(group, schema=schema))
                    group = []
            if writer is None:
                writer = pq.ParquetWriter(out, schema, compression="zstd")
            if group:
                writer.write_table(pa.Table.from_batches(group, schema=schema))
            writer.close()
    except BaseException:
        if writer is not None:
            with contextlib.suppress(Exception):
                writer.close()
        with contextlib.suppress(FileNotFoundError):
            fs.delete_file(path)
        raise
    return written


def file_name(seq: int, file_index: int) -> str:
    """Return the name of a first-load data file of snapshot ``seq`` (unique: a retry writes new names)."""
    return f"w{seq}-first-{file_index:05d}-{uuid.uuid4().hex}.parquet"


def write_task(
    runs: Sequence[FileRun],
    tables: Sequence[tuple[str, pa.Schema, Sequence[str]]],
    seq: int,
    storage_options: StorageOptions | None,
) -> Any:
    """Return the ``mapInArrow`` function that writes the runs of its Spark tasks (input: ``spark.range``).

    Input row ``id = n`` writes ``runs[n]`` into a new file of the table ``tables[run.table_index]`` (its
    location, data schema and key; :func:`write_run`). Each output row names the file written (relative to
    the table) and its rows, or, with no file, the reason the table was refused (:class:`FirstLoadRefused`).
    """

    def write_partition(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for n in batch.column("id").to_pylist():
                run = runs[n]
                uri, schema, keys = tables[run.table_index]
                name: str | None = file_name(seq, run.file_index)
                refused = None
                try:
                    rows = write_run(run, join_uri(uri, str(name)), schema, keys, storage_options)
                except FirstLoadRefused as err:
                    name, rows, refused = None, 0, str(err)
                yield pa.RecordBatch.from_pydict(
                    {"table_index": [run.table_index], "path": [name], "rows": [rows], "refused": [refused]},
                    schema=_WRITTEN,
                )

    return write_partition
