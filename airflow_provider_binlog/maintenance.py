"""Clean-up of a pipeline: staged windows and snapshots it no longer needs, and removed target files.

Staging (``docs/maintenance.md``): a folder ``window=<seq>`` (or ``window=<seq>.handover-<n>``) may go once
its window is ``merged`` in the ledger (the checkpoint or its commit record covers it), or, when the ledger
no longer lists the seq, once the checkpoint is past it (a window a ``purged`` snapshot dropped); a folder
``snapshot=<seq>`` once its snapshot is ``merged``. Nothing else is touched: a window that is cut or
extracted (open, or held by an ended run that the next run adopts) keeps its folder, and so does a running
snapshot (a retry resumes from its chunks), an unknown folder, and the state history ``_state``. A folder
also goes only when nothing in it was written for ``retention``: a cleared merge or commit task of a recent
window still finds its files.

Target: :func:`vacuum_table` deletes the Parquet files merges removed from a Delta table's log more than a
retention ago (delta-rs ``DeltaTable.vacuum``, "lite" mode: only files the log removed). Readers that
started before the files were removed, and time travel to versions within the retention, keep working.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from airflow_provider_binlog.contract.columns import UTC

if TYPE_CHECKING:
    from airflow.sdk import ObjectStoragePath

    from airflow_provider_binlog.pipeline.ledger import PipelineState

_FOLDER = re.compile(r"^(?P<kind>window|snapshot)=(?P<seq>\d+)(?:\.handover-\d+)?$")


@dataclass
class Freed:
    """What a clean-up removed (or, in a dry run, would remove).

    :param folders: staging folder names (``window=<seq>``, ``snapshot=<seq>``) or target tables.
    :param files: files deleted.
    :param bytes: bytes of the deleted files.
    """

    folders: list[str] = field(default_factory=list)
    files: int = 0
    bytes: int = 0

    def as_dict(self) -> dict[str, Any]:
        """Return the JSON form used in the maintenance task's XCom."""
        return {"folders": self.folders, "files": self.files, "bytes": self.bytes}


def staging_verdict(name: str, state: PipelineState) -> str | None:
    """Return why the staging folder ``name`` may go (``merged window``, ...), or None when it must stay.

    :param name: a folder name under ``<staging>/<pipeline>/``.
    :param state: the pipeline's state, read now.
    """
    match = _FOLDER.match(name)
    if match is None:
        return None
    seq = int(match["seq"])
    if match["kind"] == "snapshot":
        snapshot = next((s for s in state.snapshots if s.seq == seq), None)
        return "merged snapshot" if snapshot is not None and snapshot.status == "merged" else None
    window = next((w for w in state.windows if w.seq == seq), None)
    if window is not None:
        return "merged window" if window.status == "merged" else None
    return "window behind the checkpoint, not in the ledger" if seq < state.checkpoint.window else None


def clean_staging(
    root: ObjectStoragePath,
    state: PipelineState,
    *,
    retention: dt.timedelta,
    now: dt.datetime,
    dry_run: bool = False,
) -> tuple[Freed, list[str]]:
    """Remove the staging folders of ``root`` (``<staging>/<pipeline>``) the pipeline no longer needs.

    :param retention: a folder goes only when its newest file is older than this.
    :param now: the current time (UTC, aware).
    :param dry_run: count what would go, delete nothing.
    :returns: what was freed, and the names of the folders kept because the ledger still needs them.
    """
    freed, kept = Freed(), list[str]()
    if not root.exists():
        return freed, kept
    for folder in sorted(root.iterdir(), key=lambda p: p.name):
        if not folder.is_dir() or _FOLDER.match(folder.name) is None:
            continue
        if staging_verdict(folder.name, state) is None:
            kept.append(folder.name)
            continue
        files = folder.fs.find(folder.path, detail=True)
        newest = max((_modified(folder.fs, path) for path in files), default=None)
        if newest is not None and now - newest < retention:
            continue
        freed.folders.append(folder.name)
        freed.files += len(files)
        freed.bytes += sum(int(info.get("size") or 0) for info in files.values())
        if not dry_run:
            folder.fs.rm(folder.path, recursive=True)
    return freed, kept


def _modified(fs: Any, path: str) -> dt.datetime:
    """Return when ``path`` was last written (UTC)."""
    stamp = fs.modified(path)
    return stamp.replace(tzinfo=UTC) if stamp.tzinfo is None else stamp.astimezone(UTC)


def vacuum_table(
    uri: str, *, retention_hours: int, dry_run: bool = False, storage_options: dict[str, str] | None = None
) -> Freed:
    """Delete the files merges removed from the Delta table at ``uri`` more than ``retention_hours`` ago.

    The sizes are read before the files go (delta-rs reports only their paths). The table's own
    ``delta.deletedFileRetentionDuration`` is not enforced: ``retention_hours`` is the protection.

    :returns: the files deleted (``folders`` holds the table's URI when any went).
    """
    from deltalake import DeltaTable

    from airflow_provider_binlog.contract.uris import filesystem_for, join_uri

    table = DeltaTable(uri, storage_options=storage_options)
    doomed = table.vacuum(retention_hours=retention_hours, dry_run=True, enforce_retention_duration=False)
    freed = Freed()
    if not doomed:
        return freed
    fs, _ = filesystem_for(uri)
    infos = fs.get_file_info([filesystem_for(join_uri(uri, path))[1] for path in doomed])
    freed.bytes = sum(max(info.size or 0, 0) for info in infos)
    freed.files = len(doomed)
    freed.folders.append(uri)
    if not dry_run:
        table.vacuum(retention_hours=retention_hours, dry_run=False, enforce_retention_duration=False)
    return freed
