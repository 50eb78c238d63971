"""Writing a window's history beside the target table: the change log (chained by digest) and the SCD2 table.

For every table whose manifest entry asks for history (:mod:`airflow_provider_binlog.contract.history`), the merge
writes the window's row changes into its history tables, in a thread beside the window's merge into the
current-state table (:class:`HistoryWriter`, :func:`write_history`). The SCD2 table is built from the same rows
(:mod:`~airflow_provider_binlog.jobs.merge.scd2`); the change log, ``<target>/<db>/<t>~changes``, is written so:

1. Skip the table if the change log's Delta log already holds the window's app transaction (a re-run).
2. Spark reads the table's staged files (and the changes the cascades synthesised for it, flagged in
   :data:`~airflow_provider_binlog.contract.history.CASCADE_COLUMN`), gives each update the before image staged
   with it (:data:`~airflow_provider_binlog.contract.history.BEFORE_COLUMN`), leaves out the delete staged for a
   row an update moved to another key (:func:`staged_changelog_rows`), and writes the rows as Parquet files sorted
   by key into the change log's folder.
   When the change log has no commit yet and the target held rows before the window, those live rows are
   appended first as snapshot reads (``r``): the table's history starts there.
3. The driver reads the new files back, computes their :func:`~airflow_provider_binlog.contract.history.rows_digest`
   and the chain value over the change log's previous commit, and commits the files with the window's app
   transactions and the digests in one Delta commit that must follow the version it read (on a conflict, the
   chain's previous value is read again and the commit retried).

Exactly once: the change log and the target commit each under their own app transaction of the window, so a
re-run after a failure between the two finds one done and makes the other; a new change log starts from the
target's version read before the window's merge began, whatever the merge committed meanwhile.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

from airflow_provider_binlog.contract.columns import (
    CHANGE_FIELDS,
    DELETED_COLUMN,
    FILE_COLUMN,
    METADATA_COLUMN_NAMES,
    OP_COLUMN,
    OP_DELETE,
    OP_INSERT,
    OP_SNAPSHOT,
    OP_UPDATE,
    POS_COLUMN,
    SEQ_COLUMN,
    WINDOW_COLUMN,
)
from airflow_provider_binlog.contract.delta import (
    COMMIT_PIPELINE_KEY,
    COMMIT_WINDOW_KEY,
    already_merged,
    check_owner,
    delta_arrow_schema,
    open_table,
    table_key,
    window_app_id,
)
from airflow_provider_binlog.contract.history import (
    AFTER_COLUMN,
    BEFORE_COLUMN,
    CASCADE_COLUMN,
    CHAIN_KEY,
    CHANGELOG,
    CHANGELOG_SUFFIX,
    DIGEST_KEY,
    MERGE_WINDOW_COLUMN,
    PREVIOUS_KEY,
    ROWS_KEY,
    RUN_ID_COLUMN,
    SCD2,
    STATEMENT_COLUMN,
    STATEMENT_POS_COLUMN,
    STATEMENTS_SCHEMA,
    STATEMENTS_TABLE_COLUMN,
    chain_digest,
    changelog_schema,
    changelog_uri,
    history_uri,
    rows_digest,
)
from airflow_provider_binlog.contract.uris import StorageOptions, filesystem_for, join_uri, table_uri
from airflow_provider_binlog.jobs.application import MergeJobError
from airflow_provider_binlog.jobs.merge.delta import commit_window, create_table, current_files
from airflow_provider_binlog.jobs.merge.files import PlacedFile, file_layout, remove_files, write_sorted_files
from airflow_provider_binlog.jobs.merge.history_schema import evolve_schema
from airflow_provider_binlog.jobs.merge.layout import SEGMENT_COLUMN, write_partitions
from airflow_provider_binlog.jobs.merge.merge_on_read import deleted_rows
from airflow_provider_binlog.jobs.merge.transforms import (
    col,
    conformed_columns,
    read_data_files,
    read_staged_changes,
    spark_schema,
    spark_type,
)

if TYPE_CHECKING:
    from deltalake import DeltaTable
    from pyspark.sql import Column, DataFrame, SparkSession

    from airflow_provider_binlog.contract.manifest import Manifest
    from airflow_provider_binlog.jobs.merge.plan import TablePlan

log = logging.getLogger(__name__)

_CASCADE_BEFORE = "_binlog_cascade_before"
"""Column of the change-log rows being made: the before image of an update a cascade synthesised."""

COMMIT_ATTEMPTS = 5
"""Commits of one window's change-log files tried before the merge fails (another writer committed between)."""
_IMAGE = "_binlog_image"
_STAGED_BEFORE = "_binlog_staged_before"
"""Column of the change-log rows being made: the before image staged with a row (:data:`BEFORE_COLUMN`)."""
RECENT_COMMITS = 10
"""Commits of a change log read first to find its newest digest (schema and maintenance commits come between)."""
HISTORY_THREADS = 1
"""Tables whose history a merge writes at once (each writes its change log and SCD2 table at once, beside the
target merges). One, started ahead of the merges, gave the demo's catch-up merge 1.48x the time without history
while its target merges ran on Spark too (1.00x since they run in the driver, ADR 0040); two oversubscribed
``local[2]`` (2.27x, ``docs/benchmarks.md``, history cost)."""
HISTORY_PROPERTIES = {"delta.enableExpiredLogCleanup": "false"}
"""Table properties of a change log: its commit infos hold the digest chain, so its log is never cleaned up."""


