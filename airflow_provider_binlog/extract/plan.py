"""The plan of one window's read: what each selected table is for this window.

Built by the extract task before it reads, from the source's table definitions and the pipeline's state:

* :func:`plan_tables` (with :func:`table_targets`, :func:`capture_start`, :func:`captured_tables`): the tables the
  window stages, each a :class:`~airflow_provider_binlog.extract.targets.TableTarget` with its key and where the
  pipeline's capture of it begins, and those it leaves out with the reason;
* :func:`gone_targets`: the tables the target holds that the source no longer has;
* :func:`set_barriers` (:func:`schema_barriers`): the schema changes each table waits on for a re-snapshot;
* :func:`snapshot_covers`: each table's newest snapshot, against which statement-based writes are judged;
* :func:`cascading_keys`: the foreign keys whose child changes the merge applies itself.

Nothing here imports Airflow (an import contract in ``pyproject.toml`` holds it; the provider's errors, rooted at
``AirflowException`` by design, are the one exception): the source is reached through the narrow
:class:`ForeignKeySource`, the task's logger through :class:`PlanLog`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Protocol

from airflow_provider_binlog.contract.foreign_keys import (
    ForeignKey,
    ForeignKeyCycleError,
    parents_first,
    referenced_columns,
    split_by_selection,
    unselected_parent_warning,
)
from airflow_provider_binlog.exceptions import BinlogConfigError
from airflow_provider_binlog.extract.targets import SchemaBarrier, SnapshotCover, TableTarget
from airflow_provider_binlog.pipeline.tables import (
    KeylessMode,
    KeylessTableError,
    skipped_warning,
    table_keys,
    takes,
)
from airflow_provider_binlog.pipeline.windows import CutBy

if TYPE_CHECKING:
    from airflow_provider_binlog.contract.positions import BinlogPosition
    from airflow_provider_binlog.pipeline.ledger import PipelineState
    from airflow_provider_binlog.source.schema import TableInfo
    from airflow_provider_binlog.source.server import ServerState


class PlanLog(Protocol):
    """The logger the plan reports to: the task's (an Airflow task logger or a :class:`logging.Logger`)."""

    def info(self, msg: str, /, *args: object) -> object:
        """Log ``msg % args`` at INFO."""

    def warning(self, msg: str, /, *args: object) -> object:
        """Log ``msg % args`` at WARNING."""

    def error(self, msg: str, /, *args: object) -> object:
        """Log ``msg % args`` at ERROR."""


class ForeignKeySource(Protocol):
    """What :func:`cascading_keys` needs of the source (the pipeline's :class:`~airflow_provider_binlog.hooks.binlog.BinlogHook`).

    :ivar pipeline: the pipeline's name (for error messages).
    """

    pipeline: str

    def foreign_keys(self, tables: Iterable[str]) -> list[ForeignKey]:
        """Return the foreign keys with CASCADE or SET NULL actions whose child is one of ``tables``."""
        ...


def table_targets(
    described: dict[str, TableInfo],
    keys: dict[str, list[str]],
    *,
    keyless_tables: KeylessMode = "fail",
) -> tuple[dict[str, TableTarget], dict[str, str]]:
    """Return ``({"db.table": TableTarget}, {"db.table": reason skipped})`` of the described tables.

    A table's key is its primary key, or the columns named in ``keys`` (any existing columns, see
    :func:`~airflow_provider_binlog.pipeline.tables.resolve_key`); a table with neither is left out with the reason
    (``keyless_tables="skip"``) or refused (``"fail"``).

    :param described: ``{"db.table": TableInfo}`` of the selected tables as the source describes them now.
    :param keys: ``{"db.table": [columns]}`` the user named for tables without a primary key.
    :param keyless_tables: what to do with a table that has neither.
    :raises KeylessTableError: for a table with neither when ``keyless_tables="fail"``.
    :raises BinlogConfigError: for a named key column that does not exist.
    """
    resolved = table_keys(
        {name: (info.columns, info.primary_key) for name, info in described.items()},
        keys,
        keyless_tables=keyless_tables,
    )
    targets = {name: TableTarget(name=name, primary_key=key) for name, key in resolved.keys.items()}
    return targets, resolved.skipped


