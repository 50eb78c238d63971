"""Refusal records: a table whose merge of a window was refused, written beside the window's manifest.

When a window changes a column's type in a way the Delta table cannot follow, or a deletion vector of the
table cannot be read (merge-on-read, ADR 0037), the merge job merges the window's other tables and writes
``refused=<db.table>.json`` in the window's folder (:func:`record_refusal`); the merge operator reports it and
the commit reads it back (:func:`refused_tables`) to record the table as waiting for a re-snapshot. The file is written whole before the merge job ends.

JSON shape: ``{"table": "db.table", "column": str, "detail": str, "window": int, "message": str}``, and
``"reason": str`` when the refusal is not about a column (the re-snapshot's reason as the ledger records it).
"""

from __future__ import annotations

from typing import Any

import pyarrow.fs as pafs

from airflow_provider_binlog.contract.names import table_folder
from airflow_provider_binlog.contract.uris import (
    StorageOptions,
    filesystem_for,
    join_uri,
    read_json,
    write_json,
)

REFUSAL_PREFIX = "refused="
"""Name prefix of the files in a window's folder recording a table whose merge was refused."""


def record_refusal(
    window_uri: str,
    *,
    table: str,
    column: str,
    detail: str,
    window: int,
    message: str,
    reason: str | None = None,
    storage_options: StorageOptions | None = None,
) -> None:
    """Record in the window's folder that ``table`` was not merged (``refused=<db.table>.json``).

    :param window_uri: window folder.
    :param table: ``db.table``.
    :param column: the column whose change could not be followed.
    :param detail: its old and new type and why.
    :param window: the window's seq.
    :param message: the full message for the operator's log.
    :param reason: why the table waits for a re-snapshot, when not a column's change (None: from the column).
    :param storage_options: storage options for object stores.
    """
    record: dict[str, Any] = {
        "table": table,
        "column": column,
        "detail": detail,
        "window": window,
        "message": message,
    }
    if reason is not None:
        record["reason"] = reason
    write_json(join_uri(window_uri, f"{REFUSAL_PREFIX}{table_folder(table)}.json"), record, storage_options)


def refused_tables(
    window_uri: str, storage_options: StorageOptions | None = None
) -> dict[str, dict[str, Any]]:
    """Return ``{"db.table": refusal record}`` of the tables whose merge of the window was refused.

    :param window_uri: window folder ``<staging>/<pipeline>/window=<seq>``.
    :param storage_options: storage options for object stores.
    """
    fs, path = filesystem_for(window_uri, storage_options)
    found: dict[str, dict[str, Any]] = {}
    for info in fs.get_file_info(pafs.FileSelector(path, allow_not_found=True)):
        name = info.base_name
        if info.type == pafs.FileType.File and name.startswith(REFUSAL_PREFIX) and name.endswith(".json"):
            record = read_json(join_uri(window_uri, name), storage_options)
            if record is not None:
                found[str(record["table"])] = record
    return found
