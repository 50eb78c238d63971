"""Spark transformations of the merge: pure functions of DataFrames, and the Spark types they use.

A window's changes are read with an explicit schema (:func:`read_staged_changes`), shaped like the
table's rows (:func:`conform_changes`), checked and counted (:func:`profile_changes`), and merged with the
current rows of the files the window rewrites, newest change per key (:func:`apply_window`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from airflow_provider_binlog.contract.columns import (
    DELETED_COLUMN,
    OP_COLUMN,
    OP_DELETE,
    OPS,
    SEQ_COLUMN,
    WINDOW_COLUMN,
)
from airflow_provider_binlog.contract.rows import SOURCE_RANK
from airflow_provider_binlog.contract.types import storage_type
from airflow_provider_binlog.jobs.application import MergeJobError
from airflow_provider_binlog.jobs.merge.delta import data_file_uri

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.types import DataType, StructType

    from airflow_provider_binlog.jobs.merge.delta import DataFile

log = logging.getLogger(__name__)

_FILE_NAME = "__binlog_file_name"
_ROW_INDEX = "__binlog_row_index"
_IN_SNAPSHOT = "__binlog_in_snapshot"
_ROW_NUMBER = "__binlog_row_number"


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
    if pa.types.is_struct(t):  # a change log's row images (jobs/merge/history.py)
        return T.StructType([T.StructField(f.name, spark_type(f.type), True) for f in t])
    raise MergeJobError(f"Arrow type {t} is not a Delta storage type")


def spark_schema(schema: pa.Schema) -> StructType:
    """Return the Spark schema (all fields nullable) for an Arrow schema of storage types.

    :param schema: Arrow schema whose types are Delta storage types.
    """
    from pyspark.sql import types as T

    return T.StructType([T.StructField(f.name, spark_type(f.type), True) for f in schema])


def col(name: str) -> Column:
    """Return a Spark column reference that is safe for any column name (dots, spaces, backticks).

    :param name: column name.
    """
    from pyspark.sql import functions as F

    return F.col("`" + name.replace("`", "``") + "`")


def read_staged_changes(spark: SparkSession, files: Sequence[str], staged: pa.Schema) -> DataFrame:
    """Read a table's staged change files with an explicit schema (no inference across files).

    :param spark: the session.
    :param files: staged Parquet files.
    :param staged: staged schema from :func:`~airflow_provider_binlog.jobs.merge.window.staged_schema`, or with
        the before images of a table with history (:func:`~airflow_provider_binlog.jobs.merge.history.with_before_images`).
    """
    read_schema = pa.schema([pa.field(f.name, read_type(f)) for f in staged])
    df = spark.read.schema(spark_schema(read_schema)).parquet(*files)
    return df.select(*[col(f.name) for f in staged])


def read_type(field: pa.Field) -> pa.DataType:
    """Return the storage type a staged column is read as (a struct of row images: its fields' storage types)."""
    if pa.types.is_struct(field.type):
        return pa.struct([pa.field(f.name, storage_type(f.type, f.name)) for f in field.type])
    return storage_type(field.type, field.name)


def conform_changes(changes: DataFrame, data_schema: pa.Schema) -> DataFrame:
    """Shape staged changes like the table's data files: table columns and types, tombstone flag.

    Columns the window lacks are null; window columns narrower than the table's are cast up.

    :param changes: staged changes from :func:`read_staged_changes`.
    :param data_schema: the table's schema without the partition column.
    """
    from pyspark.sql import functions as F

    tombstone = F.coalesce(col(OP_COLUMN) == F.lit(OP_DELETE), F.lit(False)).alias(DELETED_COLUMN)
    columns = conformed_columns(changes.columns, list(data_schema))
    return changes.select(
        *[tombstone if f.name == DELETED_COLUMN else c for f, c in zip(data_schema, columns, strict=True)]
    )


def conformed_columns(
    present: Sequence[str], fields: Sequence[pa.Field], of: Column | None = None
) -> list[Column]:
    """Return one column per field: the column of ``present`` of its name (any case) cast to its type, else NULL.

    :param present: the column names a frame has (or the struct ``of`` has).
    :param fields: the wanted columns (storage types).
    :param of: a struct column whose fields ``present`` names (None: the frame's columns).
    """
    from pyspark.sql import functions as F

    found = {c.lower(): c for c in present}
    pick = col if of is None else of.getField
    return [
        (pick(found[f.name.lower()]) if f.name.lower() in found else F.lit(None))
        .cast(spark_type(f.type))
        .alias(f.name)
        for f in fields
    ]


def latest_change_per_key(rows: DataFrame, keys: Sequence[str]) -> DataFrame:
    """Keep, for each key, the row with the newest order key ``(_binlog_window, _binlog_seq)``.

    On equal order keys (a window merged again) the target's row (``__binlog_source_rank`` 0) wins over
    the window's (1), so re-merges leave rows unchanged. The rank column is dropped.

    :param rows: rows carrying the key columns and ``__binlog_source_rank``.
    :param keys: key column names.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    order = Window.partitionBy(*[col(k) for k in keys]).orderBy(
        col(WINDOW_COLUMN).desc(), col(SEQ_COLUMN).desc(), col(SOURCE_RANK).asc()
    )
    ranked = rows.withColumn(_ROW_NUMBER, F.row_number().over(order))
    return ranked.where(col(_ROW_NUMBER) == 1).drop(_ROW_NUMBER, SOURCE_RANK)


def newest_change_per_key(changes: DataFrame, keys: Sequence[str]) -> DataFrame:
    """Keep, for each key, the window's newest change (:func:`latest_change_per_key` over the window alone)."""
    from pyspark.sql import functions as F

    return latest_change_per_key(changes.withColumn(SOURCE_RANK, F.lit(1)), keys)


def apply_window(
    current: DataFrame | None,
    changes: DataFrame,
    keys: Sequence[str],
    partitions: int,
    *,
    refresh_seq: int | None = None,
) -> DataFrame:
    """Return the new content of the rewritten files: current rows and changes, newest per key.

    Rows are hash-partitioned by key into ``partitions`` tasks for the per-key window.

    With ``refresh_seq`` (a snapshot with that sequence number, every file rewritten) a live target row
    whose order key is below the snapshot's and whose key the snapshot does not hold becomes a tombstone
    with order key ``(refresh_seq, 0)``: the row was deleted while the binlog was not followed (or
    before a re-snapshot), and rows written by windows after the snapshot started are kept.

    :param current: current rows of the rewritten files (``None`` if there are none).
    :param changes: conformed changes.
    :param keys: key column names.
    :param partitions: number of shuffle partitions.
    :param refresh_seq: the snapshot's sequence number when ``changes`` is a whole-table snapshot.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    rows = changes.withColumn(SOURCE_RANK, F.lit(1))
    if current is not None:
        rows = current.withColumn(SOURCE_RANK, F.lit(0)).unionByName(rows)
    rows = rows.repartition(max(1, partitions), *[col(k) for k in keys])
    if refresh_seq is None:
        return latest_change_per_key(rows, keys)
    per_key = Window.partitionBy(*[col(k) for k in keys])
    rows = rows.withColumn(_IN_SNAPSHOT, F.max(col(SOURCE_RANK)).over(per_key))
    latest = latest_change_per_key(rows, keys)
    stale = (col(_IN_SNAPSHOT) == 0) & (col(WINDOW_COLUMN) < F.lit(refresh_seq)) & ~col(DELETED_COLUMN)
    latest = latest.withColumn(_IN_SNAPSHOT, stale)  # evaluated once, before the columns it reads change
    tombstone = {
        DELETED_COLUMN: F.lit(True),
        OP_COLUMN: F.lit(OP_DELETE),
        WINDOW_COLUMN: F.lit(refresh_seq).cast("long"),
        SEQ_COLUMN: F.lit(0).cast("long"),
    }
    for name, value in tombstone.items():
        latest = latest.withColumn(name, F.when(col(_IN_SNAPSHOT), value).otherwise(col(name)))
    return latest.drop(_IN_SNAPSHOT)


def profile_changes(changes: DataFrame, keys: Sequence[str], table: str) -> int:
    """Validate ops, keys and order keys of a window's changes in one Spark job; return their number.

    :param changes: conformed changes.
    :param keys: key column names.
    :param table: table name for messages.
    :raises MergeJobError: if an op is unknown or a key or order key column is null.
    """
    from pyspark.sql import functions as F

    bad_op = ~F.coalesce(col(OP_COLUMN).isin(*OPS), F.lit(False))
    null_key = F.lit(False)
    for k in keys:
        null_key = null_key | col(k).isNull()
    null_order = col(WINDOW_COLUMN).isNull() | col(SEQ_COLUMN).isNull()
    (stats,) = changes.agg(
        F.count(F.lit(1)).alias("rows"),
        F.sum(bad_op.cast("long")).alias("bad_op"),
        F.sum(null_key.cast("long")).alias("null_key"),
        F.sum(null_order.cast("long")).alias("null_order"),
    ).collect()
    check_profile(stats["bad_op"], stats["null_key"], stats["null_order"], keys, table)
    return int(stats["rows"])


def check_profile(
    bad_op: int | None, null_key: int | None, null_order: int | None, keys: Sequence[str], table: str
) -> None:
    """Raise for a window's change rows the merge cannot order: counts of unknown ops, null keys, null order keys.

    :raises MergeJobError: naming the table and the first problem found.
    """
    problems = {
        f"an op other than {'/'.join(OPS)}": bad_op,
        f"a null key column {list(keys)}": null_key,
        "a null _binlog_window or _binlog_seq": null_order,
    }
    for what, count in problems.items():
        if count:
            raise MergeJobError(f"{count} staged change rows of {table} have {what}; fix the extractor")


def read_data_files(
    spark: SparkSession,
    uri: str,
    files: Sequence[DataFile],
    data_schema: pa.Schema,
    deleted: Mapping[str, Sequence[int]] | None = None,
) -> DataFrame:
    """Read the live rows of data files of a table with its schema (without the partition column).

    :param spark: the session.
    :param uri: table location.
    :param files: files from :func:`~airflow_provider_binlog.jobs.merge.delta.current_files`.
    :param data_schema: the schema the files were written with (storage types, no partition column).
    :param deleted: ``{log path: row positions}`` of the files' deletion vectors: those rows are left out
        (matched by file name and ``_metadata.row_index``, the position Parquet stores the row at).
    """
    from pyspark.sql import functions as F

    rows = spark.read.schema(spark_schema(data_schema)).parquet(*[data_file_uri(uri, f.path) for f in files])
    wanted = {f.path for f in files}
    dead = {path: positions for path, positions in (deleted or {}).items() if path in wanted and positions}
    if dead:
        names = [os.path.basename(path) for path, positions in dead.items() for _ in positions]
        positions = [p for path in dead for p in dead[path]]
        gone = spark.createDataFrame(
            pa.table({_FILE_NAME: pa.array(names, pa.string()), _ROW_INDEX: pa.array(positions, pa.int64())})
        )
        rows = rows.withColumns(
            {_FILE_NAME: F.col("_metadata.file_name"), _ROW_INDEX: F.col("_metadata.row_index")}
        ).join(gone, on=[_FILE_NAME, _ROW_INDEX], how="left_anti")
    return rows.select(*[col(f.name) for f in data_schema])


def unpersist_after_failure(frame: DataFrame) -> None:
    """Unpersist ``frame`` after a failed rewrite, logging instead of raising a failure of its own.

    The rewrite's error is the one to report: when the Spark Connect server died, the unpersist fails too,
    and raising that would hide where the merge stopped.
    """
    try:
        frame.unpersist()
    except Exception as err:  # noqa: BLE001  (any error of the release; the rewrite's error follows)
        log.warning("could not unpersist a persisted frame of the merge after its failure: %s", err)
