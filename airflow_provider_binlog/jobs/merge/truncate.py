"""Truncate markers: a table emptied at a statement's place in the order (``docs/adr/0015-truncate-marker.md``).

``TRUNCATE TABLE``, ``DROP TABLE`` and ``RENAME TABLE`` of a table away remove every row without row events.
The extract stages a **truncate marker** for the table at the statement's place in the window's order: one
staged row with ``_binlog_op`` = :data:`OP_TRUNCATE`, the statement's order key (``_binlog_window``,
``_binlog_seq``) and coordinates, and every data column NULL. The merge of a window holding markers:

1. drops the marker rows and the window's rows ordered before its newest marker;
2. turns every live target row ordered before that marker into a tombstone carrying the marker's order key
   and coordinates (rows of newer windows merged earlier, a backfill merged out of order, stay);
3. applies the rows after the marker as usual, all in the window's one Delta commit per table, which also
   records the marker's order key as the table's **floor**: the app transactions
   ``airflow-provider-binlog:<pipeline>:truncated.window`` and ``...truncated.seq`` (:func:`floor_app_ids`),
   whose versions are the marker's ``_binlog_window`` and ``_binlog_seq`` (two: a window seq is a Unix time in
   milliseconds, ~41 bits, and a snapshot's ``_binlog_seq`` uses up to 63; a Delta app transaction version
   is one signed 64-bit integer).

Every later merge of the table (an older window merged after the truncate, a snapshot that started before
it) drops its rows ordered below the floor: they were removed by the statement, and a key the target did
not hold when the marker was merged has no tombstone to outrank them. A re-merge of the marker's window is a
no-op (its app transaction is in the table), and merging it again after newer windows removes nothing they
wrote: the result does not depend on the order windows are merged in.

Pure functions plus :func:`window_truncation`, which reads the staged files' order columns with pyarrow on the
driver (only for tables whose manifest counts markers, once per window: the window's plan holds the result,
:mod:`~airflow_provider_binlog.jobs.merge.plan`). Imports no Airflow (it runs on Spark drivers).
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import pyarrow.compute as pc
import pyarrow.parquet as pq

from airflow_provider_binlog.contract.columns import (
    DELETED_COLUMN,
    EVENT_COLUMNS,
    OP_COLUMN,
    OP_DELETE,
    OP_TRUNCATE,
    SEQ_COLUMN,
    WINDOW_COLUMN,
    OrderKey,
    order_key,
)
from airflow_provider_binlog.contract.delta import PRIMARY_KEY_PROPERTY, pipeline_app_id
from airflow_provider_binlog.contract.uris import StorageOptions, filesystem_for
from airflow_provider_binlog.jobs.application import MergeJobError
from airflow_provider_binlog.jobs.merge.transforms import col
from airflow_provider_binlog.jobs.merge.window import StagedTable

if TYPE_CHECKING:
    from deltalake import DeltaTable
    from pyspark.sql import Column, DataFrame

log = logging.getLogger(__name__)


def floor_app_ids(pipeline: str) -> tuple[str, str]:
    """Return the app transaction ids holding a table's floor: its window seq, and its ``_binlog_seq``."""
    prefix = f"{pipeline_app_id(pipeline)}:truncated"
    return f"{prefix}.window", f"{prefix}.seq"


@dataclass(frozen=True)
class Truncation:
    """What truncate markers mean for one table's merge of one window.

    :param floor: the table's floor before this merge (its newest merged marker), None without one.
    :param marker: the newest marker of the window, None without one.
    :param coordinates: the newest marker's :data:`~airflow_provider_binlog.contract.columns.EVENT_COLUMNS`,
        which the tombstones it makes take.

    The window's part (``marker``, ``coordinates``) is read once per window (:func:`window_truncation`, in the
    window's plan); the table's part (``floor``) at each attempt to merge it (:func:`table_truncation`).
    """

    floor: OrderKey | None = None
    marker: OrderKey | None = None
    coordinates: Mapping[str, Any] | None = None

    @property
    def cut(self) -> OrderKey | None:
        """Return the order key below which the window's rows are dropped (the newer of floor and marker)."""
        keys = [k for k in (self.floor, self.marker) if k is not None]
        return max(keys) if keys else None

    @property
    def empties(self) -> bool:
        """Return whether the merge turns target rows into tombstones (a marker above the table's floor)."""
        return self.marker is not None and (self.floor is None or self.marker > self.floor)

    def app_transactions(self, pipeline: str) -> dict[str, int]:
        """Return ``{app id: version}`` the merge commit records: the new floor when the window raises it."""
        if not self.empties or self.marker is None:
            return {}
        return dict(zip(floor_app_ids(pipeline), self.marker, strict=True))


def table_floor(table: DeltaTable | None, pipeline: str) -> OrderKey | None:
    """Return a table's floor (:func:`floor_app_ids`), None when no marker was merged into it.

    :raises MergeJobError: when the table's log holds one half of the floor only (not written by this module).
    """
    if table is None:
        return None
    window, seq = (table.transaction_version(app) for app in floor_app_ids(pipeline))
    if window is None and seq is None:
        return None
    if window is None or seq is None:
        raise MergeJobError(
            f"{table.table_uri}: the truncate floor app transactions {floor_app_ids(pipeline)} are not both set "
            f"({window}, {seq}); the merge commits them together, so another writer changed them"
        )
    return window, seq


