"""The target side of the contract: what a Delta table written by the merge records, and how to open one.

Every target table is a Delta table at ``<target>/<db>/<table>`` (:func:`~.uris.table_uri`). The merge
records in it, and the Airflow tasks and readers check:

* its configuration: key (:data:`PRIMARY_KEY_PROPERTY`), owning pipeline (:data:`OWNER_PROPERTY`), layout
  (:data:`LAYOUT_PROPERTY`, ``docs/adr/0020-key-range-file-layout.md``), target data file size
  (:data:`TARGET_FILE_BYTES_PROPERTY`), the columns with per-file statistics (:data:`STATS_COLUMNS_PROPERTY`)
  and, for tables created before ADR 0020, their hash bucket count (:data:`BUCKETS_PROPERTY`);
* one app transaction per merged window (:func:`window_app_id`) and a high-water mark per pipeline
  (:func:`pipeline_app_id`), written in the same commit as the window's data (Delta protocol,
  "Transaction Identifiers"), so "is window N merged" is a read of the log.

deltalake is imported inside :func:`open_table` only; the other functions take an open table.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

from airflow_provider_binlog.contract import ContractError
from airflow_provider_binlog.contract.uris import StorageOptions

if TYPE_CHECKING:
    from deltalake import DeltaTable

APP_ID_PREFIX = "airflow-provider-binlog"
BUCKETS_PROPERTY = "binlog.buckets"
"""Bucket count of a table created with hash buckets (before ADR 0020); its first merge since moves it to key ranges."""
LAYOUT_PROPERTY = "binlog.layout"
"""Table configuration key naming the file layout: :data:`KEY_RANGE_LAYOUT` (tables without it have hash buckets)."""
KEY_RANGE_LAYOUT = "key_range"
"""Data files sorted by key, each file's key range in its Delta statistics (ADR 0020)."""
TARGET_FILE_BYTES_PROPERTY = "binlog.target_file_bytes"
"""Table configuration key: the size data files are written to and split at, in bytes."""
DEFAULT_TARGET_FILE_BYTES = 128 * 1024 * 1024
"""Target data file size of a table created without one: 128 MiB."""
STATS_COLUMNS_PROPERTY = "delta.dataSkippingStatsColumns"
"""Delta table property listing the columns whose statistics the files carry (the key columns).

Set, readers build per-file guarantees from these columns only: deltalake (1.x) otherwise turns every column
missing from ``minValues`` into a ``column >= null`` guarantee that drops the file from filtered reads."""
PRIMARY_KEY_PROPERTY = "binlog.primary_key"
OWNER_PROPERTY = "binlog.pipeline"
"""Table configuration key naming the one pipeline that may merge into the table (set when it is created)."""
QUARANTINE_PROPERTY = "binlog.quarantine"
"""Table configuration key set while the table is quarantined: JSON ``{"since", "gtid", "window", "reason"}``
(``since`` the binlog coordinates ``file:pos`` its rows are as of); the empty string once a re-snapshot healed
it (``docs/operating.md``, "Quarantined tables")."""
OWNER_HISTORY_LIMIT = 1000
"""Commits read to find the writers of a table created before owners were recorded."""
COMMIT_PIPELINE_KEY = "binlog.pipeline"
"""Commit info key naming the pipeline of a merge commit (``binlog.window`` names its window)."""
COMMIT_WINDOW_KEY = "binlog.window"
STAGING_DIR = "_binlog_staging"
"""Folder under a table where Spark writes new data files before they are moved into place.

Delta readers and delta-rs vacuum skip names starting with ``_``; the maintenance vacuum removes output
folders left in it (:func:`airflow_provider_binlog.maintenance.vacuum_table`)."""


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


def quarantine_of(dt: DeltaTable) -> dict[str, Any] | None:
    """Return the table's :data:`QUARANTINE_PROPERTY` record, or None when the table is not quarantined."""
    text = dt.metadata().configuration.get(QUARANTINE_PROPERTY)
    return json.loads(text) if text else None


