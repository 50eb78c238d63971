"""Read the target back: the live rows of a source table from its Delta Lake table.

The merge keeps one Delta table per source table at ``<target>/<db>/<table>/``. Besides the source
columns it holds the change metadata (``_binlog_*``), a tombstone flag ``_binlog_deleted`` (deleted rows
are kept until compaction); data files are laid out by primary-key range (ADR 0020; tables created before
it keep their ``_binlog_bucket`` partition column). Delta has no TIME or unsigned
types, so such columns are stored wider (TIME as ``int64`` microseconds, ``uint64`` as
``decimal(20, 0)``); the staged Arrow type is recorded in each column's metadata under
``binlog.arrow_type`` and :func:`read_table` casts back to it.

Other engines can read the tables directly (``deltalake``, ``polars.read_delta``, Spark with Delta, or
plain Parquet readers over :func:`live_file_uris`); they must filter on :data:`LIVE_ROWS_PREDICATE`
and may cast stored columns back with :func:`source_schema`.

This module is the read side of the target for Airflow tasks and users: it opens tables through the
contract's one opener (:func:`~airflow_provider_binlog.contract.delta.open_table`) with the same storage
options the merge used, and turns contract errors into :class:`~airflow_provider_binlog.exceptions.BinlogConfigError`.
deltalake is imported inside the functions that open a table.
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING

from airflow_provider_binlog.contract import ContractError, uris
from airflow_provider_binlog.contract import delta as contract_delta
from airflow_provider_binlog.contract.columns import DELETED_COLUMN, METADATA_COLUMN_NAMES
from airflow_provider_binlog.contract.delta_log import file_vectors, live_rows
from airflow_provider_binlog.contract.names import split_table_name
from airflow_provider_binlog.contract.remedies import resnapshot_remedy
from airflow_provider_binlog.contract.rows import first_of_each_key
from airflow_provider_binlog.contract.types import recorded_arrow_type
from airflow_provider_binlog.exceptions import (
    BinlogConfigError,
    QuarantinedTableError,
    QuarantinedTableWarning,
)

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence
    from typing import Any

    import pyarrow as pa
    from deltalake import DeltaTable

    from airflow_provider_binlog.contract.uris import StorageOptions
    from airflow_provider_binlog.pipeline.ledger import PipelineState

#: SQL predicate selecting live rows (not tombstones) of a target table.
LIVE_ROWS_PREDICATE = "NOT _binlog_deleted"


def table_uri(target_path: str, table: str) -> str:
    """Return the location of the Delta table of source table ``db.table``: ``<target_path>/<db>/<table>``.

    :param target_path: target root, a local path (made absolute) or URI.
    :param table: qualified source table name; the first dot separates the database.
    :raises BinlogConfigError: if ``table`` is not qualified.
    """
    try:
        return uris.table_uri(target_path, table)
    except ContractError as err:
        raise BinlogConfigError(str(err)) from err


def target_root(target_path: str) -> str:
    """Return the target root as recorded in a pipeline's state: an absolute path or URI, no trailing ``/``."""
    return uris.join_uri(target_path)


def check_target(
    pipeline: str,
    state: PipelineState | None,
    target_path: str,
    tables: Iterable[str],
    *,
    recreate: bool = False,
    storage_options: StorageOptions | None = None,
) -> None:
    """Refuse to write ``tables`` of a pipeline under ``target_path`` when that would start a wrong table.

    Three mistakes are refused before anything is written (``docs/guarantees.md``, "A target table
    belongs to one pipeline"): a target root other than the one the pipeline's state records (a typo in
    the path would otherwise start new, partial tables there); a table another pipeline owns
    (:func:`~airflow_provider_binlog.contract.delta.check_owner`); and, unless ``recreate``, a table the
    pipeline has merged into before but that is gone (deleted or moved: the next window alone would
    create it anew with only its own rows).

    :param pipeline: the pipeline about to write.
    :param state: its state (None for a new pipeline).
    :param target_path: the target root the task was given.
    :param tables: the ``db.table`` names about to be written.
    :param recreate: True for a snapshot, which loads a table whole and may create it again.
    :param storage_options: storage options of the target store.
    :raises BinlogConfigError: naming the mistake and the remedy.
    """
    root = target_root(target_path)
    if state is not None and state.target is not None and state.target != root:
        raise BinlogConfigError(
            f"pipeline {state.pipeline!r} keeps its target tables under {state.target}, but this task was given "
            f"{root}. Nothing was written. If the path is a typo, fix BINLOG_CDC_TARGET / target_path. To move the "
            f"target deliberately, copy the table folders under {state.target} to {root}, then run "
            f"python -m airflow_provider_binlog.admin set-target --pipeline {state.pipeline} --target {root}"
        )
    for table in tables:
        dt = contract_delta.open_table(table_uri(target_path, table), storage_options)
        if dt is not None:
            try:
                contract_delta.check_owner(dt, pipeline, table)
            except ContractError as err:
                raise BinlogConfigError(str(err)) from err
        elif state is not None and table in state.target_tables and not recreate:
            _check_not_moved(state.pipeline, target_path, table, storage_options)
            raise BinlogConfigError(
                f"pipeline {state.pipeline!r} has merged changes of {table} into {table_uri(target_path, table)}, "
                f"but there is no Delta table there any more (deleted or moved). Nothing was written: a window "
                f"alone would create it anew with only its own rows. To load it again deliberately, re-snapshot it: "
                f"{resnapshot_remedy(state.pipeline, table)}."
            )


