"""Qualified source table names ``db.table`` and their folders: where names are split, joined and made paths.

**Names.** A qualified name is ``<db>.<table>``. MariaDB and MySQL accept any character in a quoted
identifier except NUL (MySQL manual, "Schema Object Names"), so a database name may hold a dot and either
part a backquote. The canonical form therefore backquotes a part, doubling backquotes inside, exactly
where the plain form would be ambiguous: the database part when it holds a dot or starts with a
backquote, the table part when it starts with a backquote (the first unquoted dot separates the parts,
so a dotted table name needs no quotes). ``shop.orders``, ``shop.a.b`` (table ``a.b``) and
```` `a.b`.c ```` (database ``a.b``) are canonical. :func:`qualified_name` writes the canonical form,
:func:`split_table_name` reads it (and any other backquoting of the parts).

**Folders.** A name is data, never a path: :func:`path_segment` turns a database or table name into one
folder name that is injective (two names never share a folder, case included), reversible
(:func:`name_of_segment`) and never a path of its own (no slash, backslash, ``.`` or ``..``). Ordinary names
(ASCII letters, digits, ``_``, ``$``, ``-`` and inner dots) are their own folder name, so existing tables keep
their folders; every other name is escaped byte by byte as ``~XX`` (upper-case hex of its UTF-8 bytes),
which an ordinary name never contains. Case is kept: on a case-insensitive file system (macOS, Windows)
two source tables whose names differ only in case would share a folder (``docs/security.md``).
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable
from dataclasses import dataclass

from airflow_provider_binlog.contract import ContractError


class TableNameError(ContractError, ValueError):
    """A table name is not qualified as ``db.table``, or its backquotes are not well formed."""


_PLAIN_SEGMENT = re.compile(r"[A-Za-z0-9_$][A-Za-z0-9_$.\-]*\Z")
_KEPT_BYTES = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_$-")
_ESCAPE = "~"


def quote_part(part: str) -> str:
    """Return ``part`` backquoted, backquotes inside doubled (MySQL manual, "Schema Object Names")."""
    return "`" + part.replace("`", "``") + "`"


def qualified_name(db: str, table: str) -> str:
    """Return the canonical ``db.table`` of a database and a table name (see the module docstring).

    :param db: database (schema) name, as the server spells it.
    :param table: table name, as the server spells it.
    :raises TableNameError: if either part is empty.
    """
    if not db or not table:
        raise TableNameError(f"a table needs a database and a table name, not {db!r} and {table!r}")
    head = quote_part(db) if "." in db or db.startswith("`") else db
    tail = quote_part(table) if table.startswith("`") else table
    return f"{head}.{tail}"


def _unquote(text: str, start: int, name: str) -> tuple[str, int]:
    """Read the backquoted identifier starting at ``text[start]``; return it and the index after it."""
    chars: list[str] = []
    i = start + 1
    while i < len(text):
        if text[i] == "`":
            if text[i + 1 : i + 2] == "`":
                chars.append("`")
                i += 2
                continue
            return "".join(chars), i + 1
        chars.append(text[i])
        i += 1
    raise TableNameError(
        f"table name {name!r} has an unclosed backquote; write a backquote inside a quoted part as ``"
    )


def split_table_name(name: str) -> tuple[str, str]:
    """Split ``db.table`` into its database and table names, reading backquoted parts.

    An unquoted database part ends at the first dot; a backquoted one at its closing backquote, which a
    dot must follow. The table part is the rest, unquoted when it is one backquoted identifier.

    :param name: qualified table name (canonical or with more backquotes than needed).
    :returns: ``(db, table)``, unquoted.
    :raises TableNameError: if the name has no database or table part, or malformed backquotes.
    """
    (db, _), (table, _) = _parts(name)
    return db, table


def sql_name_parts(text: str) -> tuple[str, ...]:
    """Read a table name as SQL writes it: ``table`` or ``db.table``, each part backquoted or bare.

    Whitespace around the dot is allowed, as in SQL; a backquoted part may hold dots and doubled backquotes
    (MariaDB manual, "Identifier Names" and "Identifier Qualifiers").

    :returns: the unquoted parts: ``(table,)`` or ``(db, table)``.
    :raises TableNameError: on an empty part, more than two parts, an unclosed backquote, or text after a
        backquoted part.
    """
    parts: list[str] = []
    i = 0
    while True:
        while i < len(text) and text[i].isspace():
            i += 1
        if text[i : i + 1] == "`":
            part, i = _unquote(text, i, text)
        else:
            end = text.find(".", i)
            end = len(text) if end < 0 else end
            part, i = text[i:end].strip(), end
        if not part or len(parts) == 2:
            raise TableNameError(f"{text!r} is not a table name as SQL writes it ([db.]table)")
        parts.append(part)
        while i < len(text) and text[i].isspace():
            i += 1
        if i == len(text):
            return tuple(parts)
        if text[i] != ".":
            raise TableNameError(f"{text!r} has text after the quoted name {part!r}")
        i += 1


def _parts(name: str) -> tuple[tuple[str, bool], tuple[str, bool]]:
    """Return ``((db, quoted), (table, quoted))`` of a qualified name (see :func:`split_table_name`)."""
    db_quoted = name.startswith("`")
    if db_quoted:
        db, end = _unquote(name, 0, name)
        if name[end : end + 1] != ".":
            raise TableNameError(
                f"table name {name!r} is not qualified as 'db.table' (a dot must follow `{db}`)"
            )
        rest = name[end + 1 :]
    else:
        db, sep, rest = name.partition(".")
        if not sep:
            rest = ""
    table = rest
    table_quoted = rest.startswith("`")
    if table_quoted:
        table, end = _unquote(rest, 0, name)
        if end != len(rest):
            raise TableNameError(f"table name {name!r} has text after the quoted table part")
    if not db or not table:
        raise TableNameError(f"table name {name!r} is not qualified as 'db.table'")
    return (db, db_quoted), (table, table_quoted)


_WILDCARDS = frozenset("*?[")


@dataclass(frozen=True)
class TablePattern:
    """One entry of a table selection: a database part and a table part, each a name or a shell pattern.

    An unquoted part is a shell pattern (``*``, ``?``, ``[...]``, :func:`fnmatch.fnmatchcase`) that also
    matches the name it spells, so ``shop.secret[s]`` takes the table ``secret[s]`` (and ``secrets``); a
    backquoted part is only a name (```` shop.`secret[s]` ```` takes ``secret[s]`` alone). Parts match
    separately, so ``a.*`` never takes a table of the database ``a.b`` (```` `a.b`.* ```` does).

    :param db: the database part, unquoted.
    :param table: the table part, unquoted.
    :param db_literal: the database part was backquoted (or holds no wildcard).
    :param table_literal: the table part was backquoted (or holds no wildcard).
    """

    db: str
    table: str
    db_literal: bool
    table_literal: bool

    @classmethod
    def parse(cls, entry: str) -> TablePattern:
        """Read a selection entry (without its ``!``).

        :raises TableNameError: if it is not ``db.table`` (or a pattern of that shape), or its backquotes are
            malformed.
        """
        (db, db_quoted), (table, table_quoted) = _parts(entry.strip())
        return cls(
            db,
            table,
            db_quoted or not _WILDCARDS.intersection(db),
            table_quoted or not _WILDCARDS.intersection(table),
        )

    def takes_database(self, db: str, *, case_sensitive: bool = True) -> bool:
        """Return whether the database part matches ``db`` (names compared as the server does)."""
        return _part_matches(self.db, self.db_literal, db, case_sensitive)

    def takes(self, name: str, *, case_sensitive: bool = True) -> bool:
        """Return whether the pattern matches the qualified name ``name``.

        :param case_sensitive: compare as written (``lower_case_table_names=0``) or in lower case.
        :raises TableNameError: if ``name`` is not qualified.
        """
        db, table = split_table_name(name)
        return self.takes_database(db, case_sensitive=case_sensitive) and _part_matches(
            self.table, self.table_literal, table, case_sensitive
        )


def _part_matches(pattern: str, literal: bool, name: str, case_sensitive: bool) -> bool:
    fold = name_fold(case_sensitive)
    pattern, name = fold(pattern), fold(name)
    return pattern == name or (not literal and fnmatch.fnmatchcase(name, pattern))


def name_fold(case_sensitive: bool) -> Callable[[str], str]:
    """Return how the source compares table and database names: as written, or in lower case.

    :param case_sensitive: ``lower_case_table_names`` is 0 (MySQL manual, "Identifier Case Sensitivity").
    """
    return _as_written if case_sensitive else str.lower


def _as_written(name: str) -> str:
    return name


def database_of(name: str) -> str:
    """Return the database part of ``db.table``.

    :raises TableNameError: if the name is not qualified.
    """
    return split_table_name(name)[0]


def table_part(name: str) -> str:
    """Return the table part of ``db.table`` (without the database).

    :raises TableNameError: if the name is not qualified.
    """
    return split_table_name(name)[1]


def canonical_name(name: str) -> str:
    """Return the canonical spelling of a qualified name (:func:`qualified_name` of its parts).

    :raises TableNameError: if the name is not qualified.
    """
    return qualified_name(*split_table_name(name))


def path_segment(part: str, *, escape_dots: bool = False) -> str:
    """Return the folder name of a database or table name (see the module docstring).

    :param part: one name (not qualified).
    :param escape_dots: escape every dot too (the database part of :func:`table_folder`, where a dot
        separates it from the table part).
    :raises TableNameError: if ``part`` is empty.
    """
    if not part:
        raise TableNameError("an empty name has no folder")
    if _PLAIN_SEGMENT.match(part) and not (escape_dots and "." in part):
        return part
    return "".join(
        chr(byte)
        if byte in _KEPT_BYTES or (byte == 0x2E and i and not escape_dots)
        else f"{_ESCAPE}{byte:02X}"
        for i, byte in enumerate(part.encode("utf-8"))
    )


def name_of_segment(segment: str) -> str:
    """Return the name a folder name of :func:`path_segment` stands for (its inverse).

    :raises TableNameError: if ``segment`` holds a malformed escape.
    """
    if _ESCAPE not in segment:
        return segment
    out = bytearray()
    i = 0
    while i < len(segment):
        if segment[i] == _ESCAPE:
            try:
                out.append(int(segment[i + 1 : i + 3], 16))
            except ValueError:
                raise TableNameError(f"folder name {segment!r} holds a malformed escape at {i}") from None
            i += 3
        else:
            out.extend(segment[i].encode())
            i += 1
    try:
        return out.decode("utf-8")
    except UnicodeDecodeError as err:
        raise TableNameError(f"folder name {segment!r} does not decode to a UTF-8 name: {err}") from None


def table_path(name: str) -> str:
    """Return the relative folder of a source table's target: ``<db segment>/<table segment>``.

    :param name: qualified table name.
    :raises TableNameError: if the name is not qualified.
    """
    db, table = split_table_name(name)
    return f"{path_segment(db)}/{path_segment(table)}"


STAGING_FILE_NAMES = frozenset({"manifest.json", "plan.json"})
"""The files a window or snapshot folder holds beside its table folders (the manifest, a snapshot's plan): a table
whose folder would be one of them (table ``json`` of database ``manifest``) gets its table part escaped."""


def table_folder(name: str) -> str:
    """Return the one folder name of a source table in a staging folder: ``<db segment>.<table segment>``.

    The database part escapes its dots, so the first dot separates the parts and no two tables share a
    folder. Ordinary names give ``db.table``, the layout windows and snapshots have always had, except the
    names of :data:`STAGING_FILE_NAMES`: their table part is escaped byte by byte (``manifest.~6A~73~6F~6E``),
    which no other name's folder can be (an ordinary name holds no ``~``, an escaped one escapes only what it
    must).

    :param name: qualified table name.
    :raises TableNameError: if the name is not qualified.
    """
    db, table = split_table_name(name)
    folder = f"{path_segment(db, escape_dots=True)}.{path_segment(table)}"
    if folder in STAGING_FILE_NAMES:
        return folder.partition(".")[0] + "." + "".join(f"{_ESCAPE}{b:02X}" for b in table.encode("utf-8"))
    return folder


def table_of_folder(folder: str) -> str:
    """Return the qualified name whose :func:`table_folder` is ``folder`` (its inverse).

    :raises TableNameError: if ``folder`` is no table folder (no dot, a malformed escape).
    """
    db, sep, table = folder.partition(".")
    if not sep or not db or not table:
        raise TableNameError(f"folder {folder!r} is not a table folder '<db>.<table>'")
    return qualified_name(name_of_segment(db), name_of_segment(table))
