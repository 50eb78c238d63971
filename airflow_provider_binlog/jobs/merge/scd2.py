"""The SCD type 2 table beside a target table: one row per version of each source row, rebuilt from events.

For every table whose manifest entry asks for it (``history`` holds ``scd2``,
:mod:`airflow_provider_binlog.contract.history`), the merge keeps ``<target>/<db>/<t>~scd2``: one row per version
of each source row, with the source columns, the order key and commit time of the change that started it
(``_binlog_valid_from``) and of the one that ended it (``_binlog_valid_to``, null while it is current), what ended it
(``_binlog_ended_by``: ``u`` a newer version, ``d`` deleted or moved to another key, ``t`` truncated, ``r`` a
re-snapshot restarted the table's history) and ``_binlog_is_current``.

**Events.** A version row is lossless: it is the *start event* of its change (the after image at its order key)
and, when it was ended by ``d``, ``t`` or ``r``, an *end event*; an end by ``u`` is the next version's start. The
window's change-log rows (:func:`~airflow_provider_binlog.jobs.merge.history.staged_changelog_rows`) give events too:
an after image starts a version of its key, a delete (or an update moving the row to another key) ends the before
image's key. Replaying a key's events in order-key order gives its versions: each start lasts until the key's next
event. So the merge reads the table's files that may hold the window's keys (key ranges, as the target's merge,
``docs/adr/0020-key-range-file-layout.md``), turns their rows back into events, adds the window's, replays them and
writes the files again, in one Delta commit with the window's app transactions. The result depends only on the set
of events, not on the order windows are merged in (an interval backfill of an older interval gives the same table).

**Truncates** end every version open at their order key, also of keys whose older changes arrive later: the table
keeps them in its property :data:`TRUNCATES_PROPERTY`, applies them to every key it replays, and a window holding one
rewrites the whole table. A **re-snapshot** (a staged snapshot) rewrites the whole table too: every version open
before it is ended ``r`` and the snapshot's rows start new ones.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from airflow_provider_binlog.contract.columns import (
    GTID_COLUMN,
    OP_COLUMN,
    OP_DELETE,
    OP_SNAPSHOT,
    OP_TRUNCATE,
    OP_UPDATE,
    SEQ_COLUMN,
    TS_COLUMN,
    WINDOW_COLUMN,
)
from airflow_provider_binlog.contract.delta import (
    COMMIT_PIPELINE_KEY,
    COMMIT_WINDOW_KEY,
    already_merged,
    check_owner,
    delta_arrow_schema,
    open_table,
    target_file_bytes,
)
from airflow_provider_binlog.contract.history import (
    AFTER_COLUMN,
    BEFORE_COLUMN,
    END_SEQ_COLUMN,
    END_WINDOW_COLUMN,
    ENDED_BY_COLUMN,
    IS_CURRENT_COLUMN,
    SCD2_SUFFIX,
    VALID_FROM_COLUMN,
    VALID_TO_COLUMN,
    scd2_schema,
    scd2_uri,
)
from airflow_provider_binlog.contract.uris import StorageOptions, filesystem_for
from airflow_provider_binlog.jobs.merge.delta import commit_window, create_table, current_files
from airflow_provider_binlog.jobs.merge.files import remove_files, write_plan
from airflow_provider_binlog.jobs.merge.layout import deciding_keys, plan_rewrite
from airflow_provider_binlog.jobs.merge.transforms import col, read_data_files, spark_type

if TYPE_CHECKING:
    from deltalake import DeltaTable
    from pyspark.sql import Column, DataFrame, SparkSession

log = logging.getLogger(__name__)

TRUNCATES_PROPERTY = "binlog.scd2.truncates"
"""Table property of an SCD2 table: JSON list of ``[window, seq, commit time in microseconds]`` of every truncate
marker merged into it, applied to every key replayed (a key's older changes may arrive after the truncate)."""
_KIND, _IMAGE, _START = "__kind", "__image", "s"
"""Columns of an event (its kind: ``s`` a version starts, else the op that ends one), and the start kind."""


def write_scd2(
    spark: SparkSession,
    name: str,
    changes: DataFrame,
    source: pa.Schema,
    *,
    target: str,
    pipeline: str,
    seq: int,
    keys: Sequence[str],
    refresh: bool,
    rows: int,
    truncated: bool,
    file_bytes: int | None = None,
    storage_options: StorageOptions | None = None,
) -> dict[str, Any]:
    """Merge a window's change-log rows of ``name`` into its SCD2 table; return the summary.

    :param changes: the window's change-log rows (:func:`~airflow_provider_binlog.jobs.merge.history.staged_changelog_rows`,
        with the seed rows of a new history).
    :param source: the source columns of their images (Arrow storage types).
    :param keys: the table's key columns.
    :param refresh: the window is a staged snapshot (the table's history restarts at it).
    :param rows: about how many rows ``changes`` holds (it sizes the write).
    :param truncated: whether ``changes`` may hold truncate markers (the manifest counts them).
    :param file_bytes: data file size of an SCD2 table created now (None: the default).
    :returns: ``{"versions_written", "files_removed", "files_added", "delta_version"}`` or ``{"skipped": True}``.
    :raises HistoryTypeChange: if a column's new type is neither a widening nor a narrowing of the table's.
    """
    from pyspark.sql import functions as F

    from airflow_provider_binlog.jobs.merge.history_schema import evolve_schema

    uri = scd2_uri(target, name)
    dt = open_table(uri, storage_options)
    if dt is not None and already_merged(dt, pipeline, seq):
        return {"skipped": True, "delta_version": dt.version()}
    started = time.monotonic()
    wanted = scd2_schema(source)
    if dt is None:
        dt = create_table(uri, wanted, table=name + SCD2_SUFFIX, keys=keys, pipeline=pipeline,
                          target_file_bytes=file_bytes, storage_options=storage_options)  # fmt: skip
    else:
        check_owner(dt, pipeline, name + SCD2_SUFFIX)
        evolve_schema(
            spark, dt, wanted, name, keys, pipeline=pipeline, seq=seq, storage_options=storage_options
        )
    stored = delta_arrow_schema(dt)
    new_truncates = (
        [
            (int(r[WINDOW_COLUMN]), int(r[SEQ_COLUMN]), int(r["ts"]))
            for r in changes.where(col(OP_COLUMN) == OP_TRUNCATE)
            .select(WINDOW_COLUMN, SEQ_COLUMN, F.unix_micros(col(TS_COLUMN)).alias("ts"))
            .collect()
        ]
        if truncated
        else []
    )
    truncates = sorted(set(_truncates(dt)) | set(new_truncates))
    files = current_files(dt, list(keys))
    # one file or none: it is rewritten anyway, so the window's keys need not be collected to plan it
    whole = refresh or bool(new_truncates) or len(files) <= 1
    image_type = spark_type(pa.struct(list(stored_source(stored))))
    events = _window_events(changes, keys, image_type)
    seen = [] if whole else deciding_keys(events, "__key0", files)
    plan = plan_rewrite(files, seen, target_file_bytes=target_file_bytes(dt), whole=whole)
    if plan.removed:
        existing = read_data_files(spark, dt.table_uri, plan.removed, stored)
        old = _version_events(existing, stored, keys, image_type)
        if refresh:
            old = old.unionByName(_restarts(existing, keys, seq, changes, image_type))
        events = old.unionByName(events)
    versions = _replay(spark, events, keys, stored, truncates)
    count = sum(f.rows for f in plan.removed) + rows
    placed = write_plan(versions, dt, uri, stored, list(keys), plan, files=files, seq=seq, count=count,
                        storage_options=storage_options)  # fmt: skip
    try:
        if new_truncates:
            dt.alter.set_table_properties(
                {TRUNCATES_PROPERTY: json.dumps([list(t) for t in truncates])}, raise_if_not_exists=False
            )
            dt.update_incremental()
        info = {COMMIT_PIPELINE_KEY: pipeline, COMMIT_WINDOW_KEY: seq, "binlog.files_removed": len(plan.removed),
                "binlog.files_added": len(placed)}  # fmt: skip
        commit_window(dt, plan.removed, placed, pipeline=pipeline, seq=seq, custom_metadata=info,
                      storage_options=storage_options)  # fmt: skip
    except BaseException:
        remove_files(filesystem_for(uri, storage_options)[0], [p.location for p in placed])
        raise
    dt.update_incremental()
    result = {
        "versions_written": sum(p.rows for p in placed),
        "files_removed": len(plan.removed),
        "files_added": len(placed),
        "delta_version": dt.version(),
    }
    log.info(
        "%s: merged window %d into its SCD2 table in %.1f s: %s",
        name,
        seq,
        time.monotonic() - started,
        result,
    )
    return result


def stored_source(stored: pa.Schema) -> pa.Schema:
    """Return the source columns of an SCD2 table's schema (every column but the ``_binlog_*`` ones)."""
    return pa.schema([f for f in stored if f.name not in _SCD2_COLUMNS])


def _truncates(dt: DeltaTable) -> list[tuple[int, int, int]]:
    text = dt.metadata().configuration.get(TRUNCATES_PROPERTY)
    return [(int(w), int(s), int(t)) for w, s, t in json.loads(text)] if text else []


def _event(key: Sequence[Column], window: Column, seq: Column, ts: Column, kind: Column, image: Column,
           gtid: Column) -> list[Column]:  # fmt: skip
    """Return the columns of an event: its key (``__key<i>``), order key, time, kind, image and GTID."""
    return [
        *(k.alias(f"__key{i}") for i, k in enumerate(key)),
        window.cast("long").alias("__w"),
        seq.cast("long").alias("__s"),
        ts.alias("__ts"),
        kind.alias(_KIND),
        image.alias(_IMAGE),
        gtid.cast("string").alias("__gtid"),
    ]


def _window_events(changes: DataFrame, keys: Sequence[str], image_type: Any) -> DataFrame:
    """Return the events of a window's change-log rows (see the module docstring)."""
    from pyspark.sql import functions as F

    after, before = col(AFTER_COLUMN), col(BEFORE_COLUMN)
    order = (col(WINDOW_COLUMN), col(SEQ_COLUMN), col(TS_COLUMN))
    starts = changes.where(after.isNotNull()).select(
        *_event(
            [after.getField(k) for k in keys],
            *order,
            F.lit(_START),
            _cast_image(after, image_type),
            col(GTID_COLUMN),
        )  # fmt: skip
    )
    moved = F.lit(False)
    for k in keys:
        moved = moved | ~before.getField(k).eqNullSafe(after.getField(k))
    ended = (col(OP_COLUMN) == OP_DELETE) | ((col(OP_COLUMN) == OP_UPDATE) & before.isNotNull() & moved)
    ends = changes.where(ended).select(
        *_event(
            [before.getField(k) for k in keys],
            *order,
            F.lit(OP_DELETE),
            F.lit(None).cast(image_type),
            col(GTID_COLUMN),
        )  # fmt: skip
    )
    return starts.unionByName(ends)


def _cast_image(image: Column, image_type: Any) -> Column:
    """Return a change-log image as a struct of the SCD2 table's source columns (by name; null where it lacks one)."""
    from pyspark.sql import functions as F

    return F.when(image.isNotNull(), F.struct(*[image.getField(f.name).cast(f.dataType).alias(f.name)
                                               for f in image_type.fields]))  # fmt: skip


def _version_events(rows: DataFrame, stored: pa.Schema, keys: Sequence[str], image_type: Any) -> DataFrame:
    """Return the events an SCD2 table's version rows encode: each its start, and its end by ``d`` or ``r``."""
    from pyspark.sql import functions as F

    image = F.struct(*[col(f.name).cast(f.dataType).alias(f.name) for f in image_type.fields])
    starts = rows.select(
        *_event(
            [col(k) for k in keys],
            col(WINDOW_COLUMN),
            col(SEQ_COLUMN),
            col(VALID_FROM_COLUMN),
            F.lit(_START),
            image,
            col(GTID_COLUMN),
        )  # fmt: skip
    )
    ends = rows.where(col(ENDED_BY_COLUMN).isin(OP_DELETE, OP_SNAPSHOT)).select(
        *_event(
            [col(k) for k in keys],
            col(END_WINDOW_COLUMN),
            col(END_SEQ_COLUMN),
            col(VALID_TO_COLUMN),
            col(ENDED_BY_COLUMN),
            F.lit(None).cast(image_type),
            F.lit(None),
        )  # fmt: skip
    )
    return starts.unionByName(ends)


def _restarts(
    existing: DataFrame, keys: Sequence[str], seq: int, changes: DataFrame, image_type: Any
) -> DataFrame:
    """Return an ``r`` end event for every key of the table before a re-snapshot, at the snapshot's start."""
    from pyspark.sql import functions as F

    first = changes.agg(F.min(TS_COLUMN)).collect()[0][0]
    return (
        existing.select(*[col(k) for k in keys])
        .distinct()
        .select(
            *_event(
                [col(k) for k in keys],
                F.lit(seq),
                F.lit(-1),
                F.lit(first).cast("timestamp"),
                F.lit(OP_SNAPSHOT),
                F.lit(None).cast(image_type),
                F.lit(None),
            )  # fmt: skip
        )
    )


def _replay(
    spark: SparkSession,
    events: DataFrame,
    keys: Sequence[str],
    stored: pa.Schema,
    truncates: Sequence[tuple[int, int, int]],
) -> DataFrame:
    """Return the versions the events give (see the module docstring), shaped like ``stored``."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    key_columns = [f"__key{i}" for i in range(len(keys))]
    if truncates:
        marks = spark.createDataFrame(
            pa.table(
                {
                    "__w": pa.array([t[0] for t in truncates], pa.int64()),
                    "__s": pa.array([t[1] for t in truncates], pa.int64()),
                    "__ts": pa.array([t[2] for t in truncates], pa.timestamp("us", tz="UTC")),
                }
            )  # fmt: skip
        )
        each = events.select(*key_columns).distinct().crossJoin(marks)
        events = events.unionByName(
            each.select(
                *key_columns,
                "__w",
                "__s",
                "__ts",
                F.lit(OP_TRUNCATE).alias(_KIND),
                F.lit(None).cast(events.schema[_IMAGE].dataType).alias(_IMAGE),
                F.lit(None).cast("string").alias("__gtid"),
            )  # fmt: skip
        )
    # a start and an end at one order key of one key (the source never logs both) would go ends first
    by_key = Window.partitionBy(*key_columns).orderBy("__w", "__s", F.col(_KIND) == _START)
    versions = events.withColumn("__next", F.lead(F.struct("__w", "__s", "__ts", _KIND)).over(by_key))
    versions = versions.where(F.col(_KIND) == _START)
    following = F.col("__next")
    computed = {
        WINDOW_COLUMN: F.col("__w"),
        SEQ_COLUMN: F.col("__s"),
        GTID_COLUMN: F.col("__gtid"),
        VALID_FROM_COLUMN: F.col("__ts"),
        VALID_TO_COLUMN: following.getField("__ts"),
        END_WINDOW_COLUMN: following.getField("__w"),
        END_SEQ_COLUMN: following.getField("__s"),
        ENDED_BY_COLUMN: F.when(following.getField(_KIND) == _START, F.lit(OP_UPDATE)).otherwise(
            following.getField(_KIND)
        ),
        IS_CURRENT_COLUMN: following.isNull(),
    }
    return versions.select(
        *[
            computed.get(f.name, F.col(_IMAGE).getField(f.name)).cast(spark_type(f.type)).alias(f.name)
            for f in stored
        ]
    )


_SCD2_COLUMNS = frozenset(scd2_schema(pa.schema([])).names)
