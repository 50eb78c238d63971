"""Chunk plans: a table split into key ranges that are read independently (and in parallel).

A chunk is the half-open key range ``(lower, upper]`` in the order of the table's primary key (or of
the unique key the user named); the first chunk has no lower bound and the last no upper bound, so
rows inserted beyond the ends while the snapshot runs are still read (or arrive through the binlog).
Bounds are found by walking the key index (``ORDER BY key LIMIT 1 OFFSET chunk_rows - 1``), which
gives chunks of equal row counts however the keys are distributed. Composite keys compare
lexicographically; the comparisons are written out as ``OR`` of prefix equalities so that MariaDB's
and MySQL's range optimizers turn them into index ranges (MariaDB KB, "Range Optimizer"; MySQL
manual, "Range Optimization").

Imports nothing from Airflow: the plan is read inside Spark tasks.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from airflow_provider_binlog.contract.names import split_table_name
from airflow_provider_binlog.snapshot.rows import describe_columns
from airflow_provider_binlog.source.schema import estimated_rows
from airflow_provider_binlog.source.sql import quote_identifier, quote_table

PLAN_NAME = "plan.json"
"""The plan's file in the snapshot folder, written by the snapshot operator and read by the snapshot job."""
CHUNK_ROWS = 50_000
"""Default rows per chunk: one ``SELECT`` of this many rows takes well under a second and ~10-50 MB."""

KeyValues = tuple[Any, ...]


