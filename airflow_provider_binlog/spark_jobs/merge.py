"""Merge one staged binlog window into per-table Delta Lake tables (the PySpark application).

Run it with ``spark-submit merge.py --window-uri <staging>/<pipeline>/window=<seq> --target <target>
--pipeline <name> [--key db.table=col1,col2 ...] [--buckets 16]``. It prints one JSON summary line to
stdout and exits non-zero on failure.

How a table is merged (copy-on-write by bucket, see ``docs/adr/0001-delta-commit-in-spark-driver.md``):

1. Skip the table if its Delta log already holds the app transaction of this window.
2. Create the Delta table on first use (partitioned by ``_binlog_bucket``, bucket count and key stored in
   its configuration), or add the window's new columns to it and, when the window needs a wider column type,
   rewrite the table with it in one commit first (:func:`retype_table`; a type change the table cannot
   follow raises :class:`UnfollowableSchemaChange`).
3. Spark reads the window with an explicit schema, computes each row's bucket
   (``pmod(xxhash64(key), buckets)``), reads the current files of the touched buckets only (file list
   from the Delta log), keeps the newest change per key (order key ``(_binlog_window, _binlog_seq)``,
   deletes become tombstones) and writes the new bucket contents as plain Parquet.
4. The driver validates the new files' footers, moves them into the table's ``_binlog_bucket=<n>/``
   folders and commits remove-old + add-new in one Delta commit that also records the window as app
   transactions, so readers never see half a window and a re-run is a no-op.

The module imports only pyarrow and the standard library at import time (pyspark and deltalake are
imported where used) so that the provider can reuse its helpers without pulling in Spark. It must not
import Airflow: it runs on Spark drivers that may not have it.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import logging
import os
import re
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

if TYPE_CHECKING:
    from deltalake import DeltaTable
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.types import DataType, StructType

    from airflow_provider_binlog.spark_jobs.truncate import Truncation

log = logging.getLogger("airflow_provider_binlog.spark_jobs.merge")

APP_ID_PREFIX = "airflow-provider-binlog"
MANIFEST_NAME = "manifest.json"
SUPPORTED_MANIFEST_VERSIONS = frozenset({1})

OP_COLUMN = "_binlog_op"
WINDOW_COLUMN = "_binlog_window"
SEQ_COLUMN = "_binlog_seq"
DELETED_COLUMN = "_binlog_deleted"
BUCKET_COLUMN = "_binlog_bucket"
#: Change metadata columns staged with every row, in target order, with their target Arrow types.
CHANGE_COLUMNS: tuple[tuple[str, pa.DataType], ...] = (
    (OP_COLUMN, pa.string()),
    (WINDOW_COLUMN, pa.int64()),
    ("_binlog_seq", pa.int64()),
    ("_binlog_gtid", pa.string()),
    ("_binlog_file", pa.string()),
    ("_binlog_pos", pa.int64()),
    ("_binlog_ts", pa.timestamp("us", tz="UTC")),
)
CHANGE_COLUMN_NAMES = frozenset(name for name, _ in CHANGE_COLUMNS)
REQUIRED_CHANGE_COLUMNS = (OP_COLUMN, WINDOW_COLUMN, SEQ_COLUMN)
#: Every column the merge adds to the source columns.
METADATA_COLUMN_NAMES = CHANGE_COLUMN_NAMES | {DELETED_COLUMN, BUCKET_COLUMN}
VALID_OPS = ("c", "u", "d", "r")

#: Delta table configuration keys written when the merge creates a table.
BUCKETS_PROPERTY = "binlog.buckets"
PRIMARY_KEY_PROPERTY = "binlog.primary_key"
OWNER_PROPERTY = "binlog.pipeline"
"""Table configuration key naming the one pipeline that may merge into the table (set when it is created)."""
OWNER_HISTORY_LIMIT = 1000
"""Commits read to find the writers of a table created before owners were recorded."""
#: Delta column metadata keys: the Arrow type the column was staged with, and its MySQL type.
ARROW_TYPE_KEY = "binlog.arrow_type"
MYSQL_TYPE_KEY = "binlog.mysql_type"

#: Folder under a table where Spark writes new bucket files before the driver moves them into place.
STAGING_DIR = "_binlog_staging"
_SOURCE_RANK = "__binlog_source_rank"
_IN_SNAPSHOT = "__binlog_in_snapshot"
SNAPSHOT_KIND = "snapshot"
#: A table's merge is planned again this many times when another writer commits to it in between.
COMMIT_ATTEMPTS = 5
_ROW_NUMBER = "__binlog_row_number"

#: Spark SQL settings the merge needs; set on the session by :func:`configure_session`.
SPARK_SQL_CONF: Mapping[str, str] = {
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    "spark.sql.parquet.datetimeRebaseModeInRead": "CORRECTED",
    "spark.sql.parquet.datetimeRebaseModeInWrite": "CORRECTED",
    "spark.sql.parquet.int96RebaseModeInRead": "CORRECTED",
    "spark.sql.parquet.int96RebaseModeInWrite": "CORRECTED",
}


class MergeJobError(Exception):
    """The window cannot be merged as staged or configured; the message says what to fix."""


# --------------------------------------------------------------------------------------------------
# Names and locations
# --------------------------------------------------------------------------------------------------


def pipeline_app_id(pipeline: str) -> str:
    """Return the Delta app id whose transaction version is the highest window merged by a pipeline.

    :param pipeline: pipeline name.
    """
    return f"{APP_ID_PREFIX}:{pipeline}"


def window_app_id(pipeline: str, seq: int) -> str:
    """Return the Delta app id that marks one window of a pipeline as merged into a table.

    :param pipeline: pipeline name.
    :param seq: window sequence number.
    """
    return f"{APP_ID_PREFIX}:{pipeline}:window={seq}"


def split_table_name(name: str) -> tuple[str, str]:
    """Split ``db.table`` into its database and table names.

    :param name: qualified table name; the first dot separates the database.
    :raises MergeJobError: if the name is not qualified.
    """
    db, sep, table = name.partition(".")
    if not sep or not db or not table:
        raise MergeJobError(f"table name {name!r} is not qualified as 'db.table'")
    return db, table


def join_uri(base: str, *parts: str) -> str:
    """Join a local path or URI with relative parts using ``/``.

    :param base: local path (made absolute) or URI such as ``s3://bucket/prefix``.
    :param parts: relative path parts.
    """
    root = base if "://" in base else os.path.abspath(base)
    return "/".join([root.rstrip("/"), *(part.strip("/") for part in parts)])


def table_uri(target: str, table: str) -> str:
    """Return the location of the Delta table holding source table ``db.table``: ``<target>/<db>/<table>``.

    :param target: target root (local path or URI).
    :param table: qualified source table name.
    :raises MergeJobError: if the name is not qualified.
    """
    db, name = split_table_name(table)
    return join_uri(target, db, name)


def filesystem_for(uri: str) -> tuple[pafs.FileSystem, str]:
    """Return the pyarrow filesystem and path for a local path or URI.

    :param uri: local path or URI (``file://``, ``s3://``, ``gs://``, ``hdfs://`` ...).
    """
    if "://" not in uri:
        return pafs.LocalFileSystem(), os.path.abspath(uri)
    return pafs.FileSystem.from_uri(uri)


# --------------------------------------------------------------------------------------------------
# Arrow types: staged type -> stored type -> Spark type
# --------------------------------------------------------------------------------------------------

_NAMED_TYPES: Mapping[str, pa.DataType] = {
    "bool": pa.bool_(),
    "int8": pa.int8(),
    "int16": pa.int16(),
    "int32": pa.int32(),
    "int64": pa.int64(),
    "uint8": pa.uint8(),
    "uint16": pa.uint16(),
    "uint32": pa.uint32(),
    "uint64": pa.uint64(),
    "float": pa.float32(),
    "float32": pa.float32(),
    "double": pa.float64(),
    "float64": pa.float64(),
    "string": pa.string(),
    "large_string": pa.large_string(),
    "binary": pa.binary(),
    "large_binary": pa.large_binary(),
    "date32": pa.date32(),
    "date32[day]": pa.date32(),
}
_DECIMAL_RE = re.compile(r"decimal(?:128|256)?\(\s*(\d+)\s*,\s*(-?\d+)\s*\)")
_TIMESTAMP_RE = re.compile(r"timestamp\[(s|ms|us|ns)(?:,\s*tz=([^\]]+))?\]")
_DURATION_RE = re.compile(r"duration\[(s|ms|us|ns)\]")
_INTEGER_DIGITS = {8: 3, 16: 5, 32: 10, 64: 19}


def parse_arrow_type(text: str) -> pa.DataType:
    """Parse an Arrow type as printed by pyarrow (``str(type)``), e.g. ``decimal128(20, 0)``.

    Only the types the staging contract uses are recognised.

    :param text: type text such as ``int64``, ``timestamp[us, tz=UTC]`` or ``duration[us]``.
    :raises MergeJobError: if the text is not a recognised type.
    """
    text = text.strip()
    if text in _NAMED_TYPES:
        return _NAMED_TYPES[text]
    if match := _DECIMAL_RE.fullmatch(text):
        precision, scale = int(match.group(1)), int(match.group(2))
        return pa.decimal128(precision, scale) if precision <= 38 else pa.decimal256(precision, scale)
    if match := _TIMESTAMP_RE.fullmatch(text):
        return pa.timestamp(match.group(1), tz=match.group(2))
    if match := _DURATION_RE.fullmatch(text):
        return pa.duration(match.group(1))
    raise MergeJobError(f"unrecognised Arrow type {text!r}")


def storage_type(arrow_type: pa.DataType, column: str) -> pa.DataType:
    """Return the Arrow type a staged column is stored as in Delta (Delta has no TIME or unsigned types).

    Unsigned integers widen to the next signed type (``uint64`` to ``decimal128(20, 0)``), durations
    (MySQL TIME) are stored as ``int64`` counts of their unit, timestamps as microseconds (UTC for
    zoned ones), large and view variants as their plain type.

    :param arrow_type: staged Arrow type.
    :param column: column name, for the error message.
    :raises MergeJobError: if the type cannot be stored.
    """
    t = arrow_type
    unsigned = {8: pa.int16(), 16: pa.int32(), 32: pa.int64(), 64: pa.decimal128(20, 0)}
    if pa.types.is_boolean(t) or pa.types.is_signed_integer(t) or pa.types.is_date32(t):
        return t
    if pa.types.is_float32(t) or pa.types.is_float64(t):
        return t
    if pa.types.is_unsigned_integer(t):
        return unsigned[t.bit_width]
    if pa.types.is_decimal(t) and t.precision <= 38:
        return pa.decimal128(t.precision, t.scale)
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return pa.string()
    if (
        pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_binary_view(t)
        or pa.types.is_fixed_size_binary(t)
    ):
        return pa.binary()
    if pa.types.is_date64(t):
        return pa.date32()
    if pa.types.is_timestamp(t) and t.unit != "ns":
        return pa.timestamp("us", tz=None if t.tz is None else "UTC")
    if pa.types.is_duration(t):
        return pa.int64()
    raise MergeJobError(
        f"column {column!r} has Arrow type {t} which the merge cannot store in Delta; stage it as one of "
        "int8/16/32/64, decimal128(p<=38, s), float32/64, string, binary, date32, timestamp[us] "
        "(with or without tz=UTC), duration[us] or bool"
    )


def spark_type(arrow_type: pa.DataType) -> DataType:
    """Return the Spark SQL type for a stored Arrow type (see :func:`storage_type`).

    :param arrow_type: Arrow type as stored in Delta.
    :raises MergeJobError: if the type is not a storage type.
    """
    from pyspark.sql import types as T

    t = arrow_type
    simple: list[tuple[Any, DataType]] = [
        (pa.types.is_boolean, T.BooleanType()),
        (pa.types.is_int8, T.ByteType()),
        (pa.types.is_int16, T.ShortType()),
        (pa.types.is_int32, T.IntegerType()),
        (pa.types.is_int64, T.LongType()),
        (pa.types.is_float32, T.FloatType()),
        (pa.types.is_float64, T.DoubleType()),
        (pa.types.is_string, T.StringType()),
        (pa.types.is_binary, T.BinaryType()),
        (pa.types.is_date32, T.DateType()),
    ]
    for predicate, spark in simple:
        if predicate(t):
            return spark
    if pa.types.is_decimal128(t):
        return T.DecimalType(t.precision, t.scale)
    if pa.types.is_timestamp(t):
        return T.TimestampNTZType() if t.tz is None else T.TimestampType()
    raise MergeJobError(f"Arrow type {t} is not a Delta storage type")


def spark_schema(schema: pa.Schema) -> StructType:
    """Return the Spark schema (all fields nullable) for an Arrow schema of storage types.

    :param schema: Arrow schema whose types are Delta storage types.
    """
    from pyspark.sql import types as T

    return T.StructType([T.StructField(f.name, spark_type(f.type), True) for f in schema])


def is_lossless_widening(narrow: pa.DataType, wide: pa.DataType) -> bool:
    """Return whether every value of ``narrow`` converts exactly to ``wide``.

    Integers widen to wider integers, to decimals with enough integer digits and to floats whose
    significand holds them (up to 16 bits to ``float32``, 32 bits to ``float64``); ``float32`` widens to
    ``float64``; decimals widen when neither integer nor fraction digits shrink; ``date32`` widens to a
    timestamp without time zone (midnight, as MySQL converts DATE to DATETIME).

    :param narrow: the narrower type.
    :param wide: the wider type.
    """
    if narrow.equals(wide):
        return True
    if pa.types.is_signed_integer(narrow):
        if pa.types.is_signed_integer(wide):
            return bool(wide.bit_width >= narrow.bit_width)
        if pa.types.is_decimal(wide):
            return bool(wide.precision - wide.scale >= _INTEGER_DIGITS[narrow.bit_width])
        if pa.types.is_floating(wide):
            return bool(narrow.bit_width <= {32: 16, 64: 32}.get(wide.bit_width, 0))
        return False
    if pa.types.is_float32(narrow):
        return bool(pa.types.is_float64(wide))
    if pa.types.is_decimal(narrow) and pa.types.is_decimal(wide):
        return bool(
            wide.scale >= narrow.scale and wide.precision - wide.scale >= narrow.precision - narrow.scale
        )
    if pa.types.is_date32(narrow):
        return bool(pa.types.is_timestamp(wide) and wide.tz is None)
    return False


# --------------------------------------------------------------------------------------------------
# The staged window
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StagedTable:
    """One source table of a staged window.

    :param name: qualified name ``db.table``.
    :param files: absolute locations of the table's Parquet change files.
    :param rows: number of change rows the manifest announces.
    :param primary_key: primary key columns from the manifest (empty for tables without one).
    :param columns: the manifest's column descriptions (``name``, ``mysql_type``, ``arrow_type``).
    :param refresh: the rows are a snapshot of the whole table: target rows older than the window whose
        key is not among them become tombstones (see :func:`apply_window`).
    :param markers: truncate markers among the rows (the manifest's ``ops``; see
        :mod:`~airflow_provider_binlog.spark_jobs.truncate`).
    """

    name: str
    files: tuple[str, ...]
    rows: int
    primary_key: tuple[str, ...]
    columns: tuple[Mapping[str, Any], ...] = ()
    refresh: bool = False
    markers: int = 0

    @property
    def markers_only(self) -> bool:
        """Return whether every staged row is a truncate marker (no data column, maybe no source table)."""
        return 0 < self.markers == self.rows


@dataclass(frozen=True)
class StagedWindow:
    """A complete staged window (its manifest was written).

    :param uri: window directory.
    :param pipeline: pipeline name from the manifest.
    :param seq: window sequence number.
    :param tables: staged tables in manifest order.
    """

    uri: str
    pipeline: str
    seq: int
    tables: tuple[StagedTable, ...]


@contextlib.contextmanager
def atomic_output(uri: str) -> Iterator[Any]:
    """Yield an output stream for ``uri`` that is written under a temporary name and renamed on success.

    Readers never see half a file; a failure leaves only the temporary file, never ``uri``.
    """
    fs, path = filesystem_for(uri)
    fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
    temporary = f"{path}.{uuid.uuid4().hex}.tmp"
    with fs.open_output_stream(temporary) as out:
        yield out
    fs.move(temporary, path)


def read_json(uri: str) -> dict[str, Any] | None:
    """Return the JSON object at ``uri``, or None when the file does not exist."""
    fs, path = filesystem_for(uri)
    try:
        with fs.open_input_stream(path) as stream:
            return dict(json.loads(stream.read()))
    except FileNotFoundError:
        return None


def write_json(uri: str, document: dict[str, Any]) -> None:
    """Write ``document`` to ``uri`` atomically (:func:`atomic_output`)."""
    with atomic_output(uri) as out:
        out.write(json.dumps(document, indent=2, sort_keys=True).encode())


def read_manifest(window_uri: str) -> dict[str, Any]:
    """Read a window's ``manifest.json``.

    :param window_uri: window directory (local path or URI).
    :raises MergeJobError: if the manifest is missing (window incomplete) or not JSON.
    """
    fs, path = filesystem_for(join_uri(window_uri, MANIFEST_NAME))
    try:
        with fs.open_input_stream(path) as stream:
            data = stream.read()
    except FileNotFoundError as err:
        raise MergeJobError(
            f"{join_uri(window_uri, MANIFEST_NAME)} does not exist: the window is not staged completely "
            "(the extractor writes the manifest last); re-run the extract task"
        ) from err
    try:
        manifest = json.loads(data)
    except ValueError as err:
        raise MergeJobError(f"{join_uri(window_uri, MANIFEST_NAME)} is not valid JSON: {err}") from err
    if not isinstance(manifest, dict):
        raise MergeJobError(f"{join_uri(window_uri, MANIFEST_NAME)} does not hold a JSON object")
    return manifest


def parse_window(window_uri: str, manifest: Mapping[str, Any]) -> StagedWindow:
    """Validate a manifest and resolve its file names against the window directory.

    :param window_uri: window directory the manifest was read from.
    :param manifest: parsed manifest.
    :raises MergeJobError: if the manifest does not follow the staging contract.
    """
    version = manifest.get("format_version")
    if version not in SUPPORTED_MANIFEST_VERSIONS:
        raise MergeJobError(
            f"manifest of {window_uri} has format_version {version!r}; this merge reads "
            f"{sorted(SUPPORTED_MANIFEST_VERSIONS)}: upgrade the provider on the Spark side"
        )
    try:
        pipeline = str(manifest["pipeline"])
        seq = int(manifest["window"])
        refresh = manifest.get("kind") == SNAPSHOT_KIND
        tables_spec = manifest.get("tables") or {}
        tables = tuple(
            StagedTable(
                name=name,
                files=tuple(join_uri(window_uri, f) for f in spec.get("files") or ()),
                rows=int(spec.get("rows") or 0),
                primary_key=tuple(spec.get("primary_key") or ()),
                columns=tuple(spec.get("columns") or ()),
                refresh=refresh,
                markers=int((spec.get("ops") or {}).get("t") or 0),
            )
            for name, spec in tables_spec.items()
        )
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        raise MergeJobError(
            f"manifest of {window_uri} does not follow the staging contract: {err!r}"
        ) from err
    for table in tables:
        split_table_name(table.name)
    return StagedWindow(uri=window_uri, pipeline=pipeline, seq=seq, tables=tables)


def load_window(window_uri: str) -> StagedWindow:
    """Read and validate the staged window at ``window_uri``.

    :param window_uri: window directory ``<staging>/<pipeline>/window=<seq>``.
    :raises MergeJobError: if the window is incomplete or its manifest invalid.
    """
    return parse_window(window_uri, read_manifest(window_uri))


def parse_key_overrides(specs: Sequence[str]) -> dict[str, tuple[str, ...]]:
    """Parse ``--key db.table=col1,col2`` values.

    :param specs: the values, one per table.
    :raises MergeJobError: if a value is malformed or a table is named twice.
    """
    keys: dict[str, tuple[str, ...]] = {}
    for spec in specs:
        name, sep, columns = spec.partition("=")
        cols = tuple(c.strip() for c in columns.split(",") if c.strip())
        if not sep or not cols:
            raise MergeJobError(f"--key {spec!r} must look like db.table=col1,col2")
        split_table_name(name.strip())
        if name.strip() in keys:
            raise MergeJobError(f"--key names table {name.strip()!r} twice")
        keys[name.strip()] = cols
    return keys


def resolve_keys(
    window: StagedWindow, overrides: Mapping[str, Sequence[str]] | None = None
) -> dict[str, tuple[str, ...]]:
    """Return the merge key of every non-empty table of the window.

    A table's primary key from the manifest is its key; a table without one needs a user-named key.

    :param window: the staged window.
    :param overrides: user-named keys by ``db.table`` (only for tables without a primary key).
    :raises MergeJobError: naming the table, if a table has no key or an override contradicts its key.
    """
    named = {name: tuple(cols) for name, cols in (overrides or {}).items()}
    keys: dict[str, tuple[str, ...]] = {}
    for table in window.tables:
        if not has_changes(table) or table.markers_only:  # the merge takes the Delta table's own key
            continue
        override = named.get(table.name)
        if table.primary_key:
            if override and [c.lower() for c in override] != [c.lower() for c in table.primary_key]:
                raise MergeJobError(
                    f"table {table.name} has primary key {list(table.primary_key)}; a user-named key "
                    f"({list(override)}) is only allowed for tables without a primary key: drop it"
                )
            keys[table.name] = table.primary_key
        elif override:
            keys[table.name] = override
        else:
            raise MergeJobError(
                f"table {table.name} has no primary key, so its changes cannot be merged by key; name "
                f"the columns that identify a row with --key {table.name}=col1,col2 (operator argument "
                f"keys={{'{table.name}': ['col1', 'col2']}}) or exclude the table from the pipeline"
            )
    for name in named.keys() - {t.name for t in window.tables}:
        log.warning("--key names table %s, which is not in window %s", name, window.seq)
    return keys


def has_changes(table: StagedTable) -> bool:
    """Return whether a staged table has anything to merge.

    That is change rows, or a snapshot: even an empty one replaces the table's rows.

    :param table: staged table.
    """
    return bool(table.files) and (table.rows > 0 or table.refresh)


def read_staged_schema(table: StagedTable, *, pipeline: str) -> pa.Schema:
    """Read the Arrow schema of a table's staged files from their Parquet footers.

    The files of one window normally share one schema; if a DDL in the window changed it, the schemas
    are unified: new columns are added and each column gets the widest of its types
    (:func:`is_lossless_widening`). The source columns come in the manifest's column order, then the change
    metadata columns.

    :param table: staged table with at least one file.
    :param pipeline: the pipeline merging the window, for messages.
    :raises UnfollowableSchemaChange: if a column's type changed within the window to one that is neither
        wider nor narrower (INT -> VARCHAR).
    :raises MergeJobError: if the footers conflict otherwise or change metadata columns are missing.
    """
    schemas = []
    for uri in table.files:
        fs, path = filesystem_for(uri)
        try:
            schemas.append(pq.read_schema(path, filesystem=fs))
        except (OSError, pa.ArrowException) as err:
            raise MergeJobError(f"cannot read the Parquet footer of staged file {uri}: {err}") from err
    widest: dict[str, pa.DataType] = {}
    for f in (f for schema in schemas for f in schema):
        have = widest.setdefault(f.name, f.type)
        if is_lossless_widening(have, f.type):
            widest[f.name] = f.type
        elif not is_lossless_widening(f.type, have):
            raise UnfollowableSchemaChange(
                pipeline=pipeline,
                table=table.name,
                column=f.name,
                detail=f"changed type within the window from {have} to {f.type}, which is neither a widening "
                "nor a narrowing",
            )
    # Arrow does not promote every lossless widening (date32 -> timestamp): widen the fields first.
    schemas = [pa.schema([f.with_type(widest[f.name]) for f in schema]) for schema in schemas]
    try:
        unified = pa.unify_schemas(schemas, promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError) as err:
        raise MergeJobError(f"staged files of {table.name} have conflicting schemas: {err}") from err
    missing = [c for c in REQUIRED_CHANGE_COLUMNS if c not in unified.names]
    if missing:
        raise MergeJobError(f"staged files of {table.name} lack the change columns {missing}")
    declared = [c.get("name") for c in table.columns]
    ordered = [n for n in declared if n in unified.names]
    ordered += [n for n in unified.names if n not in ordered and n not in CHANGE_COLUMN_NAMES]
    ordered += [n for n, _ in CHANGE_COLUMNS if n in unified.names]
    return pa.schema([unified.field(n).remove_metadata() for n in ordered])


def _declared_arrow_type(column: Mapping[str, Any] | None, staged: pa.DataType, name: str) -> pa.DataType:
    """Return the manifest's Arrow type for a column when it is consistent with the file's, else the file's."""
    text = (column or {}).get("arrow_type")
    if not text:
        return staged
    try:
        declared = parse_arrow_type(str(text))
    except MergeJobError:
        return staged
    if storage_type(declared, name).equals(storage_type(staged, name)):
        return declared
    return staged


def target_schema(staged: pa.Schema, columns: Sequence[Mapping[str, Any]] = ()) -> pa.Schema:
    """Return the Delta table schema (as Arrow) for a staged table schema.

    Source columns get their storage types (:func:`storage_type`) and record the staged Arrow type and
    MySQL type in their metadata; then come the change columns, ``_binlog_deleted`` and the partition
    column ``_binlog_bucket``. Every field is nullable.

    :param staged: staged schema from :func:`read_staged_schema`.
    :param columns: the manifest's column descriptions.
    :raises MergeJobError: if a column type cannot be stored.
    """
    by_name = {str(c.get("name")): c for c in columns}
    fields = []
    for f in staged:
        if f.name in CHANGE_COLUMN_NAMES:
            continue
        column = by_name.get(f.name)
        metadata = {ARROW_TYPE_KEY: str(_declared_arrow_type(column, f.type, f.name))}
        if column and column.get("mysql_type"):
            metadata[MYSQL_TYPE_KEY] = str(column["mysql_type"])
        fields.append(pa.field(f.name, storage_type(f.type, f.name), nullable=True, metadata=metadata))
    fields += [pa.field(name, t, nullable=True) for name, t in CHANGE_COLUMNS]
    fields.append(pa.field(DELETED_COLUMN, pa.bool_(), nullable=True))
    fields.append(pa.field(BUCKET_COLUMN, pa.int32(), nullable=True))
    return pa.schema(fields)


# --------------------------------------------------------------------------------------------------
# Schema evolution of an existing table
# --------------------------------------------------------------------------------------------------


def _text_metadata(f: pa.Field) -> dict[str, str]:
    return {
        (k.decode() if isinstance(k, bytes) else k): (v.decode() if isinstance(v, bytes) else v)
        for k, v in (f.metadata or {}).items()
    }


def recorded_arrow_type(stored: pa.Field) -> pa.DataType:
    """Return the staged Arrow type a target column records in its metadata (``binlog.arrow_type``).

    Columns without the record (or with one this version cannot parse) give their stored type.

    :param stored: a field of the Delta table's schema (:func:`delta_arrow_schema`) or of :func:`target_schema`.
    """
    raw = _text_metadata(stored).get(ARROW_TYPE_KEY)
    if raw is None:
        return stored.type
    try:
        return parse_arrow_type(raw)
    except MergeJobError:
        return stored.type


@dataclass
class SchemaChange:
    """What must change in a table's schema before a window can be committed to it.

    :param new_fields: columns to add (nullable).
    :param metadata: column metadata to update, by column name.
    :param widened: columns whose stored type must widen, by the table's column name, with the field (wider
        type and its metadata, the table's spelling of the name) the table rewrite gives them.
    """

    new_fields: list[pa.Field] = field(default_factory=list)
    metadata: dict[str, dict[str, str]] = field(default_factory=dict)
    widened: dict[str, pa.Field] = field(default_factory=dict)


_FRACTION_DIGITS_RE = re.compile(r"(datetime|timestamp|time)(?:\((\d)\))?")


def _type_text(f: pa.Field) -> str:
    """Return ``mysql type (staged Arrow type)`` of a column, for messages."""
    mysql = _text_metadata(f).get(MYSQL_TYPE_KEY)
    staged = recorded_arrow_type(f)
    return f"{mysql} ({staged})" if mysql else str(staged)


def _scale(t: pa.DataType) -> int | None:
    """Return the number of fraction digits of an exact numeric type (0 for integers), else ``None``."""
    if pa.types.is_integer(t):
        return 0
    if pa.types.is_decimal(t):
        return int(t.scale)
    return None


def _unfollowable_reason(have: pa.Field, wanted: pa.Field, *, newest: bool) -> str | None:
    """Return why the type change from ``have`` (table) to ``wanted`` (window) cannot be followed, or ``None``.

    Followable: equal staged types, a lossless widening (:func:`is_lossless_widening`), and a window type
    narrower than the table's. For the newest window (it may carry a MODIFY) a narrowing is followed only
    between exact numbers with the same scale, which MySQL performs without changing a stored value or
    refuses (strict SQL mode); a narrowing that rounds (fewer fraction digits of a DECIMAL, DOUBLE ->
    FLOAT, DATETIME -> DATE) and fewer fraction digits of a DATETIME/TIMESTAMP/TIME are not, because the
    server rounds the stored values of rows the binlog does not show again (MySQL manual, "Fractional
    Seconds in Time Values" and "ALTER TABLE Statement"). An older window narrower than the table was
    staged before a widening: its values are cast up. Any other change (INT -> VARCHAR, TIME -> BIGINT)
    is not followable.
    """
    old, new = recorded_arrow_type(have), recorded_arrow_type(wanted)
    if is_lossless_widening(old, new):
        if newest and _fraction_digits(wanted, have) < _fraction_digits(have, wanted):
            return "lost fraction digits, so the source rounded the values it stores"
        return None
    if is_lossless_widening(new, old):
        if not newest or (_scale(new) is not None and _scale(new) == _scale(old)):
            return None
        return "was narrowed by rounding, which changes values of rows the binlog does not show again"
    return "is neither a widening nor a narrowing of the same kind of value"


def _fraction_digits(f: pa.Field, other: pa.Field) -> int:
    """Return the fraction digits of a temporal MySQL type (``datetime(6)`` -> 6) if ``other`` is the same type."""
    mine = _FRACTION_DIGITS_RE.fullmatch(_text_metadata(f).get(MYSQL_TYPE_KEY, ""))
    theirs = _FRACTION_DIGITS_RE.fullmatch(_text_metadata(other).get(MYSQL_TYPE_KEY, ""))
    if mine is None or theirs is None or mine.group(1) != theirs.group(1):
        return 0
    return int(mine.group(2) or 0)


class UnfollowableSchemaChange(MergeJobError):
    """A column's type changed in a way the Delta table cannot follow exactly: the table needs a re-snapshot.

    Raised for a type change that is neither a widening nor a narrowing that leaves the source's values as
    they were (INT -> VARCHAR, DATETIME -> DATE, fewer fraction digits ...): the source converted the values
    of rows the binlog does not show again, so only a new snapshot of the table makes the target exact.
    :func:`merge_window` does not fail the window for it: the table's merge is refused
    (:func:`record_refusal`) and the other tables of the window are merged.

    :param pipeline: the pipeline merging the table.
    :param table: source table name ``db.table``.
    :param column: the column whose type changed (the table's spelling).
    :param detail: the old and the new type and why they cannot be followed.
    """

    def __init__(self, *, pipeline: str, table: str, column: str, detail: str) -> None:
        self.pipeline = pipeline
        self.table = table
        self.column = column
        self.detail = detail
        super().__init__(
            f"pipeline {pipeline!r}: column {column!r} of {table} {detail}; the Delta table cannot follow this "
            f"change exactly, so {table} must be re-snapshotted; nothing of it was written. The other tables of the "
            f"window are merged, and the pipeline's next snapshot task re-snapshots {table} by itself (binlog_cdc's "
            f'first task); to do it sooner, trigger binlog_resnapshot with {{"pipeline": "{pipeline}", "tables": '
            f'"{table}", "mode": "requested"}}'
        )


def plan_schema_change(
    current: pa.Schema,
    wanted: pa.Schema,
    table: str,
    *,
    pipeline: str,
    newest: bool = True,
) -> SchemaChange:
    """Compare a table's schema with the one a window needs.

    Column names match case-insensitively (as in MySQL). For a column whose type changed:

    - a window type wider than the table's (INT -> BIGINT, FLOAT -> DOUBLE, DECIMAL(10,2) ->
      DECIMAL(12,4) ...) is planned as a widening: the table is rewritten with the wider type
      (:func:`retype_table`) before the window is merged;
    - a window type narrower than the table's (an old window after a widening, or a narrowing MODIFY such
      as BIGINT -> INT) keeps the table's wider type: every value fits it exactly, and the window's values
      are cast up when read. A narrowing MODIFY records the column's new MySQL type (newest window only);
    - equal stored types with another MySQL type (VARCHAR(10) -> VARCHAR(20), DATETIME -> DATETIME(6))
      change only the column metadata;
    - anything else raises :class:`UnfollowableSchemaChange` (see :func:`_unfollowable_reason`). A snapshot
      merge does not come here when a column changed: it replaces the table's schema
      (:func:`replaced_columns`).

    :param current: the table's schema (Arrow, with metadata).
    :param wanted: the schema the window needs (:func:`target_schema`).
    :param table: table name for messages.
    :param pipeline: the pipeline merging the table, for messages.
    :param newest: whether the window is newer than every window merged into the table, so that it may
        carry a MODIFY (an older window narrower than the table was staged before a widening).
    :raises UnfollowableSchemaChange: naming the column and both types, if a type change cannot be followed.
    """
    change = SchemaChange()
    existing = {f.name.lower(): f for f in current}
    for f in wanted:
        if f.name == BUCKET_COLUMN:
            continue
        have = existing.get(f.name.lower())
        if have is None:
            change.new_fields.append(f.with_nullable(True))
            continue
        reason = _unfollowable_reason(have, f, newest=newest)
        if reason is not None:
            raise UnfollowableSchemaChange(
                pipeline=pipeline,
                table=table,
                column=have.name,
                detail=f"changed type from {_type_text(have)} to {_type_text(f)}: it {reason}",
            )
        wanted_meta, have_meta = _text_metadata(f), _text_metadata(have)
        if have.type.equals(f.type):
            if any(have_meta.get(k) != v for k, v in wanted_meta.items()):
                change.metadata[have.name] = wanted_meta
        elif is_lossless_widening(have.type, f.type):
            change.widened[have.name] = f.with_name(have.name).with_nullable(True)
        elif newest and wanted_meta.get(MYSQL_TYPE_KEY, have_meta.get(MYSQL_TYPE_KEY)) != have_meta.get(
            MYSQL_TYPE_KEY
        ):
            change.metadata[have.name] = {**have_meta, MYSQL_TYPE_KEY: wanted_meta[MYSQL_TYPE_KEY]}
    return change


def replaced_columns(current: pa.Schema, wanted: pa.Schema) -> list[str]:
    """Return the table's source columns a whole-table snapshot does not have with the same stored type.

    A snapshot (``StagedTable.refresh``) holds every row of the table as the source has it now: when a
    column was dropped, renamed or changed type, the merge writes the table anew with the snapshot's
    schema instead of keeping a stale column (:func:`_rewrite_buckets`), in the same single commit.

    :param current: the Delta table's schema.
    :param wanted: the schema the snapshot needs (:func:`target_schema`).
    """
    by_lower = {f.name.lower(): f for f in wanted}
    return [
        f.name
        for f in current
        if f.name not in METADATA_COLUMN_NAMES
        and (f.name.lower() not in by_lower or not by_lower[f.name.lower()].type.equals(f.type))
    ]


def apply_schema_change(dt: DeltaTable, change: SchemaChange, *, update_metadata: bool) -> None:
    """Add new columns (one commit) and update column metadata of a Delta table.

    :param dt: the table.
    :param change: the plan from :func:`plan_schema_change`.
    :param update_metadata: whether to apply metadata updates (only windows newer than every merged one
        may change the recorded source types).
    """
    from deltalake import Schema as DeltaSchema

    if change.new_fields:
        log.info("adding columns %s to %s", [f.name for f in change.new_fields], dt.table_uri)
        dt.alter.add_columns(list(DeltaSchema.from_arrow(pa.schema(change.new_fields)).fields))
    if update_metadata:
        for column, metadata in change.metadata.items():
            log.info("updating metadata of column %s of %s to %s", column, dt.table_uri, metadata)
            dt.alter.set_column_metadata(column, metadata)


# --------------------------------------------------------------------------------------------------
# Spark transformations (pure functions of DataFrames)
# --------------------------------------------------------------------------------------------------


def col(name: str) -> Column:
    """Return a Spark column reference that is safe for any column name (dots, spaces, backticks).

    :param name: column name.
    """
    from pyspark.sql import functions as F

    return F.col("`" + name.replace("`", "``") + "`")


def canonical_key(name: str, arrow_type: pa.DataType) -> Column:
    """Return a key column in the form it is hashed in, stable under lossless widening of its type.

    Integers hash as ``bigint``, floats as ``double`` and decimals as ``decimal(38, scale)``.

    :param name: key column name.
    :param arrow_type: the column's storage type.
    """
    if pa.types.is_integer(arrow_type):
        return col(name).cast("bigint")
    if pa.types.is_floating(arrow_type):
        return col(name).cast("double")
    if pa.types.is_decimal(arrow_type):
        return col(name).cast(f"decimal(38,{arrow_type.scale})")
    return col(name)


def bucket_of(keys: Sequence[tuple[str, pa.DataType]], buckets: int) -> Column:
    """Return the bucket column expression ``pmod(xxhash64(canonical key...), buckets)`` as ``int``.

    :param keys: key columns with their storage types.
    :param buckets: number of buckets of the table.
    """
    from pyspark.sql import functions as F

    hashed = F.xxhash64(*[canonical_key(name, t) for name, t in keys])
    return F.pmod(hashed, F.lit(buckets)).cast("int").alias(BUCKET_COLUMN)


def read_staged_changes(spark: SparkSession, files: Sequence[str], staged: pa.Schema) -> DataFrame:
    """Read a table's staged change files with an explicit schema (no inference across files).

    :param spark: the session.
    :param files: staged Parquet files.
    :param staged: staged schema from :func:`read_staged_schema`.
    """
    read_schema = pa.schema([pa.field(f.name, storage_type(f.type, f.name)) for f in staged])
    df = spark.read.schema(spark_schema(read_schema)).parquet(*files)
    return df.select(*[col(f.name) for f in staged])


def conform_changes(changes: DataFrame, data_schema: pa.Schema) -> DataFrame:
    """Shape staged changes like the table's data files: table columns and types, tombstone flag.

    Columns the window lacks are null; window columns narrower than the table's are cast up.

    :param changes: staged changes from :func:`read_staged_changes`.
    :param data_schema: the table's schema without the partition column.
    """
    from pyspark.sql import functions as F

    present = {c.lower(): c for c in changes.columns}
    columns = []
    for f in data_schema:
        target = spark_type(f.type)
        if f.name == DELETED_COLUMN:
            columns.append(F.coalesce(col(OP_COLUMN) == F.lit("d"), F.lit(False)).alias(DELETED_COLUMN))
        elif f.name.lower() in present:
            columns.append(col(present[f.name.lower()]).cast(target).alias(f.name))
        else:
            columns.append(F.lit(None).cast(target).alias(f.name))
    return changes.select(*columns)


def latest_change_per_key(rows: DataFrame, keys: Sequence[str]) -> DataFrame:
    """Keep, for each key, the row with the newest order key ``(_binlog_window, _binlog_seq)``.

    On equal order keys (a window merged again) the target's row (``__binlog_source_rank`` 0) wins over
    the window's (1), so re-merges leave rows unchanged. The rank column is dropped.

    :param rows: rows carrying ``_binlog_bucket``, the key columns and ``__binlog_source_rank``.
    :param keys: key column names.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    order = Window.partitionBy(col(BUCKET_COLUMN), *[col(k) for k in keys]).orderBy(
        col(WINDOW_COLUMN).desc(), col(SEQ_COLUMN).desc(), col(_SOURCE_RANK).asc()
    )
    ranked = rows.withColumn(_ROW_NUMBER, F.row_number().over(order))
    return ranked.where(col(_ROW_NUMBER) == 1).drop(_ROW_NUMBER, _SOURCE_RANK)


def apply_window(
    current: DataFrame | None,
    changes: DataFrame,
    keys: Sequence[str],
    partitions: int,
    *,
    refresh_seq: int | None = None,
) -> DataFrame:
    """Return the new content of the touched buckets: current rows and changes, newest per key.

    Rows are hash-partitioned by bucket first so each bucket is computed (and written) by one task;
    the per-key window then needs no second shuffle.

    With ``refresh_seq`` (a snapshot with that sequence number, all buckets touched) a live target row
    whose order key is below the snapshot's and whose key the snapshot does not hold becomes a tombstone
    with order key ``(refresh_seq, 0)``: the row was deleted while the binlog was not followed (or
    before a re-snapshot), and rows written by windows after the snapshot started are kept.

    :param current: current rows of the touched buckets (``None`` if they hold no files yet).
    :param changes: conformed changes with ``_binlog_bucket``.
    :param keys: key column names.
    :param partitions: number of shuffle partitions (the number of touched buckets is a good choice).
    :param refresh_seq: the snapshot's sequence number when ``changes`` is a whole-table snapshot.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    rows = changes.withColumn(_SOURCE_RANK, F.lit(1))
    if current is not None:
        rows = current.withColumn(_SOURCE_RANK, F.lit(0)).unionByName(rows)
    rows = rows.repartition(max(1, partitions), col(BUCKET_COLUMN))
    if refresh_seq is None:
        return latest_change_per_key(rows, keys)
    per_key = Window.partitionBy(col(BUCKET_COLUMN), *[col(k) for k in keys])
    rows = rows.withColumn(_IN_SNAPSHOT, F.max(col(_SOURCE_RANK)).over(per_key))
    latest = latest_change_per_key(rows, keys)
    stale = (col(_IN_SNAPSHOT) == 0) & (col(WINDOW_COLUMN) < F.lit(refresh_seq)) & ~col(DELETED_COLUMN)
    latest = latest.withColumn(_IN_SNAPSHOT, stale)  # evaluated once, before the columns it reads change
    tombstone = {
        DELETED_COLUMN: F.lit(True),
        OP_COLUMN: F.lit("d"),
        WINDOW_COLUMN: F.lit(refresh_seq).cast("long"),
        SEQ_COLUMN: F.lit(0).cast("long"),
    }
    for name, value in tombstone.items():
        latest = latest.withColumn(name, F.when(col(_IN_SNAPSHOT), value).otherwise(col(name)))
    return latest.drop(_IN_SNAPSHOT)


@dataclass(frozen=True)
class WindowProfile:
    """Row counts of a window's changes per bucket.

    :param rows_by_bucket: number of change rows per touched bucket.
    """

    rows_by_bucket: Mapping[int, int]

    @property
    def rows(self) -> int:
        """Return the total number of change rows."""
        return sum(self.rows_by_bucket.values())


def profile_changes(changes: DataFrame, keys: Sequence[str], table: str) -> WindowProfile:
    """Count changes per bucket and validate ops, keys and order keys in one Spark job.

    :param changes: conformed changes with ``_binlog_bucket``.
    :param keys: key column names.
    :param table: table name for messages.
    :raises MergeJobError: if an op is unknown or a key or order key column is null.
    """
    from pyspark.sql import functions as F

    bad_op = ~F.coalesce(col(OP_COLUMN).isin(*VALID_OPS), F.lit(False))
    null_key = F.lit(False)
    for k in keys:
        null_key = null_key | col(k).isNull()
    null_order = col(WINDOW_COLUMN).isNull() | col(SEQ_COLUMN).isNull()
    stats = (
        changes.groupBy(col(BUCKET_COLUMN))
        .agg(
            F.count(F.lit(1)).alias("rows"),
            F.sum(bad_op.cast("long")).alias("bad_op"),
            F.sum(null_key.cast("long")).alias("null_key"),
            F.sum(null_order.cast("long")).alias("null_order"),
        )
        .collect()
    )
    problems = {
        "an op other than c/u/d/r": sum(r["bad_op"] for r in stats),
        f"a null key column {list(keys)}": sum(r["null_key"] for r in stats),
        "a null _binlog_window or _binlog_seq": sum(r["null_order"] for r in stats),
    }
    for what, count in problems.items():
        if count:
            raise MergeJobError(f"{count} staged change rows of {table} have {what}; fix the extractor")
    return WindowProfile({int(r[BUCKET_COLUMN]): int(r["rows"]) for r in stats})


# --------------------------------------------------------------------------------------------------
# Delta table access (driver side)
# --------------------------------------------------------------------------------------------------


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


def open_table(uri: str, storage_options: Mapping[str, str] | None = None) -> DeltaTable | None:
    """Return the Delta table at ``uri``, or ``None`` if there is none.

    :param uri: table location.
    :param storage_options: deltalake storage options.
    """
    from deltalake import DeltaTable

    options = dict(storage_options or {})
    if not DeltaTable.is_deltatable(uri, storage_options=options):
        return None
    return DeltaTable(uri, storage_options=options)


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
    them (:func:`check_owner`).

    :param uri: table location.
    :param schema: table schema from :func:`target_schema`.
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


def table_writers(dt: DeltaTable) -> list[str]:
    """Return the pipelines that may have written the table: its owner, else every pipeline in its history.

    Tables created before owners were recorded name their writers only in the commit info of each merge
    (``binlog.pipeline``, see :func:`_commit_info`).

    :param dt: the table.
    """
    owner = dt.metadata().configuration.get(OWNER_PROPERTY)
    if owner:
        return [owner]
    return sorted({c["binlog.pipeline"] for c in dt.history(OWNER_HISTORY_LIMIT) if c.get("binlog.pipeline")})


def check_owner(dt: DeltaTable, pipeline: str, table: str) -> None:
    """Refuse a pipeline that does not own the table.

    Two pipelines merging into one table order their changes by unrelated sequence numbers, so one's
    rows overwrite the other's newer ones for good.

    :param dt: the table.
    :param pipeline: the pipeline about to merge.
    :param table: source table name for messages.
    :raises MergeJobError: naming the owner and the remedy.
    """
    foreign = [p for p in table_writers(dt) if p != pipeline]
    if foreign:
        raise MergeJobError(
            f"the Delta table {dt.table_uri} of {table} belongs to pipeline {foreign[0]!r}; pipeline {pipeline!r} may "
            f"not merge into it (two pipelines order their changes by unrelated sequence numbers and overwrite each "
            f"other's rows). Point {pipeline!r} at another target root, or hand the table over deliberately: "
            f"python -m airflow_provider_binlog.state_admin hand-over --target <target root> --table {table} "
            f"--to {pipeline}, then re-snapshot {table} in {pipeline!r}"
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
    stored = json.loads(dt.metadata().configuration.get(PRIMARY_KEY_PROPERTY) or "null")
    if stored is not None and [c.lower() for c in stored] != [c.lower() for c in keys]:
        raise MergeJobError(
            f"the key of {table} changed from {stored} (used to bucket the Delta table) to {list(keys)}; "
            "re-snapshot the table into a new target table"
        )
    return list(stored) if stored is not None else list(keys)


def delta_arrow_schema(dt: DeltaTable) -> pa.Schema:
    """Return a Delta table's schema as a pyarrow schema (with column metadata).

    :param dt: the table.
    """
    return pa.schema(dt.schema().to_arrow())  # type: ignore[call-overload]


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


# --------------------------------------------------------------------------------------------------
# New bucket files: validate, move into place, describe as Delta actions
# --------------------------------------------------------------------------------------------------


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


# --------------------------------------------------------------------------------------------------
# Orchestration
# --------------------------------------------------------------------------------------------------


@dataclass
class TableResult:
    """What merging one table did (one entry of the JSON summary).

    :param rows_in_window: change rows of the table in the window.
    :param rows_written: rows in the new bucket files (live rows and tombstones).
    :param buckets_touched: buckets the window touched.
    :param files_removed: data files the commit removed.
    :param files_added: data files the commit added.
    :param skipped: whether the table was skipped (already merged, or no changes).
    :param delta_version: table version after the merge (``None`` if there is no table).
    :param widened: columns whose type the merge changed by rewriting the table first (:func:`retype_table`):
        widened, or replaced by a snapshot.
    """

    rows_in_window: int = 0
    rows_written: int = 0
    buckets_touched: int = 0
    files_removed: int = 0
    files_added: int = 0
    skipped: bool = False
    delta_version: int | None = None
    widened: list[str] = field(default_factory=list)


def configure_session(spark: SparkSession) -> None:
    """Set the Spark SQL settings the merge relies on (UTC, microsecond timestamps, no rebasing).

    :param spark: the session.
    """
    for key, value in SPARK_SQL_CONF.items():
        spark.conf.set(key, value)


def already_merged(dt: DeltaTable, pipeline: str, seq: int) -> bool:
    """Return whether the table's log marks the window as merged.

    :param dt: the table.
    :param pipeline: pipeline name.
    :param seq: window sequence number.
    """
    return dt.transaction_version(window_app_id(pipeline, seq)) is not None


def _replanned_on_conflict(merge: Callable[..., TableResult]) -> Callable[..., TableResult]:
    """Run ``merge`` again (it re-reads the table) when its commit loses to another writer of the table.

    Up to :data:`COMMIT_ATTEMPTS` attempts; a snapshot merge and a window merge of the same table may
    run at once, and :func:`commit_window` accepts a commit only on the version the merge read.
    """

    @functools.wraps(merge)
    def attempts(spark: SparkSession, staged: StagedTable, **kwargs: Any) -> TableResult:
        from deltalake.exceptions import CommitFailedError

        for attempt in range(1, COMMIT_ATTEMPTS + 1):
            try:
                return merge(spark, staged, **kwargs)
            except CommitFailedError as err:
                log.warning(
                    "%s: another writer committed while window %d was merged (attempt %d of %d): %s",
                    staged.name,
                    kwargs["seq"],
                    attempt,
                    COMMIT_ATTEMPTS,
                    err,
                )
                last = err
        raise MergeJobError(
            f"{staged.name}: every one of {COMMIT_ATTEMPTS} attempts to commit window {kwargs['seq']} lost to "
            f"another writer of the same Delta table; retry the merge: {last}"
        )

    return attempts


@_replanned_on_conflict
def merge_table(
    spark: SparkSession,
    staged: StagedTable,
    *,
    target: str,
    pipeline: str,
    seq: int,
    keys: Sequence[str],
    buckets: int,
    storage_options: Mapping[str, str] | None = None,
) -> TableResult:
    """Merge one staged table of a window into its Delta table (one atomic commit).

    When another writer commits to the table between reading it and committing (a snapshot merge beside
    a window merge), the merge is planned again from the new version (:func:`_replanned_on_conflict`).

    :param spark: the session.
    :param staged: the staged table.
    :param target: target root.
    :param pipeline: pipeline name.
    :param seq: window sequence number.
    :param keys: key columns.
    :param buckets: bucket count for a new table (an existing table keeps its own).
    :param storage_options: deltalake storage options.
    :raises MergeJobError: if the window cannot be merged into the table.
    """
    uri = table_uri(target, staged.name)
    if not has_changes(staged):
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
    from airflow_provider_binlog.spark_jobs import truncate

    started = time.monotonic()
    truncation = truncate.plan(dt, staged, pipeline)
    staged_schema = read_staged_schema(staged, pipeline=pipeline)
    if staged.markers_only:
        keys = truncate.table_key(dt, staged.name)
    else:
        _check_key_columns(staged_schema, keys, staged.name)
    wanted = target_schema(staged_schema, staged.columns)
    widened: list[str] = []
    replaced: pa.Schema | None = None
    if dt is None:
        dt = create_table(
            uri,
            wanted,
            table=staged.name,
            keys=keys,
            buckets=buckets,
            pipeline=pipeline,
            storage_options=storage_options,
        )
    else:
        check_owner(dt, pipeline, staged.name)
        keys = check_table_key(dt, keys, staged.name)
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
                retype_table(spark, dt, uri, change, keys, pipeline=pipeline, seq=seq)
                widened = sorted(change.widened)
            apply_schema_change(dt, change, update_metadata=newest)
            dt.update_incremental()
    result = _rewrite_buckets(
        spark,
        dt,
        uri,
        staged,
        staged_schema,
        keys,
        pipeline=pipeline,
        seq=seq,
        replaced=replaced,
        truncation=truncation,
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
) -> None:
    """Rewrite every row of a table with the wider column types ``change.widened`` gives them, in one commit.

    deltalake has no type widening in place, so every data file is read, widened columns are cast to their
    wider types (lossless, :func:`is_lossless_widening`), the buckets are computed again (a key column's hash form may
    change, e.g. INT -> DECIMAL) and new files written. One commit replaces all files and the schema:
    ``create_write_transaction`` in ``overwrite`` mode writes a ``metaData`` action with the new schema and
    keeps the table's id, name, partitioning and configuration (owner, buckets, key); app transactions
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
    :raises deltalake.exceptions.CommitFailedError: if another writer committed since ``dt`` was read.
    """
    from deltalake import CommitProperties
    from deltalake.transaction import AddAction

    started = time.monotonic()
    old_schema = delta_arrow_schema(dt)
    new_schema = pa.schema([change.widened.get(f.name, f) for f in old_schema])
    old_data = pa.schema([f for f in old_schema if f.name != BUCKET_COLUMN])
    new_data = pa.schema([f for f in new_schema if f.name != BUCKET_COLUMN])
    by_lower = {f.name.lower(): f for f in new_data}
    key_fields = [(by_lower[k.lower()].name, by_lower[k.lower()].type) for k in keys]
    buckets = table_buckets(dt)
    removed = current_files(dt, range(buckets))
    placed: list[PlacedFile] = []
    if removed:
        rows = read_data_files(spark, uri, removed, old_data).select(
            *[col(f.name).cast(spark_type(f.type)).alias(f.name) for f in new_data]
        )
        rows = rows.withColumn(BUCKET_COLUMN, bucket_of(key_fields, buckets))
        placed = write_bucket_files(
            rows.repartition(buckets, col(BUCKET_COLUMN)), uri, new_data, seq=seq, buckets=range(buckets)
        )
    now_ms = int(time.time() * 1000)
    info = {
        "binlog.pipeline": pipeline,
        "binlog.window": seq,
        "binlog.widened": json.dumps(
            {name: f"{old_schema.field(name).type} -> {f.type}" for name, f in change.widened.items()}
        ),
        "binlog.files_removed": len(removed),
        "binlog.files_added": len(placed),
    }
    try:
        dt.create_write_transaction(
            [
                AddAction(f.path, f.size, {BUCKET_COLUMN: str(f.bucket)}, now_ms, True, f.stats)
                for f in placed
            ],
            mode="overwrite",
            schema=new_schema,
            partition_by=[BUCKET_COLUMN],
            commit_properties=CommitProperties(custom_metadata=info, max_commit_retries=0),
        )
    except BaseException:
        remove_files(filesystem_for(uri)[0], [p.location for p in placed])
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


def _rewrite_buckets(
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
    truncation: Truncation | None = None,
) -> TableResult:
    """Compute and commit the new content of the buckets the window touches.

    :param replaced: the table's new schema when a snapshot replaces it (:func:`replaced_columns`): every
        bucket is rewritten with it and the commit replaces the schema too.
    :param truncation: the truncate markers of the table and window
        (:func:`~airflow_provider_binlog.spark_jobs.truncate.plan`): one above the table's floor touches every
        bucket.
    """
    from airflow_provider_binlog.spark_jobs import truncate

    truncation = truncation or truncate.Truncation()
    stored = pa.schema([f for f in delta_arrow_schema(dt) if f.name != BUCKET_COLUMN])
    table_schema = replaced if replaced is not None else delta_arrow_schema(dt)
    data_schema = pa.schema([f for f in table_schema if f.name != BUCKET_COLUMN])
    by_lower = {f.name.lower(): f for f in data_schema}
    key_fields = [(by_lower[k.lower()].name, by_lower[k.lower()].type) for k in keys]
    key_names = [name for name, _ in key_fields]
    buckets = table_buckets(dt)

    changes = conform_changes(read_staged_changes(spark, staged.files, staged_schema), data_schema)
    changes = truncate.without_truncated(changes, truncation)
    changes = changes.withColumn(BUCKET_COLUMN, bucket_of(key_fields, buckets)).persist()
    fs = filesystem_for(uri)[0]
    try:
        profile = profile_changes(changes, key_names, staged.name)
        every = staged.refresh or truncation.empties
        touched = list(range(buckets)) if every else sorted(profile.rows_by_bucket)
        removed = current_files(dt, touched)
        current = None
        if removed:
            current = read_data_files(spark, uri, removed, stored)
            if replaced is not None:
                current = conform_changes(current, data_schema)
            current = current.withColumn(BUCKET_COLUMN, bucket_of(key_fields, buckets))
            current = truncate.tombstone_truncated(current, truncation, current.columns)
        merged = apply_window(
            current, changes, key_names, len(touched), refresh_seq=seq if staged.refresh else None
        )
        placed = write_bucket_files(merged, uri, data_schema, seq=seq, buckets=touched)
    finally:
        changes.unpersist()
    result = TableResult(
        rows_in_window=profile.rows,
        rows_written=sum(p.rows for p in placed),
        buckets_touched=len(touched),
        files_removed=len(removed),
        files_added=len(placed),
    )
    info = _commit_info(pipeline, seq, result)
    try:
        commit_window(
            dt,
            removed,
            placed,
            pipeline=pipeline,
            seq=seq,
            custom_metadata=info,
            schema=replaced,
            app_transactions=truncation.app_transactions(pipeline),
        )
    except BaseException:
        remove_files(fs, [p.location for p in placed])
        raise
    dt.update_incremental()
    result.delta_version = dt.version()
    return result


def read_data_files(
    spark: SparkSession, uri: str, files: Sequence[DataFile], data_schema: pa.Schema
) -> DataFrame:
    """Read data files of a table with its schema (without the partition column).

    :param spark: the session.
    :param uri: table location.
    :param files: files from :func:`current_files`.
    :param data_schema: the schema the files were written with (storage types).
    """
    return (
        spark.read.schema(spark_schema(data_schema))
        .parquet(*[data_file_uri(uri, f.path) for f in files])
        .select(*[col(f.name) for f in data_schema])
    )


def write_bucket_files(
    rows: DataFrame, uri: str, data_schema: pa.Schema, *, seq: int, buckets: Sequence[int]
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
    :raises MergeJobError: if Spark wrote a file for another bucket or a file does not match the schema.
    """
    fs, table_path = filesystem_for(uri)
    stage_uri = join_uri(uri, STAGING_DIR, f"w{seq}-{uuid.uuid4().hex}")
    stage_path = filesystem_for(stage_uri)[1]
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


def _commit_info(pipeline: str, seq: int, result: TableResult) -> dict[str, Any]:
    return {
        "binlog.pipeline": pipeline,
        "binlog.window": seq,
        "binlog.rows_in_window": result.rows_in_window,
        "binlog.rows_written": result.rows_written,
        "binlog.buckets_touched": result.buckets_touched,
        "binlog.files_removed": result.files_removed,
        "binlog.files_added": result.files_added,
    }


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


def merge_window(
    spark: SparkSession,
    window_uri: str,
    target: str,
    *,
    pipeline: str,
    key_overrides: Mapping[str, Sequence[str]] | None = None,
    buckets: int = 16,
    storage_options: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Merge every table of a staged window into the target; return the summary.

    Keys are checked for all tables before any table is touched. Each table is committed atomically;
    tables already holding the window are skipped, so a failed run can simply be repeated. Tables are
    merged parents first, with the child changes of the manifest's ``foreign_keys`` added
    (:func:`~airflow_provider_binlog.spark_jobs.cascades.with_cascades`).

    :param spark: the session (its SQL settings are adjusted by :func:`configure_session`).
    :param window_uri: window directory ``<staging>/<pipeline>/window=<seq>``.
    :param target: target root; table ``db.t`` lives at ``<target>/db/t``.
    :param pipeline: pipeline name; must match the manifest.
    :param key_overrides: user-named keys for tables without a primary key, by ``db.table``.
    :param buckets: bucket count for tables created by this merge.
    :param storage_options: deltalake storage options for the target.
    :raises MergeJobError: if the window is incomplete, belongs to another pipeline or a table cannot
        be merged.
    """
    if buckets < 1:
        raise MergeJobError(f"buckets must be >= 1, got {buckets}")
    configure_session(spark)
    window = load_window(window_uri)
    if window.pipeline != pipeline:
        raise MergeJobError(
            f"window {window_uri} belongs to pipeline {window.pipeline!r}, not {pipeline!r}: check the paths"
        )
    from airflow_provider_binlog.spark_jobs.cascades import drop_cascades, with_cascades

    window = with_cascades(window, target, key_overrides=key_overrides, storage_options=storage_options)
    keys = resolve_keys(window, key_overrides)
    tables: dict[str, dict[str, Any]] = {}
    for staged in window.tables:
        try:
            result = merge_table(
                spark,
                staged,
                target=target,
                pipeline=pipeline,
                seq=window.seq,
                keys=keys.get(staged.name, ()),
                buckets=buckets,
                storage_options=storage_options,
            )
        except UnfollowableSchemaChange as err:
            if staged.refresh:
                raise  # a snapshot replaces the schema (replaced_columns); this is a bug, not the source
            log.warning("%s: window %d is not merged into it: %s", staged.name, window.seq, err)
            record_refusal(window_uri, err, window.seq)
            tables[staged.name] = {"refused": str(err), "skipped": True}
            continue
        tables[staged.name] = asdict(result)
    drop_cascades(window, target)
    return {"pipeline": pipeline, "window": window.seq, "tables": tables}


REFUSAL_PREFIX = "refused="
"""Name prefix of the files in a window's staging folder recording a table whose merge was refused."""


def record_refusal(window_uri: str, err: UnfollowableSchemaChange, seq: int) -> None:
    """Record in the window's folder that ``err.table`` was not merged (``refused=<db.table>.json``).

    The commit reads it back (:func:`refused_tables`): it does not expect the window's merge commit in that
    table, and records the table as waiting for a re-snapshot from the window's start on. The file is
    written whole before the merge job ends, so the commit never sees a window half-refused.
    """
    record = {
        "table": err.table,
        "column": err.column,
        "detail": err.detail,
        "window": seq,
        "message": str(err),
    }
    write_json(join_uri(window_uri, f"{REFUSAL_PREFIX}{err.table}.json"), record)


def refused_tables(window_uri: str) -> dict[str, dict[str, Any]]:
    """Return ``{"db.table": refusal record}`` of the tables whose merge of the window was refused.

    :param window_uri: window directory ``<staging>/<pipeline>/window=<seq>``.
    """
    fs, path = filesystem_for(window_uri)
    found: dict[str, dict[str, Any]] = {}
    for info in fs.get_file_info(pafs.FileSelector(path, allow_not_found=True)):
        name = info.base_name
        if info.type == pafs.FileType.File and name.startswith(REFUSAL_PREFIX) and name.endswith(".json"):
            record = read_json(join_uri(window_uri, name))
            if record is not None:
                found[str(record["table"])] = record
    return found


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parse the command line of the merge application.

    :param argv: arguments without the program name (default ``sys.argv[1:]``).
    """
    parser = argparse.ArgumentParser(description="Merge a staged binlog window into Delta Lake tables.")
    parser.add_argument(
        "--window-uri", required=True, help="staged window dir <staging>/<pipeline>/window=<seq>"
    )
    parser.add_argument("--target", required=True, help="target root; table db.t is at <target>/db/t")
    parser.add_argument("--pipeline", required=True, help="pipeline name (must match the manifest)")
    parser.add_argument(
        "--key", action="append", default=[], metavar="DB.TABLE=COL[,COL]", help="key of a table without PK"
    )
    parser.add_argument("--buckets", type=int, default=16, help="bucket count of tables created now")
    parser.add_argument(
        "--storage-option", action="append", default=[], metavar="KEY=VALUE", help="deltalake storage option"
    )
    parser.add_argument("--log-level", default="INFO")
    return parser.parse_args(argv)


def _parse_storage_options(specs: Sequence[str]) -> dict[str, str]:
    options = {}
    for spec in specs:
        key, sep, value = spec.partition("=")
        if not sep:
            raise MergeJobError(f"--storage-option {spec!r} must look like KEY=VALUE")
        options[key] = value
    return options


@dataclass(frozen=True)
class Application:
    """A bundled Spark application bound to its command line: what to run on a session.

    The same object runs under ``spark-submit`` (:func:`run_application`, this module's ``main``) and
    in the Airflow worker as a Spark Connect client (the operators call :attr:`job` on a remote session).

    :param name: Spark application name.
    :param log_level: Python logging level name for the spark-submit driver.
    :param job: does the work on a session and returns the JSON-able summary; raises
        :class:`MergeJobError` for failures a retry of the same arguments cannot fix.
    """

    name: str
    log_level: str
    job: Callable[[SparkSession], dict[str, Any]]


def application(argv: Sequence[str]) -> Application:
    """Bind the merge application to its command line (see :func:`parse_args`).

    :param argv: arguments without the program name.
    """
    args = parse_args(argv)
    return Application(
        f"binlog-merge-{args.pipeline}",
        args.log_level,
        lambda spark: merge_window(
            spark,
            args.window_uri,
            args.target,
            pipeline=args.pipeline,
            key_overrides=parse_key_overrides(args.key),
            buckets=args.buckets,
            storage_options=_parse_storage_options(args.storage_option),
        ),
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run the merge application under spark-submit; print the JSON summary line, return the exit code.

    :param argv: command line arguments without the program name (default ``sys.argv[1:]``).
    """
    return run_application(application(sys.argv[1:] if argv is None else argv))


def run_application(app: Application) -> int:
    """Run a bundled Spark application: log to stderr, start the session, print one JSON summary line.

    :param app: the application bound to its arguments.
    :returns: the exit code: 0, or 2 after printing ``{"error": ...}`` for a :class:`MergeJobError`.
    """
    logging.basicConfig(
        level=app.log_level.upper(),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    from pyspark.sql import SparkSession

    builder: Any = SparkSession.builder
    spark = builder.appName(app.name).getOrCreate()
    try:
        summary = app.job(spark)
    except MergeJobError as err:
        log.error("%s failed: %s", app.name, err)
        print(json.dumps({"error": str(err)}), flush=True)
        return 2
    print(json.dumps(summary, sort_keys=True, default=str), flush=True)
    return 0


if __name__ == "__main__":
    # Run the package's copy of this module, which the helpers it imports (cascades) share with it.
    from airflow_provider_binlog.spark_jobs import merge as _job

    sys.exit(_job.main())
