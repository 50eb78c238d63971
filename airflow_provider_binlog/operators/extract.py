"""BinlogExtractOperator: cut (or reuse) this run's window and stage its row changes as Parquet."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import PurePosixPath
from typing import Any

import pendulum
from airflow.sdk import BaseOperator

from airflow_provider_binlog.contract.foreign_keys import ForeignKey
from airflow_provider_binlog.contract.manifest import Manifest
from airflow_provider_binlog.exceptions import BinlogConfigError, IntervalOpenError
from airflow_provider_binlog.hooks.binlog import BinlogHook
from airflow_provider_binlog.operators.lineage import StagedLineageMixin
from airflow_provider_binlog.pipeline.ledger import PipelineState, Window
from airflow_provider_binlog.pipeline.state import StateManager
from airflow_provider_binlog.pipeline.tables import (
    KeylessMode,
    check_keyless_mode,
    is_template,
    parse_keys,
    parse_tables,
    skipped_warning,
    table_keys,
    takes,
)
from airflow_provider_binlog.pipeline.windows import (
    CUT_BY_MODES,
    CutBy,
    cut_interval_window,
    cut_window,
    mark_window,
)
from airflow_provider_binlog.source.positions import BinlogPosition
from airflow_provider_binlog.source.schema import TableInfo

INTERVAL_SETTLE_SECONDS = 5
"""An interval window is cut only this long (seconds) after its end, so commits before it are logged."""


def table_targets(
    described: dict[str, TableInfo],
    keys: dict[str, list[str]],
    *,
    keyless_tables: KeylessMode = "fail",
) -> tuple[dict[str, Any], dict[str, str]]:
    """Return ``({"db.table": TableTarget}, {"db.table": reason skipped})`` of the described tables.

    A table's key is its primary key, or the columns named in ``keys`` (any existing columns, see
    :func:`~airflow_provider_binlog.pipeline.tables.resolve_key`); a table with neither is left out with the reason
    (``keyless_tables="skip"``) or refused (``"fail"``).

    :raises KeylessTableError: for a table with neither when ``keyless_tables="fail"``.
    :raises BinlogConfigError: for a named key column that does not exist.
    """
    from airflow_provider_binlog.extract.reader import TableTarget

    resolved = table_keys(
        {name: (info.columns, info.primary_key) for name, info in described.items()},
        keys,
        keyless_tables=keyless_tables,
    )
    targets = {name: TableTarget(name=name, primary_key=key) for name, key in resolved.keys.items()}
    return targets, resolved.skipped


def cascading_keys(hook: BinlogHook, server: Any, targets: dict[str, Any], log: Any) -> list[ForeignKey]:
    """Return the foreign keys among the staged tables whose child changes the merge must apply itself.

    Reads the keys with CASCADE or SET NULL actions of the ``targets`` (one query), warns in ``log`` for each
    whose parent is not staged (the child drifts on parent deletes and key updates), and sets each parent
    target's ``referenced`` columns so the reader stages their before images. On a source that logs the
    cascaded child rows itself (MySQL 9.6+ with SQL-layer foreign keys,
    :meth:`~airflow_provider_binlog.source.flavor.SourceFlavor.cascades_are_logged`) there is nothing to do.

    :param hook: the source's hook.
    :param server: its :class:`~airflow_provider_binlog.hooks.binlog.ServerState`.
    :param targets: ``{"db.table": TableTarget}`` of the tables this window stages (updated in place).
    :param log: the task's logger.
    :raises BinlogConfigError: when the keys form a cycle through several staged tables.
    """
    from airflow_provider_binlog.contract.foreign_keys import (
        ForeignKeyCycleError,
        parents_first,
        referenced_columns,
        split_by_selection,
        unselected_parent_warning,
    )

    if server.strategy.cascades_are_logged(server.variables):
        log.info("the source %s %s logs foreign-key cascades itself", server.flavor, server.version)
        return []
    applied, orphaned = split_by_selection(hook.foreign_keys(targets), targets)
    for key in orphaned:
        log.warning(unselected_parent_warning(key))
    try:
        parents_first(sorted(targets), applied)
    except ForeignKeyCycleError as err:
        raise BinlogConfigError(f"pipeline {hook.pipeline}: {err}") from err
    for parent, columns in referenced_columns(applied).items():
        targets[parent].referenced = columns
    for key in applied:
        log.info(
            "the merge applies the foreign key %s (the source does not log its child changes)", key.describe()
        )
    return applied


def capture_start(state: PipelineState | None, table: str) -> BinlogPosition | None:
    """Return where the pipeline's capture of ``table`` begins: the start of its first snapshot, if any.

    Changes logged before that start are in the snapshot's rows; binlog windows stage only later ones.
    """
    firsts = [s.start for s in (state.snapshots if state else []) if table in s.tables]
    return min((p.to_position() for p in firsts), key=lambda p: p.key, default=None)


def captured_tables(state: PipelineState | None) -> set[str]:
    """Return the tables the pipeline has merged into its target or read in a snapshot (any status)."""
    if state is None:
        return set()
    return {*state.target_tables, *(t for s in state.snapshots for t in s.tables)}


def gone_targets(
    state: PipelineState | None, selection: Sequence[str], existing: Iterable[str]
) -> dict[str, Any]:
    """Return a ``gone`` target per table the target holds that the source no longer has but the selection takes.

    Such a table was dropped or renamed away (:class:`~airflow_provider_binlog.extract.reader.TableTarget`). The
    window stages none of their row changes, only the truncate marker of the statement that removed them
    when the window holds it, so the target is emptied at that statement's place in the order
    (``docs/adr/0015-truncate-marker.md``). Their key is the Delta table's own (the merge reads it there).
    """
    from airflow_provider_binlog.extract.reader import TableTarget

    known = set(existing)
    held = state.target_tables if state is not None else []
    return {
        name: TableTarget(name, [], captured=True, gone=True)
        for name in sorted(held)
        if name not in known and takes(selection, name)
    }


def snapshot_covers(state: PipelineState | None, tables: Iterable[str]) -> dict[str, Any]:
    """Return ``{"db.table": SnapshotCover}``: each table's newest snapshot (merged or running) in the ledger.

    The reader skips a statement-based write to a table its snapshot covers (the snapshot was started after
    the window was cut, so it read the table after the statement).
    """
    from airflow_provider_binlog.extract.reader import SnapshotCover

    covers: dict[str, Any] = {}
    for snapshot in state.snapshots if state is not None else []:
        for table in set(snapshot.tables) & set(tables):
            if table not in covers or covers[table].seq < snapshot.seq:
                covers[table] = SnapshotCover(seq=snapshot.seq, start=snapshot.start.to_position())
    return covers


def schema_barriers(state: PipelineState | None, table: str, window: int) -> list[Any]:
    """Return the :class:`~airflow_provider_binlog.extract.reader.SchemaBarrier` s of ``table`` for window ``window``.

    One per schema change of the table still listed in ``state.resnapshots_needed``; it is covered when a
    snapshot of the table with a seq below ``window`` started at or after the change.
    """
    from airflow_provider_binlog.extract.reader import SchemaBarrier

    if state is None:
        return []
    return [
        SchemaBarrier(r.since.to_position(), covered=state.covering_snapshot(r, below=window) is not None)
        for r in state.resnapshots_needed
        if r.table == table
    ]


def schema_history(state: PipelineState, window: Window, root: Any) -> dict[str, list[Any]]:
    """Return the schema history at ``window``'s start: the ``schemas`` of the window that ends there.

    That window's manifest (in its staging folder under ``root``) keeps the table-map columns of each table at
    its end (:class:`~airflow_provider_binlog.contract.manifest.Manifest`); ``{}`` when there is no such
    window in the ledger (the first window, an interval window read before the one before it) or its manifest
    is gone. The reader then knows a column's old type only from a row event of the window.
    """
    from airflow_provider_binlog.pipeline.staging import read_manifest

    start = window.start.to_position().key
    before = next(
        (
            w
            for w in state.windows
            if w.seq != window.seq and w.manifest_uri and w.end.to_position().key == start
        ),
        None,
    )
    if before is None or before.manifest_uri is None:
        return {}
    manifest = read_manifest(root / PurePosixPath(before.manifest_uri).name)
    return {} if manifest is None else dict(manifest.schemas)


class BinlogExtractOperator(StagedLineageMixin, BaseOperator):
    """Cut this DAG run's binlog window (or reuse it on a retry) and stage it as Parquet plus a manifest.

    With ``cut_by="head"`` the window is ``(previous window end, source head now]`` and a new pipeline
    starts at the current head (its first window is empty). With ``cut_by="interval"`` it is the run's
    data interval ``[data_interval_start, data_interval_end)`` cut at the transactions committed at or
    after each bound (:func:`~airflow_provider_binlog.pipeline.windows.cut_interval_window`): runs and backfills
    may go in any order, and consecutive intervals tile the binlog. A retry or a cleared task of the same run reuses the staged window when
    its manifest exists, else re-reads exactly the same binlog range. When an earlier run holds an unmerged
    window (the newest head window, or this run's interval) and Airflow shows that run as ended (failed,
    succeeded without its commit, deleted), this run adopts the window
    (:func:`~airflow_provider_binlog.pipeline.windows.adopt_window`); while that run is active, or its state cannot be
    read, the task fails with :class:`~airflow_provider_binlog.exceptions.PipelineBusyError`. Returns (XCom) a dict with
    ``pipeline``, ``window`` (seq), ``window_uri``, ``rows`` and ``tables`` (rows per table).

    :param pipeline: pipeline name (templated); one state Variable and one server_id per pipeline.
    :param tables: ``db.table`` names or patterns such as ``shop.*`` (templated; list or comma-separated);
        an entry ``!db.table`` or ``!db.tmp_*`` excludes the tables it matches, after the includes.
    :param staging_uri: staging root, local path or object-store URI (templated).
    :param binlog_conn_id: a ``mysql`` or ``mysqlbinlog`` connection.
    :param staging_conn_id: connection for the staging object store (ObjectStoragePath), if any.
    :param keys: ``{"db.table": [columns]}`` (or its JSON text; templated) naming a unique key for tables without a primary key.
    :param keyless_tables: (templated) what a run does with a selected table that has no primary key and no named key:
        ``skip`` (default) leaves it out with a WARNING naming it and the remedy, and records it under
        ``skipped`` in the manifest, while every other table keeps flowing; ``fail`` fails the task with
        :class:`~airflow_provider_binlog.pipeline.tables.KeylessTableError`. A table the pipeline has already
        captured that loses its key fails the task in both modes (its target would silently go stale).
        A table that gets a key later is new to the pipeline: the snapshot task of the next run loads it
        and windows stage only its changes after that snapshot's start.
    :param allow_minimal_row_metadata: accept ``binlog_row_metadata=MINIMAL`` (not recommended).
    :param cut_by: ``head`` or ``interval`` (needs a timetable with data intervals); fixed per pipeline.
    :param max_extract_workers: how many processes may read a window's binlog files in parallel, the task's
        own included (it reads every n-th file itself, worker processes the others,
        :mod:`~airflow_provider_binlog.extract.parallel`); None (the default) allows one per CPU of the machine
        running the task, 1 reads every window serially. Used only for a catch-up window: one that
        spans two binlog files or more and at least
        :data:`~airflow_provider_binlog.extract.parallel.PARALLEL_MIN_BYTES` (64 MiB) of binlog; a window in one
        file (the steady state) is always read serially. It stages the same rows, order keys and manifest as a
        serial read. Each worker opens one more connection to the source (a non-blocking binlog dump under
        server_id 0, which no replica uses) and takes up to one core and the serial read's memory bound; set 1
        where tasks share a machine's cores or the source limits connections. See docs/operating.md.
    """

    template_fields: Sequence[str] = ("pipeline", "tables", "staging_uri", "keys", "keyless_tables")

    def __init__(
        self,
        *,
        pipeline: str,
        tables: str | Sequence[str],
        staging_uri: str,
        binlog_conn_id: str = BinlogHook.default_conn_name,
        staging_conn_id: str | None = None,
        keys: dict[str, list[str]] | str | None = None,
        keyless_tables: KeylessMode | str = "skip",
        allow_minimal_row_metadata: bool = False,
        cut_by: CutBy = "head",
        max_extract_workers: int | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if max_extract_workers is not None and max_extract_workers < 1:
            raise ValueError(
                f"max_extract_workers={max_extract_workers!r} must be None or at least 1 (1: serial)"
            )
        self.max_extract_workers = max_extract_workers
        if not is_template(keyless_tables):
            check_keyless_mode(keyless_tables)
        self.keyless_tables = keyless_tables
        if cut_by not in CUT_BY_MODES:
            raise ValueError(f"cut_by={cut_by!r} must be 'head' or 'interval'")
        self.cut_by = cut_by
        self.pipeline = pipeline
        self.tables = tables
        self.staging_uri = staging_uri
        self.binlog_conn_id = binlog_conn_id
        self.staging_conn_id = staging_conn_id
        self.keys: Any = keys if is_template(keys) else parse_keys(keys)
        self.allow_minimal_row_metadata = allow_minimal_row_metadata

    def execute(self, context: Any) -> dict[str, Any]:
        """Validate the source, cut or reuse the window, stage it and record it in the ledger."""
        from airflow_provider_binlog.extract.window import extract_window
        from airflow_provider_binlog.pipeline.history import StagedStateHistory
        from airflow_provider_binlog.pipeline.lock import SourceStateLock
        from airflow_provider_binlog.pipeline.staging import check_writable, storage_path

        keyless_tables = check_keyless_mode(self.keyless_tables)
        self.keys = parse_keys(self.keys)
        hook = BinlogHook(self.binlog_conn_id, pipeline=self.pipeline)
        selection = parse_tables(self.tables)
        server = hook.validate_source(
            allow_minimal_row_metadata=self.allow_minimal_row_metadata, tables=selection
        )
        root = storage_path(self.staging_uri, self.staging_conn_id) / self.pipeline
        check_writable(root)
        manager = StateManager(self.pipeline, history=StagedStateHistory(root), lock=SourceStateLock(hook))
        known = manager.load()
        described = hook.describe_tables(selection)
        targets, skipped = self._targets(described, known, keyless_tables)
        targets.update(gone_targets(known, selection, described))
        current, window = self._cut(manager, server, hook, context, known)
        for target in targets.values():
            target.barriers = schema_barriers(current, target.name, window.seq)
            if self.cut_by == "interval" and any(not b.covered for b in target.barriers):
                self.log.error(
                    "%s waits for a re-snapshot after a schema change (%s), but pipeline %s cuts windows by "
                    "interval and cannot take snapshots: its changes after the schema change are left out of "
                    "every window. Load the table into a pipeline that cuts by head (docs/schema-changes.md, "
                    "'Limits'); the other tables are not affected.",
                    target.name, ", ".join(str(b.since) for b in target.barriers), self.pipeline,
                )  # fmt: skip
        window_dir, manifest = self._staged(root, window)
        if manifest is not None:
            self.log.info("window %s is already staged at %s; reusing it", window.seq, str(window_dir))
        else:
            self.log.info(
                "extracting window %s of %s: (%s, %s] into %s",
                window.seq, self.pipeline, window.start, window.end, str(window_dir),
            )  # fmt: skip
            manifest = extract_window(
                hook,
                pipeline=self.pipeline,
                window=window,
                tables=targets,
                window_dir=window_dir,
                server=server,
                covers=snapshot_covers(manager.load(), targets),
                skipped=skipped,
                foreign_keys=cascading_keys(hook, server, targets, self.log),
                schemas=schema_history(current, window, root),
                max_workers=self.max_extract_workers,
            )
        uri = str(window_dir)
        self.remember_staged(manifest, uri)
        if window.status == "cut" or window.manifest_uri != uri:
            rows = int(manifest.stats["rows"])
            status = "extracted" if window.status == "cut" else window.status
            manager.update(lambda s: mark_window(s, window.seq, status=status, manifest_uri=uri, rows=rows))
        return {
            "pipeline": self.pipeline,
            "window": window.seq,
            "window_uri": uri,
            "rows": int(manifest.stats["rows"]),
            "read_seconds": float(manifest.stats["read_seconds"]),
            "tables": {name: entry.rows for name, entry in manifest.tables.items()},
        }

    def get_openlineage_facets_on_start(self) -> Any:
        """Return the OpenLineage inputs known before the window is read: the explicitly named tables."""
        from airflow_provider_binlog.lineage import selection_lineage

        return selection_lineage(self.selected_tables(self.tables), source=self.source_namespace())

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """Return the OpenLineage lineage of the staged window (``docs/lineage.md``).

        Inputs: the window's source tables (schema: MySQL types); outputs: their staging folders (schema:
        Arrow types, ``outputStatistics``: row changes, 0 for a table without any); run facet ``binlogRange``.
        """
        from airflow.providers.openlineage.extractors import OperatorLineage

        from airflow_provider_binlog.lineage import manifest_lineage

        if self.staged_manifest is None:
            return OperatorLineage()
        return manifest_lineage(
            self.staged_manifest,
            inputs="source",
            outputs=["staging"],
            source=self.source_namespace(),
            staging_uri=self.staged_uri,
        )

    def _staged(self, root: Any, window: Window) -> tuple[Any, Manifest | None]:
        """Return ``(folder, manifest)`` of the window's staging; the manifest is None when it must be read.

        A complete manifest of exactly this window is reused: first in the folder the ledger records
        (``manifest_uri``: also one an earlier holder staged before it ended), then in the folder of the
        current holder (:attr:`~airflow_provider_binlog.pipeline.ledger.Window.staging_name`, where a retry of an
        extract that died after its manifest finds it). Otherwise the window is read into the current
        holder's folder: after a hand-over a new one, never the half-written folder of a run that died.
        """
        from airflow_provider_binlog.pipeline.staging import staged_manifest

        recorded = None if window.manifest_uri is None else root / PurePosixPath(window.manifest_uri).name
        own = root / window.staging_name
        for folder in (recorded, own):
            manifest = None if folder is None else staged_manifest(folder, self.pipeline, window)
            if manifest is not None:
                return folder, manifest
        return own, None

    def _targets(
        self, described: dict[str, TableInfo], state: PipelineState | None, keyless_tables: KeylessMode
    ) -> tuple[dict[str, Any], dict[str, str]]:
        """Return the tables this run stages (with their keys and capture starts) and those it leaves out.

        :raises KeylessTableError: for a keyless table with ``keyless_tables="fail"``, or one the pipeline
            has already captured.
        """
        from airflow_provider_binlog.pipeline.tables import KeylessTableError

        targets, skipped = table_targets(described, self.keys, keyless_tables=keyless_tables)
        lost = sorted(set(skipped) & captured_tables(state))
        if lost:
            raise KeylessTableError(
                f"{', '.join(lost)} lost the primary key the pipeline {self.pipeline} captured it by, so its "
                f"changes can no longer be merged (the target table would silently go stale). Give it a key "
                f"again and re-snapshot it (binlog_resnapshot, mode 'requested'), name a key with keys=, or "
                f"exclude it with '!{lost[0]}'. {skipped[lost[0]]}"
            )
        for name, reason in skipped.items():
            self.log.warning(skipped_warning(name, reason))
        if state is not None and state.snapshots:
            captured = captured_tables(state)
            for name in sorted(set(targets) - captured):  # a snapshotting pipeline loads new tables first
                del targets[name]
                skipped[name] = (
                    f"{name} is new to the pipeline and no snapshot has read it yet; the snapshot task of the next "
                    f"run loads it, and windows capture it from that snapshot's start."
                )
                self.log.warning("%s is left out of this run: %s", name, skipped[name])
        for target in targets.values():
            target.since = capture_start(state, target.name)
            target.captured = state is not None and target.name in state.target_tables
        return targets, skipped

    def _cut(
        self, manager: StateManager, server: Any, hook: BinlogHook, context: Any, known: PipelineState | None
    ) -> tuple[PipelineState, Window]:
        """Cut (or find) this run's window in a read-modify-write of the state, re-tried on a lost race.

        :param known: the state as read before (tells whether an interval run must scan for its bounds).
        :returns: the state as written and the run's window.
        """
        from functools import lru_cache

        from airflow_provider_binlog.pipeline.runs import holder_states
        from airflow_provider_binlog.pipeline.windows import boundary_at

        locate = lru_cache(maxsize=None)(lambda moment: boundary_at(hook, server, moment))
        holders: dict[str, Any] = {
            "dag_id": getattr(context.get("dag"), "dag_id", None),
            "holder_state": holder_states(context),
        }
        cut: dict[str, Window] = {}
        if self.cut_by == "interval" and (
            known is None or known.window_of_run(str(context["run_id"])) is None
        ):
            for moment in self._interval(context):  # binlog scans happen before the state lock is taken
                locate(moment)

        def change(current: PipelineState | None) -> PipelineState:
            manager.check_source(current, server.server_identity)
            if current is None:
                self.log.info(
                    "pipeline %s is new (cut by %s; source head %s)", self.pipeline, self.cut_by, server.head
                )
            state = current or manager.initial(server.server_identity, server.flavor, server.head)
            if self.cut_by == "interval":
                new_state, cut["window"], _ = self._cut_interval(state, locate, context, holders)
                if current is None:  # a new interval pipeline starts at its first window
                    window = cut["window"]
                    checkpoint = state.checkpoint.model_copy(
                        update={"position": window.start, "window": window.seq - 1}
                    )
                    new_state = new_state.model_copy(update={"checkpoint": checkpoint})
                return new_state
            interval_start, interval_end = (
                context.get("data_interval_start"),
                context.get("data_interval_end"),
            )
            new_state, cut["window"], _ = cut_window(
                state,
                run_id=str(context["run_id"]),
                head=server.head,
                data_interval_start=None if interval_start is None else str(interval_start),
                data_interval_end=None if interval_end is None else str(interval_end),
                **holders,
            )
            return new_state

        written = manager.transact(change)
        window = cut["window"]
        self.log.info(
            "run %s owns window %s (%s, %s]: %s",
            context["run_id"],
            window.seq,
            window.start,
            window.end,
            window.status,
        )
        handover = window.handovers[-1] if window.handovers else None
        if handover is not None and handover.to_run == context["run_id"]:
            self.log.warning(
                "window %s was held by run %r, which ended (%s) before committing it; this run adopted it: same "
                "bounds and seq, tables its merge already holds are not merged again.",
                window.seq, handover.from_run, handover.holder_state,
            )  # fmt: skip
        return written, window

    def _cut_interval(
        self, state: PipelineState, locate: Any, context: Any, holders: dict[str, Any]
    ) -> tuple[PipelineState, Window, bool]:
        start, end = self._interval(context)
        return cut_interval_window(
            state,
            run_id=str(context["run_id"]),
            interval_start=start,
            interval_end=end,
            locate=locate,
            **holders,
        )

    def _interval(self, context: Any) -> tuple[pendulum.DateTime, pendulum.DateTime]:
        """Return the run's closed data interval.

        :raises BinlogConfigError: when the run has no data interval.
        :raises IntervalOpenError: when it ended less than :data:`INTERVAL_SETTLE_SECONDS` ago (retryable).
        """
        start, end = context.get("data_interval_start"), context.get("data_interval_end")
        if start is None or end is None:
            raise BinlogConfigError(
                f"cut_by='interval' needs a run with a data interval; run {context['run_id']!r} has none"
            )
        end = pendulum.instance(end)
        settle = pendulum.now("UTC").subtract(seconds=INTERVAL_SETTLE_SECONDS)
        if end > settle:
            raise IntervalOpenError(
                f"the data interval of run {context['run_id']!r} ends at {end.isoformat()}, less than "
                f"{INTERVAL_SETTLE_SECONDS} s ago: transactions committing before it may not be in the binlog yet. "
                f"The task retries; schedule runs after their interval has closed."
            )
        return pendulum.instance(start), end
