"""A snapshot's first load: the chunk files become the target files, committed without a merge.

For a table the target does not hold yet (no Delta table, or one with nothing committed after its creation),
merging a snapshot gives its rows in key order, ``_binlog_deleted = false``, cut into files of the table's
target size with exact key ranges (``apply_window`` has no current rows to compare with, and every key is in
one chunk). The chunks already hold the rows in key order, so :func:`load_first` writes the files directly:
one Spark task per target file, reading its rows from the chunk files
(:mod:`airflow_provider_binlog.snapshot.first_load`), no shuffle; then the driver validates the footers and
commits the files with the snapshot's app transactions in one delta-rs commit, as the merge does (``docs/adr/0026-first-load-without-a-shuffle.md``). The merge
that follows (:func:`~airflow_provider_binlog.jobs.merge.job.merge_window`) skips these tables as already
merged and merges the others.

A table stays on the merge path when the shortcut is not exactly equivalent: the table has rows or history
(a re-snapshot replaces rows and leaves tombstones), the snapshot read no row of it, a Spark task finds a key
null or not strictly increasing in the order Parquet statistics and Spark compare values (a named key that
repeats, or strings the source's collation orders otherwise than their bytes: ``'b' < 'C'``), or another
writer committed to the table meanwhile. The tasks check the key over every run and across runs, so a table
that passes is in the order the merge would write.
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

from airflow_provider_binlog.contract.delta import (
    check_owner,
    delta_arrow_schema,
    file_stats,
    open_table,
    table_key,
    target_file_bytes,
)
from airflow_provider_binlog.contract.manifest import Manifest
from airflow_provider_binlog.contract.uris import StorageOptions, filesystem_for, table_uri
from airflow_provider_binlog.jobs.merge.delta import commit_window, create_table
from airflow_provider_binlog.jobs.merge.files import PlacedFile, remove_files, validate_data_file
from airflow_provider_binlog.jobs.merge.layout import rows_per_file
from airflow_provider_binlog.jobs.merge.result import TableResult, commit_info
from airflow_provider_binlog.jobs.merge.window import (
    StagedTable,
    read_staged_schema,
    staged_window,
    target_schema,
    window_keys,
)
from airflow_provider_binlog.snapshot.first_load import WRITTEN_SCHEMA, FileRun, plan_runs, write_task

if TYPE_CHECKING:
    from deltalake import DeltaTable
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

FIRST_LOAD_KEY = "binlog.first_load"
"""Commit info key set on a first load's commit (and in the table's summary entry)."""


def _fresh_table(dt: DeltaTable | None, schema: pa.Schema, keys: list[str], pipeline: str, name: str) -> bool:
    """Return whether a table is absent, or was created with this schema and key and nothing since."""
    if dt is None:
        return True
    check_owner(dt, pipeline, name)
    return (
        dt.version() == 0
        and not dt.file_uris()
        and table_key(dt) == keys
        and delta_arrow_schema(dt).equals(schema, check_metadata=True)
    )


@dataclass
class _Candidate:
    """A table the first load may write: its location, staged table, schema, key and chunks' rows."""

    uri: str
    staged: StagedTable
    schema: pa.Schema
    keys: list[str]
    chunk_rows: list[int]
    dt: DeltaTable | None = None


def _candidates(
    snapshot_uri: str,
    manifest: Manifest,
    target: str,
    *,
    pipeline: str,
    storage_options: StorageOptions | None,
) -> list[_Candidate]:
    window = staged_window(snapshot_uri, manifest)
    keys = window_keys(window.tables, window=window.seq)
    found = []
    for staged in window.tables:
        if not staged.rows or staged.name not in keys:
            continue
        staged_schema = read_staged_schema(staged, pipeline=pipeline, storage_options=storage_options)
        schema = target_schema(staged_schema, staged.columns)
        key = list(keys[staged.name])
        uri = table_uri(target, staged.name)
        if not _fresh_table(open_table(uri, storage_options), schema, key, pipeline, staged.name):
            continue
        rows = []
        for chunk in staged.files:
            fs, path = filesystem_for(chunk, storage_options)
            rows.append(pq.read_metadata(path, filesystem=fs).num_rows)
        found.append(_Candidate(uri, staged, schema, key, rows))
    return found


