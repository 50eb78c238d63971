"""Which columns a staged table is merged by: its primary key, or a key the user named."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from airflow_provider_binlog.contract import ContractError
from airflow_provider_binlog.contract.names import split_table_name

log = logging.getLogger(__name__)


class MergeKeyError(ContractError):
    """A table has no key to merge by, a named key contradicts its primary key, or a key spec is malformed."""


def parse_key_overrides(specs: Sequence[str]) -> dict[str, tuple[str, ...]]:
    """Parse ``db.table=col1,col2`` values (the merge job's ``--key`` options).

    :param specs: the values, one per table.
    :raises MergeKeyError: if a value is malformed or a table is named twice.
    """
    keys: dict[str, tuple[str, ...]] = {}
    for spec in specs:
        name, sep, columns = spec.partition("=")
        cols = tuple(c.strip() for c in columns.split(",") if c.strip())
        if not sep or not cols:
            raise MergeKeyError(f"--key {spec!r} must look like db.table=col1,col2")
        split_table_name(name.strip())
        if name.strip() in keys:
            raise MergeKeyError(f"--key names table {name.strip()!r} twice")
        keys[name.strip()] = cols
    return keys


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
