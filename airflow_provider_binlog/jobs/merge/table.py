"""Merging one staged table of a window into its Delta table, in one atomic commit.

How a table is merged (copy-on-write by key-range file, see ``docs/adr/0001-delta-commit-in-spark-driver.md``
and ``docs/adr/0020-key-range-file-layout.md``):

1. Skip the table if its Delta log already holds the app transaction of this window.
2. Create the Delta table on first use (key-range layout: not partitioned, key, owner, target file size and
   statistics columns in its configuration; a table created with hash buckets gets these properties at its
   first merge, :func:`~airflow_provider_binlog.jobs.merge.delta.ensure_key_range_layout`), or add the
   window's new columns to it and, when the window needs a wider column type, rewrite the table with it in
   one commit first (:func:`retype_table`; a type change the table cannot follow raises
   :class:`~airflow_provider_binlog.jobs.merge.schema.UnfollowableSchemaChange`).
3. Spark reads the window with an explicit schema; the driver looks up the files its keys can be in from
   the key ranges in the Delta log (:func:`~airflow_provider_binlog.jobs.merge.layout.plan_rewrite`); Spark
   reads those files only, keeps the newest change per key (order key ``(_binlog_window, _binlog_seq)``,
   deletes become tombstones) and writes the result as plain Parquet sorted by key, split at the target size.
   A small window's copy-on-write rewrite is computed the same way in the driver with Arrow, without a Spark
   job (:mod:`~airflow_provider_binlog.jobs.merge.driver_rewrite`, ``docs/adr/0040-small-windows-merged-in-the-driver.md``).
4. The driver validates the new files' footers, moves them into the table and commits remove-old +
   add-new in one Delta commit that also records the window as app transactions, so readers never see half
   a window and a re-run is a no-op.

About 560 lines because the window merge, the whole-table rewrites (retype, truncate, snapshot, the
bucket-table migration) and the conflict re-planning share one commit path; the file layout planning is
in :mod:`~airflow_provider_binlog.jobs.merge.layout`, merge-on-read in :mod:`~airflow_provider_binlog.jobs.merge.merge_on_read`.
"""

from __future__ import annotations

import functools
import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from airflow_provider_binlog.contract.delta import (
    COMMIT_PIPELINE_KEY,
    COMMIT_WINDOW_KEY,
    already_merged,
    check_owner,
    delta_arrow_schema,
    open_table,
    pipeline_app_id,
    target_file_bytes,
    window_app_id,
)
from airflow_provider_binlog.contract.uris import StorageOptions, filesystem_for, table_uri
from airflow_provider_binlog.contract.write_modes import DRIVER_REWRITE_ROWS, WriteMode
from airflow_provider_binlog.jobs.application import MergeJobError
from airflow_provider_binlog.jobs.merge.delta import (
    DataFile,
    check_table_key,
    commit_window,
    create_table,
    current_files,
    ensure_key_range_layout,
)
from airflow_provider_binlog.jobs.merge.driver_rewrite import rewrite_in_driver
from airflow_provider_binlog.jobs.merge.files import PlacedFile, remove_files, write_plan
from airflow_provider_binlog.jobs.merge.layout import (
    RewritePlan,
    deciding_keys,
    plan_rewrite,
)
from airflow_provider_binlog.jobs.merge.merge_on_read import (
    candidate_files,
    choose_mode,
    deleted_rows,
    merge_on_read,
    superseded_rows,
)
from airflow_provider_binlog.jobs.merge.plan import TablePlan
from airflow_provider_binlog.jobs.merge.result import TableResult, commit_info
from airflow_provider_binlog.jobs.merge.schema import (
    SchemaChange,
    apply_schema_change,
    plan_schema_change,
    replaced_columns,
)
from airflow_provider_binlog.jobs.merge.transforms import (
    apply_window,
    col,
    conform_changes,
    profile_changes,
    read_data_files,
    read_staged_changes,
    spark_type,
    unpersist_after_failure,
)
from airflow_provider_binlog.jobs.merge.truncate import (
    Truncation,
    table_key,
    table_truncation,
    tombstone_truncated,
    without_truncated,
)

if TYPE_CHECKING:
    from deltalake import DeltaTable
    from pyspark.sql import SparkSession

    from airflow_provider_binlog.jobs.merge.window import StagedTable

log = logging.getLogger(__name__)