def load_first(
    spark: SparkSession,
    snapshot_uri: str,
    manifest: Manifest,
    target: str,
    *,
    pipeline: str,
    target_file_bytes_default: int | None = None,
    storage_options: StorageOptions | None = None,
) -> dict[str, dict[str, Any]]:
    """Write and commit the target files of the snapshot's tables that the target does not hold yet.

    :param spark: the session.
    :param snapshot_uri: the staged snapshot's folder (its manifest written).
    :param manifest: the snapshot's manifest.
    :param target: target root.
    :param pipeline: pipeline name (owner of the tables created).
    :param target_file_bytes_default: target data file size of the tables created now (None: the default).
    :param storage_options: storage options of the staging and target stores.
    :returns: the summary entry of each table loaded (a :class:`TableResult` with ``first_load``); tables
        not in it are left to the merge.
    :raises TableOwnerError: if another pipeline owns an existing table.
    """
    started = time.monotonic()
    seq = manifest.window
    candidates = _candidates(
        snapshot_uri, manifest, target, pipeline=pipeline, storage_options=storage_options
    )
    runs: list[FileRun] = []
    for index, c in enumerate(candidates):
        c.dt = create_table(
            c.uri,
            c.schema,
            table=c.staged.name,
            keys=c.keys,
            pipeline=pipeline,
            target_file_bytes=target_file_bytes_default,
            storage_options=storage_options,
        )
        per_file = rows_per_file([], target_file_bytes(c.dt))
        runs += plan_runs(index, list(zip(c.staged.files, c.chunk_rows, strict=True)), per_file)
    if not runs:
        return {}
    tables = [(c.uri, c.schema, c.keys) for c in candidates]
    task = write_task(runs, tables, seq, storage_options)
    written = spark.range(0, len(runs), 1, len(runs)).mapInArrow(task, WRITTEN_SCHEMA).collect()
    results: dict[str, dict[str, Any]] = {}
    for index, c in enumerate(candidates):
        mine = [w for w in written if w["table_index"] == index]
        result = _commit(c, mine, pipeline=pipeline, seq=seq, storage_options=storage_options)
        if result is not None:
            results[c.staged.name] = result
    log.info(
        "snapshot %d: first load of %d tables (%d files) in %.1f s without a merge; %d tables left to the merge",
        seq, len(results), len(runs), time.monotonic() - started, len(manifest.tables) - len(results),
    )  # fmt: skip
    return results


def _commit(
    c: _Candidate, written: list[Any], *, pipeline: str, seq: int, storage_options: StorageOptions | None
) -> dict[str, Any] | None:
    """Validate and commit one table's files; return its summary entry, or None to leave it to the merge."""
    from deltalake.exceptions import CommitFailedError

    assert c.dt is not None
    fs, table_path = filesystem_for(c.uri, storage_options)
    locations = [f"{table_path.rstrip('/')}/{w['path']}" for w in written if w["path"]]
    refused = [w["refused"] for w in written if w["refused"]]
    if refused:
        log.info("%s: left to the merge: %s", c.staged.name, refused[0])
        remove_files(fs, locations)
        return None
    placed = []
    try:
        for w, location in zip([w for w in written if w["path"]], locations, strict=True):
            metadata = validate_data_file(fs, location, c.schema)
            size = fs.get_file_info(location).size or 0
            stats = file_stats(metadata, c.schema, c.keys)
            placed.append(PlacedFile(w["path"], location, {}, size, metadata.num_rows, stats))
        result = TableResult(
            rows_in_window=c.staged.rows, rows_written=sum(p.rows for p in placed), files_added=len(placed)
        )
        info = {**commit_info(pipeline, seq, result), FIRST_LOAD_KEY: True}
        commit_window(c.dt, [], placed, pipeline=pipeline, seq=seq, custom_metadata=info)
    except CommitFailedError as err:
        log.info("%s: another writer committed first; left to the merge: %s", c.staged.name, err)
        remove_files(fs, locations)
        return None
    except BaseException:
        remove_files(fs, locations)
        raise
    c.dt.update_incremental()
    result.delta_version = c.dt.version()
    return {**asdict(result), "first_load": True}
