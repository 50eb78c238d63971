"""Quarantined tables: one table's refused value or row layout stops that table alone, and heals by re-snapshot.

A window whose read refuses something of one table (a value no codec stages exactly, a row layout the decoder
refuses: :class:`~airflow_provider_binlog.exceptions.TableRefusalError`) stages the table's changes up to the
start of the refused transaction and none after; its manifest lists the table under ``resnapshots`` with
``cause`` ``quarantine`` and the window's commit records a
:class:`~airflow_provider_binlog.pipeline.ledger.ResnapshotNeeded` of that cause. A snapshot whose read of one
table fails the same way merges the others and records the same. From then on the table is **quarantined**:
its target keeps its last exact state (windows stage none of its later changes), it is listed wherever the
pipeline is looked at (:func:`quarantined`), and the snapshot task re-snapshots it alone when a retry can help
(:func:`retry_due`); the merge of that snapshot ends the quarantine. Pure functions over the ledger
(``docs/operating.md``, "Quarantined tables").
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Literal, get_args

from airflow_provider_binlog import __version__
from airflow_provider_binlog.contract.manifest import Manifest
from airflow_provider_binlog.contract.positions import BinlogPosition
from airflow_provider_binlog.contract.remedies import resnapshot_remedy
from airflow_provider_binlog.exceptions import BinlogConfigError
from airflow_provider_binlog.pipeline.ledger import PipelineState, ResnapshotNeeded, Snapshot, now_iso

OnTableError = Literal["quarantine", "fail"]
"""What a table refusal does: quarantine that table and stage the others (``quarantine``, the default), or fail
the window without retry (``fail``)."""
ON_TABLE_ERROR: tuple[OnTableError, ...] = get_args(OnTableError)
"""The values of :data:`OnTableError`."""

QUARANTINE: Literal["quarantine"] = "quarantine"
"""The :data:`~airflow_provider_binlog.pipeline.ledger.ResnapshotCause` of a quarantined table."""


def check_on_table_error(value: str) -> OnTableError:
    """Return an operator's ``on_table_error`` argument, checked.

    :raises BinlogConfigError: when it is not one of :data:`ON_TABLE_ERROR`.
    """
    if value not in ON_TABLE_ERROR:
        raise BinlogConfigError(
            f"on_table_error={value!r} must be one of {', '.join(map(repr, ON_TABLE_ERROR))}"
        )
    return value  # type: ignore[return-value]


def quarantined(state: PipelineState | None) -> dict[str, ResnapshotNeeded]:
    """Return ``{"db.table": entry}`` of the quarantined tables: their oldest pending ``quarantine`` entry.

    The oldest entry's ``since`` is where the table's target stopped.
    """
    found: dict[str, ResnapshotNeeded] = {}
    for entry in state.pending_resnapshots() if state is not None else []:
        if entry.cause == QUARANTINE and (
            entry.table not in found or entry.since.key < found[entry.table].since.key
        ):
            found[entry.table] = entry
    return found


def quarantine_record(entry: ResnapshotNeeded) -> dict[str, Any]:
    """Return what the Delta table property and the Asset event say of a quarantine: where and why it stopped.

    ``{"since": "file:pos", "gtid", "window", "reason"}`` of the table's oldest pending quarantine entry
    (:func:`quarantined`): its target holds the source's rows as of ``since``.
    """
    return {
        "since": f"{entry.since.file}:{entry.since.pos}",
        "gtid": entry.gtid,
        "window": entry.window,
        "reason": entry.reason,
    }


def retry_due(entry: ResnapshotNeeded, version: str = __version__) -> bool:
    """Return whether the next snapshot task re-snapshots ``entry``'s table.

    Every cause but a quarantine, always; a quarantine until a re-snapshot of it failed, then again once the
    chunk that failed reads (the snapshot task probes it first, :func:`probes`, :func:`with_retries_due`) or the
    provider's version is not the one that failed: a retry with nothing changed would read the same refused bytes.
    """
    return entry.cause != QUARANTINE or entry.retry_due or entry.attempted_version != version


def probes(state: PipelineState | None) -> dict[str, dict[str, Any]]:
    """Return ``{"db.table": probe}`` of the quarantined tables not due for a retry whose refused chunk is known."""
    return {t: dict(e.probe) for t, e in quarantined(state).items() if e.probe and not retry_due(e)}


def with_retries_due(state: PipelineState, tables: Iterable[str]) -> PipelineState:
    """Return ``state`` with the quarantine entries of ``tables`` due for a retry (their refused chunk now reads)."""
    ready = set(tables)
    if not ready:
        return state
    entries = [
        r.model_copy(update={"retry_due": True}) if r.cause == QUARANTINE and r.table in ready else r
        for r in state.resnapshots_needed
    ]
    return state.model_copy(update={"resnapshots_needed": entries})


def snapshot_refusals(manifest: Manifest) -> dict[str, Mapping[str, Any]]:
    """Return ``{"db.table": record}`` of the tables a snapshot's read refused (its ``resnapshots`` entries)."""
    return {r["table"]: r for r in manifest.resnapshots if r.get("cause") == QUARANTINE}