def window_truncation(staged: StagedTable, storage_options: StorageOptions | None = None) -> Truncation:
    """Return the window's part of a table's :class:`Truncation`: the newest truncate marker among its staged files.

    Reads only the metadata columns, and only when the manifest counts markers (``StagedTable.markers``); the
    ``floor`` is left unset (the table's, :func:`table_truncation`).

    :param staged: the table as the manifest stages it.
    :param storage_options: storage options of the staging store.
    """
    if not staged.markers:
        return Truncation()
    newest: tuple[OrderKey, dict[str, Any]] | None = None
    for uri in staged.files:
        fs, path = filesystem_for(uri, storage_options)
        rows = pq.read_table(
            path, filesystem=fs, columns=[OP_COLUMN, WINDOW_COLUMN, SEQ_COLUMN, *EVENT_COLUMNS]
        )
        for row in rows.filter(pc.equal(rows[OP_COLUMN], OP_TRUNCATE)).to_pylist():
            order = order_key(row)
            if newest is None or order > newest[0]:
                newest = (order, {c: row[c] for c in EVENT_COLUMNS})
    return Truncation() if newest is None else Truncation(marker=newest[0], coordinates=newest[1])


def table_truncation(table: DeltaTable | None, window: Truncation, pipeline: str, name: str) -> Truncation:
    """Return the :class:`Truncation` of merging a window into ``table``: the window's marker and the table's floor.

    :param table: the Delta table at the version the merge reads, None when there is none yet.
    :param window: the window's part, from :func:`window_truncation`.
    :param pipeline: the pipeline merging the window.
    :param name: the table's ``db.table``, for the log.
    :raises MergeJobError: when the table's log holds one half of the floor only (:func:`table_floor`).
    """
    truncation = replace(window, floor=table_floor(table, pipeline))
    if truncation.empties:
        log.info(
            "%s: truncate marker at %s (floor before: %s): target rows ordered before it become tombstones",
            name, truncation.marker, truncation.floor,
        )  # fmt: skip
    return truncation


def table_key(table: DeltaTable | None, name: str) -> list[str]:
    """Return the key a table was created with, for a window that holds only truncate markers of it.

    Such a window stages no data column (the table may no longer exist on the source), so the key comes from
    the Delta table's configuration.

    :raises MergeJobError: when the target holds no such table: the extract stages markers only for tables
        the target holds or the window wrote.
    """
    stored = None if table is None else table.metadata().configuration.get(PRIMARY_KEY_PROPERTY)
    if stored is None:
        raise MergeJobError(
            f"window stages only truncate markers of {name}, but the target holds no Delta table of it with a "
            f"key ({PRIMARY_KEY_PROPERTY}): there is nothing ordered before the markers to remove. Check that "
            "the target location is the one the pipeline merged into."
        )
    import json

    return list(json.loads(stored))


def _before(order: OrderKey) -> Column:
    from pyspark.sql import functions as F

    window, seq = order
    return (col(WINDOW_COLUMN) < F.lit(window)) | (
        (col(WINDOW_COLUMN) == F.lit(window)) & (col(SEQ_COLUMN) < F.lit(seq))
    )


def without_truncated(changes: DataFrame, truncation: Truncation) -> DataFrame:
    """Return a window's changes without its markers and without the rows ordered before :attr:`Truncation.cut`."""
    from pyspark.sql import functions as F

    kept = changes.where(F.coalesce(col(OP_COLUMN) != F.lit(OP_TRUNCATE), F.lit(True)))
    return kept if truncation.cut is None else kept.where(~_before(truncation.cut))


def tombstone_truncated(current: DataFrame, truncation: Truncation, columns: Sequence[str]) -> DataFrame:
    """Return the target rows with every live row ordered before the window's marker made a tombstone.

    The tombstone takes the marker's order key and coordinates; rows ordered after the marker (newer windows
    merged earlier) and tombstones already there are unchanged. Without :attr:`Truncation.empties`, the
    rows are returned as they are.

    :param current: target rows of every bucket (data columns, metadata columns).
    :param columns: the column names of ``current`` (the metadata columns it lacks are not set).
    """
    if not truncation.empties or truncation.marker is None:
        return current
    from pyspark.sql import functions as F

    window, seq = truncation.marker
    removed = "__binlog_truncated"
    current = current.withColumn(
        removed, _before(truncation.marker) & ~F.coalesce(col(DELETED_COLUMN), F.lit(False))
    )
    values: dict[str, Any] = {
        DELETED_COLUMN: F.lit(True),
        OP_COLUMN: F.lit(OP_DELETE),
        WINDOW_COLUMN: F.lit(window).cast("long"),
        SEQ_COLUMN: F.lit(seq).cast("long"),
    }
    for name, value in (truncation.coordinates or {}).items():
        if isinstance(value, dt.datetime):
            values[name] = F.lit(value).cast("timestamp")
        else:
            values[name] = F.lit(value).cast("long" if name == "_binlog_pos" else "string")
    for name, value in values.items():
        if name in columns:
            current = current.withColumn(name, F.when(col(removed), value).otherwise(col(name)))
    return current.drop(removed)
