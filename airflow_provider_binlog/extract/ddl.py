"""Decide what a DDL statement of the binlog means for the selected tables.

A row-based binlog carries DDL as SQL text (a query event) and row images only for rows that statements
change afterwards. Some schema changes the target can follow from that alone; for others the binlog does
not carry what the target needs (the value an ``ADD COLUMN ... DEFAULT`` gives every existing row, the
values of a renamed column in rows no later statement touches, the rows a ``TRUNCATE`` removed). Each
statement is parsed with sqlglot's ``mysql`` dialect and every selected table it touches gets one
:data:`DdlAction`:

* ``ignore``: nothing a row of the target shows changes (indexes, keys other than the primary key,
  foreign keys, comments, engine and other table options, a column's default for later inserts, triggers,
  views, routines, users, grants, ``ANALYZE``/``OPTIMIZE``/``CHECK``).
* ``follow``: the row images that follow carry everything: ``ADD COLUMN`` that is nullable with no
  default (or ``DEFAULT NULL``), not generated, not ``AUTO_INCREMENT`` and not a ``TIMESTAMP`` (which
  MySQL may make ``NOT NULL DEFAULT CURRENT_TIMESTAMP`` implicitly), of a name the target does not still hold
  (below); ``DROP COLUMN`` (:attr:`DdlEffect.dropped`: the target keeps the column); ``MODIFY`` and
  ``CHANGE`` that keep the column's name (the merge follows the new type, see ``docs/schema-changes.md``);
  ``CREATE TABLE`` (also ``LIKE`` and ``AS SELECT``): a new table is captured from its first row;
  ``TRUNCATE TABLE``, ``DROP TABLE``, ``DROP DATABASE`` and the source of a ``RENAME TABLE``: the table is
  emptied at the statement's place in the order (:attr:`DdlEffect.empties`; the extract stages a truncate
  marker, ``docs/adr/0015-truncate-marker.md``).
* ``resnapshot``: the binlog does not carry what the target needs: every other ``ADD COLUMN``, ``CHANGE``
  or ``RENAME COLUMN`` that renames, primary key changes, ``CONVERT TO CHARACTER SET``,
  ``CREATE OR REPLACE TABLE``, the destination of a ``RENAME TABLE``, and anything that cannot be parsed or
  is not known to be harmless while it names a selected table. Also an ``ADD COLUMN`` of a name whose
  dropped column the target still holds (``kept`` of :func:`classify_ddl`, or a ``DROP COLUMN`` earlier in
  the statement): every row not written since would show the old column's value where the source has NULL.
  The rule over-approximates: an extra snapshot costs time, a missed one loses rows.
* A ``MODIFY``/``CHANGE`` of a column's type under a ``sql_mode`` without strict mode (the server may clamp
  or cut stored values without row events) is ``resnapshot`` with the columns it retypes
  (:attr:`DdlEffect.retyped`): the window reader follows it instead when the table maps before and after it
  show a lossless widening of each (:func:`keeps_values`).

Names are matched case-insensitively (``lower_case_table_names`` differs between servers; a false match
costs one snapshot). Unqualified names take the statement's default database (the ``db`` of its query
event, MySQL manual "Query_log_event").

About 550 lines because the classifier and :func:`keeps_values` (whether a type change keeps every stored
value) answer one question, what a statement means for the target, and cite the same manual sections.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal

from airflow_provider_binlog.contract.names import (
    database_of,
    name_fold,
    qualified_name,
    split_table_name,
    table_part,
)
from airflow_provider_binlog.extract.statements import qualify_name, qualify_table

if TYPE_CHECKING:
    from airflow_provider_binlog.extract.events.tablemap import Column, TableMapColumn

DdlAction = Literal["ignore", "follow", "resnapshot"]
Emptied = Literal["", "truncated", "dropped"]
"""How a followed statement empties a table: ``truncated`` (``TRUNCATE``), ``dropped`` (``DROP TABLE``,
``DROP DATABASE``, renamed away), or ``''`` (it does not)."""
_Decision = Literal["ignore", "follow", "dropped_column", "retyped", "truncated", "dropped", "resnapshot"]
"""What :func:`_effects` finds per table: an action, a ``follow`` that empties the table, ``dropped_column`` (a
followed ``DROP COLUMN``) or ``retyped`` (a non-strict ``MODIFY``/``CHANGE``); for these two :func:`_effects`
gives the column as the reason."""

_IDENT = r"(?:`(?:[^`]|``)+`|[\w$]+)"
_NAME = rf"{_IDENT}(?:\s*\.\s*{_IDENT})?"
_RENAME_TABLE = re.compile(r"^\s*RENAME\s+TABLES?\s+(.*)$", re.IGNORECASE | re.DOTALL)
_LEADING_COMMENTS = re.compile(r"^(?:\s+|--[^\n]*(?:\n|$)|#[^\n]*(?:\n|$)|/\*(?!!).*?\*/)*", re.DOTALL)
"""Whitespace and comments before a statement (a client sends them along: ``-- why\nCREATE TABLE ...``);
``/*! ... */`` is executable and stays."""
_CREATE_TABLE = re.compile(
    rf"^\s*CREATE\s+(OR\s+REPLACE\s+)?(TEMPORARY\s+)?TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?({_NAME})",
    re.IGNORECASE,
)
"""``CREATE TABLE`` in any form, read by its head alone: what the table looks like does not change what the
pipeline does with it, and sqlglot does not parse every column definition (``SERIAL DEFAULT VALUE``, spatial
types ...)."""
_RENAME_PAIR = re.compile(rf"^\s*({_NAME})\s+TO\s+({_NAME})\s*$", re.IGNORECASE | re.DOTALL)
_HARMLESS = re.compile(
    r"^\s*(?:"
    r"(?:CREATE|DROP|ALTER)\s+(?:OR\s+REPLACE\s+)?(?:DEFINER\s*=\s*\S+\s+)?(?:SQL\s+SECURITY\s+\w+\s+)?"
    r"(?:ALGORITHM\s*=\s*\w+\s+)?(?:TRIGGER|VIEW|PROCEDURE|FUNCTION|EVENT|USER|ROLE|SERVER|SEQUENCE)\b"
    r"|(?:CREATE|ALTER)\s+(?:DATABASE|SCHEMA)\b"
    r"|(?:GRANT|REVOKE|ANALYZE|OPTIMIZE|CHECK|FLUSH|SET|INSTALL|UNINSTALL|CHECKSUM)\b"
    r")",
    re.IGNORECASE,
)
"""Statements that change no row of any table: triggers, views, routines, events, users, grants, maintenance.

