"""Read the target back: the live rows of a source table from its Delta Lake table.

The merge keeps one Delta table per source table at ``<target>/<db>/<table>/``. Besides the source
columns it holds the change metadata (``_binlog_*``), a tombstone flag ``_binlog_deleted`` (deleted rows
are kept until compaction) and the partition column ``_binlog_bucket``. Delta has no TIME or unsigned
types, so such columns are stored wider (TIME as ``int64`` microseconds, ``uint64`` as
``decimal(20, 0)``); the staged Arrow type is recorded in each column's metadata under
``binlog.arrow_type`` and :func:`read_table` casts back to it.

Other engines can read the tables directly (``deltalake``, ``polars.read_delta``, Spark with Delta, or
plain Parquet readers over :func:`live_file_uris`); they must filter on :data:`LIVE_ROWS_PREDICATE`
and may cast stored columns back with :func:`source_schema`.

Heavy libraries are imported inside the functions, so importing this module is cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from airflow_provider_binlog.exceptions import BinlogConfigError

if TYPE_CHECKING:
    from collections.abc import Iterable

    import pyarrow as pa
    from deltalake import DeltaTable

    from airflow_provider_binlog.state import PipelineState

#: SQL predicate selecting live rows (not tombstones) of a target table.
LIVE_ROWS_PREDICATE = "NOT _binlog_deleted"


def table_uri(target_path: str, table: str) -> str:
    """Return the location of the Delta table of source table ``db.table``: ``<target_path>/<db>/<table>``.

    :param target_path: target root, a local path (made absolute) or URI.
    :param table: qualified source table name; the first dot separates the database.
    :raises BinlogConfigError: if ``table`` is not qualified.
    """
    from airflow_provider_binlog.spark_jobs import merge

    try:
        return merge.table_uri(target_path, table)
    except merge.MergeJobError as err:
        raise BinlogConfigError(str(err)) from err


def target_root(target_path: str) -> str:
    """Return the target root as recorded in a pipeline's state: an absolute path or URI, no trailing ``/``."""
    from airflow_provider_binlog.spark_jobs import merge

    return merge.join_uri(target_path)


def check_target(
    pipeline: str,
    state: PipelineState | None,
    target_path: str,
    tables: Iterable[str],
    *,
    recreate: bool = False,
    storage_options: dict[str, str] | None = None,
) -> None:
    """Refuse to write ``tables`` of a pipeline under ``target_path`` when that would start a wrong table.

    Three mistakes are refused before anything is written (``docs/guarantees.md``, "A target table
    belongs to one pipeline"): a target root other than the one the pipeline's state records (a typo in
    the path would otherwise start new, partial tables there); a table another pipeline owns
    (:func:`~airflow_provider_binlog.spark_jobs.merge.check_owner`); and, unless ``recreate``, a table the
    pipeline has merged into before but that is gone (deleted or moved: the next window alone would
    create it anew with only its own rows).

    :param pipeline: the pipeline about to write.
    :param state: its state (None for a new pipeline).
    :param target_path: the target root the task was given.
    :param tables: the ``db.table`` names about to be written.
    :param recreate: True for a snapshot, which loads a table whole and may create it again.
    :param storage_options: deltalake storage options.
    :raises BinlogConfigError: naming the mistake and the remedy.
    """
    from airflow_provider_binlog.spark_jobs import merge

    root = target_root(target_path)
    if state is not None and state.target is not None and state.target != root:
        raise BinlogConfigError(
            f"pipeline {state.pipeline!r} keeps its target tables under {state.target}, but this task was given "
            f"{root}. Nothing was written. If the path is a typo, fix BINLOG_CDC_TARGET / target_path. To move the "
            f"target deliberately, copy the table folders under {state.target} to {root}, then run "
            f"python -m airflow_provider_binlog.state_admin set-target --pipeline {state.pipeline} --target {root}"
        )
    for table in tables:
        dt = merge.open_table(table_uri(target_path, table), storage_options)
        if dt is not None:
            try:
                merge.check_owner(dt, pipeline, table)
            except merge.MergeJobError as err:
                raise BinlogConfigError(str(err)) from err
        elif state is not None and table in state.target_tables and not recreate:
            raise BinlogConfigError(
                f"pipeline {state.pipeline!r} has merged changes of {table} into {table_uri(target_path, table)}, "
                f"but there is no Delta table there any more (deleted or moved). Nothing was written: a window "
                f"alone would create it anew with only its own rows. To load it again deliberately, re-snapshot it: "
                f'trigger binlog_resnapshot with {{"pipeline": "{state.pipeline}", "tables": "{table}", '
                f'"mode": "requested"}}.'
            )