def plan_tables(
    described: dict[str, TableInfo],
    state: PipelineState | None,
    keys: dict[str, list[str]],
    *,
    keyless_tables: KeylessMode,
    pipeline: str,
    log: PlanLog,
) -> tuple[dict[str, TableTarget], dict[str, str]]:
    """Return the tables this window stages (with their keys and capture starts) and those it leaves out.

    Keys as :func:`table_targets` finds them; a keyless table is left out with a WARNING in ``log``. When the
    pipeline takes snapshots (its state records one), a table no snapshot has read yet is left out too: the
    snapshot task of the next run loads it first. Each staged table gets its :attr:`TableTarget.since`
    (:func:`capture_start`), whether the target already holds it (:attr:`TableTarget.captured`) and the dropped
    columns its target keeps (:func:`kept_columns`).

    :param described: ``{"db.table": TableInfo}`` of the selected tables as the source describes them now.
    :param state: the pipeline's state as read (None: a new pipeline).
    :param keys: ``{"db.table": [columns]}`` the user named for tables without a primary key.
    :param keyless_tables: ``skip`` or ``fail`` (see :func:`table_targets`).
    :param pipeline: the pipeline's name (for messages).
    :param log: the task's logger.
    :returns: ``({"db.table": TableTarget}, {"db.table": reason left out})``.
    :raises KeylessTableError: for a keyless table with ``keyless_tables="fail"``, or one the pipeline
        has already captured.
    :raises BinlogConfigError: for a named key column that does not exist.
    """
    targets, skipped = table_targets(described, keys, keyless_tables=keyless_tables)
    lost = sorted(set(skipped) & captured_tables(state))
    if lost:
        raise KeylessTableError(
            f"{', '.join(lost)} lost the primary key the pipeline {pipeline} captured it by, so its "
            f"changes can no longer be merged (the target table would silently go stale). Give it a key "
            f"again and re-snapshot it (binlog_resnapshot, mode 'requested'), name a key with keys=, or "
            f"exclude it with '!{lost[0]}'. {skipped[lost[0]]}"
        )
    for name, reason in skipped.items():
        log.warning(skipped_warning(name, reason))
    if state is not None and state.snapshots:
        captured = captured_tables(state)
        for name in sorted(set(targets) - captured):  # a snapshotting pipeline loads new tables first
            del targets[name]
            skipped[name] = (
                f"{name} is new to the pipeline and no snapshot has read it yet; the snapshot task of the next "
                f"run loads it, and windows capture it from that snapshot's start."
            )
            log.warning("%s is left out of this run: %s", name, skipped[name])
    for target in targets.values():
        target.since = capture_start(state, target.name)
        target.captured = state is not None and target.name in state.target_tables
        target.kept_columns = kept_columns(state, target.name)
    return targets, skipped


def kept_columns(state: PipelineState | None, table: str) -> set[str]:
    """Return the columns the target of ``table`` keeps although the source dropped them (``state.kept_columns``).

    :param state: the pipeline's state (None: a new pipeline, nothing kept).
    :param table: ``db.table``.
    """
    return set(state.kept_columns.get(table, ())) if state is not None else set()


def capture_start(state: PipelineState | None, table: str, below: int | None = None) -> BinlogPosition | None:
    """Return where a window's capture of ``table`` begins: the start of the table's newest snapshot, if any.

    Changes logged before that start are in the snapshot's rows; binlog windows stage only later ones. The newest
    snapshot ordered before the window counts, not the first: a re-snapshot (a schema change, a quarantine, a
    request) holds the table as the source had it then, and the events before it need not be decoded again
    (they may carry a value the table was quarantined for, in the before image of the update that fixed it).

    :param state: the pipeline's state (None: a new pipeline, no snapshot).
    :param table: ``db.table``.
    :param below: the window's seq: only snapshots ordered before it (a lower seq) count; None: every snapshot.
    """
    snapshots = [
        s
        for s in (state.snapshots if state else [])
        if table in s.tables and (below is None or s.seq < below)
    ]
    return max(snapshots, key=lambda s: s.seq).start if snapshots else None


def captured_tables(state: PipelineState | None) -> set[str]:
    """Return the tables the pipeline has merged into its target or read in a snapshot (any status).

    :param state: the pipeline's state (None: a new pipeline, nothing captured).
    """
    if state is None:
        return set()
    return {*state.target_tables, *(t for s in state.snapshots for t in s.tables)}


def gone_targets(
    state: PipelineState | None, selection: Sequence[str], existing: Iterable[str]
) -> dict[str, TableTarget]:
    """Return a ``gone`` target per table the target holds that the source no longer has but the selection takes.

    Such a table was dropped or renamed away (:class:`~airflow_provider_binlog.extract.targets.TableTarget`). The
    window stages none of their row changes, only the truncate marker of the statement that removed them
    when the window holds it, so the target is emptied at that statement's place in the order
    (``docs/adr/0015-truncate-marker.md``). Their key is the Delta table's own (the merge reads it there).

    :param state: the pipeline's state (None: a new pipeline, nothing is gone).
    :param selection: the table selection (names, patterns and ``!`` exclusions).
    :param existing: the ``db.table`` names the source has now.
    :returns: ``{"db.table": TableTarget}`` with ``gone=True`` and ``captured=True``.
    """
    known = set(existing)
    held = state.target_tables if state is not None else []
    return {
        name: TableTarget(name, [], captured=True, gone=True)
        for name in sorted(held)
        if name not in known and takes(selection, name)
    }


