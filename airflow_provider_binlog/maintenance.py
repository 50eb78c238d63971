"""Clean-up of a pipeline: staged windows and snapshots it no longer needs, and removed target files.

Staging (``docs/maintenance.md``): a folder ``window=<seq>`` (or ``window=<seq>.handover-<n>``) may go once
its window is ``merged`` in the ledger (the checkpoint or its commit record covers it), or, when the ledger
no longer lists the seq, once the checkpoint is past it (a window a ``purged`` snapshot dropped); a folder
``snapshot=<seq>`` once its snapshot is ``merged``. Nothing else is touched: a window that is cut or
extracted (open, or held by an ended run that the next run adopts) keeps its folder, and so does a running
snapshot (a retry resumes from its chunks), an unknown folder, and the state history ``_state``. A folder
also goes only when nothing in it was written for ``retention``: a cleared merge or commit task of a recent
window still finds its files.

Target: :func:`compact_table` joins runs of adjacent small data files of a key-range table (ADR 0020),
:func:`checkpoint_table` writes a Delta log checkpoint, and :func:`vacuum_table` deletes the Parquet files
merges and compactions removed from a Delta table's log more than a retention ago (delta-rs
``DeltaTable.vacuum``, "lite" mode: only files the log removed). Readers that started before the files were
removed, and time travel to versions within the retention, keep working.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import re
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from airflow_provider_binlog.contract.columns import UTC
from airflow_provider_binlog.contract.delta import STAGING_DIR
from airflow_provider_binlog.contract.rows import conformed_rows, without_positions

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping, Sequence

    import pyarrow as pa
    from airflow.sdk import ObjectStoragePath
    from deltalake import DeltaTable

    from airflow_provider_binlog.contract.delta_log import LogFile
    from airflow_provider_binlog.pipeline.ledger import PipelineState

_FOLDER = re.compile(r"^(?P<kind>window|snapshot)=(?P<seq>\d+)(?:\.handover-\d+)?$")


@dataclass
class Freed:
    """What a clean-up removed (or, in a dry run, would remove).

    :param folders: staging folder names (``window=<seq>``, ``snapshot=<seq>``) or target tables.
    :param files: files deleted.
    :param bytes: bytes of the deleted files.
    """

    folders: list[str] = field(default_factory=list)
    files: int = 0
    bytes: int = 0

    def as_dict(self) -> dict[str, Any]:
        """Return the JSON form used in the maintenance task's XCom."""
        return {"folders": self.folders, "files": self.files, "bytes": self.bytes}


def staging_verdict(name: str, state: PipelineState) -> str | None:
    """Return why the staging folder ``name`` may go (``merged window``, ...), or None when it must stay.

    :param name: a folder name under ``<staging>/<pipeline>/``.
    :param state: the pipeline's state, read now.
    """
    match = _FOLDER.match(name)
    if match is None:
        return None
    seq = int(match["seq"])
    if match["kind"] == "snapshot":
        snapshot = next((s for s in state.snapshots if s.seq == seq), None)
        return "merged snapshot" if snapshot is not None and snapshot.status == "merged" else None
    window = next((w for w in state.windows if w.seq == seq), None)
    if window is not None:
        return "merged window" if window.status == "merged" else None
    return "window behind the checkpoint, not in the ledger" if seq < state.checkpoint.window else None


def clean_staging(
    root: ObjectStoragePath,
    state: PipelineState,
    *,
    retention: dt.timedelta,
    now: dt.datetime,
    dry_run: bool = False,
) -> tuple[Freed, list[str]]:
    """Remove the staging folders of ``root`` (``<staging>/<pipeline>``) the pipeline no longer needs.

    :param retention: a folder goes only when its newest file is older than this.
    :param now: the current time (UTC, aware).
    :param dry_run: count what would go, delete nothing.
    :returns: what was freed, and the names of the folders kept because the ledger still needs them.
    """
    freed, kept = Freed(), list[str]()
    if not root.exists():
        return freed, kept
    for folder in sorted(root.iterdir(), key=lambda p: p.name):
        if not folder.is_dir() or _FOLDER.match(folder.name) is None:
            continue
        if staging_verdict(folder.name, state) is None:
            kept.append(folder.name)
            continue
        files = folder.fs.find(folder.path, detail=True)
        newest = max((_modified(folder.fs, path) for path in files), default=None)
        if newest is not None and now - newest < retention:
            continue
        freed.folders.append(folder.name)
        freed.files += len(files)
        freed.bytes += sum(int(info.get("size") or 0) for info in files.values())
        if not dry_run:
            folder.fs.rm(folder.path, recursive=True)
    return freed, kept


