"""Reads of ``information_schema``: the one home of the table, column and key queries.

``information_schema`` describes tables as they are now, and lists only the tables and columns the user
holds a privilege on (MySQL manual, "INFORMATION_SCHEMA Tables"; MariaDB KB, "Information Schema Tables").
Every function takes a DB-API cursor on the source (default cursor: rows are tuples) and imports nothing
from Airflow.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from airflow_provider_binlog.contract.names import qualified_name, split_table_name

SYSTEM_SCHEMAS = ("mysql", "information_schema", "performance_schema", "sys")
"""Schemas of the server itself, never captured."""


@dataclass(frozen=True)
class TableInfo:
    """A source table as information_schema describes it now.

    :param name: ``db.table``.
    :param columns: column names in ordinal order.
    :param column_types: ``COLUMN_TYPE`` text per column (``bigint(20) unsigned``, ``enum('a','b')``).
    :param primary_key: primary key column names in key order; empty when the table has none.
    """

    name: str
    columns: list[str]
    column_types: list[str]
    primary_key: list[str]


def base_tables(cur: Any) -> list[str]:
    """Return ``db.table`` of every base table outside :data:`SYSTEM_SCHEMAS` (no views)."""
    placeholders = ", ".join(["%s"] * len(SYSTEM_SCHEMAS))
    cur.execute(
        "SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES "
        f"WHERE TABLE_TYPE = 'BASE TABLE' AND TABLE_SCHEMA NOT IN ({placeholders})",
        SYSTEM_SCHEMAS,
    )
    return [qualified_name(db, name) for db, name in cur.fetchall()]


def names_case_sensitive(cur: Any) -> bool:
    """Return whether the server compares database and table names as written (``lower_case_table_names=0``).

    1 and 2 compare them in lower case (MySQL manual, "Identifier Case Sensitivity"; the same in MariaDB).
    """
    cur.execute("SELECT @@lower_case_table_names")
    return int(cur.fetchone()[0]) == 0


def tables_info(cur: Any, tables: Iterable[str]) -> dict[str, TableInfo]:
    """Return the columns (ordinal order, with ``COLUMN_TYPE``) and primary key of each ``db.table`` of ``tables``.

    Two queries whatever the number of tables (:func:`_rows_of`); a table information_schema does not show (gone,
    or no privilege on it) has no columns.
    """
    tables = list(tables)
    found = {t: TableInfo(name=t, columns=[], column_types=[], primary_key=[]) for t in tables}
    for table, (column, column_type) in _rows_of(
        cur, "COLUMNS", "COLUMN_NAME, COLUMN_TYPE", tables, order="ORDINAL_POSITION"
    ):
        found[table].columns.append(str(column))
        found[table].column_types.append(str(column_type))
    for table, (column,) in _rows_of(
        cur,
        "KEY_COLUMN_USAGE",
        "COLUMN_NAME",
        tables,
        where="CONSTRAINT_NAME = 'PRIMARY'",
        order="ORDINAL_POSITION",
    ):
        found[table].primary_key.append(str(column))
    return found


def _rows_of(
    cur: Any, view: str, fields: str, tables: Sequence[str], *, where: str = "", order: str = ""
) -> Iterator[tuple[str, tuple[Any, ...]]]:
    """Yield ``(db.table, fields)`` of an information_schema view's rows of ``tables``, in one query.

    The query reads the tables' schemas only (``TABLE_SCHEMA IN (...)``: the server opens no other schema's
    tables) and the rows of other tables of those schemas are left out here.

    :param view: ``COLUMNS``, ``KEY_COLUMN_USAGE``, ``TABLES``. :param fields: its fields to return, SQL text.
    :param where: a further condition, SQL text. :param order: the order within a table, SQL text.
    """
    wanted = {split_table_name(t): t for t in tables}
    schemas = sorted({db for db, _ in wanted})
    if not schemas:
        return
    cur.execute(
        f"SELECT TABLE_SCHEMA, TABLE_NAME, {fields} FROM information_schema.{view} "
        f"WHERE TABLE_SCHEMA IN ({', '.join(['%s'] * len(schemas))}){f' AND {where}' if where else ''} "
        f"ORDER BY TABLE_SCHEMA, TABLE_NAME{f', {order}' if order else ''}",
        schemas,
    )
    for db, name, *rest in cur.fetchall():
        table = wanted.get((str(db), str(name)))
        if table is not None:
            yield table, tuple(rest)


def unique_keys(cur: Any, table: str) -> list[tuple[str, ...]]:
    """Return the table's unique indexes whose columns are all NOT NULL, as column tuples in index order.

    Such an index identifies rows as a primary key does (MySQL manual, "Unique Indexes": a UNIQUE index
    permits multiple NULL values).
    """
    db, name = split_table_name(table)
    cur.execute(
        "SELECT s.INDEX_NAME, s.COLUMN_NAME, c.IS_NULLABLE FROM information_schema.STATISTICS s "
        "JOIN information_schema.COLUMNS c ON c.TABLE_SCHEMA = s.TABLE_SCHEMA AND c.TABLE_NAME = s.TABLE_NAME "
        "AND c.COLUMN_NAME = s.COLUMN_NAME WHERE s.TABLE_SCHEMA = %s AND s.TABLE_NAME = %s AND s.NON_UNIQUE = 0 "
        "ORDER BY s.INDEX_NAME, s.SEQ_IN_INDEX",
        (db, name),
    )
    indexes: dict[str, list[tuple[str, str]]] = {}
    for index, column, nullable in cur.fetchall():
        indexes.setdefault(str(index), []).append((str(column), str(nullable)))
    return [tuple(c for c, _ in cols) for cols in indexes.values() if all(n == "NO" for _, n in cols)]


def estimated_rows(cur: Any, table: str) -> int:
    """Return ``TABLES.TABLE_ROWS`` of ``db.table``: exact for MyISAM, a sampled estimate for InnoDB (0 when unknown)."""
    return tables_rows(cur, [table])[table]


def tables_rows(cur: Any, tables: Iterable[str]) -> dict[str, int]:
    """Return :func:`estimated_rows` of each ``db.table`` of ``tables`` in one query (0 for a table not shown)."""
    tables = list(tables)
    found = dict.fromkeys(tables, 0)
    for table, (rows,) in _rows_of(cur, "TABLES", "TABLE_ROWS", tables):
        found[table] = int(rows or 0)
    return found


COLUMN_FIELDS = (
    "COLUMN_NAME",
    "DATA_TYPE",
    "COLUMN_TYPE",
    "NUMERIC_PRECISION",
    "NUMERIC_SCALE",
    "DATETIME_PRECISION",
    "CHARACTER_SET_NAME",
    "CHARACTER_OCTET_LENGTH",
)
"""The ``information_schema.COLUMNS`` fields :func:`column_descriptions` returns, in order."""


def column_descriptions(cur: Any, db: str, table: str) -> list[tuple[Any, ...]]:
    """Return one tuple of :data:`COLUMN_FIELDS` per column of ``db.table``, in ordinal order.

    Generated and invisible columns are included. Values come as the server sends them (text may be
    bytes); a dict cursor's rows are turned into tuples in :data:`COLUMN_FIELDS` order.
    """
    cur.execute(
        f"SELECT {', '.join(COLUMN_FIELDS)} FROM information_schema.COLUMNS "
        "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION",
        (db, table),
    )
    rows = []
    for row in cur.fetchall():
        if isinstance(row, dict):
            upper = {str(k).upper(): v for k, v in row.items()}
            row = tuple(upper[name] for name in COLUMN_FIELDS)
        rows.append(tuple(row))
    return rows
