"""The ``_binlog_*`` columns of staged change records and target tables, and the op codes.

Names are a public contract (README, "Change record"). A staged change file holds the source columns,
then :data:`CHANGE_FIELDS`; a target table adds :data:`DELETED_COLUMN` (and, if it was created with hash
buckets before ADR 0020, the partition column :data:`BUCKET_COLUMN`).
"""

from __future__ import annotations

import datetime as dt

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


def change_schema(source: pa.Schema | list[pa.Field]) -> pa.Schema:
    """Return the staged Arrow schema of a table: its source columns, then :data:`CHANGE_FIELDS`.

    :param source: the source columns (staged Arrow types).
    """
    return pa.schema([*source, *CHANGE_FIELDS])