def _check_not_moved(
    pipeline: str, target_path: str, table: str, storage_options: StorageOptions | None
) -> None:
    """Refuse with the move that fixes it when the table's Delta table is at its pre-0.x folder.

    Before names were escaped (``contract/names.py``), a table whose name is not ordinary (a space, a
    non-ASCII letter ...) had the folder ``<target>/<db>/<table>`` spelled as the name. Such a table is not
    moved automatically (a move of a Delta table on an object store is a copy of every file).

    :raises BinlogConfigError: when the old folder holds the table.
    """
    db, name = split_table_name(table)
    if "/" in db + name or "\\" in db + name or {db, name} & {".", ".."}:
        return  # such a name never had a folder of its own
    old = uris.join_uri(target_path, db, name)
    if old != table_uri(target_path, table) and contract_delta.open_table(old, storage_options) is not None:
        raise BinlogConfigError(
            f"pipeline {pipeline!r} keeps {table} at {table_uri(target_path, table)} now (names that are not plain "
            f"letters, digits, _ $ - and dots are escaped, docs/security.md), but its Delta table is still at "
            f"{old}. Nothing was written. Move the folder {old} to {table_uri(target_path, table)} (a rename on "
            f"local disk; a copy of the folder on an object store), then run the task again."
        )


def hand_over(
    target_path: str, table: str, to_pipeline: str, *, storage_options: StorageOptions | None = None
) -> list[str]:
    """Give the Delta table of ``table`` to ``to_pipeline``: remove every row, then record the new owner.

    The rows go because the new owner's order keys are unrelated to the old owner's: only a snapshot the
    new owner takes afterwards makes the table exact again (readers see it empty until then). Two
    commits, rows first: a crash in between leaves an empty table still owned by the old pipeline, and
    running the hand-over again completes it.

    :param target_path: target root.
    :param table: ``db.table``.
    :param to_pipeline: the new owner.
    :param storage_options: storage options of the target store.
    :returns: the pipelines that had written the table.
    :raises BinlogConfigError: when there is no such table.
    """
    from deltalake import CommitProperties

    dt = open_table(target_path, table, storage_options=storage_options)
    writers = contract_delta.table_writers(dt)
    dt.delete(commit_properties=CommitProperties(custom_metadata={"binlog.handed_over_to": to_pipeline}))
    dt.alter.set_table_properties({contract_delta.OWNER_PROPERTY: to_pipeline}, raise_if_not_exists=False)
    return writers


def open_table(target_path: str, table: str, *, storage_options: StorageOptions | None = None) -> DeltaTable:
    """Open the Delta table of a source table (:func:`~airflow_provider_binlog.contract.delta.open_table`).

    :param target_path: target root.
    :param table: qualified source table name ``db.table``.
    :param storage_options: storage options (credentials, endpoints) for object stores
        (:mod:`airflow_provider_binlog.contract.uris`).
    :raises BinlogConfigError: if there is no Delta table for ``table`` under ``target_path``.
    """
    uri = table_uri(target_path, table)
    dt = contract_delta.open_table(uri, storage_options)
    if dt is None:
        raise BinlogConfigError(
            f"there is no Delta table for {table} at {uri}: check the target path, or no window with "
            "changes of this table has been merged yet"
        )
    return dt


