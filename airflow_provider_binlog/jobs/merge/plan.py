"""One window's merge plan: what the window asks of each of its tables, decided once before any is merged.

Following a window through the merge, each step reads what an earlier one decided instead of deriving it
again from the manifest and the staged files:

1. :func:`plan_window` reads each staged table's Parquet footers once and derives its staged schema and the
   Delta schema the window needs (:mod:`~airflow_provider_binlog.jobs.merge.window`), and its newest truncate
   marker (:func:`~airflow_provider_binlog.jobs.merge.truncate.window_truncation`);
2. the foreign-key cascades (:func:`~airflow_provider_binlog.jobs.merge.cascades.synthesise`) order the tables
   parents first and add each child's synthesised change file, reading the plan of every table they touch;
3. each table's merge key is resolved over the tables with changes
   (:func:`~airflow_provider_binlog.jobs.merge.window.window_keys`);
4. :func:`~airflow_provider_binlog.jobs.merge.job.merge_window` applies the plan table by table
   (:func:`~airflow_provider_binlog.jobs.merge.table.merge_table`), which adds only what the Delta table says
   at the version it reads: whether it holds the window, its truncate floor, its schema against the window's.

A staged schema that cannot be merged (a type change within the window that is neither a widening nor a
narrowing, footers that conflict or cannot be read) is kept in the plan and raised when the table is reached,
so that, as before the plan existed, the tables merged ahead of it are merged and an unfollowable type change
refuses only its own table.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import pyarrow as pa

from airflow_provider_binlog.contract.uris import StorageOptions
from airflow_provider_binlog.jobs.application import MergeJobError
from airflow_provider_binlog.jobs.merge.cascades import synthesise
from airflow_provider_binlog.jobs.merge.truncate import Truncation, window_truncation
from airflow_provider_binlog.jobs.merge.window import (
    StagedTable,
    StagedWindow,
    has_changes,
    read_footers,
    staged_schema,
    target_schema,
    window_keys,
)


@dataclass(frozen=True)
class TablePlan:
    """What merging one table of a window does, as far as the window decides it.

    :param staged: the table as staged: the manifest's files and rows, then the change file and rows the
        cascades synthesised for it (:func:`~airflow_provider_binlog.jobs.merge.cascades.synthesise`).
    :param keys: its merge key (the manifest's primary key or the one the user named); empty when it has no
        changes or only truncate markers (it then merges by its Delta table's own key,
        :func:`~airflow_provider_binlog.jobs.merge.truncate.table_key`).
    :param truncation: the window's newest truncate marker of it, without the table's floor
        (:func:`~airflow_provider_binlog.jobs.merge.truncate.window_truncation`).
    :param footers: the Arrow schemas of ``staged.files``' Parquet footers, in their order
        (:func:`~airflow_provider_binlog.jobs.merge.window.read_footers`); empty without files or with
        ``schema_error``.
    :param schema: the unified Arrow schema of its staged files
        (:func:`~airflow_provider_binlog.jobs.merge.window.staged_schema`); None without files or with
        ``schema_error``.
    :param target: the Delta table schema (Arrow) the window needs
        (:func:`~airflow_provider_binlog.jobs.merge.window.target_schema`); None like ``schema``.
    :param schema_error: why its staged files cannot be merged, raised by :meth:`staged_schema` and
        :meth:`target_schema`.
    """

    staged: StagedTable
    keys: tuple[str, ...] = ()
    truncation: Truncation = field(default_factory=Truncation)
    footers: tuple[pa.Schema, ...] = ()
    schema: pa.Schema | None = None
    target: pa.Schema | None = None
    schema_error: MergeJobError | None = None

    @property
    def name(self) -> str:
        """Return the table's ``db.table``."""
        return self.staged.name

    @property
    def has_changes(self) -> bool:
        """Return whether the table has anything to merge (:func:`~airflow_provider_binlog.jobs.merge.window.has_changes`)."""
        return has_changes(self.staged)

    def staged_schema(self) -> pa.Schema:
        """Return the unified Arrow schema of the table's staged files.

        :raises UnfollowableSchemaChange: if a column's type changed within the window in a way the table
            cannot follow.
        :raises MergeJobError: if the footers cannot be read or conflict, or the table stages no file.
        """
        if self.schema_error is not None:
            raise self.schema_error
        if self.schema is None:
            raise MergeJobError(f"{self.name} stages no change file in this window: it has no staged schema")
        return self.schema

    def target_schema(self) -> pa.Schema:
        """Return the Delta table schema (Arrow) the window needs for the table.

        :raises MergeJobError: as :meth:`staged_schema`, or if a column type cannot be stored.
        """
        self.staged_schema()
        assert self.target is not None  # set whenever the staged schema is
        return self.target


@dataclass(frozen=True)
class WindowPlan:
    """The merge plan of one staged window.

    :param window: the staged window (its manifest).
    :param tables: the plan of each table, parents before their children (foreign keys), else in manifest
        order.
    """

    window: StagedWindow
    tables: tuple[TablePlan, ...]


def plan_table(
    staged: StagedTable,
    *,
    pipeline: str,
    truncation: Truncation | None = None,
    footers: Sequence[pa.Schema] = (),
    storage_options: StorageOptions | None = None,
) -> TablePlan:
    """Return the plan of one staged table, reading what it does not know yet from the staged files.

    :param staged: the table as staged.
    :param pipeline: the pipeline merging the window, for messages.
    :param truncation: the window's part of its truncation when already read (:func:`window_truncation`).
    :param footers: the schemas of the first ``len(footers)`` of ``staged.files``, already read
        (:func:`read_footers`); the others' are read.
    :param storage_options: storage options of the staging store.
    :raises OSError: if a staged file holding truncate markers cannot be read (its footer errors are kept in
        the plan, ``schema_error``).
    """
    if truncation is None:
        truncation = window_truncation(staged, storage_options)
    if not staged.files:
        return TablePlan(staged, truncation=truncation)
    try:
        footers = (*footers, *read_footers(staged.files[len(footers) :], storage_options))
        schema = staged_schema(staged.name, footers, staged.columns, pipeline=pipeline)
        wanted = target_schema(schema, staged.columns)
    except MergeJobError as err:
        return TablePlan(staged, truncation=truncation, schema_error=err)
    return TablePlan(staged, truncation=truncation, footers=tuple(footers), schema=schema, target=wanted)


def plan_window(
    window: StagedWindow,
    target: str,
    *,
    key_overrides: Mapping[str, Sequence[str]] | None = None,
    storage_options: StorageOptions | None = None,
) -> WindowPlan:
    """Return the merge plan of a staged window (see the module docstring).

    Reads each staged table's footers and (when its manifest counts markers) the order columns of its files
    once, computes or reuses the cascades' synthesised child changes (reading the Delta tables of the
    children), and resolves the merge keys before any table is touched.

    :param window: the staged window.
    :param target: target root; table ``db.t`` lives at ``<target>/db/t``.
    :param key_overrides: user-named keys of tables without a primary key, by ``db.table``.
    :param storage_options: storage options of the staging and target stores.
    :raises MergeJobError: on a cycle of foreign keys through several tables, a child without a key or a
        malformed manifest (:func:`~airflow_provider_binlog.jobs.merge.cascades.synthesise`).
    :raises MergeKeyError: naming the table, if a table with changes has no key or an override contradicts it.
    """
    tables = {
        t.name: plan_table(t, pipeline=window.pipeline, storage_options=storage_options)
        for t in window.tables
    }
    order, extra = synthesise(
        window, tables, target, key_overrides=key_overrides, storage_options=storage_options
    )
    planned = []
    for name in order:
        table = tables[name]
        if name in extra:
            file, rows = extra[name]
            staged = replace(table.staged, files=(*table.staged.files, file), rows=table.staged.rows + rows)
            table = (
                replace(table, staged=staged)
                if table.schema_error is not None
                else plan_table(
                    staged,
                    pipeline=window.pipeline,
                    truncation=table.truncation,
                    footers=table.footers,
                    storage_options=storage_options,
                )
            )
        planned.append(table)
    keys = window_keys([t.staged for t in planned], key_overrides, window=window.seq)
    return WindowPlan(window, tuple(replace(t, keys=keys.get(t.name, ())) for t in planned))