COMMIT_ATTEMPTS = 5
"""A table's merge is planned again this many times when another writer commits to it in between."""


def _replanned_on_conflict(merge: Callable[..., TableResult]) -> Callable[..., TableResult]:
    """Run ``merge`` again (it re-reads the table) when its commit loses to another writer of the table.

    Up to :data:`COMMIT_ATTEMPTS` attempts; a snapshot merge and a window merge of the same table may
    run at once, and :func:`commit_window` accepts a commit only on the version the merge read.
    """

    @functools.wraps(merge)
    def attempts(spark: SparkSession, table: TablePlan, **kwargs: Any) -> TableResult:
        from deltalake.exceptions import CommitFailedError

        for attempt in range(1, COMMIT_ATTEMPTS + 1):
            try:
                return merge(spark, table, **kwargs)
            except CommitFailedError as err:
                log.warning(
                    "%s: another writer committed while window %d was merged (attempt %d of %d): %s",
                    table.name,
                    kwargs["seq"],
                    attempt,
                    COMMIT_ATTEMPTS,
                    err,
                )
                last = err
        raise MergeJobError(
            f"{table.name}: every one of {COMMIT_ATTEMPTS} attempts to commit window {kwargs['seq']} lost to "
            f"another writer of the same Delta table; retry the merge: {last}"
        )

    return attempts


@_replanned_on_conflict
def merge_table(
    spark: SparkSession,
    table: TablePlan,
    *,
    target: str,
    pipeline: str,
    seq: int,
    target_file_bytes: int | None = None,
    storage_options: StorageOptions | None = None,
    write_mode: WriteMode = "auto",
    driver_max_rows: int = DRIVER_REWRITE_ROWS,
) -> TableResult:
    """Merge one table of a window into its Delta table (one atomic commit), as the window's plan says.

    What the window decides (staged files and schema, key, truncate marker) comes from ``table``; what the
    Delta table decides (whether it holds the window, its truncate floor, its schema against the window's) is
    read from the version this attempt opens. When another writer commits to the table between reading it and
    committing (a snapshot merge beside a window merge), the merge is planned again from the new version
    (:func:`_replanned_on_conflict`).

    :param spark: the session.
    :param table: the table's plan (:func:`~airflow_provider_binlog.jobs.merge.plan.plan_window`).
    :param target: target root.
    :param pipeline: pipeline name.
    :param seq: window sequence number.
    :param target_file_bytes: target data file size in bytes of a table created (or moved from hash buckets
        to key ranges) now; None for the default; an existing key-range table keeps its own.
    :param storage_options: storage options of the staging and target stores.
    :param write_mode: ``copy_on_write``, ``merge_on_read`` or ``auto``
        (:func:`~airflow_provider_binlog.jobs.merge.merge_on_read.choose_mode`).
    :param driver_max_rows: a window of at most this many change rows of the table is rewritten in the driver
        when it can be (:mod:`~airflow_provider_binlog.jobs.merge.driver_rewrite`); 0: always on Spark.
    :raises UnfollowableSchemaChange: if the table cannot follow a type change of the window.
    :raises MergeJobError: if the window cannot be merged into the table.
    :raises TableOwnerError: if another pipeline owns the table.
    """
    staged = table.staged
    uri = table_uri(target, staged.name)
    if not table.has_changes:
        log.info("%s: no changes in window %d; nothing to do", staged.name, seq)
        return TableResult(skipped=True)
    dt = open_table(uri, storage_options)
    if dt is not None and already_merged(dt, pipeline, seq):
        log.info(
            "%s: window %d already merged (app transaction %s in version %d); skipping",
            staged.name,
            seq,
            window_app_id(pipeline, seq),
            dt.version(),
        )
        return TableResult(rows_in_window=staged.rows, skipped=True, delta_version=dt.version())
    started = time.monotonic()
    truncation = table_truncation(dt, table.truncation, pipeline, staged.name)
    staged_schema = table.staged_schema()
    keys: Sequence[str] = table.keys
    if staged.markers_only:
        keys = table_key(dt, staged.name)
    else:
        _check_key_columns(staged_schema, keys, staged.name)
    wanted = table.target_schema()
    widened: list[str] = []
    replaced: pa.Schema | None = None
    if dt is None:
        dt = create_table(
            uri,
            wanted,
            table=staged.name,
            keys=keys,
            pipeline=pipeline,
            target_file_bytes=target_file_bytes,
            storage_options=storage_options,
        )
    else:
        check_owner(dt, pipeline, staged.name)
        keys = check_table_key(dt, keys, staged.name)
        ensure_key_range_layout(dt, keys, target_file_bytes)
        changed = replaced_columns(delta_arrow_schema(dt), wanted) if staged.refresh else []
        if changed:
            replaced = wanted
            log.info(
                "%s: snapshot %d replaces the table's schema (columns %s are gone or changed type)",
                staged.name, seq, changed,
            )  # fmt: skip
        else:
            high_water = dt.transaction_version(pipeline_app_id(pipeline))
            newest = high_water is None or seq > high_water
            change = plan_schema_change(
                delta_arrow_schema(dt),
                wanted,
                staged.name,
                pipeline=pipeline,
                newest=newest,
            )
            if change.widened:
                retype_table(
                    spark, dt, uri, change, keys, pipeline=pipeline, seq=seq, storage_options=storage_options
                )
                widened = sorted(change.widened)
            apply_schema_change(dt, change, update_metadata=newest)
            dt.update_incremental()
    result = _rewrite_files(
        spark,
        dt,
        uri,
        staged,
        staged_schema,
        keys,
        pipeline=pipeline,
        seq=seq,
        replaced=replaced,
        storage_options=storage_options,
        truncation=truncation,
        write_mode=write_mode,
        driver_max_rows=driver_max_rows,
    )
    result.widened = widened
    log.info(
        "%s: merged window %d in %.1f s: %s", staged.name, seq, time.monotonic() - started, asdict(result)
    )
    return result


