"""Commits written by us to a Delta log: what delta-rs cannot write (deletion vectors, ADR 0037).

delta-rs (deltalake 1.6) reads deletion vectors (``DeltaTable.scan``, the DataFusion reader) and keeps them
when it overwrites a table, but its transaction API has no deletion-vector field: an ``add`` with a DV cannot be
written, and its ``remove`` of a file that has one leaves the file in the table (a logical file is the pair of
path and DV; measured with deltalake 1.6.6). A commit that sets or replaces a file's DV, or removes a file that
has one, is therefore written here, under the Delta protocol's rules (PROTOCOL.md, "Delta Log Entries",
"Creation of New Log Entries"):

- version ``v`` is the file ``_delta_log/<v, 20 digits>.json``, one action per line, and it is created only if
  absent (put-if-absent): of two writers of the same version one fails, as delta-rs's own commits do. On a local
  filesystem the file is written under a temporary name and hard-linked to its name (``link`` fails when the
  name exists), the rule delta-rs's local log store follows; on S3 it is put with ``If-None-Match: *``
  (``s3fs``); other stores are refused (:class:`~airflow_provider_binlog.contract.ContractError`) until a
  conditional put is wired for them;
- the commit is accepted only on the version the caller read: a lost race raises deltalake's
  ``CommitFailedError``, which the merge handles by planning again, as for its delta-rs commits.

The current descriptors of files' DVs come from a checkpoint written by delta-rs at the version read
(``DeltaTable.create_checkpoint``): delta-rs does the log replay, and its checkpoint keeps each ``add``'s
``deletionVector`` (its ``get_add_actions`` leaves it out).
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_provider_binlog.contract import ContractError
from airflow_provider_binlog.contract.deletion_vectors import DeletionVector
from airflow_provider_binlog.contract.uris import S3Settings, StorageOptions, filesystem_for, join_uri

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.dataset as ds
    from deltalake import DeltaTable

DELETION_VECTORS = "deletionVectors"
"""The table feature name (PROTOCOL.md, "Deletion Vectors")."""
ENABLE_DELETION_VECTORS = "delta.enableDeletionVectors"
"""The table property that allows writers to write DVs (PROTOCOL.md, "Deletion Vectors")."""
_WRITER_FEATURES_SINCE = {
    2: ("appendOnly", "invariants"),
    3: ("checkConstraints",),
    4: ("changeDataFeed", "generatedColumns"),
    5: ("columnMapping",),
    6: ("identityColumns",),
}
"""The features each legacy writer version added (PROTOCOL.md, "Writer Version Requirements"); an upgrade to
writer version 7 must list those its version allowed (PROTOCOL.md, "Table Features for New and Existing
Tables")."""


@dataclass(frozen=True)
class LogFile:
    """A logical data file of a table, as an ``add`` or ``remove`` action names it.

    :param path: the path as the log stores it (relative to the table, percent-encoded).
    :param size: bytes.
    :param rows: the file's physical rows (``numRecords``; a file with a DV must have it).
    :param stats: the ``stats`` JSON text of its ``add`` (None: none).
    :param partition: partition values.
    :param vector: its deletion vector, None when it has none.
    """

    path: str
    size: int
    rows: int
    stats: str | None = None
    partition: Mapping[str, str | None] | None = None
    vector: DeletionVector | None = None

    def add(self, now_ms: int, *, data_change: bool = True) -> dict[str, Any]:
        """Return the file's ``add`` action (``data_change`` False: a compaction's, which changes no row)."""
        action: dict[str, Any] = {
            "path": self.path,
            "partitionValues": dict(self.partition or {}),
            "size": self.size,
            "modificationTime": now_ms,
            "dataChange": data_change,
        }
        if self.stats is not None:
            action["stats"] = self.stats
        if self.vector is not None:
            action["deletionVector"] = self.vector.to_json()
        return {"add": action}

    def remove(self, now_ms: int, *, data_change: bool = True) -> dict[str, Any]:
        """Return the ``remove`` action of this logical file (its DV included: it is part of its identity)."""
        action: dict[str, Any] = {
            "path": self.path,
            "deletionTimestamp": now_ms,
            "dataChange": data_change,
            "extendedFileMetadata": True,
            "partitionValues": dict(self.partition or {}),
            "size": self.size,
        }
        if self.vector is not None:
            action["deletionVector"] = self.vector.to_json()
        return {"remove": action}


def supports_deletion_vectors(dt: DeltaTable) -> bool:
    """Return whether the table's protocol has the ``deletionVectors`` feature (its files may have DVs)."""
    return DELETION_VECTORS in (dt.protocol().reader_features or [])


def enable_deletion_vectors(dt: DeltaTable, storage_options: StorageOptions | None = None) -> bool:
    """Upgrade the table to the ``deletionVectors`` feature and set ``delta.enableDeletionVectors``, in one commit.

    The protocol becomes reader version 3 and writer version 7, listing ``deletionVectors`` and the features
    its former writer version allowed; the ``metaData`` action repeats the table's id, name, schema, partition
    columns and configuration with the property added. Readers of the table must then read DVs: delta-rs's
    ``DeltaTable.scan``, Polars, Spark with delta-spark 2.3+ do; delta-rs's ``to_pyarrow_dataset`` does not.

    :returns: False when the table had the feature and the property already (nothing written).
    :raises CommitFailedError: when another writer committed since ``dt`` was read.
    """
    protocol = dt.protocol()
    metadata = dt.metadata()
    configuration = dict(metadata.configuration)
    if (
        DELETION_VECTORS in (protocol.reader_features or [])
        and configuration.get(ENABLE_DELETION_VECTORS) == "true"
    ):
        return False
    legacy = {
        f for v, added in _WRITER_FEATURES_SINCE.items() if v <= protocol.min_writer_version for f in added
    }
    writer_features = set(protocol.writer_features or legacy)
    reader_features = set(protocol.reader_features or [])
    if protocol.min_reader_version == 2:
        reader_features.add("columnMapping")
    configuration[ENABLE_DELETION_VECTORS] = "true"
    actions = [
        {
            "protocol": {
                "minReaderVersion": 3,
                "minWriterVersion": 7,
                "readerFeatures": sorted(reader_features | {DELETION_VECTORS}),
                "writerFeatures": sorted(writer_features | {DELETION_VECTORS}),
            }
        },
        {
            "metaData": {
                "id": metadata.id,
                **({"name": metadata.name} if metadata.name else {}),
                **({"description": metadata.description} if metadata.description else {}),
                "format": {"provider": "parquet", "options": {}},
                "schemaString": dt.schema().to_json(),
                "partitionColumns": list(metadata.partition_columns),
                "configuration": configuration,
                "createdTime": metadata.created_time,
            }
        },
    ]
    commit(dt, actions, operation="SET TBLPROPERTIES", storage_options=storage_options)
    return True


def live_rows(dt: DeltaTable, columns: Sequence[str] | None = None) -> pa.Table:
    """Return the rows of the table's current version (tombstones included), deletion vectors applied.

    A table with the ``deletionVectors`` feature is read by delta-rs's DataFusion scan (``DeltaTable.scan``),
    which applies them; delta-rs's pyarrow dataset refuses such tables. Strings and binaries come back as
    Arrow's plain ``string``/``binary`` either way.
    """
    import pyarrow as pa

    if not supports_deletion_vectors(dt):
        return dt.to_pyarrow_table(columns=None if columns is None else list(columns))
    data = pa.table(dt.scan(columns=None if columns is None else list(columns)))
    return data.cast(
        pa.schema([pa.field(f.name, _plain(f.type), f.nullable, f.metadata) for f in data.schema])
    )


def live_dataset(dt: DeltaTable) -> ds.Dataset:
    """Return the table's current version as a pyarrow dataset, deletion vectors applied.

    A table without DVs is delta-rs's dataset (files read lazily, filters pushed down); a table with DVs is
    read whole into memory by :func:`live_rows` first, as delta-rs's dataset cannot apply them: callers that
    filter a large table with DVs should compact it (or read it with ``DeltaTable.scan(predicate=...)``).
    """
    import pyarrow.dataset as ds

    if not supports_deletion_vectors(dt):
        return dt.to_pyarrow_dataset()
    return ds.dataset(live_rows(dt))


def _plain(arrow_type: pa.DataType) -> pa.DataType:
    import pyarrow as pa

    if pa.types.is_string_view(arrow_type) or pa.types.is_large_string(arrow_type):
        return pa.string()
    if pa.types.is_binary_view(arrow_type) or pa.types.is_large_binary(arrow_type):
        return pa.binary()
    return arrow_type


def file_vectors(dt: DeltaTable, storage_options: StorageOptions | None = None) -> dict[str, DeletionVector]:
    """Return ``{log path: DV}`` of the table's current files that have a deletion vector.

    A table without the feature has none, and no checkpoint is read or written for it (:func:`log_files`).
    """
    if not supports_deletion_vectors(dt):
        return {}
    return {path: f.vector for path, f in log_files(dt, storage_options).items() if f.vector is not None}


def log_files(dt: DeltaTable, storage_options: StorageOptions | None = None) -> dict[str, LogFile]:
    """Return ``{log path: logical file}`` of the version ``dt`` holds, with each file's stats and DV.

    Read from the checkpoint of that version, written by delta-rs when it is missing: delta-rs does the log
    replay, and its checkpoints keep the ``add`` actions whole (``get_add_actions`` leaves the DV out).
    """
    import pyarrow.fs as pafs
    import pyarrow.parquet as pq

    version = dt.version()
    fs, path = filesystem_for(join_uri(dt.table_uri, "_delta_log"), storage_options)
    checkpoint = f"{path}/{version:020d}.checkpoint.parquet"
    if fs.get_file_info(checkpoint).type == pafs.FileType.NotFound:
        dt.create_checkpoint()
    actions = pq.read_table(checkpoint, columns=["add"], filesystem=fs).column("add").to_pylist()
    files = {}
    for action in actions:
        if action is None:
            continue
        stats = action.get("stats")
        vector = action.get("deletionVector")
        files[action["path"]] = LogFile(
            path=action["path"],
            size=int(action["size"]),
            rows=int(json.loads(stats).get("numRecords", 0)) if stats else 0,
            stats=stats,
            partition=dict(action.get("partitionValues") or {}),
            vector=None if vector is None else DeletionVector.from_json(vector),
        )
    return files


def commit(
    dt: DeltaTable,
    actions: Sequence[Mapping[str, Any]],
    *,
    operation: str,
    custom_metadata: Mapping[str, Any] | None = None,
    app_transactions: Mapping[str, int] | None = None,
    storage_options: StorageOptions | None = None,
) -> int:
    """Write ``actions`` as the version after the one ``dt`` holds; return that version.

    A ``commitInfo`` (timestamp, ``operation``, and ``custom_metadata`` as top-level keys, as delta-rs writes
    its commit properties) comes first, then one ``txn`` per app transaction, then ``actions``.

    :raises CommitFailedError: (deltalake's) when that version exists: another writer committed first.
    :raises ContractError: when the table's store has no put-if-absent here (:func:`has_put_if_absent`).
    """
    from deltalake.exceptions import CommitFailedError

    now_ms = int(time.time() * 1000)
    version = dt.version() + 1
    info = {
        "timestamp": now_ms,
        "operation": operation,
        "operationParameters": {},
        "clientVersion": "airflow-provider-binlog",
        **dict(custom_metadata or {}),
    }
    lines: list[Mapping[str, Any]] = [{"commitInfo": info}]
    lines += [
        {"txn": {"appId": app, "version": int(app_version), "lastUpdated": now_ms}}
        for app, app_version in (app_transactions or {}).items()
    ]
    lines += list(actions)
    text = "".join(json.dumps(line, separators=(",", ":"), default=str) + "\n" for line in lines)
    try:
        _put_if_absent(join_uri(dt.table_uri, "_delta_log", f"{version:020d}.json"), text, storage_options)
    except FileExistsError as err:
        raise CommitFailedError(
            f"version {version} of {dt.table_uri} was committed by another writer first"
        ) from err
    return version


def has_put_if_absent(uri: str) -> bool:
    """Return whether our log commits can be written to the table at ``uri``: local paths and S3.

    Local files are hard-linked (``link`` fails on an existing name); S3 objects are put with
    ``If-None-Match: *`` (AWS S3 since 2024-08, MinIO, moto). Other stores are not wired yet.
    """
    return _scheme(uri) in ("file", "s3", "s3a")


def _scheme(uri: str) -> str:
    """Return the URI's scheme, lower case; ``file`` for a plain path."""
    return uri.split("://", 1)[0].lower() if "://" in uri else "file"


def _put_if_absent(uri: str, text: str, storage_options: StorageOptions | None) -> None:
    """Create the file at ``uri`` holding ``text`` unless it exists.

    :raises FileExistsError: when it exists.
    :raises ContractError: for a store without put-if-absent here (:func:`has_put_if_absent`).
    """
    if not has_put_if_absent(uri):
        raise ContractError(
            f"{uri}: deletion vectors are written by the provider's own log commits, which need a store with "
            "put-if-absent; local filesystems and S3 have it here so far. Use write_mode='copy_on_write' for this "
            "target (docs/adr/0037-deletion-vectors.md)"
        )
    if _scheme(uri) != "file":
        s3 = _s3fs_filesystem(storage_options or {})
        s3.pipe_file(uri.split("://", 1)[1], text.encode(), mode="create")  # If-None-Match: *
        return
    path = filesystem_for(uri, storage_options)[1]
    temporary = f"{os.path.dirname(path)}/.{os.path.basename(path)}.{uuid.uuid4().hex}.tmp"
    with open(temporary, "w", encoding="utf-8") as out:
        out.write(text)
        out.flush()
        os.fsync(out.fileno())
    try:
        os.link(temporary, path)  # fails when the name exists: put-if-absent
    finally:
        os.unlink(temporary)


def _s3fs_filesystem(options: StorageOptions) -> Any:
    """Return an ``s3fs`` filesystem for deltalake-style storage options (:class:`~.uris.S3Settings`).

    pyarrow's S3 filesystem has no exclusive create; s3fs's ``pipe_file(mode="create")`` puts with
    ``If-None-Match: *`` and raises ``FileExistsError`` when the object exists.

    :raises ContractError: when ``s3fs`` is not installed (the provider's ``s3`` extra).
    """
    try:
        import s3fs
    except ImportError as err:
        raise ContractError(
            "writing a Delta log commit to S3 needs s3fs: install airflow-provider-binlog[s3]"
        ) from err
    settings = S3Settings.from_options(options)
    client = {"endpoint_url": settings.endpoint_url, "region_name": settings.region}
    return s3fs.S3FileSystem(
        key=settings.key,
        secret=settings.secret,
        token=settings.token,
        client_kwargs={k: v for k, v in client.items() if v is not None},
        skip_instance_cache=True,
    )