def with_failed_resnapshots(
    state: PipelineState,
    snapshot: Snapshot,
    refusals: Mapping[str, Mapping[str, Any]],
    version: str = __version__,
) -> PipelineState:
    """Return ``state`` recording that ``snapshot`` could not read the tables of ``refusals``.

    Each table's pending entries become quarantine entries with the refusal, its chunk to probe, one more attempt,
    and no retry until the probe reads (:func:`retry_due`); a table without one (a new table, a requested re-snapshot) gets one
    from the snapshot's start, where its target stays. Call it before the snapshot's tables lose them
    (:func:`~airflow_provider_binlog.snapshot.ledger.finish_snapshot` ``failed=``).

    :param refusals: ``{"db.table": record}`` (:func:`snapshot_refusals`): ``reason``, ``error``, ``column``.
    """
    if not refusals:
        return state
    pending = {id(r) for r in state.pending_resnapshots()}

    def failed(entry: ResnapshotNeeded, record: Mapping[str, Any]) -> ResnapshotNeeded:
        return entry.model_copy(
            update={
                "cause": QUARANTINE,
                "reason": str(record.get("reason") or entry.reason),
                "column": record.get("column") or entry.column,
                "error": record.get("error"),
                "attempts": entry.attempts + 1,
                "retry_due": False,
                "attempted_version": version,
                "probe": record.get("probe"),
            }
        )

    entries = [
        failed(r, refusals[r.table]) if r.table in refusals and id(r) in pending else r
        for r in state.resnapshots_needed
    ]
    waiting = {r.table for r, was in zip(entries, state.resnapshots_needed, strict=True) if r is not was}
    for table in sorted(set(refusals) - waiting):
        entries.append(
            failed(
                ResnapshotNeeded(
                    table=table,
                    since=snapshot.start,
                    reason="",
                    statement="",
                    window=snapshot.seq,
                    detected_at=now_iso(),
                    cause=QUARANTINE,
                ),
                refusals[table],
            )
        )
    return state.model_copy(update={"resnapshots_needed": entries})


def quarantine_report(pipeline: str, entries: Iterable[ResnapshotNeeded]) -> str:
    """Return the message naming each quarantined table: column, binlog coordinates, GTID, reason and remedy."""
    entries = list(entries)
    lines = [
        f"pipeline {pipeline!r}: {len(entries)} table(s) quarantined; the other tables flow as usual.",
    ]
    for entry in entries:
        where = f"since {_text(entry.since)}" + (
            "" if entry.at is None else f", refused event ending at {_text(entry.at)}"
        )
        lines.append(
            f"- {entry.table}: {entry.reason} ({where}, GTID {entry.gtid or 'unknown'}, found by window "
            f"{entry.window} at {entry.detected_at}; re-snapshots tried and failed: {entry.attempts})"
            + ("" if entry.column is None or entry.column in entry.reason else f"; column {entry.column}")
        )
    lines.append(
        "Its target keeps the table as it was at 'since' and says so (Delta table property binlog.quarantine, "
        "read_table warns). To heal: fix or delete the value at the source, or change the column's type or "
        "character set by DDL, or upgrade the provider; the next run then re-snapshots the table by itself and "
        f"it leaves quarantine. To retry now, {resnapshot_remedy(pipeline, '<db.table>')}. See docs/operating.md, "
        '"Quarantined tables".'
    )
    return "\n".join(lines)


def _text(position: BinlogPosition) -> str:
    return f"{position.file}:{position.pos}"
