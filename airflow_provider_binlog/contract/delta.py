"""The target side of the contract: what a Delta table written by the merge records, and how to open one.

Every target table is a Delta table at ``<target>/<db>/<table>`` (:func:`~.uris.table_uri`). The merge
records in it, and the Airflow tasks and readers check:

* its configuration: bucket count (:data:`BUCKETS_PROPERTY`), key (:data:`PRIMARY_KEY_PROPERTY`) and
  owning pipeline (:data:`OWNER_PROPERTY`);
* one app transaction per merged window (:func:`window_app_id`) and a high-water mark per pipeline
  (:func:`pipeline_app_id`), written in the same commit as the window's data (Delta protocol,
  "Transaction Identifiers"), so "is window N merged" is a read of the log.

deltalake is imported inside :func:`open_table` only; the other functions take an open table.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from airflow_provider_binlog.contract import ContractError
from airflow_provider_binlog.contract.uris import StorageOptions

if TYPE_CHECKING:
    from deltalake import DeltaTable

APP_ID_PREFIX = "airflow-provider-binlog"
BUCKETS_PROPERTY = "binlog.buckets"
PRIMARY_KEY_PROPERTY = "binlog.primary_key"
OWNER_PROPERTY = "binlog.pipeline"
"""Table configuration key naming the one pipeline that may merge into the table (set when it is created)."""
OWNER_HISTORY_LIMIT = 1000
"""Commits read to find the writers of a table created before owners were recorded."""
COMMIT_PIPELINE_KEY = "binlog.pipeline"
"""Commit info key naming the pipeline of a merge commit (``binlog.window`` names its window)."""
COMMIT_WINDOW_KEY = "binlog.window"


class TableOwnerError(ContractError):
    """A pipeline may not write a target table another pipeline owns."""


def pipeline_app_id(pipeline: str) -> str:
    """Return the Delta app id whose transaction version is the highest window merged by a pipeline."""
    return f"{APP_ID_PREFIX}:{pipeline}"


def window_app_id(pipeline: str, seq: int) -> str:
    """Return the Delta app id that marks window ``seq`` of a pipeline as merged into a table."""
    return f"{APP_ID_PREFIX}:{pipeline}:window={seq}"


def open_table(uri: str, storage_options: StorageOptions | None = None) -> DeltaTable | None:
    """Return the Delta table at ``uri``, or ``None`` if there is none: the one way the provider opens one.

    :param uri: table location (local path or URI).
    :param storage_options: deltalake storage options (:mod:`.uris`), passed as they are.
    """
    from deltalake import DeltaTable

    options = dict(storage_options or {})
    if not DeltaTable.is_deltatable(uri, storage_options=options):
        return None
    return DeltaTable(uri, storage_options=options)


def already_merged(dt: DeltaTable, pipeline: str, seq: int) -> bool:
    """Return whether the table's log marks window ``seq`` of ``pipeline`` as merged."""
    return dt.transaction_version(window_app_id(pipeline, seq)) is not None


def delta_arrow_schema(dt: DeltaTable) -> pa.Schema:
    """Return a Delta table's schema as a pyarrow schema (with column metadata)."""
    return pa.schema(dt.schema().to_arrow())  # type: ignore[call-overload]


def table_writers(dt: DeltaTable) -> list[str]:
    """Return the pipelines that may have written the table: its owner, else every pipeline in its history.

    Tables created before owners were recorded name their writers only in the commit info of each merge
    (:data:`COMMIT_PIPELINE_KEY`).
    """
    owner = dt.metadata().configuration.get(OWNER_PROPERTY)
    if owner:
        return [owner]
    history: list[dict[str, Any]] = dt.history(OWNER_HISTORY_LIMIT)
    return sorted({c[COMMIT_PIPELINE_KEY] for c in history if c.get(COMMIT_PIPELINE_KEY)})


def check_owner(dt: DeltaTable, pipeline: str, table: str) -> None:
    """Refuse a pipeline that does not own the table.

    Two pipelines merging into one table order their changes by unrelated sequence numbers, so one's
    rows overwrite the other's newer ones for good.

    :param dt: the table.
    :param pipeline: the pipeline about to write.
    :param table: source table name ``db.table`` for messages.
    :raises TableOwnerError: naming the owner and the remedy.
    """
    foreign = [p for p in table_writers(dt) if p != pipeline]
    if foreign:
        raise TableOwnerError(
            f"the Delta table {dt.table_uri} of {table} belongs to pipeline {foreign[0]!r}; pipeline {pipeline!r} may "
            f"not merge into it (two pipelines order their changes by unrelated sequence numbers and overwrite each "
            f"other's rows). Point {pipeline!r} at another target root, or hand the table over deliberately: "
            f"python -m airflow_provider_binlog.admin hand-over --target <target root> --table {table} "
            f"--to {pipeline}, then re-snapshot {table} in {pipeline!r}"
        )


def table_key(dt: DeltaTable) -> list[str] | None:
    """Return the key the table was created with (its configuration), or None for a table without one."""
    stored = json.loads(dt.metadata().configuration.get(PRIMARY_KEY_PROPERTY) or "null")
    return None if stored is None else [str(c) for c in stored]