def mark_quarantine(dt: DeltaTable, record: dict[str, Any] | None) -> None:
    """Set the table's :data:`QUARANTINE_PROPERTY` to ``record`` (JSON), or clear it (None); no commit if unchanged."""
    text = "" if record is None else json.dumps(record, sort_keys=True)
    if dt.metadata().configuration.get(QUARANTINE_PROPERTY, "") != text:
        dt.alter.set_table_properties({QUARANTINE_PROPERTY: text}, raise_if_not_exists=False)


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


def stats_columns_value(keys: list[str] | tuple[str, ...]) -> str:
    """Return the :data:`STATS_COLUMNS_PROPERTY` value for key columns (comma-separated, backtick-quoted)."""
    return ",".join("`" + k.replace("`", "``") + "`" for k in keys)


def target_file_bytes(dt: DeltaTable) -> int:
    """Return a table's target data file size in bytes (:data:`TARGET_FILE_BYTES_PROPERTY`, else the default)."""
    value = dt.metadata().configuration.get(TARGET_FILE_BYTES_PROPERTY)
    return int(value) if value else DEFAULT_TARGET_FILE_BYTES


def table_key(dt: DeltaTable) -> list[str] | None:
    """Return the key the table was created with (its configuration), or None for a table without one."""
    stored = json.loads(dt.metadata().configuration.get(PRIMARY_KEY_PROPERTY) or "null")
    return None if stored is None else [str(c) for c in stored]


def file_stats(metadata: pq.FileMetaData, schema: pa.Schema, stats_columns: Sequence[str] = ()) -> str:
    """Return Delta file statistics (JSON) from a Parquet footer: ``numRecords``, and the key range.

    For the table's statistics columns (its key, :data:`~airflow_provider_binlog.contract.delta.STATS_COLUMNS_PROPERTY`)
    ``nullCount``, ``minValues`` and ``maxValues`` are written when the footer gives every one of them exactly
    (:func:`exact_bounds`); otherwise none is, and the file has no key range (the merge then treats it as
    able to hold any key). Other columns get no statistics: the table property tells readers so, and
    deltalake (1.x) would otherwise turn a column missing from a present ``minValues`` into a
    ``column >= null`` guarantee that drops the file from pyarrow filtered reads (delta-io/delta-rs#3173).

    :param metadata: the file's footer.
    :param schema: the file's Arrow schema (storage types), in footer column order.
    :param stats_columns: the columns to give statistics (names as in ``schema``).
    """
    stats: dict[str, Any] = {"numRecords": metadata.num_rows}
    bounds = {name: exact_bounds(metadata, schema, name) for name in stats_columns}
    if bounds and all(b is not None for b in bounds.values()):
        stats["nullCount"] = {name: 0 for name in bounds}
        stats["minValues"] = {name: b[0] for name, b in bounds.items() if b is not None}
        stats["maxValues"] = {name: b[1] for name, b in bounds.items() if b is not None}
    return json.dumps(stats)


def exact_bounds(metadata: pq.FileMetaData, schema: pa.Schema, name: str) -> tuple[Any, Any] | None:
    """Return a key column's ``(min, max)`` over a file as Delta statistics JSON values, or None.

    Exact only for integers, decimals of scale 0 (written as JSON integers), strings and dates, with no null
    and min/max in every row group; None otherwise (floats with NaN, timestamps whose Delta statistics are
    in milliseconds, binary, a decimal with a fraction).

    :param metadata: the file's footer.
    :param schema: the file's Arrow schema, in footer column order.
    :param name: the column.
    """
    i = schema.get_field_index(name)
    t = schema.field(i).type
    exact = (
        pa.types.is_integer(t)
        or pa.types.is_string(t)
        or pa.types.is_date32(t)
        or (pa.types.is_decimal(t) and t.scale == 0)
    )
    chunks = [metadata.row_group(r).column(i).statistics for r in range(metadata.num_row_groups)]
    if not exact or not chunks or any(s is None or not s.has_min_max or s.null_count for s in chunks):
        return None
    low = min(s.min for s in chunks if s is not None)
    high = max(s.max for s in chunks if s is not None)
    if pa.types.is_date32(t):
        return low.isoformat(), high.isoformat()
    if pa.types.is_decimal(t):
        return int(low), int(high)
    return low, high
