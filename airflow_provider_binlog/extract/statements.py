"""Find the tables a statement-based DML statement of the binlog writes.

A session running with ``binlog_format=STATEMENT`` (or ``MIXED``) logs its DML as SQL text instead of row
images. The window reader decides by the tables such a statement writes whether it concerns the pipeline
(:meth:`~airflow_provider_binlog.extract.reader.WindowReader._query`): a statement writing no selected table is
ignored, one writing selected tables must be covered by a snapshot or the window fails.

The text is parsed with sqlglot's ``mysql`` dialect. Written tables are the target of ``INSERT`` / ``REPLACE``
(also ``INSERT ... SELECT``: the tables it reads are not written), the tables whose columns an ``UPDATE`` sets
(every table of a multi-table ``UPDATE`` when a set column is unqualified), the tables a ``DELETE`` deletes from
(``DELETE t1, t2 FROM ...`` and ``DELETE FROM t1, t2 USING ...`` included, aliases resolved), and the table of
``LOAD DATA ... INTO TABLE``. Unqualified names take the statement's default database (the ``db`` of its query
event). Where the answer is uncertain the result over-approximates: a wrong extra table asks for one
unnecessary re-snapshot, a missed one would lose rows.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from airflow_provider_binlog.contract.names import qualified_name, sql_name_parts

_LOAD_DATA_INTO = re.compile(
    r"^\s*LOAD\s+(?:XML|DATA)\b.*?\bINTO\s+TABLE\s+((?:`(?:[^`]|``)+`|[\w$]+)(?:\s*\.\s*(?:`(?:[^`]|``)+`|[\w$]+))?)",
    re.IGNORECASE | re.DOTALL,
)
_VERB_MODIFIERS = re.compile(
    r"^(\s*)(INSERT|REPLACE|UPDATE|DELETE)((?:\s+(?:LOW_PRIORITY|DELAYED|HIGH_PRIORITY|IGNORE|QUICK)\b)+)",
    re.IGNORECASE,
)
"""A DML verb with its MySQL modifiers, which sqlglot does not all parse; they change no written table."""


@dataclass(frozen=True)
class WrittenTables:
    """What a statement writes.

    :param tables: the ``db.table`` names it writes (unqualified names qualified with the default database;
        a name left without a database when there is none is ``.table``); empty when ``parsed`` is False.
    :param parsed: False when sqlglot could not parse the text (the caller must then assume the worst).
    :param error: the parser's message when ``parsed`` is False.
    """

    tables: tuple[str, ...]
    parsed: bool = True
    error: str = ""


def written_tables(sql: str, default_schema: str | None) -> WrittenTables:
    """Return the tables the DML statement ``sql`` writes.

    :param sql: the statement's text as logged (one statement).
    :param default_schema: the session's default database when the statement ran (``''`` or None for none).
    :returns: the written tables, or ``parsed=False`` with the reason when the text cannot be parsed or is no
        statement whose written tables are known (sqlglot fell back to an unparsed command).
    """
    import sqlglot
    from sqlglot import exp
    from sqlglot.errors import SqlglotError

    schema = default_schema or ""
    load = _LOAD_DATA_INTO.match(sql)
    if load is not None:
        return WrittenTables((qualify_name(load.group(1), schema),))
    # REPLACE writes the table INSERT would (sqlglot's mysql dialect reads REPLACE as an unparsed command).
    normalized = _VERB_MODIFIERS.sub(lambda m: m.group(1) + m.group(2), sql, count=1)
    normalized = re.sub(r"^(\s*)REPLACE\b", r"\1INSERT", normalized, count=1, flags=re.IGNORECASE)
    try:
        statements = [s for s in sqlglot.parse(normalized, read="mysql") if s is not None]
    except SqlglotError as err:
        return WrittenTables((), parsed=False, error=f"{type(err).__name__}: {_first_line(str(err))}")
    if len(statements) != 1:
        return WrittenTables((), parsed=False, error=f"{len(statements)} statements in one event")
    statement = statements[0]
    if isinstance(statement, exp.Insert):
        target = statement.this
        table = target.this if isinstance(target, exp.Schema) else target
        if isinstance(table, exp.Table):
            return WrittenTables((qualify_table(table, schema),))
    elif isinstance(statement, exp.Update):
        return WrittenTables(_updated(statement, schema))
    elif isinstance(statement, exp.Delete):
        return WrittenTables(_deleted(statement, schema))
    return WrittenTables(
        (), parsed=False, error=f"sqlglot read it as {type(statement).__name__}, not as INSERT/UPDATE/DELETE"
    )


def _updated(update: Any, schema: str) -> tuple[str, ...]:
    """Return the tables an UPDATE sets columns of (all its tables when that is unclear)."""
    from sqlglot import exp

    aliases = _table_refs(update, schema)
    written: set[str] = set()
    for assignment in update.expressions:
        column = assignment.this if isinstance(assignment, exp.EQ) else None
        qualifier = column.table if isinstance(column, exp.Column) else ""
        if not qualifier or qualifier.lower() not in aliases:
            return tuple(sorted(set(aliases.values())))
        written.add(aliases[qualifier.lower()])
    return tuple(sorted(written or set(aliases.values())))


def _deleted(delete: Any, schema: str) -> tuple[str, ...]:
    """Return the tables a DELETE deletes rows of (the named ones of a multi-table DELETE)."""
    from sqlglot import exp

    aliases = _table_refs(delete, schema)
    named = list(delete.args.get("tables") or [])
    if not named:  # DELETE FROM t ..., or DELETE FROM t1, t2 USING ... (the FROM list is t1 and its joins)
        target = delete.this
        if not isinstance(target, exp.Table):
            return tuple(sorted(set(aliases.values())))
        named = [target, *(join.this for join in target.args.get("joins") or [])]
    written = set()
    for table in named:
        if not isinstance(table, exp.Table):
            return tuple(sorted(set(aliases.values())))
        if not table.db and table.name.lower() in aliases:
            written.add(aliases[table.name.lower()])
        else:
            written.add(qualify_table(table, schema))
    return tuple(sorted(written))


def _table_refs(statement: Any, schema: str) -> dict[str, str]:
    """Return ``{alias or name (lowercase): db.table}`` of the tables the statement itself references.

    Tables inside subqueries are left out: they are read, never written.
    """
    from sqlglot import exp

    refs: dict[str, str] = {}
    for table in statement.find_all(exp.Table):
        if table.find_ancestor(exp.Subquery, exp.Select) is not None:
            continue
        name = qualify_table(table, schema)
        refs[(table.alias or table.name).lower()] = name
    return refs


def qualify_table(table: Any, schema: str) -> str:
    """Return the qualified name of a sqlglot table expression, in ``schema`` when it names no database."""
    return qualified_name(table.db or schema, table.name)


def qualify_name(name: str, schema: str) -> str:
    """Return ``db.table`` of a table name as written in SQL (backquoted or not), ``schema`` when unqualified."""
    parts = sql_name_parts(name)
    return qualified_name(*parts) if len(parts) == 2 else qualified_name(schema, parts[0])


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else text