``CREATE/ALTER DATABASE`` change only defaults for later tables (``DROP DATABASE`` drops every table of the
database). ``OPTIMIZE`` rebuilds a table with the same rows. Checked before parsing: sqlglot does not parse
every form (``CREATE DEFINER=... TRIGGER`` as MariaDB logs it)."""
_IGNORED_ACTIONS = frozenset({"AddConstraint", "AlterColumn", "ForceProperty", "AlterIndex", "AlterSortKey"})
"""ALTER TABLE actions that change no value: indexes, keys and constraints, a column's default, a rebuild."""
_IGNORED_DROPS = frozenset({"INDEX", "KEY", "FOREIGN KEY", "CONSTRAINT", "CHECK"})


@dataclass(frozen=True)
class DdlEffect:
    """What one DDL statement does to one selected table.

    :param table: the selected table, ``db.table`` as the pipeline names it.
    :param action: see :data:`DdlAction`.
    :param reason: why, in a few words (for the task log and the manifest).
    :param empties: whether the statement removes every row of the table at its place in the order
        (action ``follow``): the extract stages a truncate marker there (:data:`Emptied`).
    :param retyped: the columns a ``MODIFY``/``CHANGE`` under a non-strict ``sql_mode`` gave another type
        (action ``resnapshot``, the statement's only reason for it): the change may be followed when each
        keeps every stored value (:func:`keeps_values`).
    :param dropped: the columns a ``DROP COLUMN`` of the statement removed: the target keeps them, with the
        values of the rows not written since, so a later ``ADD COLUMN`` of one of these names cannot be followed
        (``kept`` of :func:`classify_ddl`) until a snapshot of the table replaces its schema.
    """

    table: str
    action: DdlAction
    reason: str
    empties: Emptied = ""
    retyped: tuple[str, ...] = ()
    dropped: tuple[str, ...] = ()