def retype_table(
    spark: SparkSession,
    dt: DeltaTable,
    uri: str,
    change: SchemaChange,
    keys: Sequence[str],
    *,
    pipeline: str,
    seq: int,
    storage_options: StorageOptions | None = None,
) -> None:
    """Rewrite every row of a table with the wider column types ``change.widened`` gives them, in one commit.

    deltalake has no type widening in place, so every data file is read, widened columns are cast to their
    wider types (lossless, :func:`~airflow_provider_binlog.contract.types.is_lossless_widening`) and new files
    written in the key-range layout (sorted by key, split at the target size). One commit replaces all files and the schema:
    ``create_write_transaction`` in ``overwrite`` mode writes a ``metaData`` action with the new schema and
    keeps the table's id, name, partitioning and configuration (owner, key, layout); app transactions
    (windows merged) are table state that an overwrite does not touch, so re-merges of earlier windows
    stay no-ops (measured with deltalake 1.6.6). Like :func:`commit_window`, the commit is accepted only on
    the version the files were read from (``max_commit_retries=0``): on a conflict the merge is planned
    again (:func:`_replanned_on_conflict`) and sees the table as the other writer left it.

    :param spark: the session.
    :param dt: the table, at the version the merge read.
    :param uri: table location.
    :param change: the plan from :func:`plan_schema_change` (its ``widened`` columns).
    :param keys: key columns (the table's spelling).
    :param pipeline: pipeline name (commit info).
    :param seq: sequence number of the window that needs the new types (commit info, file names).
    :param storage_options: storage options of the target store.
    :raises deltalake.exceptions.CommitFailedError: if another writer committed since ``dt`` was read.
    """
    from deltalake import CommitProperties
    from deltalake.transaction import AddAction

    started = time.monotonic()
    old_schema = delta_arrow_schema(dt)
    new_schema = pa.schema([change.widened.get(f.name, f) for f in old_schema])
    old_data = data_columns(dt, old_schema)
    new_data = data_columns(dt, new_schema)
    key_names = spelled_keys(new_data, keys)
    removed = current_files(dt, key_names)
    placed: list[PlacedFile] = []
    if removed:
        rows = read_data_files(
            spark, uri, removed, old_data, deleted=deleted_rows(dt, removed, storage_options)
        ).select(*[col(f.name).cast(spark_type(f.type)).alias(f.name) for f in new_data])
        placed = write_plan(
            rows, dt, uri, new_data, key_names, RewritePlan(removed, whole=True), files=removed, seq=seq,
            count=sum(f.rows for f in removed), storage_options=storage_options,
        )  # fmt: skip
    now_ms = int(time.time() * 1000)
    info = {
        COMMIT_PIPELINE_KEY: pipeline,
        COMMIT_WINDOW_KEY: seq,
        "binlog.widened": json.dumps(
            {name: f"{old_schema.field(name).type} -> {f.type}" for name, f in change.widened.items()}
        ),
        "binlog.files_removed": len(removed),
        "binlog.files_added": len(placed),
    }
    try:
        dt.create_write_transaction(
            [AddAction(f.path, f.size, dict(f.partition), now_ms, True, f.stats) for f in placed],
            mode="overwrite",
            schema=new_schema,
            partition_by=list(dt.metadata().partition_columns),
            commit_properties=CommitProperties(custom_metadata=info, max_commit_retries=0),
        )
    except BaseException:
        remove_files(filesystem_for(uri, storage_options)[0], [p.location for p in placed])
        raise
    dt.update_incremental()
    log.info(
        "%s: widened %s for window %d by rewriting %d files into %d in %.1f s (version %d)",
        uri,
        info["binlog.widened"],
        seq,
        len(removed),
        len(placed),
        time.monotonic() - started,
        dt.version(),
    )


