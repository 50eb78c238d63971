"""Qualified source table names ``db.table``: the one place they are split and joined."""

from __future__ import annotations

from airflow_provider_binlog.contract import ContractError


class TableNameError(ContractError, ValueError):
    """A table name is not qualified as ``db.table``."""


def split_table_name(name: str) -> tuple[str, str]:
    """Split ``db.table`` into its database and table names.

    The first dot separates the database (MySQL database names cannot hold a dot in this provider's
    selections; table names may).

    :param name: qualified table name.
    :returns: ``(db, table)``.
    :raises TableNameError: if the name has no dot, or an empty database or table part.
    """
    db, sep, table = name.partition(".")
    if not sep or not db or not table:
        raise TableNameError(f"table name {name!r} is not qualified as 'db.table'")
    return db, table


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
