"""Delta table access on the driver: create a target table, read its layout, commit a window.

Opening a table and what it records for readers (owner, app transactions) are the contract's
(:mod:`airflow_provider_binlog.contract.delta`); this module holds what only the merge does. Spark writes
plain Parquet; delta-rs commits remove-old + add-new (``docs/adr/0001-delta-commit-in-spark-driver.md``).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

import pyarrow as pa

from airflow_provider_binlog.contract.delta import (
    DEFAULT_TARGET_FILE_BYTES,
    KEY_RANGE_LAYOUT,
    LAYOUT_PROPERTY,
    OWNER_PROPERTY,
    PRIMARY_KEY_PROPERTY,
    STATS_COLUMNS_PROPERTY,
    TARGET_FILE_BYTES_PROPERTY,
    pipeline_app_id,
    stats_columns_value,
    table_key,
    window_app_id,
)
from airflow_provider_binlog.contract.delta_log import LogFile, commit, log_files, supports_deletion_vectors
from airflow_provider_binlog.contract.uris import StorageOptions, join_uri
from airflow_provider_binlog.jobs.application import MergeJobError

if TYPE_CHECKING:
    from deltalake import DeltaTable

    from airflow_provider_binlog.jobs.merge.files import PlacedFile

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DataFile:
    """A data file of the current table version.

    :param path: path as stored in the Delta log (relative to the table).
    :param size: size in bytes.
    :param rows: number of rows (``numRecords``; 0 when the log has no statistics for it).
    :param partition: its partition values (``{"_binlog_bucket": "<n>"}`` in a table created with hash
        buckets, empty otherwise).
    :param low: the smallest value of the first key column in the file (``minValues``), None if unknown.
    :param high: the largest value of the first key column in the file (``maxValues``), None if unknown.
    """

    path: str
    size: int
    rows: int = 0
    partition: Mapping[str, str | None] = field(default_factory=dict)
    low: Any = None
    high: Any = None

    @property
    def ranged(self) -> bool:
        """Return whether the log records the file's key range."""
        return self.low is not None and self.high is not None


def create_table(
    uri: str,
    schema: pa.Schema,
    *,
    table: str,
    keys: Sequence[str],
    pipeline: str,
    target_file_bytes: int | None = None,
    storage_options: Mapping[str, str] | None = None,
    properties: Mapping[str, str] | None = None,
) -> DeltaTable:
    """Create the empty Delta table for a source table, in the key-range layout (not partitioned).

    The key, the owning pipeline, the layout, the target file size and the statistics columns (the key)
    go into the table configuration; later merges use them
    (:func:`~airflow_provider_binlog.contract.delta.check_owner`, ``docs/adr/0020-key-range-file-layout.md``).

    :param uri: table location.
    :param schema: table schema from :func:`~airflow_provider_binlog.jobs.merge.window.target_schema`.
    :param table: source table name ``db.table`` (the Delta table's name).
    :param keys: key columns.
    :param pipeline: the pipeline creating it, its owner.
    :param target_file_bytes: size data files are written to, in bytes (default
        :data:`~airflow_provider_binlog.contract.delta.DEFAULT_TARGET_FILE_BYTES`).
    :param storage_options: deltalake storage options.
    :param properties: further table properties (a change log's, :mod:`~airflow_provider_binlog.jobs.merge.history`).
    """
    from deltalake import DeltaTable

    log.info("creating Delta table %s for %s (pipeline %s) with key %s", uri, table, pipeline, list(keys))
    return DeltaTable.create(
        uri,
        schema,
        mode="ignore",
        name=table,
        configuration={
            PRIMARY_KEY_PROPERTY: json.dumps(list(keys)),
            OWNER_PROPERTY: pipeline,
            **layout_properties(keys, target_file_bytes),
            **dict(properties or {}),
        },
        storage_options=dict(storage_options or {}),
        raise_if_key_not_exists=False,
    )


