"""The ``_binlog_*`` columns of staged change records and target tables, and the op codes.

Names are a public contract (README, "Change record"). A staged change file holds the source columns,
then :data:`CHANGE_FIELDS`; a target table adds :data:`DELETED_COLUMN` (and, if it was created with hash
buckets before ADR 0020, the partition column :data:`BUCKET_COLUMN`).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa

UTC = dt.timezone.utc
"""The zone of ``_binlog_ts`` and of every staged MySQL TIMESTAMP (the binlog carries them in UTC)."""

OP_COLUMN = "_binlog_op"
WINDOW_COLUMN = "_binlog_window"
SEQ_COLUMN = "_binlog_seq"
GTID_COLUMN = "_binlog_gtid"
FILE_COLUMN = "_binlog_file"
POS_COLUMN = "_binlog_pos"
TS_COLUMN = "_binlog_ts"
DELETED_COLUMN = "_binlog_deleted"
BUCKET_COLUMN = "_binlog_bucket"
"""Partition column of target tables created with hash buckets (before ADR 0020); 0 in their rewritten files."""

# Op codes of ``_binlog_op``. A new op is one line here plus its entry in OPS.
OP_INSERT = "c"
OP_UPDATE = "u"
OP_DELETE = "d"
OP_SNAPSHOT = "r"
"""A row read by a snapshot chunk (not a binlog change)."""
OPS: tuple[str, ...] = (OP_INSERT, OP_UPDATE, OP_DELETE, OP_SNAPSHOT)
"""Every op a staged change row may carry."""
OP_TRUNCATE = "t"
"""A truncate marker: the table was emptied (``TRUNCATE``, ``DROP TABLE``, ``RENAME TABLE`` away) at the row's
place in the order; every data column is NULL. The merge takes markers out before it checks :data:`OPS`
(:mod:`airflow_provider_binlog.jobs.merge.truncate`, ``docs/adr/0015-truncate-marker.md``)."""

CHANGE_FIELDS: tuple[pa.Field, ...] = (
    pa.field(OP_COLUMN, pa.string(), nullable=False),
    pa.field(WINDOW_COLUMN, pa.int64(), nullable=False),
    pa.field(SEQ_COLUMN, pa.int64(), nullable=False),
    pa.field(GTID_COLUMN, pa.string()),
    pa.field(FILE_COLUMN, pa.string(), nullable=False),
    pa.field(POS_COLUMN, pa.int64(), nullable=False),
    pa.field(TS_COLUMN, pa.timestamp("us", tz="UTC"), nullable=False),
)
"""Change metadata columns staged after the source columns of every row, in this order."""
CHANGE_COLUMN_NAMES = frozenset(f.name for f in CHANGE_FIELDS)
REQUIRED_CHANGE_COLUMNS = (OP_COLUMN, WINDOW_COLUMN, SEQ_COLUMN)
"""Change columns a staged file must have for the merge to order its rows."""
METADATA_COLUMN_NAMES = CHANGE_COLUMN_NAMES | {DELETED_COLUMN, BUCKET_COLUMN}
"""Every column a target table has besides the source columns."""
RESERVED_PREFIX = "_binlog_"
"""Every column the provider adds to a staged file, a target table or a history table starts with this prefix;
a source column whose name does (in any letter case: MySQL and Spark compare column names case-insensitively)
would collide with one of them, now or in a later release, so the table is refused (:func:`reserved_name_problem`)."""


def reserved_name_problem(name: str) -> str | None:
    """Return why source column ``name`` cannot be staged when it takes the reserved prefix, else None.

    A staged file holding the source column ``_binlog_op`` beside the provider's own would have one field twice
    (pyarrow refuses such a schema); the caller refuses the table alone (quarantine, ADR 0033) with this text.
    """
    if not name.lower().startswith(RESERVED_PREFIX):
        return None
    return (
        f"the column name {name!r} starts with {RESERVED_PREFIX!r}, which the provider reserves for the change "
        "metadata it adds to staged rows, target and history tables (README, 'Change record'); rename the column "
        "(ALTER TABLE ... RENAME COLUMN) or leave the table out of the pipeline's selection"
    )


EVENT_COLUMNS = (GTID_COLUMN, FILE_COLUMN, POS_COLUMN, TS_COLUMN)
"""Change columns a staged row takes from its row event: its transaction's GTID and commit time, the event's
end. Every row staged from one event holds the same values in them (the two rows of a key change, a truncate
marker and the tombstones it makes, a change a foreign key's action synthesises from its cause)."""

OrderKey = tuple[int, int]
"""A change's order key ``(_binlog_window, _binlog_seq)``: the newest order key of a primary key wins."""


def order_key(row: Mapping[str, Any]) -> OrderKey:
    """Return the order key of a staged or target row (a mapping holding both order columns).

    :raises KeyError: when the row lacks ``_binlog_window`` or ``_binlog_seq``.
    :raises TypeError: when one of them is None.
    """
    return int(row[WINDOW_COLUMN]), int(row[SEQ_COLUMN])


# The key-change rule. An update is staged as one ``u`` row holding the after image, except an update that
# changes a column of :func:`moving_columns` (the key: the row moves; or a column a cascading foreign key
# references): that one is staged as a key change, two rows of one event at consecutive order keys, the
# ``d`` of the before image, then the ``u`` of the after image at :func:`key_change_update_order`. The merge
# needs the before image to tombstone the old key, and the old referenced values to find the child rows the
# source changed without logging them (``jobs/merge/cascades.py``); ``extract/reader.py`` stages it, for the
# columns ``extract/targets.py``'s ``TableTarget.moving_columns`` takes from here.
KEY_CHANGE_OPS = (OP_DELETE, OP_UPDATE)
"""The ops of a key change's two rows, in staged order: the before image, then the after image."""


def moving_columns(primary_key: Sequence[str], referenced: Sequence[str] = ()) -> list[str]:
    """Return the columns whose change stages an update as a key change (the key-change rule above).

    :param primary_key: the table's key (its primary key or the key the user named), in key order.
    :param referenced: the table's columns that cascading foreign keys of selected tables reference.
    :returns: the key, then the referenced columns not in it.
    """
    return [*primary_key, *(c for c in referenced if c not in primary_key)]


def key_change_update_order(delete: OrderKey) -> OrderKey:
    """Return the order key of a key change's after image, from the order key of its before image's ``d``.

    :param delete: the ``d`` row's ``(_binlog_window, _binlog_seq)``.
    :returns: the next order key of the window, ``(window, seq + 1)``.
    """
    window, seq = delete
    return window, seq + 1


def is_key_change(delete: Mapping[str, Any], following: Mapping[str, Any] | None) -> bool:
    """Return whether a staged ``d`` row and the row staged right after it are one key change.

    They are when ``following`` is a ``u`` at :func:`key_change_update_order` of the ``d`` with the same
    :data:`EVENT_COLUMNS` values (the same row event); else the ``d`` is a delete of its own.

    :param delete: a staged row with ``_binlog_op`` ``d`` (columns by name).
    :param following: the staged row of the same table at the next order key, None when there is none.
    :raises KeyError: when a row lacks an order column.
    """
    return (
        following is not None
        and (delete[OP_COLUMN], following[OP_COLUMN]) == KEY_CHANGE_OPS
        and order_key(following) == key_change_update_order(order_key(delete))
        and all(following.get(c) == delete.get(c) for c in EVENT_COLUMNS)
    )


def change_schema(source: pa.Schema | list[pa.Field]) -> pa.Schema:
    """Return the staged Arrow schema of a table: its source columns, then :data:`CHANGE_FIELDS`.

    :param source: the source columns (staged Arrow types).
    """
    return pa.schema([*source, *CHANGE_FIELDS])
