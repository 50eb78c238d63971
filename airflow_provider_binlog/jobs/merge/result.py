"""What merging one table of a window did: the job's summary entry and the commit info it records."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from airflow_provider_binlog.contract.delta import COMMIT_PIPELINE_KEY, COMMIT_WINDOW_KEY


@dataclass
class TableResult:
    """What merging one table did (one entry of the JSON summary).

    :param rows_in_window: change rows of the table in the window.
    :param rows_written: rows in the new files (live rows and tombstones).
    :param files_removed: data files the commit removed (the files the window rewrote).
    :param files_added: data files the commit added.
    :param skipped: whether the table was skipped (already merged, or no changes).
    :param delta_version: table version after the merge (``None`` if there is no table).
    :param widened: columns whose type the merge changed by rewriting the table first (:func:`retype_table`):
        widened, or replaced by a snapshot.
    :param write_mode: ``copy_on_write`` (the files the window's keys can be in were rewritten) or
        ``merge_on_read`` (their replaced rows were marked in deletion vectors), "" when nothing was merged.
    :param rows_deleted: rows of existing files the commit marked deleted in deletion vectors.
    :param files_with_new_vectors: existing files whose deletion vector the commit replaced.
    :param engine: what computed a copy-on-write rewrite's files: ``spark``, or ``driver`` for a small window
        (:mod:`~airflow_provider_binlog.jobs.merge.driver_rewrite`); "" otherwise.
    """

    rows_in_window: int = 0
    rows_written: int = 0
    files_removed: int = 0
    files_added: int = 0
    write_mode: str = ""
    rows_deleted: int = 0
    files_with_new_vectors: int = 0
    engine: str = ""
    skipped: bool = False
    delta_version: int | None = None
    widened: list[str] = field(default_factory=list)


def commit_info(pipeline: str, seq: int, result: TableResult) -> dict[str, Any]:
    """Return the commit info a window's commit of one table records: its pipeline, window and counts."""
    return {
        COMMIT_PIPELINE_KEY: pipeline,
        COMMIT_WINDOW_KEY: seq,
        "binlog.rows_in_window": result.rows_in_window,
        "binlog.rows_written": result.rows_written,
        "binlog.files_removed": result.files_removed,
        "binlog.files_added": result.files_added,
        "binlog.write_mode": result.write_mode,
        "binlog.engine": result.engine,
        "binlog.rows_deleted": result.rows_deleted,
    }
