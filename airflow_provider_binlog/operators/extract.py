"""BinlogExtractOperator: cut (or reuse) this run's window and stage its row changes as Parquet.

The operator is the Airflow wiring (arguments and templates, the run's context, the state lock, XCom); what each
selected table is for the window is planned in :mod:`airflow_provider_binlog.extract.plan`, the window is cut in
:mod:`airflow_provider_binlog.pipeline.windows` and read by :func:`~airflow_provider_binlog.extract.window.extract_window`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import pendulum
from airflow.sdk import BaseOperator, conf

from airflow_provider_binlog.contract.history import HistorySettings
from airflow_provider_binlog.exceptions import BinlogConfigError, IntervalOpenError
from airflow_provider_binlog.extract.plan import (
    cascading_keys,
    gone_targets,
    plan_tables,
    set_barriers,
    snapshot_covers,
)
from airflow_provider_binlog.hooks.binlog import BinlogHook
from airflow_provider_binlog.operators.lineage import StagedLineageMixin
from airflow_provider_binlog.operators.trusted import check_trusted_arguments
from airflow_provider_binlog.pipeline.failover import OnLostTransactions, check_on_lost_transactions
from airflow_provider_binlog.pipeline.ledger import PipelineState, Window
from airflow_provider_binlog.pipeline.quarantine import OnTableError, check_on_table_error
from airflow_provider_binlog.pipeline.runs import holder_states
from airflow_provider_binlog.pipeline.staging import (
    check_writable,
    pipeline_root,
    schema_history,
    window_staging,
)
from airflow_provider_binlog.pipeline.state import StateManager
from airflow_provider_binlog.pipeline.tables import (
    KeylessMode,
    check_keyless_mode,
    is_template,
    parse_keys,
    parse_tables,
)
from airflow_provider_binlog.pipeline.windows import (
    CUT_BY_MODES,
    CutBy,
    boundary_at,
    cut_interval_window,
    cut_window,
    mark_window,
)

if TYPE_CHECKING:
    from airflow_provider_binlog.contract.positions import BinlogPosition

INTERVAL_SETTLE_SECONDS = 5
"""An interval window is cut only this long (seconds) after its end, so commits before it are logged."""


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
        ``parallel_read_min_bytes`` of binlog; a window in one file (the steady state) is always read serially. It stages the same rows, order keys and manifest as a
        serial read. Each worker opens one more connection to the source (a non-blocking binlog dump under
        server_id 0, which no replica uses) and takes up to one core and the serial read's memory bound; set 1
        where tasks share a machine's cores or the source limits connections. See docs/operating.md.
    :param parallel_read_min_bytes: binlog bytes a window must span (besides two files) before it is read in
        parallel; the default is ``[binlog] parallel_read_min_bytes``, else
        :data:`~airflow_provider_binlog.extract.parallel.PARALLEL_MIN_BYTES` (64 MiB): below it the workers'
        start costs more than they save.
    :param on_lost_transactions: when the connection reaches another server than the pipeline's state was
        written for (a failover, a switchover), the run follows it by GTID (``docs/failover.md``); if that server
        lacks transactions the target may hold (an asynchronous replica promoted after a crash),
        ``resnapshot`` (default) re-snapshots the tables they may have changed, ``fail`` fails the task naming
        them (:class:`~airflow_provider_binlog.exceptions.LostTransactionsError`).
    :param on_table_error: when the window holds a value or row layout of one table that cannot be staged
        exactly (:class:`~airflow_provider_binlog.exceptions.TableRefusalError`): ``quarantine`` (default) stops
        that table alone at the start of the refused transaction and stages every other table
        (:mod:`~airflow_provider_binlog.pipeline.quarantine`, ``docs/operating.md`` "Quarantined tables"); the
        snapshot task re-snapshots it once it changes, and :class:`~airflow_provider_binlog.operators.quarantine.BinlogQuarantineCheckOperator`
        fails the run while it is quarantined. ``fail`` fails the task without retry, as the whole window.
    :param history: the history kept beside every selected table (``docs/history.md``): ``"changelog"``,
        ``"scd2"``, both (a list), or None (default) for none. The window stages every update of such a table with its before image and
        records the kinds in the manifest, which the merge follows
        (:mod:`~airflow_provider_binlog.contract.history`).
    :param table_history: ``{"db.table": kinds}`` overriding ``history`` for single tables (``"off"`` or None: none).
    :param archive: the binlog archive of the source (``docs/archive.md``; a local path or URI, as
        :class:`~airflow_provider_binlog.operators.archive.BinlogArchiveOperator`'s): a window whose start the source
        has purged is read from there, up to the first file the source still has, and stages what it would have
        staged from the source. None (default): no archive.
    :param archive_storage_options: storage options of the archive's store (``s3://``), as the archiver's.
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
        parallel_read_min_bytes: int | None = None,
        on_lost_transactions: OnLostTransactions = "resnapshot",
        on_table_error: OnTableError = "quarantine",
        history: str | Sequence[str] | None = None,
        table_history: Mapping[str, str | Sequence[str] | None] | None = None,
        archive: str | None = None,
        archive_storage_options: Mapping[str, str] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.archive = archive
        self.archive_storage_options = dict(archive_storage_options or {}) or None
        self.history = HistorySettings.parse(history, table_history)
        self.on_lost_transactions = check_on_lost_transactions(on_lost_transactions)
        self.on_table_error = check_on_table_error(on_table_error)
        if max_extract_workers is not None and max_extract_workers < 1:
            raise ValueError(
                f"max_extract_workers={max_extract_workers!r} must be None or at least 1 (1: serial)"
            )
        self.max_extract_workers = max_extract_workers
        if parallel_read_min_bytes is None:
            parallel_read_min_bytes = conf.getint("binlog", "parallel_read_min_bytes", fallback=None)
        if parallel_read_min_bytes is not None and parallel_read_min_bytes < 0:
            raise ValueError(
                f"parallel_read_min_bytes={parallel_read_min_bytes!r} must be at least 0 (bytes)"
            )
        self.parallel_read_min_bytes = parallel_read_min_bytes
        if not is_template(keyless_tables):
            check_keyless_mode(keyless_tables)
        self.keyless_tables = keyless_tables
        if cut_by not in CUT_BY_MODES:
            raise ValueError(f"cut_by={cut_by!r} must be 'head' or 'interval'")
        self.cut_by = cut_by
        check_trusted_arguments(
            self, pipeline=pipeline, tables=tables, staging_uri=staging_uri, keys=keys, archive=archive
        )
        self.pipeline = pipeline
        self.tables = tables
        self.staging_uri = staging_uri
        self.binlog_conn_id = binlog_conn_id
        self.staging_conn_id = staging_conn_id
        self.keys: Any = keys if is_template(keys) else parse_keys(keys)
        self.allow_minimal_row_metadata = allow_minimal_row_metadata

    def _archive(self) -> Any:
        """Return the archive's feed (:class:`~airflow_provider_binlog.archive.feed.ArchiveFeed`), or None."""
        if self.archive is None:
            return None
        from airflow_provider_binlog.archive.copy import BinlogArchive
        from airflow_provider_binlog.archive.feed import ArchiveFeed

        return ArchiveFeed(BinlogArchive(self.archive, self.archive_storage_options))

    def execute(self, context: Any) -> dict[str, Any]:
        """Validate the source, cut or reuse the window, stage it and record it in the ledger."""
        from airflow_provider_binlog.extract.resume import follow_pipeline
        from airflow_provider_binlog.extract.window import extract_window  # pyarrow: not at DAG parsing

        keyless_tables = check_keyless_mode(self.keyless_tables)
        self.keys = parse_keys(self.keys)
        hook = BinlogHook(self.binlog_conn_id, pipeline=self.pipeline)
        selection = parse_tables(self.tables)
        server = hook.validate_source(
            allow_minimal_row_metadata=self.allow_minimal_row_metadata, tables=selection
        )
        root = pipeline_root(self.staging_uri, self.pipeline, self.staging_conn_id)
        check_writable(root)
        manager, known = follow_pipeline(
            hook,
            server,
            root,
            pipeline=self.pipeline,
            staging_conn_id=self.staging_conn_id,
            run_id=str(context["run_id"]),
            on_lost=self.on_lost_transactions,
            logger=self.log,
        )
        described = hook.describe_tables(selection)
        targets, skipped = plan_tables(
            described,
            known,
            self.keys,
            keyless_tables=keyless_tables,
            pipeline=self.pipeline,
            log=self.log,
        )
        for name, target in targets.items():
            target.history = self.history.kinds_for(name)
        targets.update(gone_targets(known, selection, described))
        current, window = self._cut(manager, server, hook, context, known)
        set_barriers(targets, current, window.seq, cut_by=self.cut_by, pipeline=self.pipeline, log=self.log)
        window_dir, manifest = window_staging(root, self.pipeline, window)
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
                parallel_min_bytes=self.parallel_read_min_bytes,
                on_table_error=self.on_table_error,
                archive=self._archive(),
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

    def _cut(
        self,
        manager: StateManager,
        server: Any,
        hook: BinlogHook,
        context: Any,
        known: PipelineState | None,
    ) -> tuple[PipelineState, Window]:
        """Cut (or find) this run's window in a read-modify-write of the state, re-tried on a lost race.

        :param known: the state as read before (tells whether an interval run must scan for its bounds).
        :returns: the state as written and the run's window.
        """
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
        self,
        state: PipelineState,
        locate: Callable[[pendulum.DateTime], BinlogPosition],
        context: Any,
        holders: dict[str, Any],
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
