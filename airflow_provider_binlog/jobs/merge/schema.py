"""Schema evolution of an existing target table: what a window's schema asks of it, and applying that.

Pure planning (:func:`plan_schema_change`, :func:`replaced_columns`) over Arrow schemas; only
:func:`apply_schema_change` touches a Delta table. Rewriting a table with wider types is
:func:`~airflow_provider_binlog.jobs.merge.table.retype_table`.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pyarrow as pa

from airflow_provider_binlog.contract.columns import BUCKET_COLUMN, METADATA_COLUMN_NAMES
from airflow_provider_binlog.contract.remedies import resnapshot_remedy
from airflow_provider_binlog.contract.types import (
    MYSQL_TYPE_KEY,
    is_lossless_widening,
    recorded_arrow_type,
    text_metadata,
)
from airflow_provider_binlog.jobs.application import MergeJobError

if TYPE_CHECKING:
    from deltalake import DeltaTable

log = logging.getLogger(__name__)


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
    mysql = text_metadata(f).get(MYSQL_TYPE_KEY)
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
    mine = _FRACTION_DIGITS_RE.fullmatch(text_metadata(f).get(MYSQL_TYPE_KEY, ""))
    theirs = _FRACTION_DIGITS_RE.fullmatch(text_metadata(other).get(MYSQL_TYPE_KEY, ""))
    if mine is None or theirs is None or mine.group(1) != theirs.group(1):
        return 0
    return int(mine.group(2) or 0)


class UnfollowableSchemaChange(MergeJobError):
    """A column's type changed in a way the Delta table cannot follow exactly: the table needs a re-snapshot.

    Raised for a type change that is neither a widening nor a narrowing that leaves the source's values as
    they were (INT -> VARCHAR, DATETIME -> DATE, fewer fraction digits ...): the source converted the values
    of rows the binlog does not show again, so only a new snapshot of the table makes the target exact.
    :func:`~airflow_provider_binlog.jobs.merge.job.merge_window` does not fail the window for it: the table's merge is refused
    (:func:`~airflow_provider_binlog.contract.refusals.record_refusal`) and the other tables of the window are merged.

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
            f"first task); to do it sooner, {resnapshot_remedy(pipeline, table)}"
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
      (:func:`~airflow_provider_binlog.jobs.merge.table.retype_table`) before the window is merged;
    - a window type narrower than the table's (an old window after a widening, or a narrowing MODIFY such
      as BIGINT -> INT) keeps the table's wider type: every value fits it exactly, and the window's values
      are cast up when read. A narrowing MODIFY records the column's new MySQL type (newest window only);
    - equal stored types with another MySQL type (VARCHAR(10) -> VARCHAR(20), DATETIME -> DATETIME(6))
      change only the column metadata;
    - anything else raises :class:`UnfollowableSchemaChange` (see :func:`_unfollowable_reason`). A snapshot
      merge does not come here when a column changed: it replaces the table's schema
      (:func:`replaced_columns`).

    :param current: the table's schema (Arrow, with metadata).
    :param wanted: the schema the window needs (:func:`~airflow_provider_binlog.jobs.merge.window.target_schema`).
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
        wanted_meta, have_meta = text_metadata(f), text_metadata(have)
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
    schema instead of keeping a stale column (:func:`~airflow_provider_binlog.jobs.merge.table._rewrite_buckets`), in the same single commit.

    :param current: the Delta table's schema.
    :param wanted: the schema the snapshot needs (:func:`~airflow_provider_binlog.jobs.merge.window.target_schema`).
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
