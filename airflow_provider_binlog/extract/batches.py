"""Columnar accumulation of row changes: source columns plus the ``_binlog_*`` metadata columns.

Rows are appended to per-column Python lists and turned into one Arrow record batch at a time
(``pa.array`` per column is about twice as fast as ``Table.from_pylist`` of dicts).
"""

from __future__ import annotations

import datetime as dt
import importlib.abc
import importlib.util
import sys
from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from airflow_provider_binlog.contract.columns import (
    CHANGE_FIELDS,
    FILE_COLUMN,
    GTID_COLUMN,
    OP_COLUMN,
    OP_TRUNCATE,
    POS_COLUMN,
    SEQ_COLUMN,
    TS_COLUMN,
    UTC,
    change_schema,
)
from airflow_provider_binlog.contract.history import BEFORE_COLUMN
from airflow_provider_binlog.extract.columns import ColumnSpec, ValueConversionError


def lean_arrow() -> None:
    """Make pyarrow lean for the extract: no pandas import (:func:`arrow_without_pandas`), the system allocator.

    pyarrow's default pool (jemalloc) keeps pages it freed mapped: on 240,000 OLTP rows the extract's peak
    RSS was 279 MiB with it and 236 MiB with the system allocator, at the same CPU time (one run each,
    ``benchmarks/extract_throughput.py``'s range). The pool is the process's default from then on; the
    extract's Arrow data are batches of a few MiB, which the system allocator serves as well.
    """
    arrow_without_pandas()
    if pa.default_memory_pool().backend_name != "system":
        pa.set_memory_pool(pa.system_memory_pool())


def arrow_without_pandas() -> None:
    """Let pyarrow build arrays from Python lists without importing pandas (about 55 MiB of the extract's RSS).

    ``pa.array`` asks pyarrow's pandas shim, on its first call in a process, whether pandas is installed (to
    tell pandas objects apart), and imports pandas to find out (pyarrow 26, ``pandas-shim.pxi``
    ``_check_import``). When pandas is not imported yet, no pandas object exists to convert, so this makes
    that first check fail: ``import pandas`` raises ImportError while pyarrow builds one array. Whoever
    imports pandas later gets pyarrow's pandas support back as it imports: :class:`_PandasImportHook`
    has the shim import it again (else ``pa.array(series)`` would take a Series for a plain sequence). A
    no-op when pandas is imported already, or this ran before.
    """
    if "pandas" in sys.modules or any(isinstance(f, _PandasImportHook) for f in sys.meta_path):
        return
    blocker = _NoPandas()
    sys.meta_path.insert(0, blocker)
    try:
        pa.array([0], pa.int64())
    finally:
        sys.meta_path.remove(blocker)
    sys.meta_path.insert(0, _PandasImportHook())


class _NoPandas:
    """A meta path finder under which ``import pandas`` raises ImportError (see :func:`arrow_without_pandas`)."""

    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        if name == "pandas":
            raise ImportError("pandas is not imported while pyarrow builds its first array")


class _PandasImportHook:
    """A meta path finder that, when pandas is imported, has pyarrow's pandas shim import it once it is loaded.

    It finds pandas as the other finders do and wraps its loader; it removes itself on first use.
    """

    def find_spec(self, name: str, path: object = None, target: object = None) -> Any:
        if name != "pandas":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.loader is not None:
            spec.loader = _ShimRefreshingLoader(spec.loader)
        return spec


