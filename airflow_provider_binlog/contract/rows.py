"""Arrow operations on a table's rows shared by the merge's driver rewrite, the readers and maintenance.

:func:`conformed_rows` shapes rows like a table's schema (as a Delta reader sees a file written before a column
was added); :func:`newest_per_key` keeps each key's newest row by order key ``(_binlog_window, _binlog_seq)``, the
rule the Spark merge applies with a window function
(:func:`~airflow_provider_binlog.jobs.merge.transforms.latest_change_per_key`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_binlog.contract.columns import SEQ_COLUMN, WINDOW_COLUMN

SOURCE_RANK = "__binlog_source_rank"
"""Rank of a row's source in a merge: 0 for a target row, 1 for a window's change (the target's wins a tie)."""


def conformed_rows(data: pa.Table, schema: pa.Schema) -> pa.Table:
    """Return ``data`` with the columns and types of ``schema``, NULL where ``data`` lacks a column.

    Each column is matched by name in any letter case and cast (a lossless widening, or a staged type to its
    storage type).

    :raises pyarrow.ArrowInvalid: when a value does not fit its column's type.
    """
    present = {name.lower(): name for name in data.column_names}
    columns = [
        data[present[f.name.lower()]].cast(f.type)
        if f.name.lower() in present
        else pa.nulls(data.num_rows, f.type)
        for f in schema
    ]
    return pa.Table.from_arrays(columns, schema=pa.schema([f.remove_metadata() for f in schema]))


def without_positions(rows: pa.Table, positions: Iterable[int]) -> pa.Table:
    """Return ``rows`` (a data file's, in file order) without those at ``positions`` (its deletion vector's)."""
    import numpy as np

    dead = np.fromiter(positions, np.int64)
    if not dead.size:
        return rows
    keep = np.ones(rows.num_rows, dtype=bool)
    keep[dead] = False
    return rows.filter(pa.array(keep))


def first_of_each_key(ordered: pa.Table, keys: Sequence[str]) -> pa.Table:
    """Return the first row of each run of equal ``keys`` in a table sorted by them (keys never null)."""
    if ordered.num_rows == 0:
        return ordered
    differs = pa.array([True] + [False] * (ordered.num_rows - 1))
    for k in keys:
        column = ordered[k].combine_chunks()
        changed = pc.not_equal(column.slice(1), column.slice(0, len(column) - 1))
        differs = pc.or_(differs, pa.concat_arrays([pa.array([True]), pc.fill_null(changed, True)]))
    return ordered.filter(differs)


def newest_per_key(rows: pa.Table, keys: Sequence[str]) -> pa.Table:
    """Return each key's row with the newest order key, sorted by key; on a tie the lower :data:`SOURCE_RANK` wins.

    :param rows: rows with the key columns, ``_binlog_window``, ``_binlog_seq`` and :data:`SOURCE_RANK` (dropped
        from the result), none of them null.
    """
    ordered = rows.sort_by(
        [*((k, "ascending") for k in keys), (WINDOW_COLUMN, "descending"), (SEQ_COLUMN, "descending"),
         (SOURCE_RANK, "ascending")]
    )  # fmt: skip
    return first_of_each_key(ordered, keys).drop_columns([SOURCE_RANK])
