"""The staged window as the merge reads it: its tables, their keys, and their schemas.

The manifest (:mod:`airflow_provider_binlog.contract.manifest`) says which files hold which table; the
Parquet footers say the staged Arrow schema (:func:`read_footers`, :func:`staged_schema`), which
:func:`target_schema` maps to the Delta table's. The window's plan (:mod:`~airflow_provider_binlog.jobs.merge.plan`)
reads them once per window.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from airflow_provider_binlog.contract import ContractError
from airflow_provider_binlog.contract.columns import (
    CHANGE_COLUMN_NAMES,
    CHANGE_FIELDS,
    DELETED_COLUMN,
    OP_TRUNCATE,
    REQUIRED_CHANGE_COLUMNS,
)
from airflow_provider_binlog.contract.history import BEFORE_COLUMN
from airflow_provider_binlog.contract.keys import resolve_keys
from airflow_provider_binlog.contract.manifest import Manifest, only_markers, require_manifest
from airflow_provider_binlog.contract.manifest import has_changes as stages_changes
from airflow_provider_binlog.contract.types import (
    ARROW_TYPE_KEY,
    MYSQL_TYPE_KEY,
    is_lossless_widening,
    parse_arrow_type,
    storage_type,
)
from airflow_provider_binlog.contract.uris import StorageOptions, filesystem_for, join_uri
from airflow_provider_binlog.jobs.application import MergeJobError
from airflow_provider_binlog.jobs.merge.schema import UnfollowableSchemaChange

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StagedTable:
    """One source table of a staged window.

    :param name: qualified name ``db.table``.
    :param files: absolute locations of the table's Parquet change files.
    :param rows: number of change rows the manifest announces.
    :param primary_key: primary key columns from the manifest (empty for tables without one).
    :param columns: the manifest's column descriptions (``name``, ``mysql_type``, ``arrow_type``).
    :param refresh: the rows are a snapshot of the whole table: target rows older than the window whose
        key is not among them become tombstones (see :func:`~airflow_provider_binlog.jobs.merge.transforms.apply_window`).
    :param markers: truncate markers among the rows (the manifest's ``ops``; see
        :mod:`~airflow_provider_binlog.jobs.merge.truncate`).
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
        """Return whether every staged row is a truncate marker (:func:`~airflow_provider_binlog.contract.manifest.only_markers`).

        Cascades add rows to a table (:mod:`~airflow_provider_binlog.jobs.merge.cascades`), so this counts
        :attr:`rows` with theirs, not the manifest's entry.
        """
        return only_markers(self.markers, self.rows)


@dataclass(frozen=True)
class StagedWindow:
    """A complete staged window (its manifest was written).

    :param uri: window directory.
    :param pipeline: pipeline name from the manifest.
    :param seq: window sequence number.
    :param tables: staged tables in manifest order.
    :param manifest: the manifest they come from (its foreign keys, ops and DDL).
    """

    uri: str
    pipeline: str
    seq: int
    tables: tuple[StagedTable, ...]
    manifest: Manifest


def staged_window(window_uri: str, manifest: Manifest) -> StagedWindow:
    """Return the window a manifest stages, its file names resolved against the window folder.

    :param window_uri: the folder the manifest was read from.
    :param manifest: the validated manifest.
    """
    tables = tuple(
        StagedTable(
            name=name,
            files=tuple(join_uri(window_uri, f) for f in entry.files),
            rows=entry.rows,
            primary_key=entry.primary_key,
            columns=entry.columns,
            refresh=manifest.is_snapshot,
            markers=entry.ops.get(OP_TRUNCATE, 0),
        )
        for name, entry in manifest.tables.items()
    )
    return StagedWindow(
        uri=window_uri, pipeline=manifest.pipeline, seq=manifest.window, tables=tables, manifest=manifest
    )


def load_window(window_uri: str, storage_options: StorageOptions | None = None) -> StagedWindow:
    """Read and validate the staged window at ``window_uri``.

    :param window_uri: window folder ``<staging>/<pipeline>/window=<seq>`` (or a snapshot folder).
    :param storage_options: storage options of the staging store.
    :raises ManifestMissingError: if the window is incomplete (no manifest).
    :raises ManifestError: if its manifest is not valid.
    """
    return staged_window(window_uri, require_manifest(window_uri, storage_options))


def has_changes(table: StagedTable) -> bool:
    """Return whether a staged table has anything to merge (:func:`~airflow_provider_binlog.contract.manifest.has_changes`)."""
    return stages_changes(table.files, table.rows, snapshot=table.refresh)


def window_keys(
    tables: Sequence[StagedTable], overrides: Mapping[str, Sequence[str]] | None = None, *, window: int
) -> dict[str, tuple[str, ...]]:
    """Return the merge key of every table with changes (:func:`~airflow_provider_binlog.contract.keys.resolve_keys`).

    :param tables: the window's tables with the cascades' changes added (a child may have changes only
        through them).
    :param overrides: user-named keys of tables without a primary key, by ``db.table``.
    :param window: the window's seq, for messages.
    :raises MergeKeyError: naming the table, if a table has no key or an override contradicts its key.
    """
    # A table with only truncate markers merges by its Delta table's own key (Manifest.keyed_tables, the
    # operator's side).
    return resolve_keys(
        {t.name: t.primary_key for t in tables if has_changes(t) and not t.markers_only},
        overrides,
        window=window,
    )