NEW_TABLE = "CREATE TABLE: a new table is captured from its first row"
"""Why a ``CREATE TABLE`` is followed, unless the target holds rows under that name (see :func:`classify_ddl`)."""


def classify_ddl(
    sql: str,
    default_schema: str | None,
    selected: Iterable[str],
    captured: Iterable[str] = (),
    *,
    sql_mode: int | None = None,
    kept: Mapping[str, Iterable[str]] | None = None,
    case_sensitive: bool = True,
) -> list[DdlEffect]:
    """Return the effect of the DDL statement ``sql`` on each of the ``selected`` tables it touches.

    :param sql: one statement as logged in a query event.
    :param default_schema: the session's default database when it ran (``''`` or None for none).
    :param selected: ``db.table`` names of the tables the pipeline captures.
    :param captured: those of them the target already holds rows of: a ``CREATE TABLE`` of such a name (its
        table was dropped or renamed in an earlier window, when the extract no longer saw it) is re-snapshotted,
        so the old rows do not stay beside the new table's (the target keeps the old table's columns, which
        only a snapshot replaces).
    :param sql_mode: the session's ``sql_mode`` bits from the query event's status variables (``Q_SQL_MODE_CODE``),
        None when the event carries none: a ``MODIFY``/``CHANGE`` under a mode with neither
        ``STRICT_TRANS_TABLES`` nor ``STRICT_ALL_TABLES`` is re-snapshotted (:func:`is_strict`).
    :param kept: per selected table, the columns its target still holds although the source dropped them
        (:attr:`DdlEffect.dropped` of earlier statements, since the table's last snapshot): an ``ADD COLUMN`` of
        one of these names is re-snapshotted.
    :param case_sensitive: whether the source compares database and table names case-sensitively
        (``lower_case_table_names=0``, :attr:`~airflow_provider_binlog.source.server.ServerState.case_sensitive_names`):
        then ``DROP TABLE shop.ORDERS`` does not touch ``shop.orders``. Column names always compare
        case-insensitively (MySQL manual, "Identifier Case Sensitivity").
    :returns: one effect per selected table the statement touches (``ignore`` ones included), sorted by
        table; empty when it touches none. A statement that cannot be parsed touches every selected table
        whose name appears in its text, with action ``resnapshot``.
    """
    fold = name_fold(case_sensitive)
    by_folded = {fold(name): name for name in selected}
    in_target = {fold(name) for name in captured}
    held = {fold(table): {c.lower() for c in columns} for table, columns in (kept or {}).items()}
    found = _effects(sql, default_schema or "", strict=is_strict(sql_mode), kept=held, fold=fold)
    if found is None:
        return _unparsed(sql, selected)
    effects: dict[str, DdlEffect] = {}
    ranks: dict[str, int] = {}
    retyped: dict[str, list[str]] = {}
    dropped: dict[str, list[str]] = {}
    for name, action, reason in found:
        db, table_name = split_table_name(name)
        if table_name == EVERY_TABLE:  # DROP DATABASE
            tables = [t for n, t in by_folded.items() if fold(database_of(t)) == fold(db)]
        else:
            tables = [by_folded[fold(name)]] if fold(name) in by_folded else []
        for table in tables:
            if reason == NEW_TABLE and fold(table) in in_target:
                action, reason = "resnapshot", "CREATE TABLE of a name the target holds rows of"
            if action == "retyped":
                retyped.setdefault(table, []).append(reason)  # its reason is the column
            if action == "dropped_column":
                dropped.setdefault(table, []).append(reason)  # its reason is the column
            known = ranks.get(table)
            if known is None or _RANK[action] > known:
                ranks[table] = _RANK[action]
                effects[table] = _effect(table, action, reason)
    for table, columns in retyped.items():
        if ranks[table] == _RANK["retyped"]:  # no stronger decision: a re-snapshot unless values are kept
            effects[table] = _retyped(table, columns)
    for table, columns in dropped.items():
        effects[table] = replace(effects[table], dropped=tuple(columns))
    return [effects[t] for t in sorted(effects)]


