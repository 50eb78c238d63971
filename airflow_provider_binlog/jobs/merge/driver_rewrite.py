"""A small window's copy-on-write rewrite of one table in the driver, with Arrow: no Spark job.

A Spark job costs about 0.1 s however few its rows, and a table's merge on Spark takes about seven of them
(read and profile the changes, their keys, the newest change per key, the write), so a window that changes a
few rows in each of hundreds of tables cost about 0.8 s per table (issue 32). A table whose window holds at most
``max_rows`` change rows, and whose rewrite reads at most :data:`DRIVER_REWRITE_BYTES` of current files, is
rewritten here instead (``docs/adr/0040-small-windows-merged-in-the-driver.md``): the same rows as the Spark path,
by the same rules (:func:`~airflow_provider_binlog.jobs.merge.layout.plan_rewrite` chooses the files,
:func:`~airflow_provider_binlog.contract.rows.newest_per_key` keeps each key's newest row, the target's winning a
tie, deletes become tombstones, :meth:`~airflow_provider_binlog.jobs.merge.layout.RewritePlan.segment_of` cuts the
new files), placed, validated and committed by the same code.

Whole-table operations (a snapshot, truncate markers or a table's truncate floor, a replaced schema, a table not
in the key-range layout yet) and ``write_mode="merge_on_read"`` stay on Spark; under ``auto`` a window the driver
can take is rewritten here whatever share of the files' rows it changes.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from airflow_provider_binlog.contract.columns import (
    DELETED_COLUMN,
    OP_COLUMN,
    OP_DELETE,
    OPS,
    SEQ_COLUMN,
    WINDOW_COLUMN,
)
from airflow_provider_binlog.contract.delta import STAGING_DIR, target_file_bytes
from airflow_provider_binlog.contract.rows import (
    SOURCE_RANK,
    conformed_rows,
    newest_per_key,
    without_positions,
)
from airflow_provider_binlog.contract.uris import StorageOptions, filesystem_for, join_uri
from airflow_provider_binlog.contract.write_modes import WriteMode
from airflow_provider_binlog.jobs.merge.delta import DataFile, data_file_uri
from airflow_provider_binlog.jobs.merge.files import (
    PlacedFile,
    delete_stage,
    file_layout,
    place_outputs,
    staged_outputs,
)
from airflow_provider_binlog.jobs.merge.layout import RewritePlan, plan_rewrite
from airflow_provider_binlog.jobs.merge.merge_on_read import deleted_rows
from airflow_provider_binlog.jobs.merge.transforms import check_profile, read_type

if TYPE_CHECKING:
    from deltalake import DeltaTable

    from airflow_provider_binlog.jobs.merge.window import StagedTable

log = logging.getLogger(__name__)

DRIVER_REWRITE_BYTES = 32 * 1024 * 1024
"""Most bytes of current files a rewrite in the driver reads (the driver holds them in memory at once)."""


@dataclass(frozen=True)
class DriverRewrite:
    """A rewrite done in the driver, not committed yet.

    :param plan: the files it replaces. :param placed: the new files, in the table. :param rows_in_window: the
        window's change rows of the table.
    """

    plan: RewritePlan
    placed: list[PlacedFile]
    rows_in_window: int


def rewrite_in_driver(
    dt: DeltaTable,
    uri: str,
    staged: StagedTable,
    staged_schema: pa.Schema,
    data_schema: pa.Schema,
    keys: Sequence[str],
    files: Sequence[DataFile],
    *,
    seq: int,
    write_mode: WriteMode,
    max_rows: int,
    storage_options: StorageOptions | None = None,
) -> DriverRewrite | None:
    """Rewrite the files a small window's keys can be in, in the driver; None when the window is not small.

    The caller has excluded whole-table operations (a snapshot, truncate markers or floor, a replaced schema).

    :param dt: the table at the version read. :param uri: its location.
    :param staged: the table's staged files and rows. :param staged_schema: their unified schema.
    :param data_schema: the table's schema without partition columns. :param keys: its key (its spelling).
    :param files: its current files (:func:`~airflow_provider_binlog.jobs.merge.delta.current_files`).
    :param write_mode: the pipeline's write mode: ``merge_on_read`` leaves every window to Spark; under ``auto``
        a window the driver can take is rewritten here (cheaper than Spark's merge-on-read jobs for files this
        small, and it leaves no deletion vectors), the others are left to Spark's :func:`choose_mode`.
    :param max_rows: the most change rows a window merged here has (0: none is).
    :returns: the new files placed in the table, uncommitted (the caller commits them or removes them), or None:
        ``merge_on_read``, more than ``max_rows`` rows, files without key ranges, or more than
        :data:`DRIVER_REWRITE_BYTES` to read.
    :raises MergeJobError: when a change row has an unknown op or a null key or order key.
    """
    if write_mode == "merge_on_read" or staged.rows > max_rows or not all(f.ranged for f in files):
        return None
    fs, table_path = filesystem_for(uri, storage_options)
    changes = read_changes(staged.files, staged_schema, data_schema, storage_options)
    check_changes(changes, keys, staged.name)
    keys_seen = sorted(pc.unique(changes[keys[0]]).to_pylist())
    rows_in_window = changes.num_rows
    plan = plan_rewrite(files, keys_seen, target_file_bytes=target_file_bytes(dt))
    if sum(f.size for f in plan.removed) > DRIVER_REWRITE_BYTES:
        return None
    deleted = deleted_rows(dt, plan.removed, storage_options)
    current = [
        _file_rows(fs, uri, f, deleted.get(f.path, ()), data_schema, storage_options) for f in plan.removed
    ]
    ranked = [_ranked(rows, 0) for rows in current] + [_ranked(changes, 1)]
    merged = newest_per_key(pa.concat_tables(ranked), keys)
    layout = file_layout(dt, keys, files)
    stage_uri = join_uri(uri, STAGING_DIR, f"w{seq}-driver-{uuid.uuid4().hex}")
    stage_path = filesystem_for(stage_uri, storage_options)[1]
    try:
        write_segments(fs, stage_path, merged, keys[0], plan, layout.rows_per_file)
        placed = place_outputs(fs, table_path, staged_outputs(fs, stage_path), data_schema, seq, layout)
    finally:
        delete_stage(fs, stage_path)
    log.info(
        "%s: window %d (%d change rows) rewrites %d of %d files in the driver",
        staged.name, seq, rows_in_window, len(plan.removed), len(files),
    )  # fmt: skip
    return DriverRewrite(plan, placed, rows_in_window)


def read_changes(
    files: Sequence[str],
    staged_schema: pa.Schema,
    data_schema: pa.Schema,
    storage_options: StorageOptions | None,
) -> pa.Table:
    """Return a table's staged changes shaped like its data files, as Spark's ``conform_changes`` shapes them.

    Each staged column is read as its storage type (``read_type``), then matched to the table's column of its
    name in any case and cast to its type; the tombstone flag is ``_binlog_op = 'd'``.
    """
    storage = pa.schema([pa.field(f.name, read_type(f)) for f in staged_schema])
    parts = []
    for location in files:
        fs, path = filesystem_for(location, storage_options)
        rows = conformed_rows(pq.read_table(path, filesystem=fs), storage)
        parts.append(conformed_rows(rows, data_schema).set_column(
            data_schema.get_field_index(DELETED_COLUMN),
            DELETED_COLUMN,
            pc.fill_null(pc.equal(rows[OP_COLUMN], OP_DELETE), False),
        ))  # fmt: skip
    return pa.concat_tables(parts)


def check_changes(changes: pa.Table, keys: Sequence[str], table: str) -> None:
    """Check ops, keys and order keys as Spark's ``profile_changes`` does.

    :raises MergeJobError: for an unknown op, a null key column or a null order key.
    """
    bad_op = (
        changes.num_rows - pc.sum(pc.fill_null(pc.is_in(changes[OP_COLUMN], pa.array(OPS)), False)).as_py()
    )
    null_key = sum(changes[k].null_count for k in keys)
    null_order = changes[WINDOW_COLUMN].null_count + changes[SEQ_COLUMN].null_count
    check_profile(bad_op or 0, null_key, null_order, keys, table)


def _file_rows(
    fs: pa.fs.FileSystem,
    uri: str,
    f: DataFile,
    deleted: Sequence[int],
    schema: pa.Schema,
    storage_options: StorageOptions | None,
) -> pa.Table:
    """Return a data file's rows in the table's schema, without the positions its deletion vector deletes."""
    path = filesystem_for(data_file_uri(uri, f.path), storage_options)[1]
    return without_positions(conformed_rows(pq.read_table(path, filesystem=fs), schema), deleted)


def write_segments(
    fs: pa.fs.FileSystem, stage_path: str, rows: pa.Table, key: str, plan: RewritePlan, rows_per_file: int
) -> None:
    """Write rows sorted by key into ``<stage>/_binlog_segment=<n>/`` files of at most ``rows_per_file`` rows.

    The layout Spark's write gives (:func:`~airflow_provider_binlog.jobs.merge.files.write_sorted_files`), for
    :func:`~airflow_provider_binlog.jobs.merge.files.place_outputs` to move into the table.
    """
    segments = [plan.segment_of(k) for k in rows[key].to_pylist()]
    name = uuid.uuid4().hex
    start = 0
    while start < rows.num_rows:
        end = start
        while end < rows.num_rows and segments[end] == segments[start] and end - start < rows_per_file:
            end += 1
        folder = f"{stage_path}/_binlog_segment={segments[start]}"
        fs.create_dir(folder, recursive=True)
        pq.write_table(
            rows.slice(start, end - start), f"{folder}/part-{start:08d}-{name}.parquet", filesystem=fs
        )
        start = end


def _ranked(rows: pa.Table, rank: int) -> pa.Table:
    return rows.append_column(SOURCE_RANK, pa.array(np.full(rows.num_rows, rank, dtype=np.int8)))