def _modified(fs: Any, path: str) -> dt.datetime:
    """Return when ``path`` was last written (UTC)."""
    stamp = fs.modified(path)
    return stamp.replace(tzinfo=UTC) if stamp.tzinfo is None else stamp.astimezone(UTC)


def vacuum_table(
    uri: str, *, retention_hours: int, dry_run: bool = False, storage_options: dict[str, str] | None = None
) -> Freed:
    """Delete the files of the Delta table at ``uri`` that no version needs, once older than ``retention_hours``.

    Three kinds go: data files a merge or compaction removed from the log (delta-rs ``DeltaTable.vacuum``),
    data files no commit lists (a first load or merge that failed between writing and committing: delta-rs
    "full" mode, which lists the table's folder), and output folders under ``<table>/_binlog_staging/``
    whose newest file is older than the retention (a Spark write that failed, or a detached one whose
    resumed job planned other files because another writer committed first, ADR 0024). A merge writes,
    moves and commits its files within one task, so the retention protects the files of a running one.
    Deletion vector files (merge-on-read, ADR 0037) that the current version refers to are kept, which
    delta-rs's full vacuum does not do; on a table with them the files are deleted here, not by delta-rs.
    The sizes are read before the files go (delta-rs reports only their paths). The table's own
    ``delta.deletedFileRetentionDuration`` is not enforced: ``retention_hours`` is the protection.

    :param uri: the table's location.
    :param retention_hours: files (and staging folders) younger than this stay, in hours.
    :param dry_run: count what would go, delete nothing.
    :param storage_options: deltalake-style options for ``uri``.
    :returns: the files deleted (``folders`` holds the table's URI when any went).
    """
    from deltalake import DeltaTable

    from airflow_provider_binlog.contract.delta_log import file_vectors, supports_deletion_vectors
    from airflow_provider_binlog.contract.uris import filesystem_for, join_uri

    table = DeltaTable(uri, storage_options=storage_options)
    doomed = table.vacuum(
        retention_hours=retention_hours, dry_run=True, enforce_retention_duration=False, full=True
    )
    # delta-rs's full vacuum counts deletion vector files as unreferenced (deltalake 1.6.6): keep the current
    # version's, and delete the rest here rather than through delta-rs (ADR 0037)
    referenced = {v.relative_path() for v in file_vectors(table, storage_options).values()}
    with_vectors = supports_deletion_vectors(table)
    doomed = [path for path in dict.fromkeys(doomed) if path not in referenced]  # a path may come twice
    fs, _ = filesystem_for(uri, storage_options)
    infos = fs.get_file_info([filesystem_for(join_uri(uri, path), storage_options)[1] for path in doomed])
    outputs = abandoned_outputs(
        fs, filesystem_for(join_uri(uri, STAGING_DIR), storage_options)[1], retention_hours
    )
    freed = Freed()
    freed.files = len(doomed) + sum(len(files) for files in outputs.values())
    freed.bytes = sum(max(info.size or 0, 0) for info in [*infos, *(i for f in outputs.values() for i in f)])
    if freed.files:
        freed.folders.append(uri)
    if not dry_run:
        if doomed and with_vectors:
            for path in doomed:
                fs.delete_file(filesystem_for(join_uri(uri, path), storage_options)[1])
        elif doomed:
            table.vacuum(
                retention_hours=retention_hours, dry_run=False, enforce_retention_duration=False, full=True
            )
        for folder in outputs:
            fs.delete_dir(folder)
    return freed