def snapshot_covers(state: PipelineState | None, tables: Iterable[str]) -> dict[str, SnapshotCover]:
    """Return ``{"db.table": SnapshotCover}``: each table's newest snapshot (merged or running) in the ledger.

    The reader skips a statement-based write to a table its snapshot covers (the snapshot was started after
    the window was cut, so it read the table after the statement).

    :param state: the pipeline's state (None: a new pipeline, no snapshot).
    :param tables: the ``db.table`` names the window stages; tables without a snapshot are left out.
    """
    covers: dict[str, SnapshotCover] = {}
    for snapshot in state.snapshots if state is not None else []:
        for table in set(snapshot.tables) & set(tables):
            if table not in covers or covers[table].seq < snapshot.seq:
                covers[table] = SnapshotCover(seq=snapshot.seq, start=snapshot.start)
    return covers


def schema_barriers(state: PipelineState | None, table: str, window: int) -> list[SchemaBarrier]:
    """Return the :class:`~airflow_provider_binlog.extract.targets.SchemaBarrier` s of ``table`` for window ``window``.

    One per schema change of the table still listed in ``state.resnapshots_needed``; it is covered when a
    snapshot of the table with a seq below ``window`` started at or after the change. A covered quarantine
    (:mod:`~airflow_provider_binlog.pipeline.quarantine`) stages only the changes after that snapshot's start:
    the snapshot holds the table as it was then, and the events before it may still carry the refused value
    (the before image of the very update that fixed it), which no window must decode again.

    :param state: the pipeline's state (None: a new pipeline, no barrier).
    :param table: ``db.table``.
    :param window: the window's seq.
    """
    if state is None:
        return []
    barriers = []
    for needed in (r for r in state.resnapshots_needed if r.table == table):
        cover = state.covering_snapshot(needed, below=window)
        since = cover.start if cover is not None and needed.cause == "quarantine" else needed.since
        barriers.append(SchemaBarrier(since, covered=cover is not None))
    return barriers


def set_barriers(
    targets: dict[str, TableTarget],
    state: PipelineState,
    window: int,
    *,
    cut_by: CutBy,
    pipeline: str,
    log: PlanLog,
) -> None:
    """Set each target's capture start and :attr:`TableTarget.barriers` for window ``window``.

    The capture start is :func:`capture_start` of the snapshots ordered before the window; the barriers are
    :func:`schema_barriers`.

    A pipeline cutting by interval takes no snapshots, so an uncovered barrier stays uncovered: the table's
    changes after its schema change are left out of every window. That is logged as an ERROR naming the table
    and the remedy; the other tables are not affected.

    :param targets: ``{"db.table": TableTarget}`` of the tables the window stages (updated in place).
    :param state: the pipeline's state as written with the window.
    :param window: the window's seq.
    :param cut_by: how the pipeline cuts its windows.
    :param pipeline: the pipeline's name (for messages).
    :param log: the task's logger.
    """
    for target in targets.values():
        target.since = capture_start(state, target.name, below=window)
        target.barriers = schema_barriers(state, target.name, window)
        if cut_by == "interval" and any(not b.covered for b in target.barriers):
            log.error(
                "%s waits for a re-snapshot after a schema change (%s), but pipeline %s cuts windows by "
                "interval and cannot take snapshots: its changes after the schema change are left out of "
                "every window. Load the table into a pipeline that cuts by head (docs/schema-changes.md, "
                "'Limits'); the other tables are not affected.",
                target.name, ", ".join(str(b.since) for b in target.barriers), pipeline,
            )  # fmt: skip


def cascading_keys(
    source: ForeignKeySource, server: ServerState, targets: dict[str, TableTarget], log: PlanLog
) -> list[ForeignKey]:
    """Return the foreign keys among the staged tables whose child changes the merge must apply itself.

    Reads the keys with CASCADE or SET NULL actions of the ``targets`` (one query), warns in ``log`` for each
    whose parent is not staged (the child drifts on parent deletes and key updates), and sets each parent
    target's ``referenced`` columns so the reader stages their before images. On a source that logs the
    cascaded child rows itself (MySQL 9.6+ with SQL-layer foreign keys,
    :meth:`~airflow_provider_binlog.source.flavor.SourceFlavor.cascades_are_logged`) there is nothing to do.

    :param source: the source's hook (or anything with its ``pipeline`` and ``foreign_keys``).
    :param server: what was read from the source server.
    :param targets: ``{"db.table": TableTarget}`` of the tables this window stages (updated in place).
    :param log: the task's logger.
    :returns: the keys the merge applies, in the order the source listed them.
    :raises BinlogConfigError: when the keys form a cycle through several staged tables.
    """
    if server.strategy.cascades_are_logged(server.variables):
        log.info("the source %s %s logs foreign-key cascades itself", server.flavor, server.version)
        return []
    applied, orphaned = split_by_selection(source.foreign_keys(targets), targets)
    for key in orphaned:
        log.warning(unselected_parent_warning(key))
    try:
        parents_first(sorted(targets), applied)
    except ForeignKeyCycleError as err:
        raise BinlogConfigError(f"pipeline {source.pipeline}: {err}") from err
    for parent, columns in referenced_columns(applied).items():
        targets[parent].referenced = columns
    for key in applied:
        log.info(
            "the merge applies the foreign key %s (the source does not log its child changes)", key.describe()
        )
    return applied
