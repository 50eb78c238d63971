"""The foreign keys of the selected tables, read from what a user with only SELECT on them sees (both flavors).

The key columns come from ``information_schema.KEY_COLUMN_USAGE``, the referential actions from ``SHOW CREATE
TABLE`` parsed with sqlglot: MariaDB 10.11 shows such a user no ``REFERENTIAL_CONSTRAINTS`` rows. Its own module
(not :mod:`.schema`): the Spark executors that read snapshot chunks import :mod:`.schema` and need no sqlglot.
Imports nothing from Airflow.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from airflow_provider_binlog.contract.foreign_keys import ACTING_RULES, ForeignKey
from airflow_provider_binlog.contract.names import database_of, qualified_name
from airflow_provider_binlog.source.sql import quote_table

FOREIGN_KEY_COLUMNS_SQL = """SELECT CONSTRAINT_SCHEMA, TABLE_NAME, CONSTRAINT_NAME, COLUMN_NAME,
  REFERENCED_TABLE_SCHEMA, REFERENCED_TABLE_NAME, REFERENCED_COLUMN_NAME
FROM information_schema.KEY_COLUMN_USAGE
WHERE REFERENCED_TABLE_NAME IS NOT NULL AND CONSTRAINT_SCHEMA IN ({schemas})
ORDER BY CONSTRAINT_SCHEMA, TABLE_NAME, CONSTRAINT_NAME, ORDINAL_POSITION"""
"""One query for the foreign-key columns of the given schemas, each with the column it references.

``KEY_COLUMN_USAGE`` lists them to a user with SELECT on the table; ``REFERENTIAL_CONSTRAINTS``, which holds
the referential actions, shows MariaDB 10.11 users with only SELECT nothing (measured: 0 rows for a user
with the grants the connection Test asks for), so the actions come from ``SHOW CREATE TABLE``
(:func:`referential_actions`), which SELECT shows."""

_ACTION = re.compile(r"ON (DELETE|UPDATE) (CASCADE|SET NULL|SET DEFAULT|RESTRICT|NO ACTION)", re.IGNORECASE)
DEFAULT_ACTION = "RESTRICT"
"""The action of a foreign key that names none (InnoDB: RESTRICT, MySQL manual "FOREIGN KEY Constraints")."""


def read_foreign_keys(cur: Any, children: Iterable[str]) -> list[ForeignKey]:
    """Return the acting foreign keys (:data:`~airflow_provider_binlog.contract.foreign_keys.ACTING_RULES`) whose child is one of ``children``.

    Read from what a user with SELECT on the tables sees on both flavors: the key columns from
    ``KEY_COLUMN_USAGE`` (:data:`FOREIGN_KEY_COLUMNS_SQL`, one query), the actions from ``SHOW CREATE TABLE`` of
    each child that has a foreign key (:func:`referential_actions`).

    :param cur: an open DB-API cursor on the source (pymysql).
    :param children: ``db.table`` names of the selected tables.
    """
    wanted = set(children)
    schemas = sorted({database_of(name) for name in wanted})
    if not schemas:
        return []
    cur.execute(FOREIGN_KEY_COLUMNS_SQL.format(schemas=", ".join(["%s"] * len(schemas))), schemas)
    grouped: dict[tuple[str, str], dict[str, Any]] = {}
    for schema, table, name, column, parent_schema, parent, referenced in cur.fetchall():
        child = qualified_name(schema, table)
        if child not in wanted:
            continue
        entry = grouped.setdefault(
            (child, str(name)),
            {
                "name": str(name),
                "child": child,
                "columns": [],
                "parent": qualified_name(parent_schema, parent),
                "referenced": [],
            },
        )
        entry["columns"].append(str(column))
        entry["referenced"].append(str(referenced))
    actions: dict[str, dict[str, tuple[str, str]]] = {}
    keys = []
    for (child, name), entry in grouped.items():
        if child not in actions:
            actions[child] = referential_actions(_create_statement(cur, child))
        on_delete, on_update = actions[child].get(name, (DEFAULT_ACTION, DEFAULT_ACTION))
        key = ForeignKey.from_manifest({**entry, "on_delete": on_delete, "on_update": on_update})
        if {on_delete, on_update} & ACTING_RULES:
            keys.append(key)
    return keys


def _create_statement(cur: Any, table: str) -> str:
    cur.execute(f"SHOW CREATE TABLE {quote_table(table)}")
    return str(cur.fetchone()[1])


def referential_actions(create_table: str) -> dict[str, tuple[str, str]]:
    """Return ``{constraint name: (ON DELETE action, ON UPDATE action)}`` of a ``SHOW CREATE TABLE`` statement.

    Parsed with sqlglot (MySQL dialect); an action a key does not name is :data:`DEFAULT_ACTION`.

    :raises sqlglot.errors.ParseError: when the statement cannot be parsed.
    """
    import sqlglot
    from sqlglot import exp

    found = {}
    for key in sqlglot.parse_one(create_table, read="mysql").find_all(exp.ForeignKey):
        constraint = key.parent
        if not isinstance(constraint, exp.Constraint):
            continue
        named = {"DELETE": DEFAULT_ACTION, "UPDATE": DEFAULT_ACTION}
        reference = key.args.get("reference")
        for option in reference.args.get("options") or [] if reference is not None else []:
            match = _ACTION.fullmatch(str(option).strip())
            if match:
                named[match.group(1).upper()] = match.group(2).upper()
        found[constraint.this.name] = (named["DELETE"], named["UPDATE"])
    return found