class _ShimRefreshingLoader(importlib.abc.Loader):
    """Load a module with ``loader``, then have pyarrow's pandas shim import pandas (see :class:`_PandasImportHook`)."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader

    def create_module(self, spec: Any) -> Any:
        return self.loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        self.loader.exec_module(module)
        pa.lib._pandas_api.pd  # noqa: B018  # the shim's raising check imports pandas again, and keeps it


class ChangeBatchBuilder:
    """Accumulate row changes of one table layout across transactions.

    Rows ``[0, committed)`` belong to committed transactions; rows after that to the open one, whose
    GTID and commit timestamp are filled in by :meth:`commit` (or which :meth:`rollback` drops).

    Rows are kept as the images the decoder returned (one list per row) plus one list per order key, and
    turned column-wise only when a batch is taken (``zip`` of the images: an OLTP rows event holds one
    row, and appending its values to one list per column cost a fifth of the reader's row path).

    :param columns: staged column specs in table order.
    :param window: window sequence number written to ``_binlog_window``.
    :param labels: per column, how errors name it (``db.table.column (type, metadata)``, see
        :func:`columns.describe_column`); the spec's name and type when omitted.
    :param before_images: whether rows carry the before image of the update they were staged from, in
        :data:`~airflow_provider_binlog.contract.history.BEFORE_COLUMN` (a table with history).
    """

    def __init__(
        self,
        columns: Sequence[ColumnSpec],
        window: int,
        labels: Sequence[str] | None = None,
        *,
        before_images: bool = False,
    ) -> None:
        self.columns = list(columns)
        self.labels = list(labels) if labels is not None else [f"{c.name} ({c.mysql_type})" for c in columns]
        self.names = [c.name for c in columns]
        self.window = window
        self._window_bytes = window.to_bytes(8, "little", signed=True)
        source = [pa.field(c.name, c.arrow_type) for c in columns]
        self.schema = change_schema(source)
        self.befores: list[Sequence[Any] | None] | None = None
        """Per row, the before image of the update it was staged from, else None; None when not kept."""
        if before_images:
            self.schema = self.schema.append(pa.field(BEFORE_COLUMN, pa.struct(source)))
            self.befores = []
        self.committed = 0
        self.images: list[Sequence[Any]] = []
        self.ops: list[str] = []
        self.seqs: list[int] = []
        self.files: list[str] = []
        self.positions: list[int] = []
        self.gtids: list[str | None] = []
        """GTID of each committed row (``committed`` entries)."""
        self.stamps: list[int] = []
        """Commit time of each committed row, microseconds since the epoch (``committed`` entries)."""

    def __len__(self) -> int:
        return len(self.ops)

    def add_values(
        self,
        op: str,
        seq: int,
        file: str,
        pos: int,
        values: Sequence[Any],
        before: Sequence[Any] | None = None,
    ) -> None:
        """Append one row image of the open transaction, already in staged values and column order.

        :param op: ``c``, ``u`` or ``d`` (after image for c/u, before image for d).
        :param seq: the row's ``_binlog_seq``.
        :param file: binlog file of the row event.
        :param pos: end position of the row event.
        :param values: one staged value per column (kept, not copied).
        :param before: the before image of the update the row was staged from (kept only when the builder keeps
            before images).
        """
        if self.befores is not None:
            self.befores.append(before)
        self.images.append(values)
        self.ops.append(op)
        self.seqs.append(seq)
        self.files.append(file)
        self.positions.append(pos)

    def add_images(
        self,
        ops: str | list[str],
        images: Sequence[Sequence[Any]],
        first_seq: int,
        file: str,
        pos: int,
        befores: Sequence[Sequence[Any] | None] | None = None,
    ) -> None:
        """Append the row images of one rows event to the open transaction.

        :param ops: the op of every image, or one op per image (see :meth:`add_values`).
        :param images: staged values in column order, one sequence per image (kept, not copied).
        :param first_seq: ``_binlog_seq`` of the first image; the others follow by one.
        :param file: binlog file of the row event. :param pos: end position of the row event.
        :param befores: per image, the before image of the update it was staged from (None: none has one).
        """
        count = len(images)
        if count == 1:
            op = ops if isinstance(ops, str) else ops[0]
            self.add_values(op, first_seq, file, pos, images[0], None if befores is None else befores[0])
            return
        if self.befores is not None:
            self.befores.extend([None] * count if befores is None else befores)
        self.images.extend(images)
        self.ops.extend([ops] * count if isinstance(ops, str) else ops)
        self.seqs.extend(range(first_seq, first_seq + count))
        self.files.extend([file] * count)
        self.positions.extend([pos] * count)

    def commit(self, gtid: str | None, commit_us: int) -> None:
        """Mark the open transaction's rows committed with their GTID and commit time (microseconds since the epoch)."""
        count = len(self.ops) - self.committed
        if not count:
            return
        self.gtids.extend([gtid] * count)
        self.stamps.extend([commit_us] * count)
        self.committed += count

    def rollback(self, keep: int = 0) -> None:
        """Drop the open transaction's rows, or all but its first ``keep`` (ROLLBACK TO a savepoint)."""
        at = self.committed + keep
        for values in self._row_lists():
            del values[at:]

    def _row_lists(self) -> list[list[Any]]:
        """Return the lists holding one entry per row, open or committed (not the GTIDs and commit times)."""
        lists: list[list[Any]] = [self.images, self.ops, self.seqs, self.files, self.positions]
        return lists if self.befores is None else [*lists, self.befores]

    def take_committed(self) -> pa.RecordBatch:
        """Return the committed rows as one record batch and keep only the open transaction's rows."""
        batch = self._take(0, self.committed, self.gtids, self.stamps)
        self.gtids, self.stamps, self.committed = [], [], 0
        return batch

    def take_open(self) -> pa.RecordBatch:
        """Return the open transaction's rows (commit timestamp not known yet: epoch) and drop them."""
        count = len(self.ops) - self.committed
        return self._take(self.committed, len(self.ops), [None] * count, [0] * count)

    def _take(self, low: int, high: int, gtids: list[str | None], stamps: list[int]) -> pa.RecordBatch:
        """Return rows ``[low, high)`` with their GTIDs and commit times as a record batch, and drop them.

        :raises ValueConversionError: when a value does not fit its column's Arrow type (names the
            column and the first such row's event and GTID).
        """
        arrays = self._column_arrays(self.images[low:high], low, gtids)
        count, files = high - low, self.files[low:high]
        ops = "".join(self.ops[low:high]).encode()  # one ASCII character each
        file = files[0].encode() if count and files.count(files[0]) == count else None
        arrays += [
            _fixed_width_strings(ops, 1, count),
            pa.Array.from_buffers(pa.int64(), count, [None, pa.py_buffer(self._window_bytes * count)]),
            pa.array(self.seqs[low:high], pa.int64()),
            pa.array(gtids, pa.string()),
            pa.array(files, pa.string())
            if file is None
            else _fixed_width_strings(file * count, len(file), count),
            pa.array(self.positions[low:high], pa.int64()),
            # Microseconds since the epoch, viewed as timestamps (same layout; a cast would import
            # pyarrow.compute): pa.array of tz-aware datetimes costs ~1 us per row.
            pa.array(stamps, pa.int64()).view(_TIMESTAMP),
        ]
        if self.befores is not None:
            arrays.append(self._befores_array(self.befores[low:high], low, gtids))
        for values in self._row_lists():
            del values[low:high]
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)

    def _befores_array(
        self, befores: list[Sequence[Any] | None], low: int, gtids: list[str | None]
    ) -> pa.Array:
        """Return the struct array of rows ``[low, ...)``'s before images (null where a row has none)."""
        nulls = (None,) * len(self.columns)
        children = self._column_arrays(
            [nulls if before is None else before for before in befores], low, gtids
        )
        mask = pa.array([before is None for before in befores], pa.bool_())
        struct = self.schema.field(BEFORE_COLUMN).type
        return pa.StructArray.from_arrays(children, fields=list(struct), mask=mask)

    def _column_arrays(
        self, images: Sequence[Sequence[Any]], low: int, gtids: list[str | None]
    ) -> list[pa.Array]:
        """Return one array per column of ``images``, rows ``[low, ...)`` (see :meth:`_array`)."""
        # Lists: pa.array converts a tuple of integers about 30 times slower than a list of them.
        columns = [list(c) for c in zip(*images, strict=True)] or [[] for _ in self.columns]
        return [self._array(index, values, low, gtids) for index, values in enumerate(columns)]

    def _array(self, index: int, values: Sequence[Any], low: int, gtids: list[str | None]) -> pa.Array:
        arrow_type = self.columns[index].arrow_type
        try:
            return pa.array(values, type=arrow_type)
        except Exception as err:  # find the first row that does not fit, to say where it is
            found = 0
            for offset, value in enumerate(values):
                try:
                    pa.array([value], type=arrow_type)
                except Exception:
                    found = offset
                    break
            row = low + found
            raise ValueConversionError(
                self.labels[index], err, file=self.files[row], pos=self.positions[row], gtid=gtids[found]
            ) from err


