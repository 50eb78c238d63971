"""Row-by-row comparison of a source table with its target table (``BinlogValidateOperator``, demo, tests).

Both sides are read into canonical rows keyed by primary key (:func:`canonical`: float widths, unsigned
integers, BIT and TIMESTAMP forms made comparable) and compared key by key and column by column.
"""

from __future__ import annotations

import datetime as dt
import decimal
import struct
from dataclasses import dataclass, field
from typing import Any

from airflow_provider_binlog.contract.columns import UTC
from airflow_provider_binlog.contract.names import split_table_name
from airflow_provider_binlog.source.sql import quote_identifier, quote_table


@dataclass
class TableComparison:
    """Result of comparing one table.

    :param table: ``db.table``.
    :param source_rows: rows in the source table.
    :param target_rows: live rows in the target table.
    :param missing: primary keys in the source but not the target.
    :param extra: primary keys in the target but not the source.
    :param different: primary keys whose column values differ.
    :param columns: for each key in ``different``, the names of the columns that differ.
    """

    table: str
    source_rows: int
    target_rows: int
    missing: list[tuple[Any, ...]] = field(default_factory=list)
    extra: list[tuple[Any, ...]] = field(default_factory=list)
    different: list[tuple[Any, ...]] = field(default_factory=list)
    columns: dict[tuple[Any, ...], list[str]] = field(default_factory=dict)

    @property
    def keys(self) -> list[tuple[Any, ...]]:
        """Return every key that does not match (missing, extra or different)."""
        return [*self.missing, *self.extra, *self.different]

    @property
    def matched(self) -> bool:
        """Return True when both sides hold exactly the same rows."""
        return not (self.missing or self.extra or self.different) and self.source_rows == self.target_rows

    def __str__(self) -> str:
        verdict = "MATCH" if self.matched else "MISMATCH"
        detail = (
            ""
            if self.matched
            else (f" missing={self.missing[:5]} extra={self.extra[:5]} different={self.different[:5]}")
        )
        return f"{self.table}: {verdict} source={self.source_rows} target={self.target_rows}{detail}"


def canonical(value: Any, mysql_type: str) -> Any:
    """Return a comparable form of a value from either side (float widths, unsigned as int, BIT as int)."""
    if value is None:
        return None
    base = mysql_type.split("(")[0].strip().lower()
    if base == "float":
        return struct.unpack("f", struct.pack("f", float(value)))[0]
    if (
        isinstance(value, decimal.Decimal)
        and value == value.to_integral_value()
        and base in ("bigint", "int")
    ):
        return int(value)
    if base == "bit":
        return int.from_bytes(value, "big") if isinstance(value, bytes) else int(value)
    if isinstance(value, memoryview | bytearray):
        return bytes(value)
    if base == "timestamp" and isinstance(value, dt.datetime):
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    if base == "year":
        return int(value)
    return value


def _key_columns(cur: Any, db: str, name: str) -> list[str]:
    cur.execute(
        "SELECT COLUMN_NAME FROM information_schema.KEY_COLUMN_USAGE WHERE TABLE_SCHEMA = %s "
        "AND TABLE_NAME = %s AND CONSTRAINT_NAME = 'PRIMARY' ORDER BY ORDINAL_POSITION",
        (db, name),
    )
    return [str(r[0]) for r in cur.fetchall()]


@dataclass
class SourceTable:
    """A source table read for comparison: columns, types, key columns and rows by key."""

    columns: list[str]
    types: list[str]
    key: list[str]
    rows: dict[tuple[Any, ...], tuple[Any, ...]]

    def keyed(self, rows: list[tuple[Any, ...]]) -> dict[tuple[Any, ...], tuple[Any, ...]]:
        """Return canonical ``rows`` (in column order) keyed by their primary key."""
        index = [self.columns.index(k) for k in self.key]
        out = {}
        for raw in rows:
            row = tuple(canonical(v, t) for v, t in zip(raw, self.types, strict=True))
            out[tuple(row[i] for i in index)] = row
        return out


def read_source(conn: Any, table: str, keys: list[tuple[Any, ...]] | None = None) -> SourceTable:
    """Read a source table (session time zone UTC) into canonical rows keyed by primary key.

    :param conn: a pymysql connection.
    :param table: ``db.table`` (quoted as identifiers, so any name works).
    :param keys: read only the rows with these primary keys (canonical values), in batches; None reads all.
    """
    db, name = split_table_name(table)
    with conn.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")
        cur.execute(
            "SELECT COLUMN_NAME, COLUMN_TYPE FROM information_schema.COLUMNS "
            "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION",
            (db, name),
        )
        meta = cur.fetchall()
        source = SourceTable(
            [str(m[0]) for m in meta], [str(m[1]) for m in meta], _key_columns(cur, db, name), {}
        )
        if keys is None:
            cur.execute(f"SELECT * FROM {quote_table(table)}")
            source.rows = source.keyed(list(cur.fetchall()))
            return source
        row_key = "(" + ", ".join(quote_identifier(k) for k in source.key) + ")"
        one = "(" + ", ".join(["%s"] * len(source.key)) + ")"
        for start in range(0, len(keys), _KEY_BATCH):
            batch = keys[start : start + _KEY_BATCH]
            cur.execute(
                f"SELECT * FROM {quote_table(table)} WHERE {row_key} IN ({', '.join([one] * len(batch))})",
                [value for key in batch for value in key],
            )
            source.rows.update(source.keyed(list(cur.fetchall())))
    return source


_KEY_BATCH = 500
"""Keys per ``IN`` list when :func:`read_source` reads single rows."""


def read_target(
    source: SourceTable, target_path: str, table: str, keys: list[tuple[Any, ...]] | None = None
) -> dict[tuple[Any, ...], tuple[Any, ...]]:
    """Return the target table's live rows, in ``source``'s columns, canonical and keyed by primary key.

    :param keys: keep only these keys; None keeps all.
    """
    from airflow_provider_binlog.target import read_table

    live = read_table(target_path, table)
    records = live.select(source.columns).to_pylist() if live.num_rows else []
    rows = source.keyed([tuple(r[c] for c in source.columns) for r in records])
    return rows if keys is None else {k: rows[k] for k in keys if k in rows}


def diff(
    table: str,
    source: SourceTable,
    target: dict[tuple[Any, ...], tuple[Any, ...]],
    keys: list[tuple[Any, ...]] | None = None,
) -> TableComparison:
    """Compare ``source.rows`` with ``target`` (canonical rows by key), over ``keys`` or every key."""
    scope = set(source.rows) | set(target) if keys is None else set(keys)
    result = TableComparison(
        table=table,
        source_rows=sum(1 for k in scope if k in source.rows),
        target_rows=sum(1 for k in scope if k in target),
    )
    result.missing = sorted((k for k in scope if k in source.rows and k not in target), key=repr)
    result.extra = sorted((k for k in scope if k in target and k not in source.rows), key=repr)
    result.different = sorted(
        (k for k in scope if k in source.rows and k in target and source.rows[k] != target[k]), key=repr
    )
    result.columns = {
        k: [c for c, a, b in zip(source.columns, source.rows[k], target[k], strict=True) if a != b]
        for k in result.different
    }
    return result


def compare_table(conn: Any, target_path: str, table: str) -> TableComparison:
    """Compare the source table (over ``conn``, a pymysql connection) with the target's live rows."""
    source = read_source(conn, table)
    return diff(table, source, read_target(source, target_path, table))