def layout_properties(keys: Sequence[str], target_file_bytes: int | None) -> dict[str, str]:
    """Return the table properties of the key-range layout for a table with key ``keys``.

    :param keys: key columns (the table's spelling).
    :param target_file_bytes: target data file size in bytes (None: the default).
    """
    return {
        LAYOUT_PROPERTY: KEY_RANGE_LAYOUT,
        STATS_COLUMNS_PROPERTY: stats_columns_value(list(keys)),
        TARGET_FILE_BYTES_PROPERTY: str(target_file_bytes or DEFAULT_TARGET_FILE_BYTES),
    }


def ensure_key_range_layout(dt: DeltaTable, keys: Sequence[str], target_file_bytes: int | None) -> None:
    """Give a table created with hash buckets the key-range layout's properties (one metadata commit).

    Its files carry no key ranges, so the merge that follows rewrites every one of them into key-ranged
    files in the window's commit (:func:`~airflow_provider_binlog.jobs.merge.layout.plan_rewrite`): that is
    the migration. Setting the statistics columns first is safe for readers of the old files (they carry no
    ``minValues``); the other order would let deltalake drop new files from filtered reads in between.

    :param dt: the table.
    :param keys: key columns (the table's spelling).
    :param target_file_bytes: target data file size in bytes (None: the default).
    """
    if dt.metadata().configuration.get(LAYOUT_PROPERTY) == KEY_RANGE_LAYOUT:
        return
    log.info(
        "%s: moving the table from hash buckets to the key-range layout: its next commit rewrites every file",
        dt.table_uri,
    )
    dt.alter.set_table_properties(layout_properties(keys, target_file_bytes), raise_if_not_exists=False)
    dt.update_incremental()


def check_table_key(dt: DeltaTable, keys: Sequence[str], table: str) -> list[str]:
    """Check a window's key against the key the table was created with; return the table's spelling.

    :param dt: the table.
    :param keys: the window's key columns.
    :param table: table name for messages.
    :raises MergeJobError: if the key changed.
    """
    stored = table_key(dt)
    if stored is not None and [c.lower() for c in stored] != [c.lower() for c in keys]:
        raise MergeJobError(
            f"the key of {table} changed from {stored} (the Delta table's files are sorted by it) to {list(keys)}; "
            "re-snapshot the table into a new target table"
        )
    return list(stored) if stored is not None else list(keys)


def current_files(dt: DeltaTable, keys: Sequence[str]) -> list[DataFile]:
    """Return the current data files with their key ranges, from the Delta log.

    The key range is the first key column's ``minValues``/``maxValues`` (a file missing either has none:
    :attr:`DataFile.ranged` is false).

    :param dt: the table.
    :param keys: key columns (the table's spelling).
    """
    table = pa.table(dt.get_add_actions(flatten=True))  # type: ignore[call-overload]
    partitions = [c for c in table.column_names if c.startswith("partition.")]
    low, high = f"min.{keys[0]}", f"max.{keys[0]}"
    files = []
    for action in table.to_pylist():
        files.append(
            DataFile(
                path=action["path"],
                size=int(action["size_bytes"]),
                rows=int(action.get("num_records") or 0),
                partition={c.removeprefix("partition."): _partition_value(action[c]) for c in partitions},
                low=action.get(low),
                high=action.get(high),
            )
        )
    return files


def _partition_value(value: Any) -> str | None:
    return None if value is None else str(value)


def data_file_uri(table: str, path: str) -> str:
    """Return the location of a data file from its Delta log path.

    :param table: table location.
    :param path: path from the log (relative and percent-encoded, or absolute).
    """
    if "://" in path or path.startswith("/"):
        return path
    return join_uri(table, unquote(path))