def read_footers(
    files: Sequence[str], storage_options: StorageOptions | None = None
) -> tuple[pa.Schema, ...]:
    """Read the Arrow schemas of staged Parquet files from their footers (one small read per file).

    :param files: locations of staged change files.
    :param storage_options: storage options of the staging store.
    :returns: one schema per file, in the order of ``files``.
    :raises MergeJobError: naming the file, if a footer cannot be read.
    """
    schemas = []
    for uri in files:
        fs, path = filesystem_for(uri, storage_options)
        try:
            schemas.append(pq.read_schema(path, filesystem=fs))
        except (OSError, pa.ArrowException) as err:
            raise MergeJobError(f"cannot read the Parquet footer of staged file {uri}: {err}") from err
    return tuple(schemas)


def staged_schema(
    table: str, footers: Sequence[pa.Schema], columns: Sequence[Mapping[str, Any]] = (), *, pipeline: str
) -> pa.Schema:
    """Return the Arrow schema of a table's staged files, from their footers (:func:`read_footers`).

    The files of one window normally share one schema; if a DDL in the window changed it, the schemas
    are unified: new columns are added and each column gets the widest of its types
    (:func:`is_lossless_widening`). The source columns come in the manifest's column order, then the change
    metadata columns. A table with history also stages before images
    (:data:`~airflow_provider_binlog.contract.history.BEFORE_COLUMN`): they are for its history tables only, and
    left out.

    :param table: the table's ``db.table``, for messages.
    :param footers: the schemas of its staged files (at least one).
    :param columns: the manifest's column descriptions (their order).
    :param pipeline: the pipeline merging the window, for messages.
    :raises UnfollowableSchemaChange: if a column's type changed within the window to one that is neither
        wider nor narrower (INT -> VARCHAR).
    :raises MergeJobError: if the footers conflict otherwise or change metadata columns are missing.
    """
    footers = [_without_before_images(schema) for schema in footers]
    widest: dict[str, pa.DataType] = {}
    for f in (f for schema in footers for f in schema):
        have = widest.setdefault(f.name, f.type)
        if is_lossless_widening(have, f.type):
            widest[f.name] = f.type
        elif not is_lossless_widening(f.type, have):
            raise UnfollowableSchemaChange(
                pipeline=pipeline,
                table=table,
                column=f.name,
                detail=f"changed type within the window from {have} to {f.type}, which is neither a widening "
                "nor a narrowing",
            )
    # Arrow does not promote every lossless widening (date32 -> timestamp): widen the fields first.
    schemas = [pa.schema([f.with_type(widest[f.name]) for f in schema]) for schema in footers]
    try:
        unified = pa.unify_schemas(schemas, promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError) as err:
        raise MergeJobError(f"staged files of {table} have conflicting schemas: {err}") from err
    missing = [c for c in REQUIRED_CHANGE_COLUMNS if c not in unified.names]
    if missing:
        raise MergeJobError(f"staged files of {table} lack the change columns {missing}")
    declared = [c.get("name") for c in columns]
    ordered = [n for n in declared if n in unified.names]
    ordered += [n for n in unified.names if n not in ordered and n not in CHANGE_COLUMN_NAMES]
    ordered += [f.name for f in CHANGE_FIELDS if f.name in unified.names]
    return pa.schema([unified.field(n).remove_metadata() for n in ordered])


def _without_before_images(schema: pa.Schema) -> pa.Schema:
    """Return a staged file's schema without :data:`~airflow_provider_binlog.contract.history.BEFORE_COLUMN`."""
    index = schema.get_field_index(BEFORE_COLUMN)
    return schema if index < 0 else schema.remove(index)


def read_staged_schema(
    table: StagedTable, *, pipeline: str, storage_options: StorageOptions | None = None
) -> pa.Schema:
    """Read the Arrow schema of a table's staged files: :func:`staged_schema` of their :func:`read_footers`.

    :param table: staged table with at least one file.
    :param pipeline: the pipeline merging the window, for messages.
    :param storage_options: storage options of the staging store.
    :raises UnfollowableSchemaChange: if a column's type changed within the window to one that is neither
        wider nor narrower (INT -> VARCHAR).
    :raises MergeJobError: if a footer cannot be read, the footers conflict otherwise or change metadata columns
        are missing.
    """
    footers = read_footers(table.files, storage_options)
    return staged_schema(table.name, footers, table.columns, pipeline=pipeline)


def _declared_arrow_type(column: Mapping[str, Any] | None, staged: pa.DataType, name: str) -> pa.DataType:
    """Return the manifest's Arrow type for a column when it is consistent with the file's, else the file's."""
    text = (column or {}).get("arrow_type")
    if not text:
        return staged
    try:
        declared = parse_arrow_type(str(text))
    except ContractError:
        return staged
    if storage_type(declared, name).equals(storage_type(staged, name)):
        return declared
    return staged


def target_schema(staged: pa.Schema, columns: Sequence[Mapping[str, Any]] = ()) -> pa.Schema:
    """Return the Delta table schema (as Arrow) for a staged table schema.

    Source columns get their storage types (:func:`storage_type`) and record the staged Arrow type and
    MySQL type in their metadata; then come the change columns and ``_binlog_deleted``. Every field is
    nullable.

    :param staged: staged schema from :func:`staged_schema`.
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
    fields += [f.with_nullable(True) for f in CHANGE_FIELDS]
    fields.append(pa.field(DELETED_COLUMN, pa.bool_(), nullable=True))
    return pa.schema(fields)
