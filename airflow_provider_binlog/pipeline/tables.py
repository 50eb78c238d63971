"""Which source tables a pipeline takes, and the key that tells the rows of each apart.

One module for both questions, used by extract, snapshot and the example DAGs:

* a **selection** is a list of ``db.table`` names and shell patterns (``shop.*``); an entry starting with
  ``!`` excludes the tables it matches, after all includes (``"shop.*, !shop.tmp_*"``). The database and the
  table part match separately, and a backquoted part is a name, never a pattern (```` shop.`secret[s]` ````,
  ```` `a.b`.* ````; :class:`~airflow_provider_binlog.contract.names.TablePattern`);
* a table's **key** is its primary key, or the columns the user names in ``keys`` for a table without
  one (:func:`resolve_key`); a table with neither is *keyless*: a run either leaves it out with a
  warning (``keyless_tables="skip"``) or fails (``"fail"``), see :func:`table_keys`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, cast, get_args

from airflow_provider_binlog.contract.names import TableNameError, TablePattern, split_table_name
from airflow_provider_binlog.exceptions import BinlogConfigError

KeylessMode = Literal["skip", "fail"]
"""What a run does with a selected table that has no key (the operators' ``keyless_tables``): ``skip`` leaves it
out with the reason, ``fail`` fails the task (see :func:`table_keys`)."""
KEYLESS_MODES: tuple[KeylessMode, ...] = get_args(KeylessMode)
"""The values of :data:`KeylessMode`."""
EXCLUDE = "!"
"""Prefix of a selection entry that excludes the tables it matches."""


class KeylessTableError(BinlogConfigError):
    """A selected table has no primary key and the user named none (``keyless_tables="fail"``)."""


def parse_tables(tables: str | Sequence[str]) -> list[str]:
    """Return the table selection as a list of entries (``"db.a, !db.b"`` or a list of names/patterns).

    :param tables: comma-separated text or a list; entries starting with ``!`` exclude tables.
    :raises ValueError: when the selection is empty, holds only exclusions, or an entry is not
        ``db.table`` (``!`` alone included).
    """
    names = [t.strip() for t in (tables.split(",") if isinstance(tables, str) else tables) if t and t.strip()]
    if not names:
        raise ValueError(
            "the table selection is empty: name at least one 'db.table' (patterns like 'db.*' work)"
        )
    for name in names:
        try:
            TablePattern.parse(name.removeprefix(EXCLUDE))
        except TableNameError as err:
            raise ValueError(
                f"table selection entry {name!r} must be 'db.table', a pattern 'db.*' or '!db.table' "
                f"(backquote a name that holds a dot or a wildcard: `a.b`.`t*`): {err}"
            ) from err
    if all(name.startswith(EXCLUDE) for name in names):
        raise ValueError(
            f"the table selection {', '.join(names)} only excludes tables: name the tables to take first "
            f"('db.*, !db.tmp_*')"
        )
    return names


def split_selection(selection: Iterable[str]) -> tuple[list[str], list[str]]:
    """Return ``(includes, excludes)`` of a selection, the ``!`` stripped from the exclusions."""
    includes: list[str] = []
    excludes: list[str] = []
    for entry in (e.strip() for e in selection if e and e.strip()):
        if entry.startswith(EXCLUDE):
            excludes.append(entry.removeprefix(EXCLUDE).strip())
        else:
            includes.append(entry)
    return includes, excludes


def _patterns(entries: Iterable[str]) -> list[TablePattern]:
    """Return the patterns of selection entries (``!`` stripped).

    :raises BinlogConfigError: when an entry is not ``db.table`` or its backquotes are malformed.
    """
    try:
        return [TablePattern.parse(entry) for entry in entries]
    except TableNameError as err:
        raise BinlogConfigError(
            f"table selection: {err}; write entries as 'db.table' or a pattern 'db.*'"
        ) from err


def takes(selection: Iterable[str], name: str, *, case_sensitive: bool = True) -> bool:
    """Return whether the selection takes the ``db.table`` ``name`` (an include matches it, no exclusion does).

    :param case_sensitive: whether the source compares table names as written (``lower_case_table_names=0``).
    """
    includes, excludes = (_patterns(part) for part in split_selection(selection))
    return any(p.takes(name, case_sensitive=case_sensitive) for p in includes) and not any(
        p.takes(name, case_sensitive=case_sensitive) for p in excludes
    )


def select_tables(
    selection: Iterable[str], existing: Iterable[str], *, case_sensitive: bool = True
) -> list[str]:
    """Return the ``existing`` ``db.table`` names the selection takes, in the order the includes name them.

    Includes are matched first (:class:`~airflow_provider_binlog.contract.names.TablePattern`: database and
    table part separately, shell patterns unless backquoted); then every table an exclusion matches is
    removed. An exclusion that matches nothing is allowed (the table may have been dropped).

    :param case_sensitive: whether the source compares table names as written (``lower_case_table_names=0``)
        or in lower case.
    :raises BinlogConfigError: when an entry is not ``db.table``, an include matches no existing table,
        or the exclusions remove every table.
    """
    includes, excludes = split_selection(selection)
    exclusions = _patterns(excludes)
    known = sorted(existing)
    chosen: list[str] = []
    for pattern, include in zip(includes, _patterns(includes), strict=True):
        matches = [name for name in known if include.takes(name, case_sensitive=case_sensitive)]
        if not matches:
            raise BinlogConfigError(
                f"table selection {pattern!r} matches no table on the source; "
                f"existing tables: {', '.join(known[:20]) or 'none'}"
            )
        chosen += [name for name in matches if name not in chosen]
    kept = [
        name for name in chosen if not any(p.takes(name, case_sensitive=case_sensitive) for p in exclusions)
    ]
    if not kept:
        raise BinlogConfigError(
            f"the table selection takes {', '.join(chosen)} and excludes all of them "
            f"({', '.join(EXCLUDE + p for p in excludes)}): nothing is left to capture"
        )
    return kept


def is_template(value: object) -> bool:
    """Return True for a Jinja template not rendered yet (its check waits until the task runs)."""
    return isinstance(value, str) and "{{" in value


def parse_keys(keys: Mapping[str, Sequence[str]] | str | None) -> dict[str, list[str]]:
    """Return the user's named keys ``{"db.table": [columns]}`` from a mapping or its JSON text.

    The text form is what a templated ``keys`` renders to (the example DAGs pass
    ``{{ params['keys'] | tojson }}``); empty text means no named keys.

    :raises ValueError: when the text is not JSON, a table is not ``db.table`` or its columns are not a
        non-empty list of names.
    """
    if isinstance(keys, str):
        try:
            keys = json.loads(keys) if keys.strip() else {}
        except json.JSONDecodeError as err:
            raise ValueError(
                f'keys must be JSON such as {{"db.table": ["col"]}}, got {keys!r}: {err}'
            ) from err
    if not isinstance(keys, Mapping | None):
        raise ValueError(f"keys must map 'db.table' to a list of columns, got {keys!r}")
    result: dict[str, list[str]] = {}
    for table, columns in (keys or {}).items():
        try:
            split_table_name(str(table))
        except TableNameError as err:
            raise ValueError(f"keys: table {table!r} must be qualified as 'db.table'") from err
        if isinstance(columns, str) or not columns or not all(isinstance(c, str) and c for c in columns):
            raise ValueError(f"keys[{table!r}] must be a non-empty list of column names, got {columns!r}")
        result[str(table)] = list(columns)
    return result


def keyless_remedy(name: str) -> str:
    """Return what a user can do about the keyless table ``name`` (the three ways out, in one sentence)."""
    return (
        f"Add a primary key (ALTER TABLE {name} ADD PRIMARY KEY (...)), name a unique key of NOT NULL columns "
        f"once with keys={{'{name}': ['col', ...]}} (example DAG: the param 'keys' or BINLOG_CDC_KEYS), or "
        f"exclude the table with '{EXCLUDE}{name}' in the table selection."
    )


def resolve_key(
    name: str,
    columns: Sequence[str],
    primary_key: Sequence[str],
    named: Sequence[str] | None,
    *,
    unique_keys: Sequence[Sequence[str]] | None = None,
) -> list[str]:
    """Return the key that identifies a row of table ``name``: its primary key or the key the user named.

    Two levels of acceptance, one per reader of the table:

    * ``unique_keys=None`` (binlog windows, ``BinlogExtractOperator``): a named key may be any existing
      columns, and it replaces the primary key (the merge then groups changes by it);
    * ``unique_keys`` given (snapshots, which cut key ranges): a table with a primary key takes it and
      refuses a different named key; a named key must be exactly the columns of one of ``unique_keys``
      (the table's UNIQUE indexes of NOT NULL columns, e.g. from
      :func:`~airflow_provider_binlog.source.schema.unique_keys`) and is returned in that index's column
      order, so every chunk is an index range.

    Column names compare exactly at the binlog level (the reader looks the key columns up by name in
    each row image) and case-insensitively at the snapshot level (as MySQL compares them in SQL).

    :param name: ``db.table``.
    :param columns: the table's columns.
    :param primary_key: its primary key columns (empty when it has none).
    :param named: the columns the user named in ``keys`` for this table, if any.
    :param unique_keys: see above.
    :raises KeylessTableError: when the table has no primary key and the user named none.
    :raises BinlogConfigError: when a named key lists columns the table lacks, contradicts the primary
        key (snapshot level) or matches no unique NOT NULL index (snapshot level).
    """
    named = list(named or [])
    if named:
        known = set(columns) if unique_keys is None else {c.lower() for c in columns}
        missing = [c for c in named if (c if unique_keys is None else c.lower()) not in known]
        if missing:
            raise BinlogConfigError(f"key of {name} names columns {missing} that the table does not have")
    if unique_keys is None:
        key = named or list(primary_key)
        if not key:
            raise KeylessTableError(
                f"table {name} has no primary key, so its changes cannot be merged by key. {keyless_remedy(name)}"
            )
        return key
    if primary_key:
        if named and [c.lower() for c in named] != [c.lower() for c in primary_key]:
            raise BinlogConfigError(
                f"table {name} has primary key {list(primary_key)}; keys= may only name a key for tables "
                f"without one"
            )
        return list(primary_key)
    if not named:
        raise KeylessTableError(
            f"table {name} has no primary key, so a snapshot cannot split it into key ranges or the merge tell "
            f"its rows apart. {keyless_remedy(name)}"
        )
    wanted = {c.lower() for c in named}
    matching = next((u for u in unique_keys if {c.lower() for c in u} == wanted), None)
    if matching is None:
        raise BinlogConfigError(
            f"keys names {named} for {name}, but the table has no UNIQUE index of exactly those NOT NULL "
            f"columns (its unique NOT NULL keys: {[list(u) for u in unique_keys] or 'none'}); add one, or name "
            f"one of those"
        )
    return list(matching)


@dataclass
class TableKeys:
    """The outcome of :func:`table_keys`: a key per usable table, and the tables left out with the reason.

    :param keys: ``{"db.table": [key columns]}`` of the tables the run takes.
    :param skipped: ``{"db.table": reason}`` of the keyless tables it leaves out (``keyless_tables="skip"``).
    """

    keys: dict[str, list[str]] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)


def table_keys(
    tables: Mapping[str, tuple[Sequence[str], Sequence[str]]],
    named: Mapping[str, Sequence[str]],
    *,
    keyless_tables: KeylessMode = "skip",
    unique_keys: Mapping[str, Sequence[Sequence[str]]] | None = None,
) -> TableKeys:
    """Resolve the key of every table (:func:`resolve_key`) and set keyless tables aside or fail on them.

    :param tables: ``{"db.table": (columns, primary key columns)}``.
    :param named: the user's ``keys``.
    :param keyless_tables: ``skip`` (a keyless table is left out, with the reason) or ``fail``.
    :param unique_keys: ``{"db.table": its unique NOT NULL indexes}`` for the snapshot level of
        :func:`resolve_key`; None for the binlog level.
    :raises KeylessTableError: for a keyless table when ``keyless_tables="fail"``.
    :raises BinlogConfigError: for a named key that cannot be used, whatever the mode (a user's mistake
        is not skipped silently).
    :raises ValueError: for an unknown ``keyless_tables``.
    """
    check_keyless_mode(keyless_tables)
    result = TableKeys()
    for name, (columns, primary_key) in tables.items():
        uniques = None if unique_keys is None else unique_keys.get(name, [])
        try:
            result.keys[name] = resolve_key(name, columns, primary_key, named.get(name), unique_keys=uniques)
        except KeylessTableError as err:
            if keyless_tables == "fail":
                raise
            result.skipped[name] = str(err)
    return result


def check_keyless_mode(keyless_tables: str) -> KeylessMode:
    """Return an operator's ``keyless_tables`` argument, checked (as rendered, when it was templated).

    :raises ValueError: when it is not one of :data:`KEYLESS_MODES`.
    """
    if keyless_tables not in KEYLESS_MODES:
        raise ValueError(f"keyless_tables={keyless_tables!r} must be one of {', '.join(KEYLESS_MODES)}")
    return cast(KeylessMode, keyless_tables)


def skipped_warning(name: str, reason: str) -> str:
    """Return the task-log warning for a keyless table a run leaves out."""
    return (
        f"{name} is left out of this run: {reason} Every other table keeps flowing. Once it has a key, the "
        f"next run snapshots it as a table new to the pipeline and captures its changes from then on."
    )