_RANK: dict[_Decision, int] = {
    "ignore": 0,
    "follow": 1,
    "dropped_column": 1,
    "retyped": 2,
    "truncated": 3,
    "dropped": 3,
    "resnapshot": 4,
}
_Found = list[tuple[str, _Decision, str]]

STRICT_MODES = {"STRICT_TRANS_TABLES": 1 << 21, "STRICT_ALL_TABLES": 1 << 22}
"""``sql_mode`` bits of the strict modes, the same in MySQL and MariaDB (``sql/sql_class.h``: ``MODE_REAL_AS_FLOAT``
is bit 0, each mode after it the next bit, ``MODE_STRICT_TRANS_TABLES`` bit 21); the query event logs the
session's mode as these bits (measured on MariaDB 10.11: its default mode logs ``STRICT_TRANS_TABLES`` as
``1 << 21``)."""


def is_strict(sql_mode: int | None) -> bool:
    """Return whether a session ``sql_mode`` (bits, None when not logged) refuses values that do not fit.

    Under strict mode an ``ALTER TABLE ... MODIFY`` whose stored values do not fit the new type fails; without
    it the server clamps numbers and cuts text with warnings only, and logs no row event for the rows it
    changed. None (no ``Q_SQL_MODE_CODE`` in the event) is taken as strict, the default since MySQL 5.7 and
    MariaDB 10.2.4.
    """
    return sql_mode is None or any(sql_mode & bit for bit in STRICT_MODES.values())


def _effect(table: str, decision: _Decision, reason: str) -> DdlEffect:
    if decision == "truncated" or decision == "dropped":
        return DdlEffect(table, "follow", reason, empties=decision)
    if decision == "dropped_column":
        return DdlEffect(table, "follow", f"DROP COLUMN {reason}")
    if decision == "retyped":
        return _retyped(table, [reason])
    return DdlEffect(table, decision, reason)


def _retyped(table: str, columns: list[str]) -> DdlEffect:
    return DdlEffect(
        table,
        "resnapshot",
        f"MODIFY/CHANGE of column(s) {', '.join(columns)} under a sql_mode without STRICT_TRANS_TABLES or "
        "STRICT_ALL_TABLES may clamp or cut stored values without row events",
        retyped=tuple(columns),
    )


EVERY_TABLE = "\0"
"""The table part that stands for every table of a database in :func:`_effects` (``DROP DATABASE``): NUL, which no
table name holds (MySQL manual, "Schema Object Names"), so a table named ``*`` is only itself."""


def _effects(
    sql: str,
    schema: str,
    *,
    strict: bool,
    kept: Mapping[str, set[str]] | None,
    fold: Callable[[str], str],
) -> _Found | None:
    """Return ``[(db.table, action, reason)]`` for every table the statement names, None when unparsed.

    ``kept``: per table (``db.table`` under ``fold``, :func:`~airflow_provider_binlog.contract.names.name_fold`:
    case-sensitive unless the server folds names), the names (lower case) of the dropped columns its target
    still holds (see :func:`classify_ddl`).
    """
    import sqlglot
    from sqlglot import exp
    from sqlglot.errors import SqlglotError

    sql = _LEADING_COMMENTS.sub("", sql, count=1)
    if (rename := _RENAME_TABLE.match(sql)) is not None:
        return _rename_tables(rename.group(1), schema)
    if _HARMLESS.match(sql):
        return []
    if (create := _CREATE_TABLE.match(sql)) is not None:
        return _create(create, schema)
    try:
        statements = [s for s in sqlglot.parse(sql, read="mysql") if s is not None]
    except SqlglotError:
        return None
    if len(statements) != 1:
        return None
    statement = statements[0]
    if isinstance(statement, exp.Alter) and str(statement.args.get("kind") or "").upper() == "TABLE":
        return _alter(statement, schema, strict=strict, kept=kept or {}, fold=fold)
    if isinstance(statement, exp.TruncateTable):
        return [
            (qualify_table(t, schema), "truncated", "TRUNCATE TABLE removed every row: a truncate marker")
            for t in statement.expressions
        ]
    if isinstance(statement, exp.Drop):
        return _drop(statement, schema)
    if isinstance(statement, exp.Create):  # CREATE TABLE is read before parsing: an index, a view ...
        return []
    return None