def foreign_owner(uri: str, pipeline: str, storage_options: dict[str, str] | None = None) -> str | None:
    """Return the pipeline that owns the Delta table at ``uri`` when it is not ``pipeline``, else None.

    Maintenance rewrites (compaction) and deletes (vacuum) files of a table, so it touches only tables its
    pipeline owns, as a merge does (:func:`~airflow_provider_binlog.contract.delta.check_owner`: the table's
    ``binlog.pipeline`` property, else the pipelines its commits name). None also when there is no table at
    ``uri`` (nothing to maintain, nobody else's).

    :param uri: the table's location.
    :param pipeline: the pipeline maintaining it.
    :param storage_options: deltalake-style options for ``uri``.
    """
    from airflow_provider_binlog.contract.delta import open_table, table_writers

    table = open_table(uri, storage_options)
    foreign = [] if table is None else [p for p in table_writers(table) if p != pipeline]
    return foreign[0] if foreign else None


def abandoned_outputs(fs: Any, staging: str, retention_hours: float) -> dict[str, list[Any]]:
    """Return the output folders under a table's staging folder whose newest file is older than the retention.

    :param fs: the table's pyarrow filesystem.
    :param staging: ``<table>/_binlog_staging`` on ``fs``.
    :param retention_hours: folders with a file younger than this (hours) stay.
    :returns: ``{folder path: [file infos]}``; empty when the staging folder does not exist.
    """
    import pyarrow.fs as pafs

    if fs.get_file_info(staging).type != pafs.FileType.Directory:
        return {}
    cutoff = time.time() - retention_hours * 3600
    outputs = {}
    for folder in fs.get_file_info(pafs.FileSelector(staging)):
        if folder.type != pafs.FileType.Directory:
            continue
        files = [
            i
            for i in fs.get_file_info(pafs.FileSelector(folder.path, recursive=True))
            if i.type == pafs.FileType.File
        ]
        if all(i.mtime is None or i.mtime.timestamp() < cutoff for i in files):
            outputs[folder.path] = files
    return outputs


@dataclass
class Compacted:
    """What a compaction of one table did (or, in a dry run, would do).

    :param files_removed: small data files joined.
    :param files_added: files they were joined into.
    :param bytes: bytes of the joined files.
    :param conflict: another writer committed meanwhile; nothing was committed (the next run tries again).
    """

    files_removed: int = 0
    files_added: int = 0
    bytes: int = 0
    conflict: bool = False

    def as_dict(self) -> dict[str, Any]:
        """Return the JSON form used in the maintenance task's XCom."""
        return {
            "files_removed": self.files_removed,
            "files_added": self.files_added,
            "bytes": self.bytes,
            "conflict": self.conflict,
        }


@dataclass(frozen=True)
class _File:
    path: str
    size: int
    partition: dict[str, str | None]
    low: Any
    high: Any


def small_file_runs(files: list[_File], target_bytes: int) -> list[list[_File]]:
    """Return runs of adjacent small files (in key order) to join, each at most ``target_bytes`` together.

    A file is small below half the target size; a run holds two files or more of one partition.

    :param files: files with key ranges.
    :param target_bytes: the table's target file size.
    """
    runs: list[list[_File]] = []
    run: list[_File] = []
    for f in sorted(files, key=lambda f: (f.low, f.high)):
        fits = run and f.partition == run[0].partition and sum(r.size for r in run) + f.size <= target_bytes
        if f.size < target_bytes / 2 and (fits or not run):
            run.append(f)
            continue
        if len(run) > 1:
            runs.append(run)
        run = [f] if f.size < target_bytes / 2 else []
    if len(run) > 1:
        runs.append(run)
    return runs


