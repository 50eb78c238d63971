"""SQL text helpers shared by every reader of the source.

Identifier quoting, ``db.table`` names, and the classification of binlog query events.

Identifiers are backquoted with embedded backquotes doubled (MySQL manual, "Schema Object Names"; MariaDB
KB, "Identifier Names"); string literals are single-quoted with quotes doubled and backslashes escaped
(MySQL manual, "String Literals"), which is right unless the session runs with ``NO_BACKSLASH_ESCAPES``
(then a doubled backslash is two backslashes: still a literal that cannot end early).

:func:`classify_query` is the one reading of a ``Query`` event's text. The binlog logs the statements
that open, delimit and end a transaction group as query events (MySQL manual, "The Binary Log"; MariaDB
KB, "Binary Log Formats"): ``BEGIN`` opens a group, ``COMMIT`` ends one of non-transactional changes (an
InnoDB group ends with an ``Xid`` event instead), ``ROLLBACK`` ends a group whose non-transactional
changes could not be undone. ``SAVEPOINT name`` and ``ROLLBACK TO [SAVEPOINT] name`` are logged inside
the group when it changed a non-transactional table (MySQL manual, "SAVEPOINT, ROLLBACK TO SAVEPOINT, and
RELEASE SAVEPOINT Statements"), so they neither open nor end it. An XA transaction's group is
``XA START`` (``XA BEGIN`` is its synonym, MySQL manual, "XA Transaction SQL Statements"; classified the
same in case a server logs the text as written) ... ``XA END`` and ends with its ``XA_PREPARE`` event;
``XA COMMIT`` / ``XA ROLLBACK`` are groups of their own. A DML statement (statement-based logging) lies
inside a group; any other statement is DDL, which commits implicitly and forms a group of its own.

Imports nothing from Airflow or pymysql.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass

from airflow_provider_binlog.contract.names import split_table_name


def quote_identifier(name: str) -> str:
    """Return ``name`` as a backquoted identifier (``a`b`` -> ```a``b```)."""
    return "`" + name.replace("`", "``") + "`"


def quote_string(text: str) -> str:
    """Return ``text`` as a single-quoted SQL string literal."""
    return "'" + text.replace("\\", "\\\\").replace("'", "''") + "'"


def quote_table(name: str) -> str:
    """Return ``db.table`` as two backquoted identifiers joined by a dot.

    :raises ValueError: when ``name`` is not ``db.table``.
    """
    db, table = split_table_name(name)
    return f"{quote_identifier(db)}.{quote_identifier(table)}"


class QueryKind(enum.Enum):
    """What a binlog ``Query`` event is to the transaction group it is in (see the module docstring)."""

    BEGIN = "begin"
    COMMIT = "commit"
    ROLLBACK = "rollback"
    SAVEPOINT = "savepoint"
    ROLLBACK_TO = "rollback to"
    XA_START = "xa start"
    XA_END = "xa end"
    XA_COMMIT = "xa commit"
    XA_ROLLBACK = "xa rollback"
    DML = "dml"
    DDL = "ddl"

    @property
    def ends_group(self) -> bool:
        """Return True when the event ends a transaction group: its timestamp is a commit time."""
        return self in _GROUP_ENDS


_GROUP_ENDS = frozenset(
    {QueryKind.COMMIT, QueryKind.ROLLBACK, QueryKind.XA_COMMIT, QueryKind.XA_ROLLBACK, QueryKind.DDL}
)
_SAVEPOINT = re.compile(r"SAVEPOINT\s+(.+)", re.IGNORECASE | re.DOTALL)
_ROLLBACK_TO = re.compile(r"ROLLBACK\s+(?:WORK\s+)?TO\s+(?:SAVEPOINT\s+)?(.+)", re.IGNORECASE | re.DOTALL)
_XA = re.compile(r"XA\s+(START|BEGIN|END|COMMIT|ROLLBACK)\b", re.IGNORECASE)
_XA_KINDS = {
    "START": QueryKind.XA_START,
    "BEGIN": QueryKind.XA_START,
    "END": QueryKind.XA_END,
    "COMMIT": QueryKind.XA_COMMIT,
    "ROLLBACK": QueryKind.XA_ROLLBACK,
}
DML_PREFIXES = ("insert", "update", "delete", "replace", "load data")
"""Lower-case heads of the DML statements statement-based logging writes as query events."""


@dataclass(frozen=True)
class QueryEvent:
    """A classified query event.

    :param kind: what the statement is to its group.
    :param text: the statement, stripped of surrounding whitespace.
    :param savepoint: the savepoint name of ``SAVEPOINT`` / ``ROLLBACK TO``, unquoted and in lower case
        (savepoint names compare case-insensitively); else "".
    """

    kind: QueryKind
    text: str
    savepoint: str = ""


def query_text(query: str | bytes) -> str:
    """Return a query event's statement as text (bytes decoded as UTF-8, invalid bytes replaced), stripped."""
    return (query.decode("utf-8", "replace") if isinstance(query, bytes | bytearray) else str(query)).strip()


def classify_query(query: str | bytes) -> QueryEvent:
    """Classify the statement of a binlog ``Query`` event (see the module docstring for the rules)."""
    text = query_text(query)
    upper = text.upper()
    if upper == "BEGIN":
        return QueryEvent(QueryKind.BEGIN, text)
    if upper == "COMMIT":
        return QueryEvent(QueryKind.COMMIT, text)
    if upper == "ROLLBACK":
        return QueryEvent(QueryKind.ROLLBACK, text)
    if match := _ROLLBACK_TO.fullmatch(text):
        return QueryEvent(QueryKind.ROLLBACK_TO, text, _savepoint_name(match.group(1)))
    if match := _SAVEPOINT.fullmatch(text):
        return QueryEvent(QueryKind.SAVEPOINT, text, _savepoint_name(match.group(1)))
    if match := _XA.match(text):
        return QueryEvent(_XA_KINDS[match.group(1).upper()], text)
    if text.lower().startswith(DML_PREFIXES):
        return QueryEvent(QueryKind.DML, text)
    return QueryEvent(QueryKind.DDL, text)


def _savepoint_name(text: str) -> str:
    """Return the savepoint name of a logged statement's tail (backquoted; compared case-insensitively)."""
    name = text.strip()
    if len(name) >= 2 and name[0] == name[-1] == "`":
        name = name[1:-1].replace("``", "`")
    return name.lower()