def _alter(
    statement: Any, schema: str, *, strict: bool, kept: Mapping[str, set[str]], fold: Callable[[str], str]
) -> _Found:
    """Return the effect of ``ALTER TABLE`` on its table (the strongest of its actions).

    ``strict``: whether the session's ``sql_mode`` was strict (:func:`is_strict`). ``kept``: as for
    :func:`_effects`; a ``DROP COLUMN`` of the statement adds to the table's for the actions after it.
    """
    from sqlglot import exp

    table = qualify_table(statement.this, schema)
    dropped = set(kept.get(fold(table), ()))
    actions = list(statement.args.get("actions") or [])
    found: _Found = [(table, "ignore", "table options only")] if not actions else []
    for action in actions:
        kind = type(action).__name__
        if isinstance(action, exp.ColumnDef):
            found.append((table, *_added_column(action, dropped)))
        elif isinstance(action, exp.ModifyColumn):
            renamed_from = action.args.get("rename_from")
            new_name = action.this.name if isinstance(action.this, exp.ColumnDef) else ""
            if renamed_from is not None and renamed_from.name.lower() != new_name.lower():
                found.append(
                    (table, "resnapshot", f"CHANGE renames column {renamed_from.name} to {new_name}")
                )
            elif action.find(exp.ComputedColumnConstraint) is not None:
                found.append((table, "resnapshot", f"MODIFY/CHANGE makes column {new_name} generated"))
            elif not strict:
                found.append((table, "retyped", new_name))
            else:
                found.append((table, "follow", f"MODIFY/CHANGE of column {new_name} keeps its name"))
        elif isinstance(action, exp.RenameColumn):
            found.append((table, "resnapshot", "RENAME COLUMN"))
        elif isinstance(action, exp.Drop):
            what = str(action.args.get("kind") or "").upper()
            if what == "COLUMN":
                for column in action.args.get("tables") or []:
                    found.append((table, "dropped_column", column.name))
                    dropped.add(column.name.lower())
            elif what in _IGNORED_DROPS:
                found.append((table, "ignore", f"DROP {what}"))
            else:
                found.append((table, "resnapshot", f"DROP {what or '?'}"))
        elif isinstance(action, exp.AlterRename):
            destination = qualify_table(action.this, schema)
            found.append((table, "dropped", f"renamed to {destination}: emptied by a truncate marker"))
            found.append((destination, "resnapshot", f"renamed from {table}"))
        elif kind == "AddConstraint" and action.find(exp.PrimaryKey) is not None:
            found.append((table, "resnapshot", "primary key added"))
        elif kind in _IGNORED_ACTIONS:
            found.append((table, "ignore", kind))
        else:
            found.append((table, "resnapshot", f"ALTER TABLE action {kind} is not known to keep every value"))
    return found


