"""Following the source to another server: the ledger rebased by GTID (``docs/failover.md``).

Binlog coordinates are only valid on the server that wrote them; the GTID set executed up to a transaction
boundary names the same boundary on every server of a replication topology (MariaDB KB, "Global Transaction
ID"; MySQL manual, "Replication with Global Transaction Identifiers"). When the connection reaches another
server than the one the state was written for (a failover, a planned switchover, a rebuilt replica, the same
server after ``RESET MASTER``), :func:`plan_switch` finds where the ledger's GTID sets lie on the new server
and :func:`switch_source` rebases every position of the ledger onto it:

* a position whose GTID set the new checkpoint contains becomes the new checkpoint. It lies at or before the
  checkpoint, and every later comparison (capture starts, snapshot covers, window tiling) is with positions
  after the checkpoint, so every such comparison keeps its outcome. Merged windows thus collapse onto the
  checkpoint; the :class:`~airflow_provider_binlog.pipeline.ledger.SourceSwitch` record keeps the old coordinates;
* a position beyond the checkpoint (an unmerged window's bounds, a snapshot started after the checkpoint, an
  interval window merged ahead of a gap) is located by its own GTID set;
* a schema-change barrier (its ``since`` has coordinates only) moves to the new checkpoint: its table then
  waits for the re-snapshot from there on, which is exact, since the re-snapshot reads the whole table.

**Lost transactions.** With asynchronous replication a crashed primary may have committed transactions the
promoted replica never received, and the target may hold them. When the new server lacks part of the
checkpoint's GTID set, the pipeline resumes at the newest boundary of its ledger the new server holds
(windows after it are read again there: replaying a suffix of the binlog converges to the same rows), and
every table a window or snapshot after that boundary changed waits for a re-snapshot on the new server
(:class:`~airflow_provider_binlog.pipeline.ledger.ResnapshotNeeded`, cause ``lost_transactions``), or the run
fails naming them (``on_lost_transactions="fail"``). Unmerged windows holding lost transactions are dropped and
re-cut. Pure functions: locating a GTID set on a server is the caller's (``locate``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal, get_args

from airflow_provider_binlog.contract.positions import BinlogPosition
from airflow_provider_binlog.exceptions import BinlogConfigError, LostTransactionsError, StateError
from airflow_provider_binlog.pipeline.ledger import (
    PipelineState,
    ResnapshotNeeded,
    SourceSwitch,
    Window,
    now_iso,
)
from airflow_provider_binlog.source.gtid import GtidSet

OnLostTransactions = Literal["resnapshot", "fail"]
"""What a run does when a new source lacks transactions the target may hold: re-snapshot the tables they may
have changed (``resnapshot``, the default) or fail without retry naming them (``fail``)."""
ON_LOST_TRANSACTIONS: tuple[OnLostTransactions, ...] = get_args(OnLostTransactions)
"""The values of :data:`OnLostTransactions`."""

Locate = Callable[[GtidSet], BinlogPosition]
"""Where a GTID set lies on the new server; raises :class:`LostTransactionsError` when its binlog lacks part of it."""
WindowTables = Callable[[Window], "set[str] | None"]
"""The tables a staged window changed (from its manifest); None when its manifest can no longer be read."""


def check_on_lost_transactions(value: str) -> OnLostTransactions:
    """Return an operator's ``on_lost_transactions`` argument, checked.

    :raises BinlogConfigError: when it is not one of :data:`ON_LOST_TRANSACTIONS`.
    """
    if value not in ON_LOST_TRANSACTIONS:
        raise BinlogConfigError(
            f"on_lost_transactions={value!r} must be one of {', '.join(map(repr, ON_LOST_TRANSACTIONS))}"
        )
    return value  # type: ignore[return-value]


@dataclass(frozen=True)
class SwitchPlan:
    """What following a switch does to a ledger (from :func:`plan_switch`, applied by :func:`switch_source`).

    :param checkpoint: the new checkpoint: the old one's GTID set located on the new server or, when
        transactions were lost, the newest earlier ledger boundary the new server holds (its head when none).
    :param located: positions beyond the checkpoint on the new server, by the text of their GTID set.
    :param lost: the GTIDs the target may hold that the new server lacks: those merged after the resume point
        (empty: none were lost).
    :param lost_tables: the captured tables that may hold lost transactions (re-snapshotted).
    :param dropped: seqs of unmerged windows holding lost transactions (re-cut).
    """

    checkpoint: BinlogPosition
    located: dict[str, BinlogPosition]
    lost: str = ""
    lost_tables: frozenset[str] = frozenset()
    dropped: frozenset[int] = frozenset()


def plan_switch(
    state: PipelineState, *, locate: Locate, window_tables: WindowTables, head: BinlogPosition
) -> SwitchPlan:
    """Return where the ledger of ``state`` lies on a new server (see the module docstring).

    :param locate: finds a GTID set on the new server (one binlog dump each; results are reused).
    :param window_tables: the tables a window changed, for lost transactions.
    :param head: the new server's binlog head: the resume point when it holds no boundary of the ledger.
    :raises StateError: when the checkpoint has no GTID set (GTIDs were off on the old server): coordinates
        cannot be carried to another server.
    """
    old = state.checkpoint.position
    if not old.gtid_set:
        raise StateError(
            f"the checkpoint {old.file}:{old.pos} of pipeline {state.pipeline!r} records no GTID set (GTIDs were off "
            f"on the source that wrote it), so it cannot be found on another server. Point the connection back at "
            f"the original server, or re-snapshot into a new pipeline name; turn GTIDs on (MySQL gtid_mode=ON) so "
            f"that the next failover is followed (docs/failover.md)."
        )
    finder = _Finder(state.flavor, locate)
    captured = {*state.target_tables, *(t for s in state.snapshots for t in s.tables)}
    merged = _gtids(old, state.flavor)
    try:
        checkpoint, lost = _same_text(locate(merged), old, state.flavor), ""
    except LostTransactionsError as err:
        resume = _resume_point(state, finder)
        if resume is None:  # the new server holds no boundary of the ledger: every table is read again
            unmerged = frozenset(w.seq for w in state.windows if w.status != "merged")
            return SwitchPlan(head, {}, err.missing, frozenset(captured), unmerged)
        checkpoint, lost = resume, str(merged - _gtids(resume, state.flavor))
    reach = _gtids(checkpoint, state.flavor)
    tables: set[str] = set()
    dropped: set[int] = set()
    for window in state.windows:
        beyond = [p for p in (window.start, window.end) if not _within(p, reach, state.flavor)]
        if not beyond:
            continue
        if window.status == "merged" and window.cut_by == "head":
            if lost:  # merged after the resume point: it may hold the lost transactions
                tables |= _window_tables(state, window, window_tables)
        elif not all(finder.find(p) for p in beyond):
            if window.status != "merged":
                dropped.add(window.seq)
            if window.status != "cut":  # its merge may have begun
                tables |= _window_tables(state, window, window_tables)
    for snapshot in state.snapshots:
        if not _within(snapshot.start, reach, state.flavor) and finder.find(snapshot.start) is None:
            tables |= set(snapshot.tables)
    return SwitchPlan(
        checkpoint=checkpoint,
        located=finder.located,
        lost=lost,
        lost_tables=frozenset(tables & captured),
        dropped=frozenset(dropped),
    )


def switch_source(
    state: PipelineState, plan: SwitchPlan, *, identity: str, run_id: str | None
) -> PipelineState:
    """Return ``state`` rebased onto the new server of ``plan``, the switch recorded.

    :param identity: the new server's source identity.
    :param run_id: the DAG run following the switch.
    """
    checkpoint = plan.checkpoint
    reach = _gtids(checkpoint, state.flavor)

    def rebase(position: BinlogPosition) -> BinlogPosition:
        if _within(position, reach, state.flavor):
            return checkpoint
        return plan.located.get(_key(position, state.flavor), checkpoint)

    windows = [
        w.model_copy(update={"start": rebase(w.start), "end": rebase(w.end)})
        for w in state.windows
        if w.seq not in plan.dropped
    ]
    snapshots = [s.model_copy(update={"start": rebase(s.start)}) for s in state.snapshots]
    barriers = [r.model_copy(update={"since": checkpoint}) for r in state.resnapshots_needed]
    switch = SourceSwitch(
        from_identity=state.source_identity,
        to_identity=identity,
        old_checkpoint=state.checkpoint.position,
        checkpoint=checkpoint,
        lost=plan.lost,
        resnapshot=sorted(plan.lost_tables),
        dropped_windows=sorted(plan.dropped),
        run_id=run_id,
        switched_at=now_iso(),
    )
    switched = state.model_copy(
        update={
            "source_identity": identity,
            "checkpoint": state.checkpoint.model_copy(
                update={"position": checkpoint, "updated_at": now_iso()}
            ),
            "windows": windows,
            "snapshots": snapshots,
            "resnapshots_needed": barriers,
            "switches": [*state.switches, switch],
            # a dropped window's seq is never reused: its staging folder and Delta markers may exist
            "seq_floor": max([state.seq_floor, *plan.dropped]),
        }
    )
    return switched.with_resnapshots_needed(_lost_barriers(state, plan))


def switch_summary(switch: SourceSwitch) -> str:
    """Return the one log line that says what following ``switch`` did."""
    old, new = switch.old_checkpoint, switch.checkpoint
    change = (
        f"the binlog of {switch.to_identity} was rewritten (reset or renamed)"
        if switch.from_identity == switch.to_identity
        else f"the source changed from {switch.from_identity} to {switch.to_identity}"
    )
    text = f"{change}: the checkpoint (GTID set {old.gtid_set}, {old.file}:{old.pos} there) "
    if not switch.lost and new.gtid_set == old.gtid_set:
        text += f"lies at {new.file}:{new.pos} now; the pipeline goes on from there"
    elif not switch.lost:
        text += (
            f"is preceded there by transactions the old source never had (errant ones); the pipeline reads from "
            f"{new.file}:{new.pos} (GTID set {new.gtid_set}), the checkpoint's later transactions again"
        )
    else:
        text += (
            f"is not on the new server, which lacks the transactions {switch.lost}; the pipeline goes on from "
            f"{new.file}:{new.pos} (GTID set {new.gtid_set or 'empty'}) and re-snapshots "
            f"{', '.join(switch.resnapshot) or 'no table (none may hold them)'}"
        )
    if switch.dropped_windows:
        text += f"; unmerged windows {', '.join(map(str, switch.dropped_windows))} held lost transactions and are re-cut"
    return text


class _Finder:
    """``locate`` with its results kept; a position the new server lacks is None."""

    def __init__(self, flavor: str, locate: Locate) -> None:
        self.flavor = flavor
        self.locate = locate
        self.located: dict[str, BinlogPosition] = {}
        self.missing: set[str] = set()

    def find(self, position: BinlogPosition) -> BinlogPosition | None:
        key = _key(position, self.flavor)
        if key not in self.located and key not in self.missing:
            try:
                self.located[key] = _same_text(
                    self.locate(_gtids(position, self.flavor)), position, self.flavor
                )
            except LostTransactionsError:
                self.missing.add(key)
        return self.located.get(key)


def _resume_point(state: PipelineState, finder: _Finder) -> BinlogPosition | None:
    """Return the newest boundary of the ledger's merged windows that the new server holds, located there."""
    bounds = {p for w in state.windows if w.status == "merged" for p in (w.start, w.end) if p.gtid_set}
    for bound in sorted(bounds, key=lambda p: p.key, reverse=True):
        if bound.key <= state.checkpoint.position.key and (found := finder.find(bound)) is not None:
            return found
    return None


