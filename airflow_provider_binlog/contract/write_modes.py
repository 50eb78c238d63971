"""How a window is merged into a table: the write modes both the operators and the merge job know.

Kept apart from :mod:`~airflow_provider_binlog.contract.delta` so that operators check the argument when a DAG
file is parsed without importing pyarrow.
"""

from __future__ import annotations

from typing import Literal

from airflow_provider_binlog.contract import ContractError

WriteMode = Literal["copy_on_write", "merge_on_read", "auto"]
WRITE_MODES: tuple[WriteMode, ...] = ("copy_on_write", "merge_on_read", "auto")
"""How a window is merged into a table: rewrite the files its keys can be in, mark replaced rows in deletion
vectors (``docs/adr/0037-deletion-vectors.md``), or choose per window
(:func:`~airflow_provider_binlog.jobs.merge.merge_on_read.choose_mode`)."""

DRIVER_REWRITE_ROWS = 10_000
"""Default most change rows of one table's window that the merge job rewrites in its driver with Arrow instead of
Spark jobs (:mod:`~airflow_provider_binlog.jobs.merge.driver_rewrite`, ``docs/adr/0040-small-windows-merged-in-the-driver.md``)."""


def check_write_mode(mode: str) -> WriteMode:
    """Return ``mode`` if it is one of :data:`WRITE_MODES`.

    :raises ContractError: if it is not.
    """
    for known in WRITE_MODES:
        if mode == known:
            return known
    raise ContractError(f"write_mode={mode!r} must be one of {', '.join(WRITE_MODES)}")