def history_kinds_of(manifest: Manifest, table: TablePlan) -> tuple[str, ...]:
    """Return the history kinds the window writes for ``table``: its manifest entry's, none when it stages no file."""
    entry = manifest.tables.get(table.name)
    return entry.history if entry is not None and table.staged.files else ()


def write_history(
    spark: SparkSession,
    table: TablePlan,
    manifest: Manifest,
    window_uri: str,
    *,
    target: str,
    pipeline: str,
    target_file_bytes: int | None = None,
    storage_options: StorageOptions | None = None,
    target_version: int | None = None,
) -> dict[str, Any] | None:
    """Write the window's changes of ``table`` into its history tables; return their summaries by kind.

    The change log gets the window's change-log rows appended (:func:`write_changelog`), the SCD2 table the
    versions they make (:func:`~airflow_provider_binlog.jobs.merge.scd2.write_scd2`); a history table that holds the
    window already is left as it is. Both start, when new, with the target's live rows at ``target_version``.

    :param spark: the session.
    :param table: the table's plan (:func:`~airflow_provider_binlog.jobs.merge.plan.plan_window`).
    :param manifest: the window's manifest (the table's history kinds, the run id).
    :param window_uri: the window folder (its manifest's files are relative to it).
    :param target: target root.
    :param pipeline: pipeline name.
    :param target_file_bytes: data file size of a history table created now (None: the default).
    :param storage_options: storage options of the staging and target stores.
    :param target_version: the target table's version before the window's merge (None: it did not exist).
    :returns: ``{"changelog": {...}, "scd2": {...}}`` for the kinds the table keeps; None when it keeps none.
    :raises HistoryTypeChange: if a column of a history table cannot take the window's type.
    :raises MergeJobError: if a history table cannot be written or committed.
    """
    from airflow_provider_binlog.jobs.merge.scd2 import stored_source, write_scd2

    kinds = history_kinds_of(manifest, table)
    if not kinds:
        return None
    entry = manifest.tables[table.name]
    seq = manifest.window
    opened = {kind: open_table(history_uri(kind, target, table.name), storage_options) for kind in kinds}
    result: dict[str, Any] = {}
    for kind, dt in opened.items():
        if dt is not None and already_merged(dt, pipeline, seq):
            log.info(
                "%s: window %d is already in its %s table (version %d)", table.name, seq, kind, dt.version()
            )
            result[kind] = {"skipped": True, "delta_version": dt.version()}
    pending = [kind for kind in kinds if kind not in result]
    existing = next((dt for dt in opened.values() if dt is not None), None)
    keys = list(table.keys) or list((table_key(existing) if existing is not None else None) or ())
    if not pending or not keys:  # only truncate markers, and no history yet: there is none to record
        return result or None
    started = time.monotonic()
    if table.staged.markers_only and existing is not None:  # a TRUNCATE or DROP alone: no column to follow
        stored = delta_arrow_schema(existing)
        source = stored.field(AFTER_COLUMN).type if AFTER_COLUMN in stored.names else stored_source(stored)
        wanted = changelog_schema(pa.schema(list(source)), keys)
    else:
        wanted = changelog_schema(source_fields(table.target_schema()), keys)
    log_dt = None
    if CHANGELOG in pending:
        log_dt = prepare_changelog(
            spark, opened[CHANGELOG], wanted, uri=changelog_uri(target, table.name), table=table.name, keys=keys,
            pipeline=pipeline, seq=seq, file_bytes=target_file_bytes, storage_options=storage_options,
        )  # fmt: skip
    schema = delta_arrow_schema(log_dt) if log_dt is not None else wanted
    run_id = manifest.run_id or ""
    staged = {join_uri(window_uri, f) for f in entry.files}
    statements = join_uri(window_uri, manifest.statements) if manifest.statements else None
    rows = staged_changelog_rows(
        spark, table, schema, staged=staged, seq=seq, run_id=run_id, statements=statements,
        storage_options=storage_options,
    )  # fmt: skip
    new = {
        CHANGELOG: log_dt is not None and last_chain(log_dt) is None,
        SCD2: SCD2 in pending and opened[SCD2] is None,
    }
    seed = None
    if any(new.values()):
        seed = target_rows(spark, target, table.name, schema, keys, pipeline=pipeline, seq=seq, run_id=run_id,
                           version=target_version, storage_options=storage_options)  # fmt: skip

    def write(kind: str) -> dict[str, Any]:
        these, count = rows, table.staged.rows
        if seed is not None and new[kind]:
            these, count = seed[0].unionByName(rows), count + seed[1]
        if kind == CHANGELOG and log_dt is not None:
            return write_changelog(these, log_dt, schema, keys, count=count, pipeline=pipeline, seq=seq,
                                   storage_options=storage_options)  # fmt: skip
        return write_scd2(
            spark, table.name, these, pa.schema(list(schema.field(AFTER_COLUMN).type)), target=target,
            pipeline=pipeline, seq=seq, keys=keys, refresh=table.staged.refresh, rows=count,
            truncated=table.staged.markers > 0, file_bytes=target_file_bytes, storage_options=storage_options,
        )  # fmt: skip

    if len(pending) == 1:
        result[pending[0]] = write(pending[0])
    else:  # both at once: each is mostly Spark and Delta latency
        rows = rows.persist()
        try:
            with ThreadPoolExecutor(max_workers=len(pending), thread_name_prefix="binlog-history") as pool:
                futures = {kind: pool.submit(write, kind) for kind in pending}
            result.update((kind, future.result()) for kind, future in futures.items())
        finally:
            rows.unpersist()
    log.info("%s: wrote window %d into its history (%s) in %.1f s", table.name, seq, ", ".join(pending),
             time.monotonic() - started)  # fmt: skip
    return result