def compact_table(
    uri: str,
    *,
    dry_run: bool = False,
    storage_options: dict[str, str] | None = None,
    appended: bool = False,
) -> Compacted:
    """Join runs of adjacent small data files of a key-range table (``docs/adr/0020-key-range-file-layout.md``).

    Merges that add a few keys above a full tail file, and windows that delete rows, leave small files
    behind. Each run of adjacent small files (:func:`small_file_runs`) is read, written as one file sorted
    by key (the runs hold disjoint, ascending key ranges) and committed as remove + add with
    ``dataChange`` false, in one commit accepted only on the version it read: a merge that commits in between
    makes this run a no-op (``conflict``), and a merge that loses to this commit plans again, so no change is
    lost. Tables without the key-range layout, or with files lacking a key range, are left alone.

    A change log (``appended``, ``docs/history.md``) gets a file per window merged, whose key ranges overlap:
    its runs are files of adjacent windows (the window its file name starts with, ``w<window>-``), joined in
    window order into a file named after its first window, so that ``verify-history`` reads each window from
    few files; the rows are copied unchanged, and so is each window's digest (it does not depend on files).

    :param uri: table location.
    :param dry_run: count what would be joined, write nothing.
    :param storage_options: deltalake storage options.
    :param appended: the table is an append-only change log.
    """
    import uuid

    import pyarrow as pa
    import pyarrow.parquet as pq
    from deltalake import CommitProperties, DeltaTable
    from deltalake.transaction import AddAction, RemoveAction

    from airflow_provider_binlog.contract.delta import (
        KEY_RANGE_LAYOUT,
        LAYOUT_PROPERTY,
        delta_arrow_schema,
        file_stats,
        table_key,
        target_file_bytes,
    )
    from airflow_provider_binlog.contract.delta_log import supports_deletion_vectors
    from airflow_provider_binlog.contract.uris import filesystem_for, join_uri

    table = DeltaTable(uri, storage_options=storage_options)
    keys = table_key(table)
    if table.metadata().configuration.get(LAYOUT_PROPERTY) != KEY_RANGE_LAYOUT or not keys:
        return Compacted()
    if supports_deletion_vectors(table):
        return compact_with_vectors(table, keys, dry_run=dry_run, storage_options=storage_options)
    files = _window_ordered_files(table) if appended else _key_ranged_files(table, keys[0])
    if files is None:
        return Compacted()
    runs = small_file_runs(files, target_file_bytes(table))
    result = Compacted(
        files_removed=sum(len(r) for r in runs),
        files_added=len(runs),
        bytes=sum(f.size for r in runs for f in r),
    )
    if dry_run or not runs:
        return result
    partitions = set(table.metadata().partition_columns)
    schema = _without_columns(delta_arrow_schema(table), partitions)
    fs, _ = filesystem_for(uri, storage_options)
    now_ms = int(time.time() * 1000)
    actions: list[AddAction | RemoveAction] = []
    with _written_files(fs) as written:
        for run in runs:
            folder = "".join(f"{k}={v}/" for k, v in run[0].partition.items())
            named = f"w{run[0].low}-s0-" if appended else ""  # a change log's: its first window
            relative = f"{folder}{named}compacted-{uuid.uuid4().hex}.parquet"
            location = filesystem_for(join_uri(uri, relative), storage_options)[1]
            parts = [
                conformed_rows(pq.read_table(_location(uri, f.path, storage_options), filesystem=fs), schema)
                for f in run
            ]
            written.paths.append(location)
            pq.write_table(pa.concat_tables(parts), location, filesystem=fs)
            stats = file_stats(pq.read_metadata(location, filesystem=fs), schema, keys)
            size = fs.get_file_info(location).size or 0
            actions += [RemoveAction(f.path, False, now_ms, f.size, f.partition) for f in run]
            actions.append(AddAction(relative, size, run[0].partition, now_ms, False, stats))
        table.create_write_transaction(
            actions,
            mode="append",
            schema=table.schema(),
            partition_by=list(table.metadata().partition_columns),
            commit_properties=CommitProperties(
                custom_metadata={"binlog.compacted": result.files_removed}, max_commit_retries=0
            ),
        )
    return Compacted(conflict=True) if written.conflict else result


COMPACT_DELETED_FRACTION = 0.1
"""A table with deletion vectors is compacted when they delete at least this fraction of its physical rows."""
COMPACT_MAX_FILES_PER_TARGET = 2.0
"""... or when it has more than this many files per target-size file its live rows would fill (plus one)."""


