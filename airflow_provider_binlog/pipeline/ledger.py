"""The ledger of a pipeline's state document: checkpoint, windows, snapshots and pending re-snapshots.

Pydantic models of the JSON document kept in one Airflow Variable (``docs/adr/0003-state-in-one-variable.md``),
with the pure checks and transitions over it (:meth:`PipelineState.problems`, :meth:`Held.handed_to`,
:func:`covers`). Reading and writing the Variable is :mod:`airflow_provider_binlog.pipeline.state`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from itertools import pairwise
from typing import Annotated, Any, Literal, TypeVar

import pendulum
from pydantic import BaseModel, ConfigDict, Field, model_validator

from airflow_provider_binlog.contract import ContractError
from airflow_provider_binlog.contract.positions import BinlogPosition
from airflow_provider_binlog.contract.uris import table_uri, within_root
from airflow_provider_binlog.exceptions import StateError

MERGED_WINDOWS_KEPT = 200
"""How many merged windows the ledger keeps (unmerged windows are always kept)."""
SEQ_MAX = 2**53 - 1
"""Largest sequence number, revision or row count a state document may hold: exact in every JSON reader, and far
from the int64 limit of the order key (``_binlog_window``) and of Delta app-transaction versions, which a
sequence number near 2**63 would overflow later (a new pipeline's seqs start at the Unix time in ms, ~2**41)."""
POS_MAX = 2**63 - 1
"""Largest binlog position a state document may hold (the 8-byte positions of the replication protocol, signed as
pymysql and the Delta metadata carry them)."""
Seq = Annotated[int, Field(ge=1, le=SEQ_MAX)]
Count = Annotated[int, Field(ge=0, le=SEQ_MAX)]

WindowStatus = Literal["cut", "extracted", "merged"]
SnapshotStatus = Literal["running", "merged"]
ResnapshotCause = Literal["schema_change", "lost_transactions", "quarantine"]
"""Why a table waits for a re-snapshot (:class:`ResnapshotNeeded`): a schema change its target cannot follow,
transactions the target may hold that a new source never received (a failover lost them,
:mod:`~airflow_provider_binlog.pipeline.failover`), or a value or row layout of the table that cannot be staged
exactly (the table is quarantined, :mod:`~airflow_provider_binlog.pipeline.quarantine`)."""
SnapshotReason = Literal[
    "initial", "added", "requested", "purged", "schema_change", "lost_transactions", "quarantine"
]
"""Why a snapshot was taken (:attr:`Snapshot.reason`)."""


class Handover(BaseModel):
    """A window or snapshot taken over by another run because the run holding it had ended without merging it."""

    model_config = ConfigDict(extra="forbid")

    from_run: str
    to_run: str
    at: str
    holder_state: str = Field(description="the Airflow state of the holder run when it was taken over")


_HeldT = TypeVar("_HeldT", bound="Held")


class Held(BaseModel):
    """A ledger entry (window or snapshot) held by one DAG run until it is merged.

    :param run_id: the DAG run holding it (a retry of that run reuses it): the run that started it, or the
        run that took it over (see ``handovers``).
    :param dag_id: the DAG of ``run_id``, so another run can ask Airflow whether this one is still active
        (None in ledgers written before it was recorded: the asking run's own DAG is asked then).
    :param handovers: each take-over of the entry from a run that had ended without merging it, oldest first.
    """

    model_config = ConfigDict(extra="forbid")

    run_id: str
    dag_id: str | None = None
    handovers: list[Handover] = Field(default_factory=list)

    def handed_to(self: _HeldT, run_id: str, dag_id: str | None, holder_state: str) -> _HeldT:
        """Return a copy held by ``run_id`` of ``dag_id``, recording the hand-over from the current holder.

        :param holder_state: the Airflow state of the current holder (why it may be taken over).
        """
        handover = Handover(from_run=self.run_id, to_run=run_id, at=now_iso(), holder_state=holder_state)
        return self.model_copy(
            update={"run_id": run_id, "dag_id": dag_id, "handovers": [*self.handovers, handover]}
        )


class Window(Held):
    """One entry of the window ledger: a half-open binlog range ``(start, end]`` owned by one DAG run.

    :param seq: window sequence number, 1, 2, 3, ... in binlog order.
    :param run_id: the DAG run that cut it or adopted it (a retry of that run reuses it; see
        :class:`Held`).
    :param status: ``cut`` -> ``extracted`` (manifest written) -> ``merged`` (checkpoint moved).
    :param cut_by: ``head`` (ends at the source head when cut) or ``interval`` (the run's data interval,
        see :func:`~airflow_provider_binlog.pipeline.windows.cut_interval_window`).
    :param last_commit_ts: commit time of the window's last transaction (from its manifest).
    """

    seq: Seq
    start: BinlogPosition
    end: BinlogPosition
    data_interval_start: str | None = None
    data_interval_end: str | None = None
    status: WindowStatus = "cut"
    cut_at: str
    manifest_uri: str | None = None
    rows: Count | None = None
    cut_by: Literal["head", "interval"] = "head"
    last_commit_ts: str | None = None

    @property
    def staging_name(self) -> str:
        """Return the name of the staging folder of the window's current holder.

        ``window=<seq>`` for the run that cut it, ``window=<seq>.handover-<n>`` after the n-th hand-over: a
        run that adopts a window never writes into a folder an earlier holder may have left half-written.
        """
        name = f"window={self.seq}"
        return f"{name}.handover-{len(self.handovers)}" if self.handovers else name


class Snapshot(Held):
    """One entry of the snapshot ledger: tables read in key chunks and merged as ``_binlog_op = 'r'`` rows.

    Its rows take the order key ``(seq, n)``. ``seq`` is drawn from the window sequence when the snapshot
    starts and ``start`` is the source head at that moment, before any chunk is read; every window cut
    later gets a larger seq, so each change logged after a chunk's low watermark (which is at or after
    ``start``) outranks the chunk's rows, and the windows still to merge start at or before ``start``
    (see :mod:`airflow_provider_binlog.snapshot`).

    :param seq: order-key sequence number of the snapshot's rows.
    :param tables: the ``db.table`` names it reads.
    :param start: the source head before the first chunk was read (the snapshot's low watermark).
    :param run_id: the DAG run holding it (a retry of that run resumes it; see :class:`Held`).
    :param status: ``running`` until its merge is verified in the target, then ``merged``.
    :param staging_uri: its staging folder ``<staging>/<pipeline>/snapshot=<seq>``.
    :param rows: rows read (set when merged).
    :param finished_at: when its merge was verified (ISO-8601 UTC; None while running and in ledgers
        written before it was recorded): with ``started_at``, the measured snapshot rate
        (:mod:`airflow_provider_binlog.monitoring.snapshot_estimate`).
    :param reason: why it was taken: ``initial`` (new pipeline), ``added`` (table new to the
        pipeline), ``requested`` (re-snapshot asked for), ``purged`` (binlogs were purged),
        ``schema_change`` (a schema change the target cannot follow, see :class:`ResnapshotNeeded`) or
        ``lost_transactions`` (a failover lost transactions the target may hold, see :class:`SourceSwitch`).
    """

    seq: Seq
    tables: list[str]
    start: BinlogPosition
    status: SnapshotStatus = "running"
    started_at: str
    staging_uri: str
    rows: Count | None = None
    reason: SnapshotReason = "initial"
    finished_at: str | None = None


class ResnapshotNeeded(BaseModel):
    """A table whose target can no longer follow the binlog from ``since`` on: it waits for a re-snapshot.

    Recorded by the commit of the window that found it (its manifest lists it under ``resnapshots``), so
    the state changes only once that window is merged. Until a snapshot covers it (see
    :func:`covers`), windows stage only the table's changes logged at or before ``since``; the
    snapshot task of the next ``binlog_cdc`` run reads the table (reason ``schema_change``) and its merge
    clears the entry (see ``docs/schema-changes.md``).

    :param table: ``db.table``.
    :param since: the end of the statement's event (its binlog coordinates; ``gtid_set`` empty).
    :param gtid: the statement's GTID, if the source logs GTIDs.
    :param reason: why (a few words, e.g. "ADD COLUMN c with DEFAULT 'x' fills existing rows").
    :param statement: the statement's text, shortened to :data:`STATEMENT_CHARS`.
    :param window: the seq of the window that found it (for ``lost_transactions``: the highest seq in use
        at the switch, so only a snapshot started after the switch covers it).
    :param detected_at: when that window was extracted (ISO-8601, UTC).
    :param cause: ``schema_change``, ``lost_transactions`` or ``quarantine`` (:data:`ResnapshotCause`).
    :param column: for a quarantine, the refused column and its type, when one value was refused.
    :param at: for a quarantine found by a window, the end of the refused row event (``since`` is the start of
        its transaction).
    :param error: for a quarantine, the full message of the last refusal: what, where and what to do.
    :param attempts: re-snapshots of the table tried since it was quarantined that failed in turn.
    :param retry_due: whether the next snapshot task re-snapshots the table: always for the causes other than
        ``quarantine``; for a quarantine, until a re-snapshot fails, then again once the chunk it could not read
        (``probe``) reads, or the provider's version differs from ``attempted_version``
        (:func:`~airflow_provider_binlog.pipeline.quarantine.retry_due`).
    :param attempted_version: the provider version that tried the last failed re-snapshot.
    :param probe: the chunk the last failed re-snapshot could not read (``{"key", "chunk"}``,
        :func:`~airflow_provider_binlog.snapshot.chunks.probe_chunk`): the snapshot task reads it again first, and
        a retry is due once it reads.
    """

    model_config = ConfigDict(extra="forbid")

    table: str
    since: BinlogPosition
    gtid: str | None = None
    reason: str
    statement: str
    window: Seq
    detected_at: str
    cause: ResnapshotCause = "schema_change"
    column: str | None = None
    at: BinlogPosition | None = None
    error: str | None = None
    attempts: Count = 0
    retry_due: bool = True
    attempted_version: str | None = None
    probe: dict[str, Any] | None = None


class SourceSwitch(BaseModel):
    """The pipeline followed its source to another server (or the same server with a reset binlog).

    Written by the run that found the switch (:func:`~airflow_provider_binlog.pipeline.failover.switch_source`):
    every position of the ledger was rebased onto the new server's binlog by its GTID set.

    :param from_identity: the source identity the state was written for.
    :param to_identity: the source identity the connection reaches now.
    :param old_checkpoint: the checkpoint on the old server (its coordinates, and the GTID set merged).
    :param checkpoint: the checkpoint on the new server: where the GTID set of ``old_checkpoint`` lies there,
        or, when transactions were lost, the newest earlier boundary the new server holds.
    :param lost: the GTIDs the target may hold that the new server's binlog lacks (empty: none).
    :param resnapshot: the tables those transactions may have changed, listed for a re-snapshot.
    :param dropped_windows: seqs of unmerged windows that held lost transactions (re-cut on the new server).
    :param run_id: the DAG run that followed the switch.
    :param switched_at: when (ISO-8601, UTC).
    """

    model_config = ConfigDict(extra="forbid")

    from_identity: str
    to_identity: str
    old_checkpoint: BinlogPosition
    checkpoint: BinlogPosition
    lost: str = ""
    resnapshot: list[str] = Field(default_factory=list)
    dropped_windows: list[Seq] = Field(default_factory=list)
    run_id: str | None = None
    switched_at: str


STATEMENT_CHARS = 300
"""How much of a statement's text a :class:`ResnapshotNeeded` entry (and the manifest) keeps."""


class Checkpoint(BaseModel):
    """The position up to which changes are durably merged into the target."""

    model_config = ConfigDict(extra="forbid")

    position: BinlogPosition
    window: int = Field(
        ge=0, le=SEQ_MAX, description="seq of the last merged window (the seq base: none merged yet)"
    )
    commit_ts: str | None = None
    updated_at: str


class PipelineState(BaseModel):
    """The versioned state document of one pipeline (``format_version`` 1)."""

    model_config = ConfigDict(extra="forbid")

    format_version: Literal[1] = 1
    pipeline: str
    source_identity: str
    flavor: Literal["mysql", "mariadb"]
    revision: Count
    writer: str = ""
    checkpoint: Checkpoint
    windows: list[Window] = Field(default_factory=list)
    snapshots: list[Snapshot] = Field(default_factory=list)
    target: str | None = Field(
        default=None, description="root of the pipeline's Delta tables, recorded by its first merge"
    )
    target_tables: list[str] = Field(
        default_factory=list, description="the db.table names a window or snapshot has merged into the target"
    )
    seq_floor: int = Field(
        default=0,
        ge=0,
        le=SEQ_MAX,
        description="highest sequence number used by any earlier revision (set when one is restored)",
    )
    resnapshots_needed: list[ResnapshotNeeded] = Field(
        default_factory=list,
        description="tables a schema change left waiting for a re-snapshot (see ResnapshotNeeded)",
    )
    switches: list[SourceSwitch] = Field(
        default_factory=list, description="each change of source server the pipeline followed, oldest first"
    )
    kept_columns: dict[str, list[str]] = Field(
        default_factory=dict,
        description="per db.table, the columns its target keeps although a followed DROP COLUMN removed them from "
        "the source; a snapshot of the table clears them (see PipelineState.with_kept_columns)",
    )

    @model_validator(mode="after")
    def _positions_in_range(self) -> PipelineState:
        """Refuse a binlog position beyond :data:`POS_MAX`, naming its field (it would overflow when read from)."""
        named = [("checkpoint.position", self.checkpoint.position)]
        named += [
            (f"windows.{i}.{e}", getattr(w, e)) for i, w in enumerate(self.windows) for e in ("start", "end")
        ]
        named += [(f"snapshots.{i}.start", s.start) for i, s in enumerate(self.snapshots)]
        named += [(f"resnapshots_needed.{i}.since", r.since) for i, r in enumerate(self.resnapshots_needed)]
        beyond = [f"{field}.pos is {p.pos}" for field, p in named if p.pos > POS_MAX]
        if beyond:
            raise ValueError(f"binlog positions beyond {POS_MAX}: {', '.join(beyond)}")
        return self

    @property
    def next_seq(self) -> int:
        """Return the sequence number for the next window or snapshot (one above any used so far).

        ``seq_floor`` keeps it above the sequence numbers of revisions a restored document replaced:
        their windows' staging folders and Delta app-transaction markers must never be reused.
        """
        used = [
            self.seq_floor,
            self.checkpoint.window,
            *(w.seq for w in self.windows),
            *(s.seq for s in self.snapshots),
        ]
        return max(used) + 1

    def with_target(self, root: str, tables: Iterable[str]) -> PipelineState:
        """Return a copy recording ``root`` as the target and ``tables`` among the tables merged into it."""
        merged = sorted({*self.target_tables, *tables})
        return self.model_copy(update={"target": root, "target_tables": merged})

    def snapshot_of_run(self, run_id: str) -> Snapshot | None:
        """Return the snapshot held by ``run_id`` (started or taken over by it), if any."""
        return next((s for s in self.snapshots if s.run_id == run_id), None)

    def snapshotted_tables(self) -> set[str]:
        """Return the tables a snapshot of this pipeline has read and merged into the target.

        A snapshot still ``running`` does not count: until its merge is verified, its tables may lack
        the rows it was started to load.
        """
        return {
            table for snapshot in self.snapshots if snapshot.status == "merged" for table in snapshot.tables
        }

    def with_resnapshots_needed(self, found: Iterable[ResnapshotNeeded]) -> PipelineState:
        """Return a copy that also lists ``found`` (an entry already listed, same table and since, is kept once)."""
        known = {(r.table, r.since.key) for r in self.resnapshots_needed}
        added = [r for r in found if (r.table, r.since.key) not in known]
        if not added:
            return self
        return self.model_copy(update={"resnapshots_needed": [*self.resnapshots_needed, *added]})

    def with_kept_columns(self, found: Mapping[str, Iterable[str]]) -> PipelineState:
        """Return a copy whose ``kept_columns`` also list ``found`` (``{"db.table": [column, ...]}``).

        A followed ``DROP COLUMN`` leaves the column in the target with the values of the rows not written since;
        the extract re-snapshots an ``ADD COLUMN`` of such a name instead of following it
        (:func:`~airflow_provider_binlog.extract.ddl.classify_ddl`), which it knows from these.
        """
        kept = {table: list(columns) for table, columns in self.kept_columns.items()}
        for table, columns in found.items():
            known = kept.setdefault(table, [])
            for column in columns:  # MySQL column names are case-insensitive
                if column.lower() not in {k.lower() for k in known}:
                    known.append(column)
        kept = {table: columns for table, columns in kept.items() if columns}
        return self if kept == self.kept_columns else self.model_copy(update={"kept_columns": kept})

    def without_kept_columns(self, tables: Iterable[str]) -> PipelineState:
        """Return a copy without the ``kept_columns`` of ``tables``: a snapshot of each replaced its target's schema."""
        gone = set(tables)
        if not gone & set(self.kept_columns):
            return self
        kept = {table: columns for table, columns in self.kept_columns.items() if table not in gone}
        return self.model_copy(update={"kept_columns": kept})

    def pending_resnapshots(self) -> list[ResnapshotNeeded]:
        """Return the entries no snapshot covers yet (none of the table's snapshots started at or after ``since``).

        A snapshot still ``running`` covers an entry too: it reads the table after ``since``, and its merge
        clears the entry.
        """
        return [r for r in self.resnapshots_needed if self.covering_snapshot(r) is None]

    def covering_snapshot(self, needed: ResnapshotNeeded, below: int | None = None) -> Snapshot | None:
        """Return the newest snapshot covering ``needed``, if any.

        A snapshot covers it when it reads ``needed.table``, started at or after ``needed.since`` and is ordered
        after the window that found it (a higher seq): an older snapshot that started at the window's start
        read none of that window's changes, which a refused merge left out of the target.

        :param below: only snapshots whose seq is below this one (a window's seq) count.
        """
        return max(
            (s for s in self.snapshots if covers(s, needed) and (below is None or s.seq < below)),
            key=lambda s: s.seq,
            default=None,
        )

    def window_of_run(self, run_id: str) -> Window | None:
        """Return the window held by ``run_id`` (cut or adopted by it), if any."""
        return next((w for w in self.windows if w.run_id == run_id), None)

    def window(self, seq: int) -> Window:
        """Return window ``seq``.

        :raises StateError: when the ledger has no such window.
        """
        found = next((w for w in self.windows if w.seq == seq), None)
        if found is None:
            raise StateError(f"pipeline {self.pipeline!r} has no window {seq} in its ledger")
        return found

    @property
    def last_window(self) -> Window | None:
        """Return the newest window of the ledger."""
        return self.windows[-1] if self.windows else None

    def inconsistencies(self) -> list[str]:
        """Return what contradicts the ledger's rules in this document (empty when consistent).

        The rules (``docs/guarantees.md``, "The state document is checked on every read"): sequence
        numbers are unique; every window ends at or after its start; head windows tile the binlog in seq
        order (each starts where the one before it ended) and only the newest may be unmerged; interval
        windows do not overlap; the checkpoint is the end of the window it names when the ledger holds
        it, no merged head window lies beyond it, no merged window starts at it unconsumed, and the
        first head window after it starts at it.
        """
        problems = _duplicate_seqs(self)
        for window in self.windows:
            if window.end.key < window.start.key:
                problems.append(
                    f"window {window.seq} ends at {_text(window.end)} before its start {_text(window.start)}"
                )
        heads = sorted((w for w in self.windows if w.cut_by == "head"), key=lambda w: w.seq)
        for before, after in pairwise(heads):
            if after.start != before.end:
                problems.append(
                    f"window {after.seq} starts at {_text(after.start)}, not where window {before.seq} ended "
                    f"({_text(before.end)}): the ledger no longer tiles the binlog"
                )
            if before.status != "merged":
                problems.append(
                    f"window {before.seq} is {before.status} but a later window {after.seq} was cut"
                )
        intervals = sorted((w for w in self.windows if w.cut_by == "interval"), key=lambda w: w.start.key)
        for before, after in pairwise(intervals):
            if after.start.key < before.end.key:
                problems.append(f"interval windows {before.seq} and {after.seq} overlap")
        return problems + _checkpoint_problems(self, heads)

    def pruned(self) -> PipelineState:
        """Return a copy keeping every unmerged window and the newest merged ones."""
        merged = [w for w in self.windows if w.status == "merged"][-MERGED_WINDOWS_KEPT:]
        keep = {w.seq for w in merged} | {w.seq for w in self.windows if w.status != "merged"}
        return self.model_copy(update={"windows": [w for w in self.windows if w.seq in keep]})


def location_problems(
    state: PipelineState, *, staging: str | None, target: str | None, bare_staging: str | None = None
) -> list[str]:
    """Return each location ``state`` names outside the pipeline's configured roots (empty when none).

    A state document names locations later tasks read, write and delete (``snapshots[].staging_uri``,
    ``windows[].manifest_uri``, the target tables of ``target_tables``); a hand-edited one could name any. Each
    must lie within its root (:func:`~airflow_provider_binlog.contract.uris.within_root`).

    :param staging: the pipeline's staging folder ``<staging>/<pipeline>`` as the task's ObjectStoragePath
        writes it (with its connection id, ``s3://conn@bucket/...``, as windows record their manifests; snapshots
        record theirs without it), or None when the task was given no staging.
    :param bare_staging: ``staging`` without its connection id (what snapshots record); ``staging`` when None.
    :param target: the target root the task was given, or None.
    :returns: one line per location, naming the field (``snapshots[2].staging_uri``), the location and the root.
    """
    found: list[tuple[str, str, str]] = []
    if staging is not None:
        bare = bare_staging or staging
        found += [(f"snapshots[{i}].staging_uri", s.staging_uri, bare) for i, s in enumerate(state.snapshots)]
        found += [
            (f"windows[{i}].manifest_uri", w.manifest_uri, staging)
            for i, w in enumerate(state.windows)
            if w.manifest_uri is not None
        ]
    problems = [
        f"{field} is {uri!r}, outside {root!r}" for field, uri, root in found if not within_root(root, uri)
    ]
    if target is not None:
        for i, table in enumerate(state.target_tables):
            try:
                uri = table_uri(target, table)
            except ContractError as err:
                problems.append(f"target_tables[{i}] is {table!r}: {err}")
                continue
            if not within_root(target, uri):
                problems.append(
                    f"target_tables[{i}] is {table!r}, whose table {uri!r} lies outside {target!r}"
                )
    return problems


def covers(snapshot: Snapshot, needed: ResnapshotNeeded) -> bool:
    """Return whether ``snapshot`` covers ``needed`` (see :meth:`PipelineState.covering_snapshot`)."""
    return (
        needed.table in snapshot.tables
        and snapshot.start.key >= needed.since.key
        and snapshot.seq > needed.window
    )


def _text(position: BinlogPosition) -> str:
    return f"{position.file}:{position.pos}"


def _duplicate_seqs(state: PipelineState) -> list[str]:
    seqs = [w.seq for w in state.windows] + [s.seq for s in state.snapshots]
    return [
        f"sequence number {seq} is used more than once"
        for seq in sorted({q for q in seqs if seqs.count(q) > 1})
    ]


def _checkpoint_problems(state: PipelineState, heads: list[Window]) -> list[str]:
    checkpoint = state.checkpoint
    at = _text(checkpoint.position)
    named = next((w for w in state.windows if w.seq == checkpoint.window), None)
    problems = []
    if named is not None and (named.status != "merged" or named.end != checkpoint.position):
        problems.append(
            f"the checkpoint {at} names window {named.seq} as the last merged one, but that window is "
            f"{named.status} and ends at {_text(named.end)}"
        )
    for window in state.windows:
        if window.status != "merged" or window.seq <= checkpoint.window:
            continue
        if window.cut_by == "head":
            problems.append(
                f"window {window.seq} is merged but the checkpoint {at} (window {checkpoint.window}) is behind it"
            )
        elif window.start == checkpoint.position:
            problems.append(
                f"merged window {window.seq} starts at the checkpoint {at}, which did not move past it"
            )
    following = next((w for w in heads if w.seq > checkpoint.window), None)
    if following is not None and following.start != checkpoint.position:
        problems.append(
            f"window {following.seq}, the first after the checkpoint, starts at {_text(following.start)}, "
            f"not at the checkpoint {at}"
        )
    return problems


def now_iso() -> str:
    """Return the current UTC time as ISO-8601 text."""
    return pendulum.now("UTC").isoformat()


def state_summary(state: PipelineState) -> dict[str, Any]:
    """Return a short dict (source, last source switch, checkpoint, last window) for task logs and XCom."""
    last = state.last_window
    switch = state.switches[-1] if state.switches else None
    return {
        "pipeline": state.pipeline,
        "source": state.source_identity,
        "last_source_switch": None
        if switch is None
        else {
            "from": switch.from_identity,
            "at": switch.switched_at,
            "lost": switch.lost,
            "run_id": switch.run_id,
        },
        "checkpoint": state.checkpoint.position.to_dict(),
        "checkpoint_window": state.checkpoint.window,
        "last_window": None if last is None else {"seq": last.seq, "status": last.status},
    }