def prepare_changelog(
    spark: SparkSession,
    dt: DeltaTable | None,
    wanted: pa.Schema,
    *,
    uri: str,
    table: str,
    keys: Sequence[str],
    pipeline: str,
    seq: int,
    file_bytes: int | None,
    storage_options: StorageOptions | None,
) -> DeltaTable:
    """Return the change log of ``table`` at ``uri``: created with ``wanted``, or given its new columns and types."""
    if dt is None:
        return create_table(
            uri, wanted, table=table + CHANGELOG_SUFFIX, keys=keys, pipeline=pipeline, target_file_bytes=file_bytes,
            storage_options=storage_options, properties=HISTORY_PROPERTIES,
        )  # fmt: skip
    check_owner(dt, pipeline, table + CHANGELOG_SUFFIX)
    evolve_schema(spark, dt, wanted, table, keys, pipeline=pipeline, seq=seq, storage_options=storage_options)
    return dt


def write_changelog(
    rows: DataFrame,
    dt: DeltaTable,
    schema: pa.Schema,
    keys: Sequence[str],
    *,
    count: int,
    pipeline: str,
    seq: int,
    storage_options: StorageOptions | None,
) -> dict[str, Any]:
    """Append change-log rows (about ``count``) to the change log ``dt`` and commit them with their digests.

    :returns: ``{"rows", "files", "delta_version", "digest", "chain"}``.
    """
    placed = _write(
        rows, dt, dt.table_uri, schema, keys, seq=seq, count=count, storage_options=storage_options
    )
    return commit_changelog(dt, placed, pipeline=pipeline, seq=seq, storage_options=storage_options)


