"""Merge-on-read: a window marks the rows it replaces in deletion vectors and writes only its new rows.

Copy-on-write (:mod:`~airflow_provider_binlog.jobs.merge.layout`) rewrites every file a window's keys can be in;
a window of random updates touches every file of a big table and rewrites all of it. Merge-on-read writes the
window's winning rows (the newest change per key, deletes as tombstones) into new files and adds, to each
existing file holding a row they replace, a deletion vector (DV) of those rows' positions
(``docs/adr/0037-deletion-vectors.md``). No existing data file is rewritten; the commit replaces each touched
file's logical entry (path, old DV) by (path, new DV) and adds the new files, with the window's app
transactions, in one log commit of our own (:mod:`~airflow_provider_binlog.contract.delta_log`).

The rule that keeps it exact: a row is marked deleted only when a strictly newer version of its key is written
in the same commit (a window's change beats the target's newest version of the key, the target winning ties as
in copy-on-write). So every deleted row is older than its key's live row, and the newest version of a key over
all physical rows, deleted or not, is the live one: the planning read needs no DVs applied.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

import pyarrow as pa

from airflow_provider_binlog.contract.columns import SEQ_COLUMN, WINDOW_COLUMN
from airflow_provider_binlog.contract.deletion_vectors import DeletionVectorError, read_vector, write_vectors
from airflow_provider_binlog.contract.delta_log import (
    LogFile,
    commit,
    enable_deletion_vectors,
    file_vectors,
    has_put_if_absent,
    log_files,
)
from airflow_provider_binlog.contract.uris import StorageOptions, filesystem_for
from airflow_provider_binlog.contract.write_modes import WriteMode
from airflow_provider_binlog.jobs.application import MergeJobError
from airflow_provider_binlog.jobs.merge.delta import DataFile, data_file_uri, window_transactions
from airflow_provider_binlog.jobs.merge.files import remove_files, write_plan
from airflow_provider_binlog.jobs.merge.layout import RewritePlan
from airflow_provider_binlog.jobs.merge.result import TableResult, commit_info
from airflow_provider_binlog.jobs.merge.transforms import newest_change_per_key, unpersist_after_failure

if TYPE_CHECKING:
    from deltalake import DeltaTable
    from pyroaring import BitMap64
    from pyspark.sql import DataFrame, SparkSession

    from airflow_provider_binlog.jobs.merge.files import PlacedFile
    from airflow_provider_binlog.jobs.merge.truncate import Truncation

log = logging.getLogger(__name__)

AUTO_MAX_CHANGED_FRACTION = 0.25
"""``auto`` merges a window on read when its changes number at most this fraction of the rows of the files
its keys can be in. Measured (``docs/benchmarks.md``, "break-even"): merge-on-read merges faster at every share
below a half (0.82x the time at a quarter, level at a half), but leaves the replaced rows for reads to skip until
a compaction; past a quarter it saves little and leaves many."""

_T_ORDER = "__binlog_target_order"
_T_NEWEST = "__binlog_target_newest"
_W_ORDER = "__binlog_window_order"
_FILE = "__binlog_file_name"
_ROW = "__binlog_row_index"
_RUN = "__binlog_run"
_FIRST = "__binlog_first_row"
_COUNT = "__binlog_rows"


def choose_mode(
    mode: WriteMode, *, uri: str, whole: bool, rows_in_window: int, candidates: Sequence[DataFile]
) -> Literal["copy_on_write", "merge_on_read"]:
    """Return how one window is merged into one table.

    Whole-table operations (a snapshot, a truncate marker, a replaced schema) rewrite every file whatever the
    mode, and so does a window into a table not in the key-range layout yet (hash buckets, files without key
    statistics), which moves it there (``whole``). ``auto`` merges on read a window whose changes are at most
    :data:`AUTO_MAX_CHANGED_FRACTION` of the rows of the files they can be in (all of them when the window only
    adds keys above the table's), on a target with put-if-absent (:func:`~airflow_provider_binlog.contract.delta_log.has_put_if_absent`).

    :param whole: the window rewrites the table whole (see above).
    :param candidates: the current files the window's keys can be in.
    :raises MergeJobError: for ``merge_on_read`` on a target without put-if-absent for our log commits.
    """
    if whole or mode == "copy_on_write":
        return "copy_on_write"
    if not has_put_if_absent(uri):
        if mode == "merge_on_read":
            raise MergeJobError(
                f"{uri}: write_mode='merge_on_read' needs a local or S3 target so far (the deletion vectors' log "
                "commits need put-if-absent, docs/adr/0037-deletion-vectors.md); use 'auto' or 'copy_on_write'"
            )
        return "copy_on_write"
    if mode == "merge_on_read":
        return "merge_on_read"
    candidate_rows = sum(f.rows for f in candidates)
    return (
        "merge_on_read"
        if rows_in_window <= AUTO_MAX_CHANGED_FRACTION * candidate_rows or not candidate_rows
        else "copy_on_write"
    )


def candidate_files(files: Sequence[DataFile], keys: Sequence[Any]) -> list[DataFile]:
    """Return the files whose key range holds one of ``keys`` (sorted ascending).

    Unlike copy-on-write's plan no file is chosen to grow into a gap: merge-on-read writes new keys to new files.
    Every file must have a key range (:attr:`DataFile.ranged`): a table with a file without one is rewritten whole
    into the key-range layout instead (``whole`` of :func:`choose_mode`).
    """
    import bisect

    chosen = []
    for f in files:
        at = bisect.bisect_left(keys, f.low)
        if at < len(keys) and keys[at] <= f.high:
            chosen.append(f)
    return chosen


@dataclasses.dataclass(frozen=True)
class MergeOnRead:
    """What a merge-on-read computed for one window of one table, before its commit.

    :param winners: the window's rows that beat the target's newest version of their key (written as new files;
        persisted: the caller unpersists it once they are written).
    :param deleted: ``{log path: row positions}`` of target rows the winners replace.
    """

    winners: DataFrame
    deleted: Mapping[str, BitMap64]


def plan_merge_on_read(
    spark: SparkSession,
    uri: str,
    latest: DataFrame,
    candidates: Sequence[DataFile],
    data_schema: pa.Schema,
    keys: Sequence[str],
) -> MergeOnRead:
    """Find the window's winning rows and the positions of the target rows they replace.

    :param latest: the window's newest change per key (conformed to the table's storage types).
    :param candidates: the current files the window's keys can be in (:func:`candidate_files`).
    :param data_schema: the table's schema without the partition column.
    :param keys: key column names.
    :raises MergeJobError: when two candidate files share a file name (positions are matched by it).
    """
    from pyspark.sql import functions as F

    from airflow_provider_binlog.jobs.merge.transforms import col, spark_schema

    order = F.struct(col(WINDOW_COLUMN), col(SEQ_COLUMN))
    latest = latest.withColumn(_W_ORDER, order)
    if not candidates:
        return MergeOnRead(latest.drop(_W_ORDER), {})
    by_name = _by_file_name(candidates)
    wanted = pa.schema([data_schema.field(name) for name in [*keys, WINDOW_COLUMN, SEQ_COLUMN]])
    target = (
        spark.read.schema(spark_schema(wanted))
        .parquet(*[data_file_uri(uri, f.path) for f in candidates])
        .select(
            *[col(k) for k in keys],
            order.alias(_T_ORDER),
            F.col("_metadata.file_name").alias(_FILE),
            F.col("_metadata.row_index").alias(_ROW),
        )
    )
    # The window's keys are few next to the table's rows: a broadcast semi-join keeps the target rows of those
    # keys while the files are scanned, so no shuffle moves the table (only its key and order columns are read).
    matched = target.join(F.broadcast(latest.select(*[col(k) for k in keys])), on=list(keys), how="left_semi")
    matched = matched.persist()
    newest = matched.groupBy(*[col(k) for k in keys]).agg(F.max(col(_T_ORDER)).alias(_T_NEWEST))
    joined = latest.join(newest, on=list(keys), how="left")
    winners = joined.where(col(_T_NEWEST).isNull() | (col(_W_ORDER) > col(_T_NEWEST))).drop(
        _W_ORDER, _T_NEWEST
    )
    winners = winners.persist()  # filled by the job below, before the target rows it was computed from go
    replaced = matched.join(winners.select(*[col(k) for k in keys]), on=list(keys), how="left_semi")
    try:
        runs = _position_runs(replaced).toArrow()
    finally:
        matched.unpersist()
    return MergeOnRead(winners, _positions_by_file(runs, by_name))


def _position_runs(replaced: DataFrame) -> DataFrame:
    """Return the replaced rows' positions as runs of consecutive rows: one row ``(file, first row, rows)`` each.

    Positions ``p`` of a file numbered in order by ``n`` have ``p - n`` constant along a run ("gaps and
    islands"), so a window replacing every row of a file sends the driver one run instead of its positions.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    from airflow_provider_binlog.jobs.merge.transforms import col

    along = Window.partitionBy(col(_FILE)).orderBy(col(_ROW))
    return (
        replaced.withColumn(_RUN, col(_ROW) - F.row_number().over(along))
        .groupBy(col(_FILE), col(_RUN))
        .agg(F.min(col(_ROW)).alias(_FIRST), F.count(F.lit(1)).alias(_COUNT))
        .drop(_RUN)
    )


def _positions_by_file(runs: pa.Table, by_name: Mapping[str, DataFile]) -> dict[str, BitMap64]:
    """Return ``{log path: positions}`` from :func:`_position_runs`' rows, a batch of runs at a time."""
    from pyroaring import BitMap64

    deleted: dict[str, BitMap64] = {}
    for batch in runs.to_batches(max_chunksize=65_536):
        columns = (
            batch.column(_FILE).to_pylist(),
            batch.column(_FIRST).to_pylist(),
            batch.column(_COUNT).to_pylist(),
        )
        for name, first, count in zip(*columns, strict=True):
            deleted.setdefault(by_name[name].path, BitMap64()).add_range(first, first + count)
    return deleted


def _by_file_name(files: Sequence[DataFile]) -> dict[str, DataFile]:
    by_name: dict[str, DataFile] = {}
    for f in files:
        name = os.path.basename(f.path)
        if name in by_name:
            raise MergeJobError(
                f"two data files of the table are named {name!r}: {by_name[name].path}, {f.path}"
            )
        by_name[name] = f
    return by_name


def grown_vectors(
    dt: DeltaTable, deleted: Mapping[str, BitMap64], storage_options: StorageOptions | None = None
) -> list[tuple[LogFile, BitMap64]]:
    """Return each touched file with its new deletion vector: its old one plus the ``deleted`` positions.

    Positions already deleted (an old version of a key that a window matched again) are counted once.

    :param deleted: ``{log path: row positions}`` to delete, from :func:`plan_merge_on_read`.
    :raises MergeJobError: when a position is not a row of its file.
    """
    from pyroaring import BitMap64

    current = log_files(dt, storage_options) if deleted else {}
    grown = []
    for path in sorted(deleted):
        file = current[path]
        positions = BitMap64(deleted[path])
        if file.vector is not None:
            positions |= read_vector(dt.table_uri, file.vector, storage_options)
        if positions.max() >= file.rows:
            raise MergeJobError(
                f"{dt.table_uri}: row {positions.max()} of {path} is to be deleted, but the file has {file.rows} rows"
            )
        grown.append((file, positions))
    return grown


def newly_deleted(grown: Sequence[tuple[LogFile, BitMap64]]) -> int:
    """Return how many rows the grown vectors delete that the files' old vectors did not."""
    return sum(len(positions) - (file.vector.cardinality if file.vector else 0) for file, positions in grown)


def commit_merge_on_read(
    dt: DeltaTable,
    grown: Sequence[tuple[LogFile, BitMap64]],
    placed: Sequence[PlacedFile],
    *,
    app_transactions: Mapping[str, int],
    custom_metadata: Mapping[str, Any],
    storage_options: StorageOptions | None = None,
) -> int:
    """Commit a merge-on-read: each touched file gets its grown deletion vector; the new files are added.

    The table gets the ``deletionVectors`` feature first when it lacks it and a file gets a DV (a commit of its
    own, which changes no row): a window that only adds keys leaves the protocol as it is. One new DV file holds
    the new vectors of all touched files; a DV file left by a commit that lost its race is referred to by no
    version, and the maintenance vacuum removes it.

    :param grown: the touched files and their new vectors (:func:`grown_vectors`).
    :param placed: the new files, written and moved into the table.
    :returns: the version committed.
    :raises CommitFailedError: when another writer committed since ``dt`` was read.
    """
    if grown and enable_deletion_vectors(dt, storage_options):  # a window of new keys only needs no DV
        dt.update_incremental()
    now_ms = int(time.time() * 1000)
    descriptors = write_vectors(dt.table_uri, [v for _, v in grown], storage_options) if grown else []
    actions: list[Mapping[str, Any]] = []
    for (file, _), vector in zip(grown, descriptors, strict=True):
        actions += [file.remove(now_ms), dataclasses.replace(file, vector=vector).add(now_ms)]
    actions += [LogFile(p.path, p.size, p.rows, p.stats, dict(p.partition)).add(now_ms) for p in placed]
    return commit(
        dt,
        actions,
        operation="MERGE",
        custom_metadata=custom_metadata,
        app_transactions=app_transactions,
        storage_options=storage_options,
    )


def deleted_rows(
    dt: DeltaTable, files: Sequence[DataFile], storage_options: StorageOptions | None = None
) -> dict[str, list[int]]:
    """Return ``{log path: row positions}`` of the deletion vectors of ``files`` (none for a table without DVs)."""
    vectors = file_vectors(dt, storage_options)
    return {
        f.path: list(read_vector(dt.table_uri, vectors[f.path], storage_options))
        for f in files
        if f.path in vectors
    }


def superseded_rows(
    dt: DeltaTable, files: Sequence[DataFile], table: str, storage_options: StorageOptions | None = None
) -> dict[str, list[int]]:
    """Return :func:`deleted_rows` of a whole-table rewrite, or none when a deletion vector cannot be read.

    A row is marked deleted only by the commit that writes a newer version of its key, so a rewrite that reads
    every file and keeps each key's newest version (``apply_window``) gets the same rows without the vectors:
    this is how a re-snapshot heals a table whose vector file was lost or damaged.

    :param table: the source table's name, for the log.
    """
    try:
        return deleted_rows(dt, files, storage_options)
    except DeletionVectorError as err:
        log.warning(
            "%s: %s; the whole-table rewrite reads every row without the vectors and keeps each key's newest "
            "version, which gives the same rows", table, err,
        )  # fmt: skip
        return {}


def merge_on_read(
    spark: SparkSession,
    dt: DeltaTable,
    uri: str,
    changes: DataFrame,
    candidates: Sequence[DataFile],
    data_schema: pa.Schema,
    keys: Sequence[str],
    *,
    files: Sequence[DataFile],
    pipeline: str,
    seq: int,
    rows_in_window: int,
    truncation: Truncation,
    storage_options: StorageOptions | None,
) -> TableResult:
    """Merge the window on read (:mod:`~airflow_provider_binlog.jobs.merge.merge_on_read`) and commit it.

    :param candidates: the current files the window's keys can be in.
    :param files: every current file (their bytes per row size the new files).
    """
    planned = plan_merge_on_read(
        spark, uri, newest_change_per_key(changes, keys), candidates, data_schema, keys
    )
    winners = planned.winners
    try:
        placed = write_plan(
            winners,
            dt,
            uri,
            data_schema,
            keys,
            RewritePlan(),
            files=files,
            seq=seq,
            count=rows_in_window,
            storage_options=storage_options,
        )
    except BaseException:
        unpersist_after_failure(winners)
        raise
    winners.unpersist()
    try:
        grown = grown_vectors(dt, planned.deleted, storage_options)
    except BaseException:
        remove_files(filesystem_for(uri, storage_options)[0], [p.location for p in placed])
        raise
    result = TableResult(
        rows_in_window=rows_in_window,
        rows_written=sum(p.rows for p in placed),
        files_added=len(placed),
        write_mode="merge_on_read",
        rows_deleted=newly_deleted(grown),
        files_with_new_vectors=len(grown),
    )
    log.info(
        "%s: window %d merged on read: %d new rows in %d files, %d rows of %d of %d files marked deleted",
        dt.table_uri, seq, result.rows_written, len(placed), result.rows_deleted, len(planned.deleted), len(files),
    )  # fmt: skip
    try:
        commit_merge_on_read(
            dt,
            grown,
            placed,
            app_transactions=window_transactions(dt, pipeline, seq, truncation.app_transactions(pipeline)),
            custom_metadata=commit_info(pipeline, seq, result),
            storage_options=storage_options,
        )
    except BaseException:
        remove_files(filesystem_for(uri, storage_options)[0], [p.location for p in placed])
        raise
    dt.update_incremental()
    result.delta_version = dt.version()
    return result