def encode_value(value: Any) -> Any:
    """Return a JSON-safe form of a key value as pymysql returns it (ints and text stay as they are)."""
    if isinstance(value, bool) or value is None or isinstance(value, int | float | str):
        return value
    if isinstance(value, decimal.Decimal):
        return {"decimal": str(value)}
    if isinstance(value, bytes | bytearray):
        return {"bytes": base64.b64encode(bytes(value)).decode()}
    if isinstance(value, dt.datetime):
        return {"datetime": value.isoformat()}
    if isinstance(value, dt.date):
        return {"date": value.isoformat()}
    if isinstance(value, dt.timedelta):
        return {"time_us": value // dt.timedelta(microseconds=1)}
    raise ValueError(f"key value {value!r} of type {type(value).__name__} cannot bound a chunk")


def decode_value(value: Any) -> Any:
    """Invert :func:`encode_value`."""
    if not isinstance(value, dict):
        return value
    ((kind, text),) = value.items()
    decoders: dict[str, Callable[[Any], Any]] = {
        "decimal": decimal.Decimal,
        "bytes": base64.b64decode,
        "datetime": dt.datetime.fromisoformat,
        "date": dt.date.fromisoformat,
        "time_us": lambda us: dt.timedelta(microseconds=us),
    }
    return decoders[kind](text)


@dataclass(frozen=True)
class Chunk:
    """One key range ``(lower, upper]`` of a table; ``None`` is unbounded.

    :param index: position of the chunk in key order, from 0.
    :param lower: key values the chunk starts after (exclusive).
    :param upper: key values the chunk ends with (inclusive).
    """

    index: int
    lower: KeyValues | None
    upper: KeyValues | None

    def to_json(self) -> dict[str, Any]:
        """Return the plan-file form."""
        return {
            "index": self.index,
            "lower": None if self.lower is None else [encode_value(v) for v in self.lower],
            "upper": None if self.upper is None else [encode_value(v) for v in self.upper],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Chunk:
        """Build a chunk from :meth:`to_json` output."""

        def bound(values: list[Any] | None) -> KeyValues | None:
            return None if values is None else tuple(decode_value(v) for v in values)

        return cls(index=int(data["index"]), lower=bound(data["lower"]), upper=bound(data["upper"]))


def greater_than(key: Sequence[str], values: KeyValues) -> tuple[str, list[Any]]:
    """Return ``(sql, params)`` for ``(key) > (values)`` in lexicographic order.

    ``(a, b) > (x, y)`` is written ``a > x OR (a = x AND b > y)``.
    """
    return _lexicographic(key, values, ">", inclusive=False)


def at_most(key: Sequence[str], values: KeyValues) -> tuple[str, list[Any]]:
    """Return ``(sql, params)`` for ``(key) <= (values)`` in lexicographic order."""
    return _lexicographic(key, values, "<", inclusive=True)


def _lexicographic(
    key: Sequence[str], values: KeyValues, op: str, *, inclusive: bool
) -> tuple[str, list[Any]]:
    if len(key) != len(values):
        raise ValueError(f"key {list(key)} has {len(key)} columns but the bound has {len(values)} values")
    terms, params = [], []
    for i, column in enumerate(key):
        equal = [f"{quote_identifier(c)} = %s" for c in key[:i]]
        terms.append("(" + " AND ".join([*equal, f"{quote_identifier(column)} {op} %s"]) + ")")
        params += [*values[:i], values[i]]
    if inclusive:
        terms.append("(" + " AND ".join(f"{quote_identifier(c)} = %s" for c in key) + ")")
        params += list(values)
    return "(" + " OR ".join(terms) + ")", params


def range_condition(key: Sequence[str], chunk: Chunk) -> tuple[str, list[Any]]:
    """Return ``(sql, params)`` selecting the chunk's key range (``1 = 1`` for a one-chunk table)."""
    parts, params = [], []
    for values, build in ((chunk.lower, greater_than), (chunk.upper, at_most)):
        if values is not None:
            sql, bound_params = build(key, values)
            parts.append(sql)
            params += bound_params
    return (" AND ".join(parts) or "1 = 1"), params


def chunk_query(
    table: str, select_list: Sequence[str], key: Sequence[str], chunk: Chunk
) -> tuple[str, list[Any]]:
    """Return the ``SELECT`` reading one chunk in key order."""
    where, params = range_condition(key, chunk)
    order = ", ".join(quote_identifier(c) for c in key)
    return f"SELECT {', '.join(select_list)} FROM {quote_table(table)} WHERE {where} ORDER BY {order}", params


@dataclass(frozen=True)
class TablePlan:
    """How one table is read: its key and its chunks.

    :param name: ``db.table``.
    :param key: key columns (primary key, or the unique key the user named).
    :param chunks: chunks in key order; together they cover every key.
    :param columns: the staged column descriptions at planning time (manifest form).
    :param estimated_rows: ``information_schema.TABLES.TABLE_ROWS`` (an estimate on InnoDB).
    """

    name: str
    key: tuple[str, ...]
    chunks: tuple[Chunk, ...]
    columns: tuple[dict[str, str], ...]
    estimated_rows: int

    def to_json(self) -> dict[str, Any]:
        """Return the plan-file form."""
        return {
            "name": self.name,
            "key": list(self.key),
            "chunks": [c.to_json() for c in self.chunks],
            "columns": list(self.columns),
            "estimated_rows": self.estimated_rows,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TablePlan:
        """Build a table plan from :meth:`to_json` output."""
        return cls(
            name=str(data["name"]),
            key=tuple(data["key"]),
            chunks=tuple(Chunk.from_json(c) for c in data["chunks"]),
            columns=tuple(data["columns"]),
            estimated_rows=int(data["estimated_rows"]),
        )


def chunk_bounds(cur: Any, table: str, key: Sequence[str], chunk_rows: int) -> list[Chunk]:
    """Walk the key index of ``table`` and return its chunks of ``chunk_rows`` rows (the last may be smaller).

    One query per chunk reads ``chunk_rows`` index entries; no rows are locked (plain consistent reads).

    :param cur: a cursor on the source.
    :param table: ``db.table``.
    :param key: key columns in index order.
    :param chunk_rows: rows per chunk (>= 1).
    :raises ValueError: when ``chunk_rows`` < 1.
    """
    if chunk_rows < 1:
        raise ValueError(f"chunk_rows must be >= 1, got {chunk_rows}")
    columns, order = ", ".join(quote_identifier(c) for c in key), ", ".join(quote_identifier(c) for c in key)
    chunks: list[Chunk] = []
    lower: KeyValues | None = None
    while True:
        where, params = greater_than(key, lower) if lower is not None else ("1 = 1", [])
        cur.execute(
            f"SELECT {columns} FROM {quote_table(table)} WHERE {where} ORDER BY {order} "
            f"LIMIT 1 OFFSET {chunk_rows - 1}",
            params,
        )
        row = cur.fetchone()
        upper = None if row is None else tuple(row)
        chunks.append(Chunk(index=len(chunks), lower=lower, upper=upper))
        if upper is None:
            return chunks
        lower = upper


def plan_snapshot(
    cur: Any,
    *,
    pipeline: str,
    seq: int,
    run_id: str,
    flavor: str,
    start: dict[str, Any],
    keys: Mapping[str, Sequence[str]],
    chunk_rows: int = CHUNK_ROWS,
) -> dict[str, Any]:
    """Return the plan document (``plan.json``) of a snapshot: each table's columns, key and chunks.

    :param cur: a cursor on the source.
    :param pipeline: pipeline name.
    :param seq: the snapshot's sequence number.
    :param run_id: the run that started it.
    :param flavor: ``mysql`` or ``mariadb``.
    :param start: the snapshot's start position (``{"file", "pos", "gtid_set"}``).
    :param keys: ``{"db.table": key columns}`` of the tables to read.
    :param chunk_rows: rows per chunk.
    A table with a column that cannot be staged is planned without columns: each of its chunks is then refused
    when read (:func:`~airflow_provider_binlog.snapshot.chunks.read_chunk`), which quarantines that table alone.

    :raises ValueError: when ``chunk_rows`` < 1.
    """
    tables = []
    for name, key in keys.items():
        db, table = split_table_name(name)
        columns = _planned_columns(cur, db, table)
        chunks = tuple(chunk_bounds(cur, name, key, chunk_rows))
        tables.append(TablePlan(name, tuple(key), chunks, columns, estimated_rows(cur, name)).to_json())
    return {
        "format_version": 1,
        "pipeline": pipeline,
        "seq": seq,
        "run_id": run_id,
        "flavor": flavor,
        "start": start,
        "chunk_rows": chunk_rows,
        "tables": tables,
    }


def _planned_columns(cur: Any, db: str, table: str) -> tuple[dict[str, Any], ...]:
    """Return the staged column specs of ``db.table`` for its plan, or ``()`` when one cannot be staged."""
    try:
        return tuple(c.spec.to_manifest() for c in describe_columns(cur, db, table))
    except ValueError:  # refused again, with this message, by each chunk's read
        return ()