def hand_over(
    target_path: str, table: str, to_pipeline: str, *, storage_options: dict[str, str] | None = None
) -> list[str]:
    """Give the Delta table of ``table`` to ``to_pipeline``: remove every row, then record the new owner.

    The rows go because the new owner's order keys are unrelated to the old owner's: only a snapshot the
    new owner takes afterwards makes the table exact again (readers see it empty until then). Two
    commits, rows first: a crash in between leaves an empty table still owned by the old pipeline, and
    running the hand-over again completes it.

    :param target_path: target root.
    :param table: ``db.table``.
    :param to_pipeline: the new owner.
    :param storage_options: deltalake storage options.
    :returns: the pipelines that had written the table.
    :raises BinlogConfigError: when there is no such table.
    """
    from deltalake import CommitProperties

    from airflow_provider_binlog.spark_jobs import merge

    dt = open_table(target_path, table, storage_options=storage_options)
    writers = merge.table_writers(dt)
    dt.delete(commit_properties=CommitProperties(custom_metadata={"binlog.handed_over_to": to_pipeline}))
    dt.alter.set_table_properties({merge.OWNER_PROPERTY: to_pipeline}, raise_if_not_exists=False)
    return writers


def open_table(target_path: str, table: str, *, storage_options: dict[str, str] | None = None) -> DeltaTable:
    """Open the Delta table of a source table.

    :param target_path: target root.
    :param table: qualified source table name ``db.table``.
    :param storage_options: deltalake storage options (credentials, endpoints) for object stores.
    :raises BinlogConfigError: if there is no Delta table for ``table`` under ``target_path``.
    """
    from deltalake import DeltaTable

    uri = table_uri(target_path, table)
    options = dict(storage_options or {})
    if not DeltaTable.is_deltatable(uri, storage_options=options):
        raise BinlogConfigError(
            f"there is no Delta table for {table} at {uri}: check the target path, or no window with "
            "changes of this table has been merged yet"
        )
    return DeltaTable(uri, storage_options=options)


def live_file_uris(
    target_path: str, table: str, *, storage_options: dict[str, str] | None = None
) -> list[str]:
    """Return the data files of the table's current version, for engines that read plain Parquet.

    The files hold tombstones too: filter on :data:`LIVE_ROWS_PREDICATE`. They do not hold the partition
    column ``_binlog_bucket`` (it lives in the Delta log, and in the ``_binlog_bucket=<n>`` folder names
    for hive-partitioning readers). Files written before a column was added lack it (read by name, e.g.
    DuckDB's ``union_by_name``).

    :param target_path: target root.
    :param table: qualified source table name ``db.table``.
    :param storage_options: deltalake storage options.
    :raises BinlogConfigError: if the table does not exist.
    """
    return list(open_table(target_path, table, storage_options=storage_options).file_uris())


def source_schema(
    target_path: str,
    table: str,
    *,
    with_metadata: bool = False,
    storage_options: dict[str, str] | None = None,
) -> pa.Schema:
    """Return the table's columns with the Arrow types they were staged with.

    :param target_path: target root.
    :param table: qualified source table name ``db.table``.
    :param with_metadata: include the ``_binlog_*`` columns.
    :param storage_options: deltalake storage options.
    :raises BinlogConfigError: if the table does not exist.
    """
    import pyarrow as pa

    from airflow_provider_binlog.spark_jobs import merge

    stored = merge.delta_arrow_schema(open_table(target_path, table, storage_options=storage_options))
    return pa.schema(
        [
            pa.field(f.name, merge.recorded_arrow_type(f), nullable=True)
            for f in stored
            if with_metadata or f.name not in merge.METADATA_COLUMN_NAMES
        ]
    )


def read_table(
    target_path: str,
    table: str,
    *,
    with_metadata: bool = False,
    include_tombstones: bool = False,
    storage_options: dict[str, str] | None = None,
) -> pa.Table:
    """Return the live rows of source table ``db.table`` with the column types it was staged with.

    Rows come in no particular order. Columns come in table order (source columns, then columns added
    by later windows; with ``with_metadata`` the ``_binlog_*`` columns too).

    :param target_path: target root (local path or URI).
    :param table: qualified source table name ``db.table``.
    :param with_metadata: include ``_binlog_op``, ``_binlog_window``, ``_binlog_seq``, ``_binlog_gtid``,
        ``_binlog_file``, ``_binlog_pos``, ``_binlog_ts``, ``_binlog_deleted`` and ``_binlog_bucket``.
    :param include_tombstones: include deleted rows (``_binlog_deleted`` true; they hold the row's last
        image before the delete).
    :param storage_options: deltalake storage options for object stores.
    :raises BinlogConfigError: if the table does not exist or ``table`` is not qualified.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    from airflow_provider_binlog.spark_jobs import merge

    dt = open_table(target_path, table, storage_options=storage_options)
    stored = merge.delta_arrow_schema(dt)
    data = dt.to_pyarrow_table()
    if not include_tombstones:
        data = data.filter(pc.invert(pc.fill_null(data[merge.DELETED_COLUMN], False)))
    fields = [f for f in stored if with_metadata or f.name not in merge.METADATA_COLUMN_NAMES]
    schema = pa.schema([pa.field(f.name, merge.recorded_arrow_type(f), nullable=True) for f in fields])
    columns = [data[f.name].cast(schema.field(f.name).type) for f in fields]
    return pa.Table.from_arrays(columns, schema=schema)