class HistoryWriter:
    """Writes the history of a window's tables in threads of their own, beside the target merges.

    A table's history is independent of its target merge (each commit is exactly once by its own app
    transaction; a new history table starts from the target's version read before the merge), so the two run at once:
    on a small window each is mostly Spark and Delta latency. Every table's history is started before the first
    target merge (:meth:`start_all`; the plan has made the cascades' files they read), :data:`HISTORY_THREADS` at
    a time, so the histories of later tables run while earlier tables merge and Spark's cores are kept busy. The
    threads run their Spark actions in place, never detached (``docs/adr/0024-deferrable-spark-work.md``): only the
    target merge may defer.

    Use as a context manager (leaving it on an error cancels the histories not started yet); :meth:`start_all`
    before merging the tables, :meth:`finish` each table's after its merge.
    """

    def __init__(
        self,
        spark: SparkSession,
        manifest: Manifest,
        window_uri: str,
        *,
        target: str,
        pipeline: str,
        target_file_bytes: int | None = None,
        storage_options: StorageOptions | None = None,
    ) -> None:
        self.spark, self.manifest, self.window_uri = spark, manifest, window_uri
        self.target, self.pipeline = target, pipeline
        self.target_file_bytes, self.storage_options = target_file_bytes, storage_options
        self._pool: ThreadPoolExecutor | None = None

    def __enter__(self) -> HistoryWriter:
        return self

    def __exit__(self, kind: type[BaseException] | None, *exc: object) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=kind is not None)

    def start_all(self, tables: Sequence[TablePlan]) -> dict[str, Future[dict[str, Any] | None]]:
        """Start writing the window's history of every table that keeps one (:meth:`start`); return them by name."""
        started = {table.name: self.start(table) for table in tables}
        return {name: future for name, future in started.items() if future is not None}

    def start(self, table: TablePlan) -> Future[dict[str, Any] | None] | None:
        """Start writing the window's history of ``table`` (:func:`write_history`); None when it keeps none.

        Call it before the table's target merge: its history starts from the target's version read now.
        """
        if not history_kinds_of(self.manifest, table):
            return None
        current = open_table(table_uri(self.target, table.name), self.storage_options)
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=HISTORY_THREADS, thread_name_prefix="binlog-history")
        return self._pool.submit(
            write_history,
            self.spark,
            table,
            self.manifest,
            self.window_uri,
            target=self.target,
            pipeline=self.pipeline,
            target_file_bytes=self.target_file_bytes,
            storage_options=self.storage_options,
            target_version=None if current is None else current.version(),
        )

    @staticmethod
    def finish(pending: Future[dict[str, Any] | None] | None) -> dict[str, Any] | None:
        """Wait for the history :meth:`start` began; return its summaries by kind or raise its error."""
        return None if pending is None else pending.result()


def source_fields(target: pa.Schema) -> pa.Schema:
    """Return the source columns of a target table schema (storage types, no change columns, no field metadata)."""
    return pa.schema([f.remove_metadata() for f in target if f.name not in METADATA_COLUMN_NAMES])


def _image(frame: DataFrame, source: pa.Schema) -> Column:
    """Return the struct of ``source``'s columns of ``frame`` (null where it lacks a column)."""
    from pyspark.sql import functions as F

    return F.struct(*conformed_columns(frame.columns, list(source)))