def hold_batches(builder: ChangeBatchBuilder, batches: list[pa.RecordBatch]) -> None:
    """Put committed rows (batches of staged rows, final ``_binlog_seq``) into ``builder``, which holds no rows.

    For a reader that goes on where another stopped at a file's end: the rows are committed again
    transaction by transaction (by GTID and commit time), as they were built.
    """
    for batch in batches:
        values = [batch.column(name).to_pylist() for name in builder.names]
        befores: list[Any] = [None] * batch.num_rows
        if builder.befores is not None and BEFORE_COLUMN in batch.schema.names:
            struct = batch.column(BEFORE_COLUMN)
            images = zip(*(child.to_pylist() for child in struct.flatten()), strict=True)
            befores = [
                list(image) if valid else None
                for image, valid in zip(images, struct.is_valid().to_pylist(), strict=True)
            ]
        ops, seqs, files, positions, gtids = (
            batch.column(name).to_pylist()
            for name in (OP_COLUMN, SEQ_COLUMN, FILE_COLUMN, POS_COLUMN, GTID_COLUMN)
        )
        stamps = batch.column(TS_COLUMN).view(pa.int64()).to_pylist()
        commit: tuple[Any, Any] | None = None
        for i, image in enumerate(zip(*values, strict=True)):
            if commit is not None and commit != (gtids[i], stamps[i]):
                builder.commit(*commit)
            commit = (gtids[i], stamps[i])
            builder.add_values(ops[i], seqs[i], files[i], positions[i], list(image), befores[i])
        if commit is not None:
            builder.commit(*commit)


