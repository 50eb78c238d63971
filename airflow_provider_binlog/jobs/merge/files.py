"""New data files of a merge: written by Spark, validated, moved into place and described for Delta.

Spark writes them sorted by key to a staging folder under the table; the driver validates their footers,
moves them into the table and describes them as Delta add actions whose statistics carry their key range
(``docs/adr/0020-key-range-file-layout.md``).

``create_write_transaction`` does not look into the files it adds, so :func:`validate_data_file` is the
only check that a file matches the table's schema.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from airflow_provider_binlog.contract.columns import BUCKET_COLUMN
from airflow_provider_binlog.contract.delta import STAGING_DIR, file_stats, target_file_bytes
from airflow_provider_binlog.contract.uris import StorageOptions, filesystem_for, join_uri
from airflow_provider_binlog.jobs.actions import output_name, save_output
from airflow_provider_binlog.jobs.application import MergeJobError
from airflow_provider_binlog.jobs.connect_operations import OperationDetached

if TYPE_CHECKING:
    from deltalake import DeltaTable
    from pyspark.sql import DataFrame

    from airflow_provider_binlog.jobs.merge.delta import DataFile
    from airflow_provider_binlog.jobs.merge.layout import RewritePlan

log = logging.getLogger(__name__)

_SEGMENT_DIR_RE = re.compile(r"_binlog_segment=(\d+)")


def staged_outputs(fs: pafs.FileSystem, stage_path: str) -> list[tuple[int, str]]:
    """List the Parquet files Spark wrote under a staging folder, with their segment.

    ``_SUCCESS``, ``.crc`` and other hidden files are ignored (they are deleted with the folder).

    :param fs: filesystem.
    :param stage_path: staging folder path.
    """
    outputs = []
    for info in fs.get_file_info(pafs.FileSelector(stage_path, recursive=True)):
        name = info.base_name
        if info.type != pafs.FileType.File or not name.endswith(".parquet") or name[0] in "._":
            continue
        match = _SEGMENT_DIR_RE.fullmatch(info.path.rsplit("/", 2)[-2])
        if match is None:
            raise MergeJobError(f"Spark wrote {info.path} outside a _binlog_segment=<n> folder")
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


@dataclass
class PlacedFile:
    """A new data file moved into the table.

    :param path: path relative to the table, as written to the log.
    :param location: full location, for cleanup.
    :param partition: its partition values (see :attr:`~airflow_provider_binlog.jobs.merge.delta.DataFile.partition`).
    :param size: size in bytes.
    :param rows: number of rows.
    :param stats: Delta statistics JSON.
    """

    path: str
    location: str
    partition: Mapping[str, str | None]
    size: int
    rows: int
    stats: str


@dataclass(frozen=True)
class FileLayout:
    """Where and how a merge writes a table's new files.

    :param keys: the key columns, which the files are sorted by.
    :param stats_columns: the columns whose statistics the add actions carry (the table's
        :data:`~airflow_provider_binlog.contract.delta.STATS_COLUMNS_PROPERTY`).
    :param partition: the partition values of every new file: ``{"_binlog_bucket": "0"}`` in a table
        created with hash buckets (Delta cannot drop a partition column), else empty.
    :param rows_per_file: rows after which a file is split (the table's target size).
    """

    keys: Sequence[str]
    stats_columns: Sequence[str]
    partition: Mapping[str, str | None]
    rows_per_file: int

    @property
    def folder(self) -> str:
        """Return the folder of new files under the table (``_binlog_bucket=0/`` or the table itself)."""
        return "".join(f"{k}={v}/" for k, v in self.partition.items())


def place_outputs(
    fs: pafs.FileSystem,
    table_path: str,
    outputs: Sequence[tuple[int, str]],
    schema: pa.Schema,
    seq: int,
    layout: FileLayout,
) -> list[PlacedFile]:
    """Validate Spark's output files and move them into the table (its :attr:`FileLayout.folder`).

    :param fs: filesystem of the table.
    :param table_path: table path on ``fs``.
    :param outputs: ``(segment, path)`` pairs from :func:`staged_outputs`.
    :param schema: the table's schema without the partition column.
    :param seq: window sequence number (prefixes the file names).
    :param layout: the table's file layout.
    :raises MergeJobError: if a file does not match the schema.
    """
    placed: list[PlacedFile] = []
    try:
        for segment, path in outputs:
            metadata = validate_data_file(fs, path, schema)
            relative = f"{layout.folder}w{seq}-s{segment}-{path.rsplit('/', 1)[-1]}"
            destination = f"{table_path.rstrip('/')}/{relative}"
            fs.create_dir(destination.rsplit("/", 1)[0], recursive=True)
            fs.move(path, destination)
            size = fs.get_file_info(destination).size or 0
            stats = file_stats(metadata, schema, layout.stats_columns)
            placed.append(PlacedFile(relative, destination, layout.partition, size, metadata.num_rows, stats))
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


def write_sorted_files(
    rows: DataFrame,
    uri: str,
    data_schema: pa.Schema,
    *,
    seq: int,
    layout: FileLayout,
    partitions: int,
    storage_options: StorageOptions | None = None,
    output_key: Sequence[Any] = (),
) -> list[PlacedFile]:
    """Write rows as Parquet files sorted by key, cut by segment and target size; move them into the table.

    Spark range-partitions the rows by ``(segment, key)`` into ``partitions`` tasks and sorts each; a task
    starts a new file at each segment and after :attr:`FileLayout.rows_per_file` rows (``maxRecordsPerFile``),
    so new files hold disjoint key ranges. Spark writes into a staging folder under the table (hidden from
    Delta readers); the files are validated against the schema and moved into place. Nothing is committed:
    the caller commits the returned files or deletes them (:func:`remove_files`).

    :param rows: rows with the data columns and ``_binlog_segment``
        (:func:`~airflow_provider_binlog.jobs.merge.layout.segment_column`).
    :param uri: table location.
    :param data_schema: the table's schema without the partition column.
    :param seq: window sequence number (prefixes the file names).
    :param layout: the table's file layout.
    :param partitions: the number of Spark tasks writing (about rows / rows per file).
    :param storage_options: storage options of the target store (the driver's moves; Spark's writes use
        the session's filesystem configuration).
    :param output_key: what the new files depend on besides the table and window (the Delta version read,
        the files replaced): names the folder Spark writes when the write may run detached
        (:func:`~airflow_provider_binlog.jobs.actions.output_name`).
    :raises MergeJobError: if a file does not match the schema.
    :raises OperationDetached: when the write was handed to the Spark Connect server to finish
        (:func:`~airflow_provider_binlog.jobs.actions.detaching`); nothing is placed then.
    """
    from airflow_provider_binlog.jobs.merge.layout import SEGMENT_COLUMN
    from airflow_provider_binlog.jobs.merge.transforms import col

    fs, table_path = filesystem_for(uri, storage_options)
    stage_uri = join_uri(uri, STAGING_DIR, f"w{seq}-{output_name(uri, seq, *output_key)}")
    stage_path = filesystem_for(stage_uri, storage_options)[1]
    order = [col(SEGMENT_COLUMN), *[col(k) for k in layout.keys]]
    detached = False
    try:
        # Always an exchange, even into one task: coalesce(1) would pull the per-key window function and its
        # sort into the writing task, two sorters in one task that run out of memory on a window of millions
        # of rows (UNABLE_TO_ACQUIRE_MEMORY) where each alone spills. Small windows are merged in the driver.
        writer = (
            rows.repartitionByRange(partitions, *order)
            .sortWithinPartitions(*order)
            .write.mode("error")
            .option("maxRecordsPerFile", layout.rows_per_file)
            .partitionBy(SEGMENT_COLUMN)
            .format("parquet")
        )
        save_output(writer, stage_uri, fs, stage_path, description=f"window {seq}'s new files of {uri}")
        return place_outputs(fs, table_path, staged_outputs(fs, stage_path), data_schema, seq, layout)
    except OperationDetached:
        detached = True  # the server writes the folder now; the resumed job takes it
        raise
    finally:
        if not detached:
            delete_stage(fs, stage_path)


def delete_stage(fs: pafs.FileSystem, path: str) -> None:
    """Delete a staging folder of a merge's output, and its parent when empty (best effort: errors are logged)."""
    _delete_quietly(fs.delete_dir, path, "staging folder")
    _delete_dir_if_empty(fs, path.rsplit("/", 1)[0])


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


def file_layout(dt: DeltaTable, keys: Sequence[str], files: Sequence[DataFile]) -> FileLayout:
    """Return how new files of a table are written: sorted by key, split at its target size.

    A table created with hash buckets keeps its ``_binlog_bucket`` partition column (Delta cannot drop one):
    its new files all go to partition ``0``.

    :param dt: the table.
    :param keys: key columns (the table's spelling).
    :param files: the table's current files (their bytes per row size the new ones).
    """
    from airflow_provider_binlog.jobs.merge.layout import rows_per_file

    partitioned = BUCKET_COLUMN in dt.metadata().partition_columns
    return FileLayout(
        keys=list(keys),
        stats_columns=list(keys),
        partition={BUCKET_COLUMN: "0"} if partitioned else {},
        rows_per_file=rows_per_file(files, target_file_bytes(dt)),
    )


def write_plan(
    rows: DataFrame,
    dt: DeltaTable,
    uri: str,
    data_schema: pa.Schema,
    keys: Sequence[str],
    plan: RewritePlan,
    *,
    files: Sequence[DataFile],
    seq: int,
    count: int,
    storage_options: StorageOptions | None,
) -> list[PlacedFile]:
    """Write a rewrite's ``count`` rows into new files cut by the plan's segments; return them, uncommitted.

    ``files`` are the table's current files (their bytes per row size the new ones).
    """
    from airflow_provider_binlog.jobs.merge.layout import SEGMENT_COLUMN, segment_column, write_partitions

    layout = file_layout(dt, keys, files)
    return write_sorted_files(
        rows.withColumn(SEGMENT_COLUMN, segment_column(keys[0], plan)),
        uri,
        data_schema,
        seq=seq,
        layout=layout,
        partitions=write_partitions(count, layout.rows_per_file),
        storage_options=storage_options,
        # field metadata left out: delta-rs gives its keys in no fixed order
        output_key=(
            dt.version(),
            [f.path for f in plan.removed],
            [(f.name, str(f.type)) for f in data_schema],
        ),
    )