def _window_tables(state: PipelineState, window: Window, window_tables: WindowTables) -> set[str]:
    """Return the tables ``window`` changed; every table the target holds when its manifest is gone."""
    if not window.rows:
        return set()
    found = window_tables(window)
    return set(state.target_tables) if found is None else found


def _lost_barriers(state: PipelineState, plan: SwitchPlan) -> Iterable[ResnapshotNeeded]:
    """Return a re-snapshot entry per table that may hold lost transactions."""
    for table in sorted(plan.lost_tables):
        yield ResnapshotNeeded(
            table=table,
            since=plan.checkpoint,
            reason=f"the new source lacks the transactions {plan.lost}, which the target may hold",
            statement="",
            window=max(1, state.next_seq - 1),
            detected_at=now_iso(),
            cause="lost_transactions",
        )


def _same_text(located: BinlogPosition, position: BinlogPosition, flavor: str) -> BinlogPosition:
    """Return ``located`` with the GTID set text of ``position`` when it is the same set.

    A rebased boundary keeps its ledger text, so a window's staged manifest still names the window's bounds by
    GTID set (:func:`~airflow_provider_binlog.pipeline.staging.staged_manifest`). A boundary found before the
    position (errant transactions precede it on the new server) keeps its own state.
    """
    if _gtids(located, flavor) != _gtids(position, flavor):
        return located
    return BinlogPosition(located.file, located.pos, position.gtid_set)


def _gtids(position: BinlogPosition, flavor: str) -> GtidSet:
    return GtidSet.parse(position.gtid_set, flavor)


def _key(position: BinlogPosition, flavor: str) -> str:
    return str(_gtids(position, flavor))


def _within(position: BinlogPosition, reach: GtidSet, flavor: str) -> bool:
    """Return whether ``position`` lies at or before the boundary whose GTID set is ``reach``.

    A position without a GTID set (a schema-change barrier's) counts as within: it is rebased to the checkpoint.
    """
    return not position.gtid_set or reach.contains(_gtids(position, flavor))