def staged_changelog_rows(
    spark: SparkSession,
    table: TablePlan,
    schema: pa.Schema,
    *,
    staged: set[str],
    seq: int,
    run_id: str,
    statements: str | None = None,
    storage_options: StorageOptions | None = None,
) -> DataFrame:
    """Return the change-log rows of a table's staged (and cascade) files, shaped like ``schema``.

    A staged row is a change-log row, with its image as the before image of a ``d`` and the after image of ``c``,
    ``u`` and ``r``, and a ``u``'s before image the one staged with it (:data:`~.contract.history.BEFORE_COLUMN`;
    a cascade's: :func:`_with_cascade_befores`); the ``d`` staged with a before image is the delete of a row whose
    key an update moved (the key-change rule), whose ``u`` at the next order key holds the change, and is left out.
    So no row needs another: no shuffle. Each row gets the statement of its rows event from the window's statements
    side file (``statements``), its text on the row its entry names (:data:`~.contract.history.STATEMENT_COLUMN`).

    :param staged: the files the manifest lists (the others of ``table.staged.files`` are the cascades').
    :param statements: the window's statements side file (None: the window recorded none).
    :param storage_options: storage options of the target store (where the cascades' before images are).
    """
    from pyspark.sql import functions as F

    source = pa.schema(schema.field(AFTER_COLUMN).type)
    staged_schema = with_before_images(table.staged_schema())
    staged_source = [f.name for f in staged_schema.field(BEFORE_COLUMN).type]
    frames = []
    cascaded = [f for f in table.staged.files if f not in staged]
    for flag, files in ((False, [f for f in table.staged.files if f in staged]), (True, cascaded)):
        if files:
            frame = read_staged_changes(spark, files, staged_schema)
            staged_before = F.struct(*conformed_columns(staged_source, list(source), col(BEFORE_COLUMN)))
            frames.append(
                frame.select(
                    *[col(f.name) for f in CHANGE_FIELDS],
                    F.lit(flag).alias(CASCADE_COLUMN),
                    _image(frame, source).alias(_IMAGE),
                    F.when(col(BEFORE_COLUMN).isNotNull(), staged_before).alias(_STAGED_BEFORE),
                )
            )
    rows = frames[0] if len(frames) == 1 else frames[0].unionByName(frames[1])
    op = col(OP_COLUMN)
    rows = rows.where(~((op == OP_DELETE) & col(_STAGED_BEFORE).isNotNull()))  # the delete of a moved row
    rows = _with_cascade_befores(spark, rows, table, cascaded, source, storage_options)
    if statements is not None:
        rows = _with_statements(spark, rows, statements, table.name)
    before = F.when(op == OP_DELETE, col(_IMAGE)).when(
        op == OP_UPDATE, F.coalesce(col(_STAGED_BEFORE), col(_CASCADE_BEFORE))
    )
    after = F.when(op.isin(OP_INSERT, OP_UPDATE, OP_SNAPSHOT), col(_IMAGE))
    return _shaped(rows, schema, before=before, after=after, seq=seq, run_id=run_id)


def with_before_images(staged: pa.Schema) -> pa.Schema:
    """Return a table's staged schema with the before images a table with history stages (:data:`BEFORE_COLUMN`).

    :param staged: the staged schema (:func:`~airflow_provider_binlog.jobs.merge.window.staged_schema`), whose
        source columns the before images hold; files staged without them read them as null.
    """
    return staged.append(pa.field(BEFORE_COLUMN, pa.struct(list(source_fields(staged)))))


def _with_cascade_befores(
    spark: SparkSession,
    rows: DataFrame,
    table: TablePlan,
    cascaded: list[str],
    source: pa.Schema,
    storage_options: StorageOptions | None,
) -> DataFrame:
    """Return ``rows`` with :data:`_CASCADE_BEFORE`: the before image of each update a cascade synthesised.

    ``cascaded`` are the table's synthesised change files (those of ``table.staged.files`` the manifest does not list).

    The cascade step writes them beside the table's synthesised changes
    (:func:`~airflow_provider_binlog.jobs.merge.cascades.before_images_file`), at the update's order key with the
    row's key; null where there is none (every other row, an update that moved the row's key: its ``d`` holds it).
    """
    from pyspark.sql import functions as F

    from airflow_provider_binlog.jobs.merge.cascades import before_images_file

    files = [before_images_file(f) for f in cascaded]
    files = [f for f in files if _exists(f, storage_options)]
    if not files or not table.keys:
        return rows.withColumn(_CASCADE_BEFORE, F.lit(None).cast(spark_type(pa.struct(list(source)))))
    frame = read_staged_changes(spark, files, table.staged_schema())
    keys = [f"__before_key{i}" for i in range(len(table.keys))]
    befores = frame.select(
        *[col(k).alias(alias) for k, alias in zip(table.keys, keys, strict=True)],
        col(WINDOW_COLUMN).alias("__before_window"),
        col(SEQ_COLUMN).alias("__before_seq"),
        _image(frame, source).alias(_CASCADE_BEFORE),
    )
    on = (col(WINDOW_COLUMN) == col("__before_window")) & (col(SEQ_COLUMN) == col("__before_seq"))
    on &= col(CASCADE_COLUMN) & (col(OP_COLUMN) == OP_UPDATE)
    for k, alias in zip(table.keys, keys, strict=True):
        on &= col(_IMAGE).getField(k) == col(alias)
    return rows.join(befores, on, "left").drop("__before_window", "__before_seq", *keys)


def _exists(uri: str, storage_options: StorageOptions | None) -> bool:
    """Return whether the file at ``uri`` exists."""
    import pyarrow.fs as pafs

    fs, path = filesystem_for(uri, storage_options)
    return fs.get_file_info(path).type == pafs.FileType.File