def window_merged(
    target_path: str, table: str, pipeline: str, seq: int, storage_options: StorageOptions | None = None
) -> bool:
    """Return True when the table's Delta log holds the merge commit of window ``seq`` of ``pipeline``.

    The merge job records each window as the Delta app transaction
    :func:`~airflow_provider_binlog.contract.delta.window_app_id` in the same commit as its data (Delta
    protocol, "Transaction Identifiers").

    :param target_path: target root.
    :param table: ``db.table``.
    :param pipeline: pipeline name.
    :param seq: window sequence number.
    :param storage_options: storage options of the target store.
    """
    dt = contract_delta.open_table(table_uri(target_path, table), storage_options)
    return dt is not None and contract_delta.already_merged(dt, pipeline, seq)


def live_file_uris(
    target_path: str, table: str, *, storage_options: StorageOptions | None = None
) -> list[str]:
    """Return the data files of the table's current version, for engines that read plain Parquet.

    The files hold tombstones too: filter on :data:`LIVE_ROWS_PREDICATE`. They do not hold the partition
    column ``_binlog_bucket`` (it lives in the Delta log, and in the ``_binlog_bucket=<n>`` folder names
    for hive-partitioning readers). Files written before a column was added lack it (read by name, e.g.
    DuckDB's ``union_by_name``).

    :param target_path: target root.
    :param table: qualified source table name ``db.table``.
    :param storage_options: deltalake storage options.
    :raises BinlogConfigError: if the table does not exist, or its files have deletion vectors (rows of them
        are deleted: read it with :func:`read_table`, deltalake's ``DeltaTable.scan``, Polars, or Spark with
        delta-spark; a compaction leaves none).
    """
    dt = open_table(target_path, table, storage_options=storage_options)
    if file_vectors(dt, storage_options):
        raise BinlogConfigError(
            f"{table}: some data files of {dt.table_uri} have deletion vectors (merge-on-read), so plain Parquet "
            "readers would see deleted rows; read it with target.read_table, deltalake's DeltaTable.scan, Polars "
            "or Spark with delta-spark, or compact it first (BinlogMaintenanceOperator, compact=True)"
        )
    return list(dt.file_uris())


def source_schema(
    target_path: str,
    table: str,
    *,
    with_metadata: bool = False,
    storage_options: StorageOptions | None = None,
) -> pa.Schema:
    """Return the table's columns with the Arrow types they were staged with.

    :param target_path: target root.
    :param table: qualified source table name ``db.table``.
    :param with_metadata: include the ``_binlog_*`` columns.
    :param storage_options: deltalake storage options.
    :raises BinlogConfigError: if the table does not exist.
    """
    stored = contract_delta.delta_arrow_schema(
        open_table(target_path, table, storage_options=storage_options)
    )
    return _staged_schema(stored, with_metadata=with_metadata)


def _staged_schema(stored: pa.Schema, *, with_metadata: bool) -> pa.Schema:
    """Return a Delta table's columns (Arrow, with metadata) with the Arrow types they were staged with."""
    import pyarrow as pa

    return pa.schema(
        [
            pa.field(f.name, recorded_arrow_type(f), nullable=True)
            for f in stored
            if with_metadata or f.name not in METADATA_COLUMN_NAMES
        ]
    )