def compact_with_vectors(
    table: DeltaTable,
    keys: Sequence[str],
    *,
    dry_run: bool = False,
    deleted_fraction: float = COMPACT_DELETED_FRACTION,
    files_per_target: float = COMPACT_MAX_FILES_PER_TARGET,
    storage_options: dict[str, str] | None = None,
) -> Compacted:
    """Rewrite a table with deletion vectors (merge-on-read, ADR 0037) into key-ranged files without any.

    Merge-on-read leaves rows deleted in place and adds files whose key ranges overlap the others', so reads
    slow down as windows go by. When the DVs delete at least ``deleted_fraction`` of the physical rows, or the
    table has more than ``files_per_target`` files per target-size file of its live rows (plus one), its live rows
    (tombstones included, DVs applied) are written in key order into files of the target size with disjoint
    ranges (:func:`key_ordered_chunks`: the worker holds about one target file's rows at a time, plus the rows
    of files whose key ranges span several, not the table), and one commit of ours removes every file (with its
    DV) and adds the new ones (``dataChange`` false), accepted only on the version read: a merge committing
    meanwhile makes this run a no-op (``conflict``), a merge losing to it plans again.

    :param keys: the table's key columns.
    :param deleted_fraction: the share of physical rows deleted that makes a compaction worth it.
    :param files_per_target: the files per target-size file of live rows that make a compaction worth it.
    :raises DeletionVectorError: a DV of the table cannot be read (nothing is committed).
    """
    import uuid

    import pyarrow.parquet as pq

    from airflow_provider_binlog.contract.columns import BUCKET_COLUMN
    from airflow_provider_binlog.contract.delta import delta_arrow_schema, file_stats, target_file_bytes
    from airflow_provider_binlog.contract.delta_log import LogFile, commit, log_files
    from airflow_provider_binlog.contract.uris import filesystem_for, join_uri

    uri = table.table_uri
    current = log_files(table, storage_options)
    physical = sum(f.rows for f in current.values())
    deleted = sum(f.vector.cardinality for f in current.values() if f.vector is not None)
    size = sum(f.size for f in current.values())
    wanted_files = 1 + (size * (physical - deleted) / physical) / target_file_bytes(table) if physical else 1
    if not current or (
        deleted < deleted_fraction * physical and len(current) <= files_per_target * wanted_files
    ):
        return Compacted()
    result = Compacted(files_removed=len(current), bytes=size)
    if dry_run:
        result.files_added = max(1, round(wanted_files - 1))
        return result
    schema = _without_columns(delta_arrow_schema(table), set(table.metadata().partition_columns))
    per_file = max(1, int(target_file_bytes(table) * physical / size)) if size else 1
    fs, _ = filesystem_for(uri, storage_options)
    partition = {BUCKET_COLUMN: "0"} if BUCKET_COLUMN in table.metadata().partition_columns else {}
    folder = "".join(f"{k}={v}/" for k, v in partition.items())
    now_ms = int(time.time() * 1000)
    added = []
    with _written_files(fs) as written:
        for rows in key_ordered_chunks(table, current, schema, keys, per_file, storage_options):
            relative = f"{folder}compacted-{uuid.uuid4().hex}.parquet"
            location = filesystem_for(join_uri(uri, relative), storage_options)[1]
            written.paths.append(location)
            pq.write_table(rows, location, filesystem=fs)
            metadata = pq.read_metadata(location, filesystem=fs)
            added.append(
                LogFile(
                    relative,
                    fs.get_file_info(location).size or 0,
                    metadata.num_rows,
                    file_stats(metadata, schema, keys),
                    partition,
                )
            )
        actions = [f.remove(now_ms, data_change=False) for f in current.values()]
        actions += [f.add(now_ms, data_change=False) for f in added]
        commit(
            table,
            actions,
            operation="OPTIMIZE",
            custom_metadata={"binlog.compacted": len(current)},
            storage_options=storage_options,
        )
    if written.conflict:
        return Compacted(conflict=True)
    result.files_added = len(added)
    return result