def _added_column(column: Any, dropped: set[str]) -> tuple[DdlAction, str]:
    """Return whether an added column can be followed: its value in existing rows must be NULL, in the target too.

    :param dropped: the names (lower case) of the table's dropped columns its target still holds.
    """
    from sqlglot import exp

    name = column.name
    if name.lower() in dropped:
        return (
            "resnapshot",
            f"ADD COLUMN {name}: the target still holds the dropped column {name}, with the values of the rows not "
            "written since",
        )
    for constraint in column.find_all(exp.ColumnConstraint):
        kind = constraint.args.get("kind")
        if isinstance(kind, exp.DefaultColumnConstraint) and not isinstance(kind.this, exp.Null):
            return (
                "resnapshot",
                f"ADD COLUMN {name} with DEFAULT {kind.this.sql('mysql')} fills existing rows",
            )
        if isinstance(kind, exp.NotNullColumnConstraint) and not kind.args.get("allow_null"):
            return "resnapshot", f"ADD COLUMN {name} NOT NULL fills existing rows with its implicit default"
        if isinstance(kind, (exp.ComputedColumnConstraint, exp.GeneratedAsIdentityColumnConstraint)):
            return "resnapshot", f"ADD COLUMN {name} is generated from other columns"
        if isinstance(kind, exp.AutoIncrementColumnConstraint):
            return "resnapshot", f"ADD COLUMN {name} AUTO_INCREMENT numbers existing rows"
    data_type = column.args.get("kind")
    explicit_null = any(
        isinstance(c.args.get("kind"), exp.NotNullColumnConstraint) and c.args["kind"].args.get("allow_null")
        for c in column.find_all(exp.ColumnConstraint)
    )
    if (
        isinstance(data_type, exp.DataType)
        and data_type.is_type("timestamp", "timestamptz", "timestampltz")
        and not explicit_null
    ):
        return (
            "resnapshot",
            f"ADD COLUMN {name} TIMESTAMP may get an implicit NOT NULL DEFAULT CURRENT_TIMESTAMP",
        )
    return "follow", f"ADD COLUMN {name} is NULL in existing rows"


def _drop(statement: Any, schema: str) -> _Found:
    what = str(statement.args.get("kind") or "").upper()
    if statement.args.get("temporary"):
        return []
    if what == "TABLE":
        return [
            (qualify_table(t, schema), "dropped", "DROP TABLE removed every row: a truncate marker")
            for t in statement.args["tables"]
        ]
    if what in ("DATABASE", "SCHEMA"):
        return [
            (
                qualified_name(t.name, EVERY_TABLE),
                "dropped",
                f"DROP {what} removed every table: a truncate marker",
            )
            for t in statement.args["tables"]
        ]
    return []


def _create(match: re.Match[str], schema: str) -> _Found:
    """Return the effect of a ``CREATE TABLE`` (see :data:`_CREATE_TABLE`): none for a temporary table."""
    replace, temporary, name = match.groups()
    if temporary:
        return []
    table = qualify_name(name, schema)
    if replace:
        return [(table, "resnapshot", "CREATE OR REPLACE TABLE replaces the table's rows")]
    # A new table starts empty and every row it gets follows as row events; so do the rows of CREATE ...
    # SELECT, which the row format logs as the bare CREATE and row events (MySQL manual, "Replication of
    # CREATE TABLE ... SELECT Statements"). A name a dropped or renamed table had waits for its barrier.
    return [(table, "follow", NEW_TABLE)]


def _rename_tables(pairs: str, schema: str) -> _Found | None:
    """Return the effects of ``RENAME TABLE a TO b, c TO d``.

    A source no longer exists afterwards: it is emptied, as by ``DROP TABLE`` (a name that is also a
    destination, as ``t`` in the cut-over ``t TO _t_old, _t_new TO t``, is re-snapshotted: the stronger
    action). A destination holds another table's rows: re-snapshotted.
    """
    found: _Found = []
    for pair in re.split(r",(?=(?:[^`]*`[^`]*`)*[^`]*$)", pairs):
        match = _RENAME_PAIR.match(pair)
        if match is None:
            return None
        source, destination = qualify_name(match.group(1), schema), qualify_name(match.group(2), schema)
        found.append(
            (source, "dropped", f"RENAME TABLE {source} TO {destination} removed it: a truncate marker")
        )
        found.append((destination, "resnapshot", f"RENAME TABLE {source} TO {destination} replaced it"))
    return found