def read_table(
    target_path: str,
    table: str,
    *,
    with_metadata: bool = False,
    include_tombstones: bool = False,
    storage_options: StorageOptions | None = None,
    allow_quarantined: bool = True,
    version: int | None = None,
    as_of: dt.datetime | None = None,
) -> pa.Table:
    """Return the live rows of source table ``db.table`` with the column types it was staged with.

    A quarantined table (:data:`~airflow_provider_binlog.contract.delta.QUARANTINE_PROPERTY`) holds the
    source's rows as of where it stopped, not the pipeline's checkpoint: reading it warns
    (:class:`~airflow_provider_binlog.exceptions.QuarantinedTableWarning`), or raises with
    ``allow_quarantined=False``.

    Rows come in no particular order. Columns come in table order (source columns, then columns added
    by later windows; with ``with_metadata`` the ``_binlog_*`` columns too).

    :param target_path: target root (local path or URI).
    :param table: qualified source table name ``db.table``.
    :param with_metadata: include ``_binlog_op``, ``_binlog_window``, ``_binlog_seq``, ``_binlog_gtid``,
        ``_binlog_file``, ``_binlog_pos``, ``_binlog_ts``, ``_binlog_deleted`` and ``_binlog_bucket``.
    :param include_tombstones: include deleted rows (``_binlog_deleted`` true; they hold the row's last
        image before the delete).
    :param storage_options: deltalake storage options for object stores.
    :param allow_quarantined: False raises instead of warning when the table is quarantined.
    :param version: the Delta version to read (None: the current one); :func:`read_tables` finds the version
        that holds a given window.
    :param as_of: read the table as it was at this commit time (timezone-aware) from its SCD2 table
        (``history="scd2"``, :func:`rows_as_of`), not the current-state table.
    :raises BinlogConfigError: if the table does not exist or ``table`` is not qualified.
    :raises QuarantinedTableError: if the table is quarantined and ``allow_quarantined`` is False.
    """
    if as_of is not None and (with_metadata or include_tombstones):
        raise BinlogConfigError(
            "as_of reads the live rows of the SCD2 table: read its versions with their _binlog_* columns from "
            "its Delta table instead of with_metadata or include_tombstones (docs/history.md)"
        )
    dt = open_table(target_path, table, storage_options=storage_options)
    if version is not None:
        dt.load_as_version(version)
    check_quarantine(dt, table, allow=allow_quarantined)
    if as_of is not None:
        data = rows_as_of(target_path, table, as_of, storage_options=storage_options)
    else:
        data = live_rows(dt)
    return _staged_rows(data, contract_delta.delta_arrow_schema(dt), with_metadata, include_tombstones)