def _fixed_width_strings(data: bytes, width: int, count: int) -> pa.Array:
    """Return a string array of ``count`` values of ``width`` bytes each (UTF-8), ``data`` being them back to back.

    Built from its buffers (offsets ``0, width, 2 * width, ...``): ``pa.array`` of a list of strings costs about
    150 ns per value, and the op and binlog file columns hold one-character ops and, per batch, most often
    one file name. The offsets come from ``numpy.arange`` (pyarrow imports numpy): 1 us for 4,096 rows, against
    320 us for ``pa.array`` of a ``range`` (two columns of each of the 60 batches of 240,000 OLTP rows: 40 ms).
    """
    import numpy as np

    offsets = pa.py_buffer(np.arange(0, (count + 1) * width, width, dtype=np.int32))
    return pa.Array.from_buffers(pa.string(), count, [None, offsets, pa.py_buffer(data)])


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=UTC)
_TIMESTAMP = pa.timestamp("us", tz="UTC")


def truncate_marker(
    *, window: int, seq: int, gtid: str | None, file: str, pos: int, commit_ts: dt.datetime
) -> pa.RecordBatch:
    """Return the one-row batch of a truncate marker: :data:`CHANGE_FIELDS` only, ``_binlog_op`` = ``t``.

    A reader of the staged files sees every data column of the row as NULL (the column is absent from the
    marker's part file); the merge removes every row of the table ordered before it
    (:mod:`airflow_provider_binlog.jobs.merge.truncate`).

    :param seq: its ``_binlog_seq``, in the window's order with the row changes.
    :param pos: end position of the statement's event.
    :param commit_ts: the statement's commit time (UTC).
    """
    values = [OP_TRUNCATE, window, seq, gtid, file, pos, commit_ts]
    return pa.RecordBatch.from_arrays(
        [pa.array([v], f.type) for v, f in zip(values, CHANGE_FIELDS, strict=True)],
        schema=pa.schema(CHANGE_FIELDS),
    )


def with_commit(batch: pa.RecordBatch, *, gtid: str | None, commit_ts: dt.datetime) -> pa.RecordBatch:
    """Return ``batch`` (spilled before its commit was known) with its GTID and commit timestamp set."""
    count = batch.num_rows
    columns = list(batch.columns)
    names = batch.schema.names
    columns[names.index(GTID_COLUMN)] = pa.array([gtid] * count, pa.string())
    columns[names.index(TS_COLUMN)] = pa.array([commit_ts] * count, pa.timestamp("us", tz="UTC"))
    return pa.RecordBatch.from_arrays(columns, schema=batch.schema)