def _unparsed(sql: str, selected: Iterable[str]) -> list[DdlEffect]:
    """Return ``resnapshot`` for every selected table whose name appears in a statement that was not parsed.

    Names are compared in lower case whatever the server's rule: a re-snapshot too many is exact, one too few
    is not.
    """
    text = sql.lower()
    touched = sorted(
        table
        for table in set(selected)
        if re.search(rf"(?<![\w$]){re.escape(table_part(table).lower())}(?![\w$])", text)
    )
    return [
        DdlEffect(t, "resnapshot", "the statement could not be parsed and names the table") for t in touched
    ]


_INTEGER_BITS = {"tinyint": 8, "smallint": 16, "mediumint": 24, "int": 32, "bigint": 64}
_TEMPORAL = frozenset({"datetime", "timestamp", "time"})


def keeps_values(before: TableMapColumn, after: TableMapColumn) -> bool:
    """Return whether changing a column from the table-map column ``before`` to ``after`` keeps every stored value.

    Under a non-strict ``sql_mode`` the server clamps or cuts values that do not fit the new type, and logs no
    row event for them; only a change whose every old value is a value of the new type, unchanged, can be
    followed from the binlog. Measured from what the table maps say (``binlog_row_metadata=FULL``), never
    from the statement's text:

    - integers: the new range holds the old one (``SMALLINT`` -> ``INT``, ``INT UNSIGNED`` -> ``BIGINT``; not
      ``INT`` -> ``INT UNSIGNED``, which clamps negative values to 0), or a ``DECIMAL`` with enough integer digits;
    - ``DECIMAL(p,s)`` -> ``DECIMAL(p',s')`` with ``s' >= s`` and ``p'-s' >= p-s``; ``FLOAT`` -> ``DOUBLE``;
      ``BIT(n)`` -> ``BIT(m)``, ``m >= n``;
    - ``DATETIME``/``TIMESTAMP``/``TIME`` keeping the kind with at least as many fraction digits;
      ``DATE`` -> ``DATETIME`` (:func:`~airflow_provider_binlog.contract.types.is_lossless_widening`);
    - text and bytes in the same character set whose maximum length in bytes does not shrink, from
      ``CHAR`` to ``CHAR``/``VARCHAR``/``TEXT``, ``VARCHAR`` to ``VARCHAR``/``TEXT`` (not to ``CHAR``, whose
      reads strip trailing spaces), ``BINARY(n)`` only to ``VARBINARY``/``BLOB`` (a longer ``BINARY`` pads
      with zero bytes);
    - ``ENUM``/``SET`` whose old members are all members of the new one; ``JSON`` to ``JSON``;

    and a column that allowed NULL still does (a non-strict ``NOT NULL`` turns NULL into the type's implicit
    default). Anything else (another character set, a change of kind, an unknown length, member list or
    NULL-ability, as in mysql-replication's table-map columns) is not known to keep every value.

    :param before: the column in the table map before the change (``Column`` of mysql-replication or of
        :mod:`~airflow_provider_binlog.extract.events.tablemap`).
    :param after: the column in the table map after it.
    """
    from pymysqlreplication.constants import FIELD_TYPE

    from airflow_provider_binlog.contract.types import is_lossless_widening
    from airflow_provider_binlog.extract.columns import charset_of, column_spec

    try:
        old, new = column_spec(before), column_spec(after)
    except ValueError:
        return False
    nullable = getattr(before, "nullable", None), getattr(after, "nullable", None)
    if None in nullable or nullable == (True, False):
        return False
    old_kind, new_kind = (
        old.mysql_type.split("(")[0].split(" ")[0],
        new.mysql_type.split("(")[0].split(" ")[0],
    )
    if old_kind in _INTEGER_BITS:
        low, high = _integer_range(old.mysql_type)
        if new_kind in _INTEGER_BITS:
            new_low, new_high = _integer_range(new.mysql_type)
            return new_low <= low and high <= new_high
        return new_kind == "decimal" and after.precision - after.decimals >= len(str(max(-low, high)))
    if old_kind == "decimal":
        return new_kind == "decimal" and (
            after.decimals >= before.decimals
            and after.precision - after.decimals >= before.precision - before.decimals
        )
    if old_kind == "bit":
        return new_kind == "bit" and int(after.bits or 64) >= int(before.bits or 64)
    if old_kind in _TEMPORAL:
        return new_kind == old_kind and int(after.fsp or 0) >= int(before.fsp or 0)
    if old_kind in ("enum", "set"):
        members = "enum_values" if old_kind == "enum" else "set_values"
        old_members, new_members = getattr(before, members, None), getattr(after, members, None)
        return new_kind == old_kind and bool(old_members) and set(old_members or ()) <= set(new_members or ())
    if old_kind in ("char", "varchar", "binary", "varbinary", "text", "blob"):
        charset = charset_of(before)
        if charset is None or charset != charset_of(after):
            return False
        if new_kind not in ("char", "varchar", "binary", "varbinary", "text", "blob") or (
            old.arrow_type != new.arrow_type
        ):
            return False
        if new_kind in ("char", "binary") and (old_kind not in ("char", "binary") or old_kind == "binary"):
            return old.mysql_type == new.mysql_type
        return _max_bytes(after, FIELD_TYPE) >= _max_bytes(before, FIELD_TYPE)
    if old_kind == "json":
        return new_kind == "json"
    return old_kind in ("float", "double", "date") and is_lossless_widening(old.arrow_type, new.arrow_type)


