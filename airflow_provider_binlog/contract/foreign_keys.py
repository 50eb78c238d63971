"""Foreign keys whose referential actions change child rows that the binlog does not carry.

InnoDB applies ``ON DELETE CASCADE``, ``ON UPDATE CASCADE`` and ``ON DELETE/UPDATE SET NULL`` inside the
storage engine, below the server layer that writes the binary log: the parent's row change is logged,
the child rows it changes are not (MariaDB KB "Replication and Foreign Keys"; MySQL manual 8.0/8.4
section 19.5.1.17 "Replication and Foreign Keys"). MySQL 9.6 moved foreign-key handling to the SQL layer:
with ``innodb_native_foreign_keys=OFF`` (its default, a read-only global) the cascaded child changes are
written as row events before the parent's event (MySQL 9.7 manual section 19.5.1.37; the variable is
defined in ``sql/sys_vars.cc`` of 9.6.0). On such a server nothing needs to be synthesised.

This module is shared by the extractor (which reads the keys with
:func:`~airflow_provider_binlog.source.foreign_keys.read_foreign_keys` and records them in the window manifest)
and the Spark merge (which applies them, see :mod:`airflow_provider_binlog.jobs.merge.cascades`); it
imports neither Airflow nor Spark. Whether a source logs the cascaded rows itself is a flavor question
(:meth:`~airflow_provider_binlog.source.flavor.SourceFlavor.cascades_are_logged`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

MANIFEST_KEY = "foreign_keys"
"""The window manifest's list of the foreign keys whose actions the merge applies (:meth:`ForeignKey.to_manifest`)."""
CASCADE = "CASCADE"
SET_NULL = "SET NULL"
ACTING_RULES = frozenset({CASCADE, SET_NULL})
"""Referential actions that change child rows (RESTRICT, NO ACTION refuse the parent change instead;
InnoDB rejects SET DEFAULT)."""


@dataclass(frozen=True)
class ForeignKey:
    """A foreign key of a selected child table on a parent table, with its referential actions.

    :param name: constraint name.
    :param child: the referencing table ``db.table``.
    :param columns: the child's foreign-key columns, in constraint order.
    :param parent: the referenced table ``db.table`` (may equal ``child``).
    :param referenced: the parent's referenced columns (its primary key or a UNIQUE key), same order.
    :param on_delete: ``DELETE_RULE`` of information_schema.REFERENTIAL_CONSTRAINTS (``CASCADE``,
        ``SET NULL``, ``RESTRICT``, ``NO ACTION``, ``SET DEFAULT``).
    :param on_update: ``UPDATE_RULE``, same values.
    """

    name: str
    child: str
    columns: tuple[str, ...]
    parent: str
    referenced: tuple[str, ...]
    on_delete: str
    on_update: str

    def describe(self) -> str:
        """Return ``child(cols) -> parent(cols) ON DELETE x ON UPDATE y`` for messages."""
        return (
            f"{self.name}: {self.child}({', '.join(self.columns)}) -> {self.parent}({', '.join(self.referenced)}) "
            f"ON DELETE {self.on_delete} ON UPDATE {self.on_update}"
        )

    def to_manifest(self) -> dict[str, Any]:
        """Return the manifest form (a JSON object)."""
        return {
            "name": self.name,
            "child": self.child,
            "columns": list(self.columns),
            "parent": self.parent,
            "referenced": list(self.referenced),
            "on_delete": self.on_delete,
            "on_update": self.on_update,
        }

    @classmethod
    def from_manifest(cls, entry: Mapping[str, Any]) -> ForeignKey:
        """Build a key from its manifest form.

        :raises KeyError, TypeError, ValueError: when the entry does not have the manifest form.
        """
        columns, referenced = tuple(map(str, entry["columns"])), tuple(map(str, entry["referenced"]))
        if not columns or len(columns) != len(referenced):
            raise ValueError(f"foreign key {entry.get('name')!r} pairs {columns} with {referenced}")
        return cls(
            name=str(entry["name"]),
            child=str(entry["child"]),
            columns=columns,
            parent=str(entry["parent"]),
            referenced=referenced,
            on_delete=str(entry["on_delete"]).upper(),
            on_update=str(entry["on_update"]).upper(),
        )


def unselected_parent_warning(key: ForeignKey) -> str:
    """Return the warning for an acting key whose parent table the pipeline does not capture."""
    return (
        f"{key.child} has the foreign key {key.describe()}, but its parent {key.parent} is not in the table "
        f"selection. The source changes rows of {key.child} when a row of {key.parent} is deleted or its "
        f"referenced key is updated, and the binlog does not carry those child changes, so the target of "
        f"{key.child} will drift from the source on such parent changes. Add {key.parent} to the selection "
        f"(the merge then applies the actions itself), or re-snapshot {key.child} after such changes."
    )


def split_by_selection(
    keys: Sequence[ForeignKey], selected: Iterable[str]
) -> tuple[list[ForeignKey], list[ForeignKey]]:
    """Return ``(applied, orphaned)``: keys whose parent is selected, and keys whose parent is not."""
    chosen = set(selected)
    applied = [k for k in keys if k.child in chosen and k.parent in chosen]
    orphaned = [k for k in keys if k.child in chosen and k.parent not in chosen]
    return applied, orphaned


def referenced_columns(keys: Iterable[ForeignKey]) -> dict[str, list[str]]:
    """Return ``{"db.parent": [referenced columns]}``: the columns whose old values the merge must see.

    The extractor stages an update that changes one of them as a delete of the before image followed by
    the after image (as it does for a primary-key change), so a referenced UNIQUE column's old value is
    in the window.
    """
    result: dict[str, list[str]] = {}
    for key in keys:
        columns = result.setdefault(key.parent, [])
        columns += [c for c in key.referenced if c not in columns]
    return result


class ForeignKeyCycleError(ValueError):
    """The acting foreign keys among the selected tables form a cycle through two or more tables."""


def parents_first(tables: Sequence[str], keys: Iterable[ForeignKey]) -> list[str]:
    """Return ``tables`` ordered so that every parent comes before its children (stable otherwise).

    A table referencing itself is fine (its own changes are applied within it).

    :raises ForeignKeyCycleError: naming the tables when keys form a cycle through several tables.
    """
    parents: dict[str, set[str]] = {t: set() for t in tables}
    for key in keys:
        if key.child in parents and key.parent in parents and key.child != key.parent:
            parents[key.child].add(key.parent)
    ordered: list[str] = []
    placed: set[str] = set()
    while len(ordered) < len(tables):
        ready = [t for t in tables if t not in placed and parents[t] <= placed]
        if not ready:
            cycle = sorted(t for t in tables if t not in placed)
            raise ForeignKeyCycleError(
                f"the cascading foreign keys among {', '.join(cycle)} form a cycle through several tables; the "
                f"merge cannot order their cascades. Exclude one table of the cycle from the selection."
            )
        ordered += ready
        placed.update(ready)
    return ordered
