"""One home for the remedy that error messages of every layer name most: re-snapshot some tables.

Since ADR 0034 a pipeline's identity is fixed when its DAG file is parsed (``BINLOG_CDC_PIPELINE`` in the
example DAGs), so the resnapshot DAG's trigger configuration holds only ``tables`` and ``mode``; the message
names the pipeline whose resnapshot DAG to trigger.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Literal

ResnapshotMode = Literal["requested", "purged"]


def resnapshot_remedy(pipeline: str, tables: str | Iterable[str], mode: ResnapshotMode = "requested") -> str:
    """Return how to re-snapshot ``tables`` of ``pipeline`` now, as a clause of an error message.

    :param tables: a table (``db.table``), several, or a placeholder such as ``"<its tables>"``.
    :param mode: ``requested`` (the binlog still holds the tables' changes) or ``purged`` (it does not: the
        snapshot also moves the checkpoint past the gap).
    :returns: e.g. ``trigger pipeline 'p''s binlog_resnapshot DAG with {"tables": "shop.orders", "mode":
        "requested"} (or run BinlogSnapshotOperator(mode="requested"))``; the configuration is JSON, so a table
        name with quotes or backslashes is pasted as it is.
    """
    listed = tables if isinstance(tables, str) else ",".join(tables)
    conf = json.dumps({"tables": listed, "mode": mode}, ensure_ascii=False)
    return (
        f"trigger pipeline {pipeline!r}'s binlog_resnapshot DAG with {conf} (or run "
        f'BinlogSnapshotOperator(mode="{mode}") over those tables)'
    )