def _integer_range(mysql_type: str) -> tuple[int, int]:
    """Return the lowest and highest value of an integer type such as ``int unsigned``."""
    kind, _, sign = mysql_type.partition(" ")
    bits = _INTEGER_BITS[kind]
    return (0, 2**bits - 1) if sign == "unsigned" else (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)


def _max_bytes(column: TableMapColumn, field_type: Any) -> int:
    """Return the most bytes a CHAR/VARCHAR/BINARY/VARBINARY (``max_length``) or TEXT/BLOB value may hold."""
    if column.type in (field_type.VARCHAR, field_type.VAR_STRING, field_type.STRING):
        return int(column.max_length or 0)
    size = int(getattr(column, "length_size", 0) or 0) or {
        field_type.TINY_BLOB: 1,
        field_type.MEDIUM_BLOB: 3,
        field_type.LONG_BLOB: 4,
    }.get(column.type, 2)
    return int(2 ** (8 * size) - 1)


_COLUMN_FIELDS = (
    "type",
    "name",
    "nullable",
    "unsigned",
    "max_length",
    "length_size",
    "precision",
    "decimals",
    "fsp",
    "bits",
    "bytes",
    "size",
    "enum_values",
    "set_values",
)
"""The table-map column attributes :func:`keeps_values` reads, kept in a window's manifest (``schemas``)."""


def column_record(column: TableMapColumn) -> dict[str, Any]:
    """Return the JSON form of a table-map column, as the manifest's ``schemas`` keep it (:func:`keeps_values`'s needs).

    :param column: a ``Column`` of mysql-replication or of :mod:`~airflow_provider_binlog.extract.events.tablemap`.
    """
    from airflow_provider_binlog.extract.columns import charset_of

    record = {name: getattr(column, name, None) for name in _COLUMN_FIELDS}
    record["mysql_charset"] = charset_of(column)
    return {  # without the defaults of ``Column``: the manifest keeps every column of every table
        name: value
        for name, value in record.items()
        if name in ("type", "name", "nullable") or value not in (None, 0, False, "")
    }


def record_column(record: Mapping[str, Any]) -> Column:
    """Return the table-map column of a :func:`column_record` (an :mod:`~airflow_provider_binlog.extract.events.tablemap` ``Column``).

    :raises TypeError: when the record holds an unknown field.
    """
    from airflow_provider_binlog.extract.events.tablemap import Column

    return Column(**record)