def _staged_rows(
    data: pa.Table, stored: pa.Schema, with_metadata: bool, include_tombstones: bool
) -> pa.Table:
    """Return a table's rows (``data``, tombstones included) in the columns and types they were staged with."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if not include_tombstones:
        data = data.filter(pc.invert(pc.fill_null(data[DELETED_COLUMN], False)))
    schema = _staged_schema(stored, with_metadata=with_metadata)
    columns = [
        data[f.name].cast(f.type) if f.name in data.column_names else pa.nulls(data.num_rows, f.type)
        for f in schema
    ]
    return pa.Table.from_arrays(columns, schema=schema)


def rows_as_of(
    target_path: str, table: str, as_of: dt.datetime, *, storage_options: StorageOptions | None = None
) -> pa.Table:
    """Return the rows ``db.table`` held at commit time ``as_of``, from its SCD2 table (``docs/history.md``).

    For each key, the version with the highest order key among those that started at or before ``as_of``; it is
    live unless a delete, truncate or re-snapshot ended it at or before ``as_of``. (Order keys, not times, decide:
    a snapshot's row is read after the changes that follow it in order were committed.)

    :returns: the source columns as stored, with ``_binlog_deleted`` false, as :func:`live_rows` gives them.
    :raises BinlogConfigError: if the table keeps no SCD2 table, ``as_of`` is naive, or its history starts later.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    from airflow_provider_binlog.contract.history import (
        ENDED_BY_COLUMN,
        VALID_FROM_COLUMN,
        VALID_TO_COLUMN,
        scd2_uri,
    )

    if as_of.tzinfo is None:
        raise BinlogConfigError(f"as_of={as_of!r} has no time zone: pass an aware datetime (UTC)")
    history = contract_delta.open_table(scd2_uri(target_path, table), storage_options)
    if history is None:
        raise BinlogConfigError(
            f"{table} keeps no SCD2 table ({scd2_uri(target_path, table)}): give its pipeline history='scd2' "
            "(docs/history.md) to read it as of a time; its history starts at the next window merged"
        )
    versions = history.to_pyarrow_table()
    first = pc.min(versions[VALID_FROM_COLUMN]).as_py()
    if first is None or as_of < first:
        raise BinlogConfigError(f"the history of {table} starts at {first}, after as_of={as_of.isoformat()}")
    keys = contract_delta.table_key(history) or []
    moment = pa.scalar(as_of, pa.timestamp("us", tz="UTC"))
    started = versions.filter(pc.less_equal(versions[VALID_FROM_COLUMN], moment))
    ordered = started.sort_by([*((k, "ascending") for k in keys), ("_binlog_window", "descending"),
                               ("_binlog_seq", "descending")])  # fmt: skip
    newest = first_of_each_key(ordered, keys)
    ended = pc.and_kleene(
        pc.is_in(newest[ENDED_BY_COLUMN], pa.array(["d", "t", "r"])),
        pc.less_equal(newest[VALID_TO_COLUMN], moment),
    )
    live = newest.filter(pc.invert(pc.fill_null(ended, False)))
    return live.append_column(DELETED_COLUMN, pa.array([False] * live.num_rows, pa.bool_()))


def window_version(dt: DeltaTable, window: int, *, pipeline: str | None = None) -> int:
    """Return the version of a target table that holds the windows up to ``window`` and none after it.

    That is the version before the first commit of a later window (the merge records each window's seq in its
    commit info, :data:`~airflow_provider_binlog.contract.delta.COMMIT_WINDOW_KEY`), else the current version;
    version 0 (the empty table) when the table's first window came later.

    :param dt: the table.
    :param window: a window (or snapshot) seq of the pipeline.
    :param pipeline: count only this pipeline's commits (None: any).
    :raises BinlogConfigError: when windows were merged out of order around ``window`` (an interval backfill of an
        older interval after a newer one): no version holds exactly the windows up to it.
    """
    commits = sorted(
        (int(c["version"]), int(c[contract_delta.COMMIT_WINDOW_KEY]))
        for c in dt.history()
        if contract_delta.COMMIT_WINDOW_KEY in c
        and (pipeline is None or c.get(contract_delta.COMMIT_PIPELINE_KEY) == pipeline)
    )
    later = [v for v, w in commits if w > window]
    if not later:
        return dt.version()
    stray = [w for v, w in commits if w <= window and v > later[0]]
    if stray:
        raise BinlogConfigError(
            f"{dt.table_uri}: window {stray[0]} was merged after window "
            f"{next(w for v, w in commits if v == later[0])}, so no version holds exactly the windows up to "
            f"{window}; read a window merged after the backfill, or the current version"
        )
    return later[0] - 1


def read_tables(
    target_path: str,
    tables: Sequence[str],
    *,
    window: int,
    pipeline: str | None = None,
    storage_options: StorageOptions | None = None,
) -> dict[str, pa.Table]:
    """Return the live rows of several tables as of the same committed window, by ``db.table``.

    Each table is read at its version holding the windows up to ``window`` (:func:`window_version`), so a reader
    joining two tables never sees one a window ahead of the other, which reading each table's current version
    does not promise while a merge is committing table by table. A table created by a later window reads empty.

    :param target_path: target root.
    :param tables: ``db.table`` names.
    :param window: a window seq the pipeline committed (the ledger's ``seq``; a snapshot's seq too).
    :param pipeline: the pipeline whose windows count (None: any that wrote the tables).
    :param storage_options: storage options of the target store.
    :raises BinlogConfigError: if a table does not exist, or its windows were merged out of order around ``window``.
    """
    found = {}
    for name in tables:
        dt = open_table(target_path, name, storage_options=storage_options)
        version = window_version(dt, window, pipeline=pipeline)
        if version != dt.version():
            dt.load_as_version(version)
        check_quarantine(dt, name)
        found[name] = _staged_rows(live_rows(dt), contract_delta.delta_arrow_schema(dt), False, False)
    return found


def check_quarantine(dt: DeltaTable, table: str, *, allow: bool = True) -> None:
    """Warn (or, unless ``allow``, raise) when the Delta table of ``table`` is quarantined.

    :raises QuarantinedTableError: if it is and ``allow`` is False.
    """
    import warnings

    record = contract_delta.quarantine_of(dt)
    if record is None:
        return
    message = (
        f"{table} is quarantined since {record.get('since')} (GTID {record.get('gtid') or 'unknown'}, window "
        f"{record.get('window')}): {record.get('reason')}. Its rows are the source's as of then, not as of the "
        f"pipeline's checkpoint; it heals by a re-snapshot (docs/operating.md, 'Quarantined tables')."
    )
    if not allow:
        raise QuarantinedTableError(message)
    warnings.warn(message, QuarantinedTableWarning, stacklevel=3)


def mark_quarantines(
    target_path: str,
    records: Mapping[str, Mapping[str, Any] | None],
    storage_options: StorageOptions | None = None,
) -> None:
    """Set (or, for None, clear) the quarantine property of each table's Delta table that exists.

    :param records: ``{"db.table": record or None}`` (:func:`~airflow_provider_binlog.pipeline.quarantine.quarantine_record`);
        a table whose property already says the same gets no commit.
    """
    for table, record in sorted(records.items()):
        dt = contract_delta.open_table(table_uri(target_path, table), storage_options)
        if dt is not None:
            contract_delta.mark_quarantine(dt, None if record is None else dict(record))