def key_ordered_chunks(
    table: DeltaTable,
    files: Mapping[str, LogFile],
    schema: pa.Schema,
    keys: Sequence[str],
    rows_per_chunk: int,
    storage_options: dict[str, str] | None = None,
) -> Iterator[pa.Table]:
    """Yield the live rows of ``files`` sorted by ``keys``, ``rows_per_chunk`` rows at a time (the last fewer).

    The files are read in the order of their lowest first-key value (the ``min`` statistic; files without one
    first), a chunk's worth of rows at a time. After each batch the rows whose first key lies below the next
    file's lowest are final: no file still to read holds a lower one. They are sorted and handed out; the rest
    are carried to the next batch. So memory holds a batch, the carried rows (of files whose key range spans
    later ones: merge-on-read's) and less than a chunk of sorted rows, whatever the table's size.

    :param files: the table's current files (:func:`~airflow_provider_binlog.contract.delta_log.log_files`).
    :param schema: the table's Arrow schema without partition columns; every chunk has it.
    :param keys: the key columns; chunks are sorted by them, ascending.
    :param rows_per_chunk: rows of each chunk but the last.
    :raises DeletionVectorError: a file's DV cannot be read.
    """
    import pyarrow as pa

    from airflow_provider_binlog.contract.uris import filesystem_for

    lows = _first_key_lows(table, keys[0], schema.field(keys[0]).type)
    order = sorted(files.values(), key=lambda f: _low_order(lows.get(unquote(f.path))))
    fs, _ = filesystem_for(table.table_uri, storage_options)
    carry, pending = schema.empty_table(), schema.empty_table()
    batch: list[LogFile] = []
    handed = 0
    for i, f in enumerate(order):
        batch.append(f)
        following = lows.get(unquote(order[i + 1].path)) if i + 1 < len(order) else None
        if i + 1 < len(order) and (following is None or sum(b.rows for b in batch) < rows_per_chunk):
            continue
        final, carry = _split_batch(
            pa.concat_tables([carry, *(_live_rows_of(table, b, schema, fs, storage_options) for b in batch)]),
            keys,
            following,
        )
        batch = []
        pending = pa.concat_tables([pending, final]).combine_chunks()
        del final  # the batch's rows live on only in pending and carry
        while pending.num_rows >= rows_per_chunk:
            yield pending.slice(0, rows_per_chunk)
            handed += 1
            pending = pending.slice(rows_per_chunk)
        pa.default_memory_pool().release_unused()  # hand the batch's buffers back before the next one is read
    if pending.num_rows or not handed:
        yield pending


def _split_batch(
    rows: pa.Table, keys: Sequence[str], following: pa.Scalar | None
) -> tuple[pa.Table, pa.Table]:
    """Return a batch's rows whose first key is below ``following``, sorted by ``keys``, and the other rows.

    With ``following`` None (no file is left to read) every row is final.
    """
    import pyarrow.compute as pc

    order = [(k, "ascending") for k in keys]
    if following is None:
        return rows.sort_by(order), rows.schema.empty_table()
    below = pc.less(rows[keys[0]], following)
    return rows.filter(below).sort_by(order), rows.filter(pc.invert(below))


def _first_key_lows(table: DeltaTable, key: str, key_type: pa.DataType) -> dict[str, pa.Scalar | None]:
    """Return ``{file path (unquoted): lowest value of ``key``}`` from the log's statistics (None: unknown).

    A statistic that is not of the key's type counts as unknown: the file is read first, its rows carried.
    """
    import pyarrow as pa

    lows: dict[str, pa.Scalar | None] = {}
    for f in _files_with_key_stats(table, key):
        try:
            lows[unquote(f.path)] = None if f.low is None else pa.scalar(f.low, key_type)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError):
            lows[unquote(f.path)] = None
    return lows


def _low_order(low: pa.Scalar | None) -> tuple[Any, ...]:
    return (0,) if low is None else (1, low.as_py())


