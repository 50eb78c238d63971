"""The schema of a history table as windows change their source's: new columns, wider types, and what it refuses.

Shared by the change log (:mod:`~airflow_provider_binlog.jobs.merge.history`) and the SCD2 table
(:mod:`~airflow_provider_binlog.jobs.merge.scd2`), whose older rows stay as they were written: a history table takes a
new column and a lossless widening (rewritten in one commit by
:func:`~airflow_provider_binlog.jobs.merge.table.retype_table`), and refuses any other type change.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

import pyarrow as pa

from airflow_provider_binlog.contract.delta import delta_arrow_schema
from airflow_provider_binlog.contract.types import is_lossless_widening
from airflow_provider_binlog.contract.uris import StorageOptions
from airflow_provider_binlog.jobs.merge.schema import SchemaChange, UnfollowableSchemaChange

if TYPE_CHECKING:
    from deltalake import DeltaTable
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)


class HistoryTypeChange(UnfollowableSchemaChange):
    """A change log cannot take a column's new type: it is neither a lossless widening nor a narrowing of the old.

    The change log keeps every older row with the old type, so its history cannot go on in the same table; the
    table is refused like any change the target cannot follow. Remedy: move the change log's folder aside (it
    keeps the history up to the change) and re-snapshot the table: a new change log starts with the snapshot.
    """


def evolve_schema(
    spark: SparkSession,
    dt: DeltaTable,
    wanted: pa.Schema,
    table: str,
    keys: Sequence[str],
    *,
    pipeline: str,
    seq: int,
    storage_options: StorageOptions | None,
) -> None:
    """Give the change log the columns ``wanted`` adds and the wider types it needs, keeping every row.

    New columns (image fields included) come in a metadata-only commit; a column the window needs wider
    (:func:`~airflow_provider_binlog.contract.types.is_lossless_widening`) is widened by rewriting the change log
    with it in one commit (:func:`~airflow_provider_binlog.jobs.merge.table.retype_table`; the digests recorded
    stay valid, as the canonical form does not depend on a lossless widening). A window narrower than the change
    log is written with the change log's types.

    :raises HistoryTypeChange: for a type change that is neither (INT -> VARCHAR).
    """
    from deltalake import write_deltalake

    from airflow_provider_binlog.jobs.merge.table import retype_table

    current = delta_arrow_schema(dt)
    merged = pa.schema(
        [
            _merged_field(current.field(f.name), wanted, table, pipeline) if f.name in wanted.names else f
            for f in current
        ]
        + [f for f in wanted if f.name not in current.names]
    )
    added = _with_types_of(merged, current)  # the new columns, the old types
    if not _leaf_types(added).keys() <= _leaf_types(current).keys():
        log.info("%s: its change log gains the window's new columns", table)
        write_deltalake(dt, added.empty_table(), mode="append", schema_mode="merge",
                        storage_options=dict(storage_options or {}))  # fmt: skip
        dt.update_incremental()
    widened = {f.name: f for f in merged if not f.type.equals(delta_arrow_schema(dt).field(f.name).type)}
    if widened:
        log.info("%s: its change log widens %s for window %d", table, sorted(widened), seq)
        retype_table(spark, dt, dt.table_uri, SchemaChange(widened=widened), keys, pipeline=pipeline, seq=seq,
                     storage_options=storage_options)  # fmt: skip


def _merged_field(have: pa.Field, wanted: pa.Schema | pa.StructType, table: str, pipeline: str) -> pa.Field:
    """Return ``have`` with ``wanted``'s field of its name merged in (new struct fields, wider types)."""
    want = wanted.field(have.name)
    if pa.types.is_struct(have.type) and pa.types.is_struct(want.type):
        names = [f.name for f in have.type]
        fields = [_merged_field(f, want.type, table, pipeline) if f.name in [w.name for w in want.type] else f
                  for f in have.type]  # fmt: skip
        fields += [f for f in want.type if f.name not in names]
        return have.with_type(pa.struct(fields))
    if is_lossless_widening(want.type, have.type):
        return have  # the window's type fits the change log's
    if is_lossless_widening(have.type, want.type):
        return have.with_type(want.type)
    raise HistoryTypeChange(
        pipeline=pipeline,
        table=table,
        column=have.name,
        detail=f"its change log stores {have.type} and the window needs {want.type}: the change log cannot hold both; "
        f"move the change log aside (it keeps the history up to here) before the re-snapshot, which starts a new one",
    )


def _with_types_of(merged: pa.Schema, current: pa.Schema) -> pa.Schema:
    """Return ``merged`` with the types ``current`` has for its fields (struct fields one by one)."""

    def field_of(f: pa.Field, old: pa.Field | None) -> pa.Field:
        if old is None:
            return f
        if pa.types.is_struct(f.type) and pa.types.is_struct(old.type):
            olds = {c.name: c for c in old.type}
            return f.with_type(pa.struct([field_of(c, olds.get(c.name)) for c in f.type]))
        return f.with_type(old.type)

    return pa.schema(
        [field_of(f, current.field(f.name) if f.name in current.names else None) for f in merged]
    )


def _leaf_types(schema: pa.Schema | pa.StructType, prefix: str = "") -> dict[str, pa.DataType]:
    leaves: dict[str, pa.DataType] = {}
    for f in schema:
        if pa.types.is_struct(f.type):
            leaves.update(_leaf_types(f.type, f"{prefix}{f.name}."))
        else:
            leaves[prefix + f.name] = f.type
    return leaves