def _with_statements(spark: SparkSession, rows: DataFrame, statements: str, name: str) -> DataFrame:
    """Return ``rows`` with the statement position of their rows event and, on the row its entry names, its text.

    A rows event whose coordinates the side file gives several statements (a compressed MySQL transaction) gets
    none; a row a cascade synthesised gets its cause's statement (any table's entry), never its text.
    """
    from pyspark.sql import functions as F

    position, text = col(STATEMENT_POS_COLUMN), col(STATEMENT_COLUMN)
    ours = (col(STATEMENTS_TABLE_COLUMN) == name) & text.isNotNull()
    events = (
        spark.read.schema(spark_schema(STATEMENTS_SCHEMA))
        .parquet(statements)
        .groupBy(FILE_COLUMN, POS_COLUMN)
        .agg(
            F.min(position).alias("_first"),
            F.max(position).alias("_last"),
            F.max(F.when(ours, text)).alias("_text"),
            F.min(F.when(ours, col(SEQ_COLUMN))).alias("_text_seq"),
        )
        .select(
            col(FILE_COLUMN).alias("_statement_file"),
            col(POS_COLUMN).alias("_statement_event"),
            F.when(col("_first") == col("_last"), col("_first")).alias(STATEMENT_POS_COLUMN),
            F.when(col("_first") == col("_last"), col("_text")).alias("_text"),
            col("_text_seq"),
        )
    )
    on = (col(FILE_COLUMN) == col("_statement_file")) & (col(POS_COLUMN) == col("_statement_event"))
    joined = rows.join(events, on, "left")  # broadcast by Spark when small (a window's statements may not be)
    here = ~col(CASCADE_COLUMN) & (col(SEQ_COLUMN) == col("_text_seq"))
    return joined.withColumn(STATEMENT_COLUMN, F.when(here, col("_text"))).drop(
        "_statement_file", "_statement_event", "_text", "_text_seq"
    )


def _shaped(
    rows: DataFrame, schema: pa.Schema, *, before: Column, after: Column, seq: int, run_id: str
) -> DataFrame:
    """Select ``schema``'s columns from rows holding the change columns, ``_binlog_image`` and the cascade flag."""
    from pyspark.sql import functions as F

    image = pa.schema(schema.field(AFTER_COLUMN).type)
    computed = {
        MERGE_WINDOW_COLUMN: F.lit(seq),
        RUN_ID_COLUMN: F.lit(run_id),
        CASCADE_COLUMN: col(CASCADE_COLUMN),
        BEFORE_COLUMN: before,
        AFTER_COLUMN: after,
    }
    for name in (STATEMENT_POS_COLUMN, STATEMENT_COLUMN):
        if name not in rows.columns:  # no statement recorded (a snapshot read, a window without any)
            computed[name] = F.lit(None)
    columns = []
    for f in schema:
        if f.name in computed:
            value = computed[f.name]
        elif f.name in image.names and f.name not in METADATA_COLUMN_NAMES:  # a key column
            value = col(_IMAGE).getField(f.name)
        else:
            value = col(f.name)
        columns.append(value.cast(spark_type(f.type)).alias(f.name))
    return rows.select(*columns)


def target_rows(
    spark: SparkSession,
    target: str,
    name: str,
    schema: pa.Schema,
    keys: Sequence[str],
    *,
    pipeline: str,
    seq: int,
    run_id: str,
    version: int | None,
    storage_options: StorageOptions | None = None,
) -> tuple[DataFrame, int] | None:
    """Return the target's live rows of ``name`` as snapshot reads for a new change log, and its rows in all.

    None when the target has no rows, or holds the window already (a snapshot's first load writes the target
    before its merge: its rows are the window's); the count includes its tombstones (it sizes the write).

    Read at ``version``, the target's version before the window's merge, they are the table as the checkpoint
    left it: the history
    of a table whose change log starts after the target did starts at them, with the order keys, GTIDs and
    binlog coordinates of the changes that wrote them.
    """
    from pyspark.sql import functions as F

    from airflow_provider_binlog.jobs.merge.table import data_columns, spelled_keys

    dt = None if version is None else open_table(table_uri(target, name), storage_options)
    if dt is None or version is None:
        return None
    dt.load_as_version(version)  # the version the window's merge started from: it may be committing beside us
    if already_merged(dt, pipeline, seq):  # a snapshot's first load wrote the target first
        return None
    stored = data_columns(dt, delta_arrow_schema(dt))
    files = current_files(dt, spelled_keys(stored, keys))
    if not files:
        return None
    live = read_data_files(
        spark, dt.table_uri, files, stored, deleted=deleted_rows(dt, files, storage_options)
    )
    live = live.where(~F.coalesce(col(DELETED_COLUMN), F.lit(False)))
    source = pa.schema(schema.field(AFTER_COLUMN).type)
    rows = live.select(
        *[col(f.name) for f in CHANGE_FIELDS if f.name != OP_COLUMN],
        F.lit(OP_SNAPSHOT).alias(OP_COLUMN),
        F.lit(False).alias(CASCADE_COLUMN),
        _image(live, source).alias(_IMAGE),
    )
    log.info("%s: its change log starts with the target's live rows, as snapshot reads", name)
    shaped = _shaped(rows, schema, before=F.lit(None), after=col(_IMAGE), seq=seq, run_id=run_id)
    return shaped, sum(f.rows for f in files)