def _check_key_columns(staged: pa.Schema, keys: Sequence[str], table: str) -> None:
    names = {n.lower() for n in staged.names}
    missing = [k for k in keys if k.lower() not in names]
    if missing:
        raise MergeJobError(f"key columns {missing} of {table} are not in its staged files ({staged.names})")


def data_columns(dt: DeltaTable, schema: pa.Schema) -> pa.Schema:
    """Return ``schema`` without the table's partition columns: the columns its data files hold.

    :param dt: the table.
    :param schema: a schema of the table (current, widened or replaced).
    """
    partitions = set(dt.metadata().partition_columns)
    return pa.schema([f for f in schema if f.name not in partitions])


def spelled_keys(data_schema: pa.Schema, keys: Sequence[str]) -> list[str]:
    """Return the key columns ``keys`` as ``data_schema`` spells them (names match in any case).

    :raises KeyError: for a key column the schema lacks.
    """
    by_lower = {f.name.lower(): f.name for f in data_schema}
    return [by_lower[k.lower()] for k in keys]


def _rewrite_files(
    spark: SparkSession,
    dt: DeltaTable,
    uri: str,
    staged: StagedTable,
    staged_schema: pa.Schema,
    keys: Sequence[str],
    *,
    pipeline: str,
    seq: int,
    replaced: pa.Schema | None = None,
    storage_options: StorageOptions | None = None,
    truncation: Truncation | None = None,
    write_mode: WriteMode = "auto",
    driver_max_rows: int = DRIVER_REWRITE_ROWS,
) -> TableResult:
    """Compute and commit the new content of the files the window's keys can be in.

    :param replaced: the table's new schema when a snapshot replaces it (:func:`replaced_columns`): every
        file is rewritten with it and the commit replaces the schema too.
    :param storage_options: storage options of the target store.
    :param truncation: the truncate markers of the table and window
        (:func:`~airflow_provider_binlog.jobs.merge.truncate.table_truncation`): one above the table's floor
        rewrites every file.
    :param write_mode: how a window that is not a whole-table operation is merged (:func:`choose_mode`).
    :param driver_max_rows: a window of at most this many change rows is rewritten in the driver when it can be
        (:func:`~airflow_provider_binlog.jobs.merge.driver_rewrite.rewrite_in_driver`); 0: always on Spark.
    """
    truncation = truncation or Truncation()
    current_schema = delta_arrow_schema(dt)
    stored = data_columns(dt, current_schema)
    table_schema = current_schema
    if replaced is not None:
        partitions = [current_schema.field(name) for name in dt.metadata().partition_columns]
        table_schema = pa.schema([*replaced, *partitions])  # a hash-bucket table keeps its partition column
    data_schema = data_columns(dt, table_schema)
    key_names = spelled_keys(data_schema, keys)
    files = current_files(dt, key_names)
    whole = staged.refresh or truncation.empties or replaced is not None
    fs = filesystem_for(uri, storage_options)[0]
    small = None
    if not whole and truncation.cut is None and not staged.markers:
        small = rewrite_in_driver(
            dt, uri, staged, staged_schema, data_schema, key_names, files, seq=seq, write_mode=write_mode,
            max_rows=driver_max_rows, storage_options=storage_options,
        )  # fmt: skip
    if small is not None:
        return _commit_rewrite(
            dt, fs, staged.name, small.plan, small.placed, small.rows_in_window, files=files, pipeline=pipeline,
            seq=seq, engine="driver", truncation=truncation, storage_options=storage_options,
        )  # fmt: skip

    changes = conform_changes(read_staged_changes(spark, staged.files, staged_schema), data_schema)
    changes = without_truncated(changes, truncation).persist()
    try:
        rows_in_window = profile_changes(changes, key_names, staged.name)
        # a table not in the key-range layout yet (hash buckets, files without key statistics) is rewritten into
        # it whatever the mode: merge-on-read and compaction work on key ranges
        pruning = not whole and bool(files) and all(f.ranged for f in files)
        keys_seen = deciding_keys(changes, key_names[0], files) if pruning else []
        candidates = candidate_files(files, keys_seen) if pruning else []
        mode = choose_mode(
            write_mode, uri=uri, whole=not pruning, rows_in_window=rows_in_window, candidates=candidates
        )
        if mode == "merge_on_read":
            result = merge_on_read(
                spark,
                dt,
                uri,
                changes,
                candidates,
                data_schema,
                key_names,
                files=files,
                pipeline=pipeline,
                seq=seq,
                rows_in_window=rows_in_window,
                truncation=truncation,
                storage_options=storage_options,
            )
            changes.unpersist()
            return result
        plan = plan_rewrite(
            files,
            keys_seen if pruning else [],
            target_file_bytes=target_file_bytes(dt),
            whole=whole,
        )
        current = None
        if plan.removed:
            deleted = (
                superseded_rows(dt, plan.removed, staged.name, storage_options)
                if staged.refresh
                else deleted_rows(dt, plan.removed, storage_options)
            )
            current = read_data_files(spark, uri, plan.removed, stored, deleted=deleted)
            if replaced is not None:
                current = conform_changes(current, data_schema)
            current = tombstone_truncated(current, truncation, current.columns)
        count = sum(f.rows for f in plan.removed) + rows_in_window
        merged = apply_window(
            current,
            changes,
            key_names,
            int(spark.conf.get("spark.sql.shuffle.partitions") or 1),
            refresh_seq=seq if staged.refresh else None,
        )
        placed = write_plan(
            merged,
            dt,
            uri,
            data_schema,
            key_names,
            plan,
            files=files,
            seq=seq,
            count=count,
            storage_options=storage_options,
        )
    except BaseException:
        unpersist_after_failure(changes)
        raise
    changes.unpersist()
    return _commit_rewrite(
        dt, fs, staged.name, plan, placed, rows_in_window, files=files, pipeline=pipeline, seq=seq, engine="spark",
        schema=None if replaced is None else table_schema, truncation=truncation, storage_options=storage_options,
    )  # fmt: skip


