"""Write committed change batches of a window to Parquet, one folder per table, and build the manifest."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from airflow.sdk import ObjectStoragePath

from airflow_provider_binlog.contract.columns import OP_COLUMN
from airflow_provider_binlog.contract.manifest import TableEntry
from airflow_provider_binlog.extract.columns import ColumnSpec
from airflow_provider_binlog.pipeline.staging import LOCAL_SCHEMES

ROW_GROUP_ROWS = 65_536
"""Rows buffered per table before a Parquet row group is flushed (bounds the writer's memory)."""
PENDING_BYTES = 16 << 20
"""Arrow bytes the writers of one window buffer in all, at most: past it the table holding the most writes
its rows as a row group (so a window of many tables, or of tables below :data:`ROW_GROUP_ROWS` rows each,
stays within this bound too)."""


@dataclass
class TableOutput:
    """Everything written for one table of a window."""

    name: str
    primary_key: list[str]
    columns: list[ColumnSpec] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    ops: Counter[str] = field(default_factory=Counter)
    rows: int = 0
    zero_dates: int = 0

    def manifest_entry(self) -> TableEntry:
        """Return this table's entry of the window's manifest."""
        return TableEntry(
            files=tuple(self.files),
            rows=self.rows,
            ops=dict(self.ops),
            primary_key=tuple(self.primary_key),
            columns=tuple(c.to_manifest() for c in self.columns),
            zero_dates=self.zero_dates,
        )


class TableWriter:
    """Stream one table's change batches into ``part-<n>.parquet`` files of a window folder.

    A new part file starts when the table's column layout changes inside the window (an ALTER TABLE
    between transactions); the manifest lists the union of the columns.
    """

    def __init__(
        self, window_dir: ObjectStoragePath, output: TableOutput, *, row_group_rows: int = ROW_GROUP_ROWS
    ):
        self.window_dir = window_dir
        self.output = output
        self.row_group_rows = row_group_rows
        self._writer: pq.ParquetWriter | None = None
        self._handle: Any = None
        self._schema: pa.Schema | None = None
        self._pending: list[pa.RecordBatch] = []
        self._pending_rows = 0
        self.pending_bytes = 0
        """Arrow bytes of the batches buffered for the next row group."""

    def write(self, batch: pa.RecordBatch, columns: list[ColumnSpec]) -> None:
        """Append a committed batch whose source columns are ``columns``."""
        if batch.num_rows == 0:
            return
        if self._schema is not None and not batch.schema.equals(self._schema):
            self._close_part()
        if self._schema is None:
            self._open_part(batch.schema, columns)
        self._pending.append(batch)
        self._pending_rows += batch.num_rows
        self.pending_bytes += batch.nbytes
        # Counted in Python: Array.value_counts imports pyarrow.compute (9 MiB) for a handful of distinct values.
        self.output.ops.update(batch.column(OP_COLUMN).to_pylist())
        self.output.rows += batch.num_rows
        if self._pending_rows >= self.row_group_rows:
            self.flush()

    def _open_part(self, schema: pa.Schema, columns: list[ColumnSpec]) -> None:
        relative = f"{self.output.name}/part-{len(self.output.files):05d}.parquet"
        path = self.window_dir / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        # The filesystem's own file: ObjectStoragePath.open wraps it to report hook-level lineage on every
        # write call (loading Airflow's plugins on the first); the window's lineage is the operator's
        # OpenLineage facets (docs/lineage.md), not each part file. A local file is opened directly:
        # ObjectStoragePath.fs first registers every provider's filesystem (importing botocore for the
        # Amazon provider's), about 0.2 s of CPU that a local window never needs.
        if path.protocol in LOCAL_SCHEMES:
            self._handle = open(path.path, "wb")  # noqa: SIM115  # closed by _close_part
        else:
            self._handle = path.fs.open(path.path, mode="wb")
        self._writer = pq.ParquetWriter(self._handle, schema, compression="zstd")
        self._schema = schema
        self.output.files.append(relative)
        known = {c.name: i for i, c in enumerate(self.output.columns)}
        for column in columns:
            if column.name in known:
                self.output.columns[known[column.name]] = column
            else:
                self.output.columns.append(column)

    def flush(self) -> None:
        """Write the buffered batches as one row group of the current part file."""
        if self._pending and self._writer is not None:
            self._writer.write_table(pa.Table.from_batches(self._pending), row_group_size=self._pending_rows)
        self._pending, self._pending_rows, self.pending_bytes = [], 0, 0

    def _close_part(self) -> None:
        self.flush()
        if self._writer is not None:
            self._writer.close()
            self._handle.close()
        self._writer, self._handle, self._schema = None, None, None

    def close(self) -> TableOutput:
        """Flush and close the current part file; return what was written."""
        self._close_part()
        return self.output
