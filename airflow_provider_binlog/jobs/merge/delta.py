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
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

import pyarrow as pa

from airflow_provider_binlog.contract.columns import BUCKET_COLUMN
from airflow_provider_binlog.contract.delta import (
    BUCKETS_PROPERTY,
    OWNER_PROPERTY,
    PRIMARY_KEY_PROPERTY,
    pipeline_app_id,
    table_key,
    window_app_id,
)
from airflow_provider_binlog.contract.uris import join_uri
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
    :param bucket: its ``_binlog_bucket`` partition value.
    """

    path: str
    size: int
    bucket: int


def create_table(
    uri: str,
    schema: pa.Schema,
    *,
    table: str,
    keys: Sequence[str],
    buckets: int,
    pipeline: str,
    storage_options: Mapping[str, str] | None = None,
) -> DeltaTable:
    """Create the empty Delta table for a source table, partitioned by ``_binlog_bucket``.

    The bucket count, the key and the owning pipeline go into the table configuration; later merges use
    them (:func:`~airflow_provider_binlog.contract.delta.check_owner`).

    :param uri: table location.
    :param schema: table schema from :func:`~airflow_provider_binlog.jobs.merge.window.target_schema`.
    :param table: source table name ``db.table`` (the Delta table's name).
    :param keys: key columns.
    :param buckets: bucket count.
    :param pipeline: the pipeline creating it, its owner.
    :param storage_options: deltalake storage options.
    """
    from deltalake import DeltaTable

    log.info(
        "creating Delta table %s for %s (pipeline %s) with %d buckets, key %s",
        uri,
        table,
        pipeline,
        buckets,
        list(keys),
    )
    return DeltaTable.create(
        uri,
        schema,
        mode="ignore",
        partition_by=[BUCKET_COLUMN],
        name=table,
        configuration={
            BUCKETS_PROPERTY: str(buckets),
            PRIMARY_KEY_PROPERTY: json.dumps(list(keys)),
            OWNER_PROPERTY: pipeline,
        },
        storage_options=dict(storage_options or {}),
        raise_if_key_not_exists=False,
    )


def table_buckets(dt: DeltaTable) -> int:
    """Return the bucket count stored in a table's configuration.

    :param dt: the table.
    :raises MergeJobError: if the table was not created by this merge.
    """
    value = dt.metadata().configuration.get(BUCKETS_PROPERTY)
    if not value:
        raise MergeJobError(
            f"Delta table {dt.table_uri} has no {BUCKETS_PROPERTY} property: it was not created by the "
            "binlog merge; point the pipeline at another target"
        )
    return int(value)


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
            f"the key of {table} changed from {stored} (used to bucket the Delta table) to {list(keys)}; "
            "re-snapshot the table into a new target table"
        )
    return list(stored) if stored is not None else list(keys)


def current_files(dt: DeltaTable, buckets: Sequence[int]) -> list[DataFile]:
    """Return the current data files of the given buckets, from the Delta log.

    :param dt: the table.
    :param buckets: bucket numbers.
    """
    wanted = set(buckets)
    actions = pa.table(dt.get_add_actions(flatten=True)).to_pylist()  # type: ignore[call-overload]
    files = []
    for action in actions:
        bucket = action.get(f"partition.{BUCKET_COLUMN}")
        if bucket is not None and int(bucket) in wanted:
            files.append(DataFile(path=action["path"], size=int(action["size_bytes"]), bucket=int(bucket)))
    return files


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
) -> None:
    """Commit remove-old + add-new in one Delta commit that records the window as app transactions.

    With ``schema`` (a snapshot replacing the table's schema, ``removed`` being every current file) the
    commit is an ``overwrite`` that also writes the new schema: ``create_write_transaction`` then removes
    every current file itself and writes a ``metaData`` action, keeping the table's id, partitioning and
    configuration (measured with deltalake 1.6.6).

    The commit must be the version right after the one the files were read from: it is never retried
    over another writer's commit (a window merge beside a snapshot of the same table), because the new
    bucket contents were computed without that writer's rows. The caller plans the merge again.

    Two app transactions are written: ``airflow-provider-binlog:<pipeline>`` with the highest window seq
    merged so far, and ``airflow-provider-binlog:<pipeline>:window=<seq>`` marking this window (windows
    can be merged out of order, so the high-water mark alone cannot tell whether an older one was).

    :param dt: the table, loaded at the version the removed files were read from.
    :param removed: current files of the touched buckets.
    :param added: new files of the touched buckets.
    :param pipeline: pipeline name.
    :param seq: window sequence number.
    :param custom_metadata: extra commit info (summary numbers).
    :param schema: the table's new schema (Arrow, with the partition column), if it changes.
    :param app_transactions: further app transactions ``{app id: version}`` to record (a truncate floor).
    """
    from deltalake import CommitProperties, Transaction
    from deltalake import Schema as DeltaSchema
    from deltalake.transaction import AddAction, RemoveAction

    now_ms = int(time.time() * 1000)
    previous = dt.transaction_version(pipeline_app_id(pipeline))
    high_water = seq if previous is None else max(seq, previous)
    actions: list[AddAction | RemoveAction] = [
        RemoveAction(f.path, True, now_ms, f.size, {BUCKET_COLUMN: str(f.bucket)}) for f in removed
    ]
    actions += [
        AddAction(f.path, f.size, {BUCKET_COLUMN: str(f.bucket)}, now_ms, True, f.stats) for f in added
    ]
    properties = CommitProperties(
        custom_metadata=dict(custom_metadata),
        max_commit_retries=0,
        app_transactions=[
            Transaction(pipeline_app_id(pipeline), high_water, now_ms),
            Transaction(window_app_id(pipeline, seq), seq, now_ms),
            *(Transaction(app, version, now_ms) for app, version in (app_transactions or {}).items()),
        ],
    )
    if schema is not None:
        adds: list[AddAction | RemoveAction] = [a for a in actions if isinstance(a, AddAction)]
        dt.create_write_transaction(
            adds,
            mode="overwrite",
            schema=DeltaSchema.from_arrow(schema),
            partition_by=[BUCKET_COLUMN],
            commit_properties=properties,
        )
        return
    dt.create_write_transaction(
        actions, mode="append", schema=dt.schema(), partition_by=[BUCKET_COLUMN], commit_properties=properties
    )
