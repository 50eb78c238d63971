"""New bucket files of a merge: written by Spark, validated, moved into place and described for Delta.

Spark writes them to a staging folder under the table; the driver validates their footers, moves them into
``<table>/_binlog_bucket=<n>/`` and describes them as Delta add actions.

``create_write_transaction`` does not look into the files it adds, so :func:`validate_data_file` is the
only check that a file matches the table's schema.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from airflow_provider_binlog.contract.columns import BUCKET_COLUMN
from airflow_provider_binlog.contract.uris import StorageOptions, filesystem_for, join_uri
from airflow_provider_binlog.jobs.application import MergeJobError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

log = logging.getLogger(__name__)

STAGING_DIR = "_binlog_staging"
"""Folder under a table where Spark writes new bucket files before the driver moves them into place."""


_BUCKET_DIR_RE = re.compile(re.escape(BUCKET_COLUMN) + r"=(\d+)")


def staged_outputs(fs: pafs.FileSystem, stage_path: str) -> list[tuple[int, str]]:
    """List the Parquet files Spark wrote under a staging folder, with their bucket.

    ``_SUCCESS``, ``.crc`` and other hidden files are ignored (they are deleted with the folder).

    :param fs: filesystem.
    :param stage_path: staging folder path.
    """
    outputs = []
    for info in fs.get_file_info(pafs.FileSelector(stage_path, recursive=True)):
        name = info.base_name
        if info.type != pafs.FileType.File or not name.endswith(".parquet") or name[0] in "._":
            continue
        match = _BUCKET_DIR_RE.fullmatch(info.path.rsplit("/", 2)[-2])
        if match is None:
            raise MergeJobError(f"Spark wrote {info.path} outside a {BUCKET_COLUMN}=<n> folder")
        outputs.append((int(match.group(1)), info.path))
    return sorted(outputs)


def validate_data_file(fs: pafs.FileSystem, path: str, schema: pa.Schema) -> pq.FileMetaData:
    """Check that a new data file matches the table schema (names, types, no INT96); return its footer.

    ``create_write_transaction`` does not look into the files it adds, so this is the only check.

    :param fs: filesystem.
    :param path: file path.
    :param schema: the table's schema without the partition column.
    :raises MergeJobError: on any mismatch.
    """
    metadata = pq.read_metadata(path, filesystem=fs)
    for i in range(metadata.num_columns):
        if metadata.schema.column(i).physical_type == "INT96":
            raise MergeJobError(
                f"{path} stores {metadata.schema.column(i).name} as INT96: set "
                "spark.sql.parquet.outputTimestampType=TIMESTAMP_MICROS"
            )
    found = metadata.schema.to_arrow_schema()
    expected = [(f.name, f.type) for f in schema]
    actual = [(f.name, f.type) for f in found]
    if len(actual) != len(expected) or any(
        a_name != e_name or not a_type.equals(e_type)
        for (a_name, a_type), (e_name, e_type) in zip(actual, expected, strict=False)
    ):
        raise MergeJobError(
            f"new data file {path} does not match the table schema: expected {expected}, found {actual}"
        )
    return metadata


def file_stats(metadata: pq.FileMetaData, schema: pa.Schema) -> str:
    """Return Delta file statistics (JSON) from a Parquet footer: ``numRecords`` and ``nullCount``.

    ``nullCount`` holds every column whose row groups all carry a null count. No ``minValues`` or
    ``maxValues`` are written, on purpose: the Delta protocol lets a writer leave out any column's min
    and max ("Per-file Statistics" in PROTOCOL.md), but deltalake (delta-rs, 1.x) turns every column
    missing from a present ``minValues``/``maxValues`` into a ``column >= null`` / ``column <= null``
    guarantee of the file's pyarrow fragment, and pyarrow then drops the file for any ``==``,
    ``isin`` or range filter on that column (delta-io/delta-rs#3173, #3032). Complete min/max for every
    type (truncated strings, NaN floats, millisecond timestamps, all-null columns) cannot be had
    exactly from footers, so no file of ours carries any.

    :param metadata: the file's footer.
    :param schema: the file's Arrow schema (storage types), in footer column order.
    """
    null_count: dict[str, int] = {}
    for i, f in enumerate(schema):
        chunks = [metadata.row_group(r).column(i).statistics for r in range(metadata.num_row_groups)]
        if chunks and all(s is not None and s.has_null_count for s in chunks):
            null_count[f.name] = sum(s.null_count for s in chunks if s is not None)
    return json.dumps({"numRecords": metadata.num_rows, "nullCount": null_count})


@dataclass
class PlacedFile:
    """A new data file moved into the table.

    :param path: path relative to the table, as written to the log.
    :param location: full location, for cleanup.
    :param bucket: its bucket.
    :param size: size in bytes.
    :param rows: number of rows.
    :param stats: Delta statistics JSON.
    """

    path: str
    location: str
    bucket: int
    size: int
    rows: int
    stats: str


def place_outputs(
    fs: pafs.FileSystem, table_path: str, outputs: Sequence[tuple[int, str]], schema: pa.Schema, seq: int
) -> list[PlacedFile]:
    """Validate Spark's output files and move them into ``<table>/_binlog_bucket=<n>/``.

    :param fs: filesystem of the table.
    :param table_path: table path on ``fs``.
    :param outputs: ``(bucket, path)`` pairs from :func:`staged_outputs`.
    :param schema: the table's schema without the partition column.
    :param seq: window sequence number (prefixes the file names).
    :raises MergeJobError: if a file does not match the schema.
    """
    placed: list[PlacedFile] = []
    try:
        for bucket, path in outputs:
            metadata = validate_data_file(fs, path, schema)
            relative = f"{BUCKET_COLUMN}={bucket}/w{seq}-{path.rsplit('/', 1)[-1]}"
            destination = f"{table_path.rstrip('/')}/{relative}"
            fs.create_dir(destination.rsplit("/", 1)[0], recursive=True)
            fs.move(path, destination)
            size = fs.get_file_info(destination).size or 0
            placed.append(
                PlacedFile(
                    relative, destination, bucket, size, metadata.num_rows, file_stats(metadata, schema)
                )
            )
    except BaseException:
        remove_files(fs, [p.location for p in placed])
        raise
    return placed


def remove_files(fs: pafs.FileSystem, paths: Sequence[str]) -> None:
    """Delete files, ignoring ones already gone (cleanup of uncommitted output).

    :param fs: filesystem.
    :param paths: file paths.
    """
    for path in paths:
        _delete_quietly(fs.delete_file, path, "uncommitted file")


def write_bucket_files(
    rows: DataFrame,
    uri: str,
    data_schema: pa.Schema,
    *,
    seq: int,
    buckets: Sequence[int],
    storage_options: StorageOptions | None = None,
) -> list[PlacedFile]:
    """Write rows as Parquet by ``_binlog_bucket`` and move the files into the table's bucket folders.

    Spark writes into a staging folder under the table (hidden from Delta readers); the files are validated
    against the schema and moved into ``_binlog_bucket=<n>/``. Nothing is committed: the caller commits the
    returned files or deletes them (:func:`remove_files`).

    :param rows: rows with the data columns and ``_binlog_bucket``.
    :param uri: table location.
    :param data_schema: the table's schema without the partition column.
    :param seq: window sequence number (prefixes the file names).
    :param buckets: the buckets the rows may fall in.
    :param storage_options: storage options of the target store (the driver's moves; Spark's writes use
        the session's filesystem configuration).
    :raises MergeJobError: if Spark wrote a file for another bucket or a file does not match the schema.
    """
    fs, table_path = filesystem_for(uri, storage_options)
    stage_uri = join_uri(uri, STAGING_DIR, f"w{seq}-{uuid.uuid4().hex}")
    stage_path = filesystem_for(stage_uri, storage_options)[1]
    try:
        rows.write.mode("error").partitionBy(BUCKET_COLUMN).parquet(stage_uri)
        outputs = staged_outputs(fs, stage_path)
        stray = {b for b, _ in outputs} - set(buckets)
        if stray:
            raise MergeJobError(f"Spark wrote files for buckets {sorted(stray)} the window did not touch")
        return place_outputs(fs, table_path, outputs, data_schema, seq)
    finally:
        _delete_dir(fs, stage_path)
        _delete_dir_if_empty(fs, stage_path.rsplit("/", 1)[0])


def _delete_dir(fs: pafs.FileSystem, path: str) -> None:
    _delete_quietly(fs.delete_dir, path, "staging folder")


def _delete_quietly(delete: Any, path: str, what: str) -> None:
    """Run ``delete(path)``; a path already gone is fine, other errors are logged (cleanup only)."""
    try:
        delete(path)
    except FileNotFoundError:
        return  # already gone: nothing to clean up
    except OSError as err:
        log.warning("could not delete %s %s: %s", what, path, err)


def _delete_dir_if_empty(fs: pafs.FileSystem, path: str) -> None:
    # Best effort: another merge may be using the folder; it is hidden from Delta readers either way.
    with contextlib.suppress(OSError):
        if not fs.get_file_info(pafs.FileSelector(path, allow_not_found=True)):
            fs.delete_dir(path)