def _write(
    rows: DataFrame,
    dt: DeltaTable,
    uri: str,
    schema: pa.Schema,
    keys: Sequence[str],
    *,
    seq: int,
    count: int,
    storage_options: StorageOptions | None,
) -> list[PlacedFile]:
    """Write about ``count`` rows as new files sorted by key; return them, uncommitted."""
    from pyspark.sql import functions as F

    layout = file_layout(dt, keys, current_files(dt, keys))
    return write_sorted_files(
        rows.withColumn(SEGMENT_COLUMN, F.lit(0)),
        uri,
        schema,
        seq=seq,
        layout=layout,
        partitions=write_partitions(count, layout.rows_per_file),
        storage_options=storage_options,
        output_key=(dt.version(), "changelog"),
    )


def last_chain(dt: DeltaTable) -> str | None:
    """Return the chain value of the change log's newest digest-bearing commit, None when it has none.

    The newest commits are read first (most often the newest is one); the whole log only when none of them is.
    """
    for limit in (RECENT_COMMITS, None):
        for commit in dt.history(limit):
            if CHAIN_KEY in commit:
                return str(commit[CHAIN_KEY])
    return None


def commit_changelog(
    dt: DeltaTable,
    placed: Sequence[PlacedFile],
    *,
    pipeline: str,
    seq: int,
    storage_options: StorageOptions | None,
) -> dict[str, Any]:
    """Commit the new files with the window's app transactions and digests (see the module docstring).

    :raises MergeJobError: when other writers won :data:`COMMIT_ATTEMPTS` times in a row.
    """
    from deltalake.exceptions import CommitFailedError

    fs = filesystem_for(dt.table_uri, storage_options)[0]
    tables = [pq.read_table(p.location, filesystem=fs) for p in placed]
    rows = pa.concat_tables(tables, promote_options="permissive") if tables else pa.table({})
    digest = rows_digest(rows)
    try:
        for _ in range(COMMIT_ATTEMPTS):
            previous = last_chain(dt) or ""
            chain = chain_digest(previous, seq, digest)
            info = {
                COMMIT_PIPELINE_KEY: pipeline,
                COMMIT_WINDOW_KEY: seq,
                ROWS_KEY: rows.num_rows,
                DIGEST_KEY: digest,
                PREVIOUS_KEY: previous,
                CHAIN_KEY: chain,
            }
            try:
                commit_window(dt, [], placed, pipeline=pipeline, seq=seq, custom_metadata=info,
                              storage_options=storage_options)  # fmt: skip
            except CommitFailedError:
                dt.update_incremental()
                if already_merged(dt, pipeline, seq):
                    raise MergeJobError(
                        f"another merge wrote window {seq} into {dt.table_uri} at the same time"
                    ) from None
                continue
            dt.update_incremental()
            return {"rows": rows.num_rows, "files": len(placed), "delta_version": dt.version(), "digest": digest,
                    "chain": chain}  # fmt: skip
    except BaseException:
        remove_files(fs, [p.location for p in placed])
        raise
    remove_files(fs, [p.location for p in placed])
    raise MergeJobError(
        f"window {seq} could not be committed to {dt.table_uri}: other writers committed first {COMMIT_ATTEMPTS} "
        f"times (app transaction {window_app_id(pipeline, seq)}); the merge can be run again"
    )