def _live_rows_of(
    table: DeltaTable, f: LogFile, schema: pa.Schema, fs: Any, storage_options: dict[str, str] | None
) -> pa.Table:
    """Return a data file's rows in the table's schema, without those its deletion vector deletes."""
    import pyarrow.parquet as pq

    from airflow_provider_binlog.contract.deletion_vectors import read_vector

    rows = conformed_rows(
        pq.read_table(_location(table.table_uri, f.path, storage_options), filesystem=fs), schema
    )
    if f.vector is None:
        return rows
    return without_positions(rows, read_vector(table.table_uri, f.vector, storage_options))


def checkpoint_table(
    uri: str, *, storage_options: dict[str, str] | None = None, keep_log: bool = False
) -> int:
    """Write a Delta log checkpoint of the table's current version and drop log files past retention.

    Readers then replay the log from the checkpoint instead of every commit since the table was created
    (delta-rs ``create_checkpoint``, ``cleanup_metadata``: commits older than the table's
    ``delta.logRetentionDuration``, 30 days by default, and not needed by the checkpoint).

    :param keep_log: drop no log file (a change log: its commits hold the digest chain, ``docs/history.md``;
        delta-rs's ``cleanup_metadata`` does not look at ``delta.enableExpiredLogCleanup``).
    :returns: the version checkpointed.
    """
    from deltalake import DeltaTable

    table = DeltaTable(uri, storage_options=storage_options)
    table.create_checkpoint()
    if not keep_log:
        table.cleanup_metadata()
    return table.version()


def _key_ranged_files(table: Any, key: str) -> list[_File] | None:
    """Return the table's files with their key ranges, or None when a file has none."""
    files = _files_with_key_stats(table, key)
    return None if any(f.low is None or f.high is None for f in files) else files


_WINDOW_FILE = re.compile(r"(?:^|/)w(\d+)-[^/]*$")
"""A change-log data file's name: ``w<window>-...`` (a merge's, or a compaction's from its first window)."""


def _window_ordered_files(table: Any) -> list[_File] | None:
    """Return a change log's files, each with the window its name starts with as its range; None if one has none."""
    files = []
    for f in _files_with_key_stats(table, None):
        found = _WINDOW_FILE.search(unquote(f.path))
        if found is None:
            return None
        files.append(_File(f.path, f.size, f.partition, int(found.group(1)), int(found.group(1))))
    return files


def _files_with_key_stats(table: Any, key: str | None) -> list[_File]:
    """Return the table's files with the ``min``/``max`` statistics of ``key`` (None where the log has none)."""
    import pyarrow as pa

    actions = pa.table(table.get_add_actions(flatten=True))
    partitions = [c for c in actions.column_names if c.startswith("partition.")]
    files = []
    for action in actions.to_pylist():
        partition = {
            c.removeprefix("partition."): None if action[c] is None else str(action[c]) for c in partitions
        }
        low, high = (action.get(f"min.{key}"), action.get(f"max.{key}")) if key else (None, None)
        files.append(_File(action["path"], int(action["size_bytes"]), partition, low, high))
    return files


def _without_columns(schema: Any, names: set[str]) -> Any:
    """Return an Arrow schema without the named fields (a table's partition columns)."""
    import pyarrow as pa

    return pa.schema([f for f in schema if f.name not in names])


def _location(uri: str, path: str, storage_options: dict[str, str] | None) -> str:
    from airflow_provider_binlog.contract.uris import filesystem_for, join_uri

    return filesystem_for(join_uri(uri, unquote(path)), storage_options)[1]


@dataclass
class _Written:
    """The files a compaction wrote, and whether its commit lost to another writer."""

    paths: list[str] = field(default_factory=list)
    conflict: bool = False


@contextlib.contextmanager
def _written_files(fs: Any) -> Iterator[_Written]:
    """Delete the files written in the block when it fails; a lost commit race sets ``conflict`` instead of raising."""
    from deltalake.exceptions import CommitFailedError

    written = _Written()
    try:
        yield written
    except CommitFailedError:
        _delete_written(fs, written.paths)
        written.conflict = True
    except BaseException:
        _delete_written(fs, written.paths)
        raise


def _delete_written(fs: Any, paths: list[str]) -> None:
    for path in paths:
        try:
            fs.delete_file(path)
        except OSError:
            continue  # best effort: an uncommitted file is invisible to readers; vacuum removes it