def _commit_rewrite(
    dt: DeltaTable,
    fs: Any,
    table: str,
    plan: RewritePlan,
    placed: list[PlacedFile],
    rows_in_window: int,
    *,
    files: Sequence[DataFile],
    pipeline: str,
    seq: int,
    engine: str,
    truncation: Truncation,
    schema: pa.Schema | None = None,
    storage_options: StorageOptions | None = None,
) -> TableResult:
    """Commit a copy-on-write rewrite (the files ``plan`` removes, the ``placed`` ones) and return its result.

    :param engine: what computed the new files, ``spark`` or ``driver`` (:mod:`.driver_rewrite`).
    :param schema: the table's new schema when a snapshot replaces it.
    :raises deltalake.exceptions.CommitFailedError: if another writer committed since ``dt`` was read (the
        placed files are removed).
    """
    result = TableResult(
        rows_in_window=rows_in_window,
        rows_written=sum(p.rows for p in placed),
        files_removed=len(plan.removed),
        files_added=len(placed),
        write_mode="copy_on_write",
        engine=engine,
    )
    log.info(
        "%s: window %d rewrites %d of %d files (%s, %s)",
        table, seq, len(plan.removed), len(files), "every file" if plan.whole else "by key range", engine,
    )  # fmt: skip
    try:
        commit_window(
            dt,
            plan.removed,
            placed,
            pipeline=pipeline,
            seq=seq,
            custom_metadata=commit_info(pipeline, seq, result),
            schema=schema,
            app_transactions=truncation.app_transactions(pipeline),
            storage_options=storage_options,
        )
    except BaseException:
        remove_files(fs, [p.location for p in placed])
        raise
    dt.update_incremental()
    result.delta_version = dt.version()
    return result
