"""Which columns a staged table is merged by: its primary key, or a key the user named."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence

from airflow_provider_binlog.contract import ContractError
from airflow_provider_binlog.contract.names import split_table_name

log = logging.getLogger(__name__)


class MergeKeyError(ContractError):
    """A table has no key to merge by, a named key contradicts its primary key, or a key spec is malformed."""


def parse_key_overrides(specs: Sequence[str]) -> dict[str, tuple[str, ...]]:
    """Parse the merge job's ``--key`` values: ``db.table=col1,col2``, or a JSON object ``{"db.table": [columns]}``.

    The JSON form is what the operators pass: it carries any table or column name (an ``=`` or ``,`` in a name
    would make the short form ambiguous).

    :param specs: the values, one per table (short form) or per object.
    :raises MergeKeyError: if a value is malformed or a table is named twice.
    """
    keys: dict[str, tuple[str, ...]] = {}
    for name, cols in (pair for spec in specs for pair in _key_specs(spec)):
        split_table_name(name)
        if name in keys:
            raise MergeKeyError(f"--key names table {name!r} twice")
        keys[name] = cols
    return keys


def key_spec(keys: Mapping[str, Sequence[str]]) -> str:
    """Return the ``--key`` value (JSON form) of :func:`parse_key_overrides` for ``{"db.table": [columns]}``."""
    return json.dumps({table: list(columns) for table, columns in sorted(keys.items())}, ensure_ascii=False)


def _key_specs(spec: str) -> list[tuple[str, tuple[str, ...]]]:
    """Return the ``(table, columns)`` pairs of one ``--key`` value."""
    if spec.lstrip().startswith("{"):
        try:
            body = json.loads(spec)
        except ValueError as err:
            raise MergeKeyError(f"--key {spec!r} is not JSON: {err}") from err
        pairs = [(str(t), c) for t, c in body.items()]
        if not all(isinstance(c, list) and c and all(isinstance(x, str) and x for x in c) for _, c in pairs):
            raise MergeKeyError(f"--key {spec!r} must map each table to a non-empty list of column names")
        return [(t, tuple(c)) for t, c in pairs]
    name, sep, columns = spec.partition("=")
    cols = tuple(c.strip() for c in columns.split(",") if c.strip())
    if not sep or not cols:
        raise MergeKeyError(f'--key {spec!r} must look like db.table=col1,col2 or {{"db.table": ["col"]}}')
    return [(name.strip(), cols)]


def resolve_keys(
    primary_keys: Mapping[str, Sequence[str]],
    overrides: Mapping[str, Sequence[str]] | None = None,
    *,
    window: int | None = None,
) -> dict[str, tuple[str, ...]]:
    """Return the merge key of every table to merge.

    A table's primary key (from the manifest) is its key; a table without one needs a user-named key,
    and a user-named key for a table with a primary key must be that key (case-insensitively).

    :param primary_keys: the tables to merge (those with changes), each with its primary key (empty when
        it has none).
    :param overrides: user-named keys by ``db.table``.
    :param window: the window's seq, for the warning about an override naming no table of it.
    :raises MergeKeyError: naming the table, if a table has no key or an override contradicts its key.
    """
    named = {name: tuple(cols) for name, cols in (overrides or {}).items()}
    keys: dict[str, tuple[str, ...]] = {}
    for name, primary_key in primary_keys.items():
        override = named.get(name)
        if primary_key:
            if override and [c.lower() for c in override] != [c.lower() for c in primary_key]:
                raise MergeKeyError(
                    f"table {name} has primary key {list(primary_key)}; a user-named key "
                    f"({list(override)}) is only allowed for tables without a primary key: drop it"
                )
            keys[name] = tuple(primary_key)
        elif override:
            keys[name] = override
        else:
            raise MergeKeyError(
                f"table {name} has no primary key, so its changes cannot be merged by key; name "
                f"the columns that identify a row with --key {name}=col1,col2 (operator argument "
                f"keys={{'{name}': ['col1', 'col2']}}) or exclude the table from the pipeline"
            )
    for name in sorted(named.keys() - primary_keys.keys()):
        log.info("a key is named for table %s, which has no changes in window %s", name, window)
    return keys
