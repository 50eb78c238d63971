"""Columnar accumulation of row changes: source columns plus the ``_binlog_*`` metadata columns.

Rows are appended to per-column Python lists and turned into one Arrow record batch at a time
(``pa.array`` per column is about twice as fast as ``Table.from_pylist`` of dicts).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from airflow_provider_binlog.extract.columns import ColumnSpec, Converter, is_zero_date

META_FIELDS: tuple[pa.Field, ...] = (
    pa.field("_binlog_op", pa.string(), nullable=False),
    pa.field("_binlog_window", pa.int64(), nullable=False),
    pa.field("_binlog_seq", pa.int64(), nullable=False),
    pa.field("_binlog_gtid", pa.string()),
    pa.field("_binlog_file", pa.string(), nullable=False),
    pa.field("_binlog_pos", pa.int64(), nullable=False),
    pa.field("_binlog_ts", pa.timestamp("us", tz="UTC"), nullable=False),
)
"""Metadata columns of every change record (names are a public contract, ARCHITECTURE.md)."""
META_NAMES = tuple(f.name for f in META_FIELDS)


def change_schema(columns: Sequence[ColumnSpec]) -> pa.Schema:
    """Return the staged Arrow schema: the source columns, then :data:`META_FIELDS`."""
    return pa.schema([pa.field(c.name, c.arrow_type) for c in columns] + list(META_FIELDS))


class ChangeBatchBuilder:
    """Accumulate row changes of one table with one column layout.

    :param columns: staged column specs in table order.
    :param converters: one value converter per column (see :func:`columns.converter`).
    :param window: window sequence number written to ``_binlog_window``.
    """

    def __init__(self, columns: Sequence[ColumnSpec], converters: Sequence[Converter], window: int) -> None:
        self.columns = list(columns)
        self.names = [c.name for c in columns]
        self.converters = list(converters)
        self.window = window
        self.schema = change_schema(columns)
        self.zero_dates = 0
        self._reset()

    def _reset(self) -> None:
        self.values: list[list[Any]] = [[] for _ in self.columns]
        self.ops: list[str] = []
        self.seqs: list[int] = []
        self.positions: list[int] = []

    def __len__(self) -> int:
        return len(self.ops)

    def add(self, op: str, seq: int, pos: int, row: dict[str, Any], none_sources: dict[str, str]) -> None:
        """Append one row image (after image for c/u/r, before image for d)."""
        for index, name in enumerate(self.names):
            value = row.get(name)
            reason = none_sources.get(name) if value is None else None
            if reason is not None and is_zero_date(value, reason):
                self.zero_dates += 1
            self.values[index].append(self.converters[index](value, reason))
        self.ops.append(op)
        self.seqs.append(seq)
        self.positions.append(pos)

    def take(self, *, file: str, gtid: str | None, commit_ts: dt.datetime) -> pa.RecordBatch:
        """Return the accumulated rows as one record batch and start empty again.

        :param file: binlog file of the transaction.
        :param gtid: the transaction's GTID (None without GTIDs).
        :param commit_ts: commit timestamp (UTC).
        """
        count = len(self.ops)
        arrays = [
            pa.array(values, type=spec.arrow_type)
            for values, spec in zip(self.values, self.columns, strict=True)
        ]
        arrays += [
            pa.array(self.ops, pa.string()),
            pa.array([self.window] * count, pa.int64()),
            pa.array(self.seqs, pa.int64()),
            pa.array([gtid] * count, pa.string()),
            pa.array([file] * count, pa.string()),
            pa.array(self.positions, pa.int64()),
            pa.array([commit_ts] * count, pa.timestamp("us", tz="UTC")),
        ]
        self._reset()
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)


def with_commit(batch: pa.RecordBatch, *, gtid: str | None, commit_ts: dt.datetime) -> pa.RecordBatch:
    """Return ``batch`` (spilled before its commit was known) with its GTID and commit timestamp set."""
    count = batch.num_rows
    columns = list(batch.columns)
    names = batch.schema.names
    columns[names.index("_binlog_gtid")] = pa.array([gtid] * count, pa.string())
    columns[names.index("_binlog_ts")] = pa.array([commit_ts] * count, pa.timestamp("us", tz="UTC"))
    return pa.RecordBatch.from_arrays(columns, schema=batch.schema)