def commit_window(
    dt: DeltaTable,
    removed: Sequence[DataFile],
    added: Sequence[PlacedFile],
    *,
    pipeline: str,
    seq: int,
    custom_metadata: Mapping[str, Any],
    schema: pa.Schema | None = None,
    app_transactions: Mapping[str, int] | None = None,
    storage_options: StorageOptions | None = None,
) -> None:
    """Commit remove-old + add-new in one Delta commit that records the window as app transactions.

    With ``schema`` (a snapshot replacing the table's schema, ``removed`` being every current file) the
    commit is an ``overwrite`` that also writes the new schema: ``create_write_transaction`` then removes
    every current file itself and writes a ``metaData`` action, keeping the table's id, partitioning and
    configuration (measured with deltalake 1.6.6).

    The commit must be the version right after the one the files were read from: it is never retried
    over another writer's commit (a window merge beside a snapshot of the same table, or a compaction),
    because the new files were computed without that writer's changes. The caller plans the merge again.

    The window's app transactions are written (:func:`window_transactions`). A table with deletion vectors
    gets a log commit of ours (``remove`` actions must name each file's DV, which delta-rs's cannot), except
    for a schema-replacing overwrite, whose removes delta-rs writes whole.

    :param dt: the table, loaded at the version the removed files were read from.
    :param removed: the current files the window rewrites.
    :param added: the new files holding their rows and the window's changes.
    :param pipeline: pipeline name.
    :param seq: window sequence number.
    :param custom_metadata: extra commit info (summary numbers).
    :param schema: the table's new schema (Arrow, with its partition column if it has one), if it changes.
    :param app_transactions: further app transactions ``{app id: version}`` to record (a truncate floor).
    :param storage_options: storage options of the target store (the log commit of a table with DVs).
    """
    from deltalake import CommitProperties, Transaction
    from deltalake import Schema as DeltaSchema
    from deltalake.transaction import AddAction, RemoveAction

    now_ms = int(time.time() * 1000)
    transactions = window_transactions(dt, pipeline, seq, app_transactions)
    if schema is None and supports_deletion_vectors(dt):
        # delta-rs's remove of a file with a DV leaves the file in the table: the commit is ours (ADR 0037)
        current = log_files(dt, storage_options)
        actions = [current[f.path].remove(now_ms) for f in removed]
        actions += [LogFile(f.path, f.size, f.rows, f.stats, dict(f.partition)).add(now_ms) for f in added]
        commit(
            dt,
            actions,
            operation="WRITE",
            custom_metadata=custom_metadata,
            app_transactions=transactions,
            storage_options=storage_options,
        )
        return
    delta_actions: list[AddAction | RemoveAction] = [
        RemoveAction(f.path, True, now_ms, f.size, dict(f.partition)) for f in removed
    ]
    delta_actions += [AddAction(f.path, f.size, dict(f.partition), now_ms, True, f.stats) for f in added]
    partition_by = list(dt.metadata().partition_columns)
    properties = CommitProperties(
        custom_metadata=dict(custom_metadata),
        max_commit_retries=0,
        app_transactions=[Transaction(app, version, now_ms) for app, version in transactions.items()],
    )
    if schema is not None:
        adds: list[AddAction | RemoveAction] = [a for a in delta_actions if isinstance(a, AddAction)]
        dt.create_write_transaction(
            adds,
            mode="overwrite",
            schema=DeltaSchema.from_arrow(schema),
            partition_by=partition_by,
            commit_properties=properties,
        )
        return
    dt.create_write_transaction(
        delta_actions,
        mode="append",
        schema=dt.schema(),
        partition_by=partition_by,
        commit_properties=properties,
    )


def window_transactions(
    dt: DeltaTable, pipeline: str, seq: int, extra: Mapping[str, int] | None = None
) -> dict[str, int]:
    """Return the app transactions a window's commit records: the pipeline's high-water mark, the window, ``extra``.

    ``airflow-provider-binlog:<pipeline>`` holds the highest window seq merged so far and
    ``airflow-provider-binlog:<pipeline>:window=<seq>`` marks this window (windows can be merged out of order,
    so the high-water mark alone cannot tell whether an older one was).
    """
    previous = dt.transaction_version(pipeline_app_id(pipeline))
    high_water = seq if previous is None else max(seq, previous)
    return {pipeline_app_id(pipeline): high_water, window_app_id(pipeline, seq): seq, **dict(extra or {})}
