"""BinlogCommitOperator: advance the checkpoint once the run's window is durably in the target."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pendulum
from airflow.sdk import BaseOperator

from airflow_provider_binlog.assets import TARGET_TABLES_ALIAS
from airflow_provider_binlog.contract.manifest import Manifest
from airflow_provider_binlog.contract.positions import BinlogPosition
from airflow_provider_binlog.exceptions import MergeError, StateError
from airflow_provider_binlog.hooks.binlog import BinlogHook
from airflow_provider_binlog.operators.lineage import StagedLineageMixin
from airflow_provider_binlog.operators.trusted import check_trusted_arguments
from airflow_provider_binlog.pipeline.ledger import (
    STATEMENT_CHARS,
    PipelineState,
    ResnapshotNeeded,
    Window,
    state_summary,
)
from airflow_provider_binlog.pipeline.quarantine import quarantine_record, quarantined
from airflow_provider_binlog.pipeline.state import StateManager


def resnapshots_of(
    manifest: Manifest, window: Window, refused: dict[str, dict[str, Any]] | None = None
) -> list[ResnapshotNeeded]:
    """Return the state entries of the tables that need a re-snapshot after ``window``.

    They are the tables its manifest lists under ``resnapshots`` (a schema change the binlog does not
    carry, since that statement; or a refused value or row layout, since the start of its transaction: the
    table is quarantined), and the tables whose merge of the window was ``refused`` (a type change
    the Delta table cannot follow, see :func:`~airflow_provider_binlog.contract.refusals.refused_tables`:
    since the window's start, none of the window's changes of that table being in the target).
    """
    detected_at = str(manifest.created_at or window.cut_at)
    merge_refused = [
        ResnapshotNeeded(
            table=table,
            since=window.start,
            reason=record.get("reason")
            or f"the merge of window {window.seq} was refused: column {record['column']} {record['detail']}",
            statement="",
            window=window.seq,
            detected_at=detected_at,
        )
        for table, record in sorted((refused or {}).items())
    ]
    return merge_refused + [
        ResnapshotNeeded(
            table=entry["table"],
            since=BinlogPosition(file=entry["since"]["file"], pos=entry["since"]["pos"]),
            gtid=entry.get("gtid"),
            reason=entry["reason"],
            statement=entry["statement"][:STATEMENT_CHARS],
            window=window.seq,
            detected_at=detected_at,
            cause=entry.get("cause", "schema_change"),
            column=entry.get("column"),
            at=None if entry.get("at") is None else BinlogPosition.from_dict(entry["at"]),
            error=entry.get("error"),
        )
        for entry in manifest.resnapshots
    ]


def dropped_columns_of(
    manifest: Manifest, refused: dict[str, dict[str, Any]] | None = None
) -> dict[str, list[str]]:
    """Return ``{"db.table": [column, ...]}``: the columns the window's ``DROP COLUMN`` statements removed.

    The target keeps them (with the values of the rows not written since) once the window is merged; a table
    whose merge was ``refused`` got none of the window's changes.
    """
    dropped: dict[str, list[str]] = {}
    for statement in manifest.ddl:
        for effect in statement["effects"]:
            if effect.get("dropped_columns") and effect["table"] not in (refused or {}):
                dropped.setdefault(effect["table"], []).extend(effect["dropped_columns"])
    return dropped


def with_schema_changes(
    state: PipelineState,
    manifest: Manifest,
    window: Window,
    refused: dict[str, dict[str, Any]] | None = None,
) -> PipelineState:
    """Return ``state`` recording what the schema changes of the merged ``window`` leave waiting for a re-snapshot.

    It adds :func:`resnapshots_of`, then removes every entry (this window's or an earlier one's) of a table the
    window dropped or renamed away (its manifest's ``dropped``) at or after the entry's ``since``: the table is
    empty in the source after that statement, and so is the target once the window's truncate marker is merged,
    whatever the change before it did, so no snapshot would ever read the table for it (a table created again
    under the name gets an entry of its own). A table whose merge was ``refused`` keeps its entries: its marker
    is not in the target. It also records the columns the target now keeps after a ``DROP COLUMN``
    (:func:`dropped_columns_of`, ``kept_columns``), which later windows do not follow an ``ADD COLUMN`` of.
    """
    added = state.with_resnapshots_needed(resnapshots_of(manifest, window, refused)).with_kept_columns(
        dropped_columns_of(manifest, refused)
    )
    drops = [
        (d["table"], BinlogPosition(d["since"]["file"], d["since"]["pos"]).key)
        for d in manifest.dropped
        if d["table"] not in (refused or {})
    ]
    kept = [
        r
        for r in added.resnapshots_needed
        if not any(r.table == table and r.since.key <= at for table, at in drops)
    ]
    if len(kept) == len(added.resnapshots_needed):
        return added
    return added.model_copy(update={"resnapshots_needed": kept})


class BinlogCommitOperator(StagedLineageMixin, BaseOperator):
    """Move the pipeline's checkpoint to the end of this run's window and mark the window ``merged``.

    Before moving anything it reads the Delta log of every table the window changed and checks that the
    window's merge commit is there (app transaction version >= window seq); otherwise it fails and the
    checkpoint stays where it was, so the next try re-merges the same staged window. The write holds
    the pipeline's state lock on the source and checks the state revision
    (:class:`~airflow_provider_binlog.pipeline.state.StateManager`, :mod:`~airflow_provider_binlog.pipeline.lock`).

    :param pipeline: pipeline name (templated).
    :param target_path: root of the target tables (templated).
    :param storage_options: deltalake storage options for object-store targets; they override the options
        derived from ``staging_conn_id`` key by key.
    :param staging_conn_id: the Airflow connection of the object store (an ``aws`` connection for
        ``s3://``; by default the one in the window's staging URI, ``s3://<conn_id>@bucket/...``): the
        storage options are derived from it (:func:`~airflow_provider_binlog.pipeline.storage.storage_options_for`).
    :param binlog_conn_id: the pipeline's source connection, where its state lock lives (templated).
    :param asset_alias: name of the :class:`~airflow.sdk.AssetAlias` added to the task's outlets, through
        which it emits one Asset event per target table the window changed (URI
        :func:`~airflow_provider_binlog.assets.table_asset_uri`, extra
        :func:`~airflow_provider_binlog.assets.asset_event_extra`; ``docs/assets.md``). None emits nothing.
        The events are recorded when the task succeeds; a cleared commit task of a committed window emits
        them again (at least once).
    """

    template_fields: Sequence[str] = ("pipeline", "target_path", "binlog_conn_id")

    def __init__(
        self,
        *,
        pipeline: str,
        target_path: str,
        storage_options: dict[str, str] | None = None,
        binlog_conn_id: str = BinlogHook.default_conn_name,
        asset_alias: str | None = TARGET_TABLES_ALIAS,
        staging_conn_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        from airflow_provider_binlog.assets import with_alias_outlet

        kwargs["outlets"] = with_alias_outlet(kwargs.get("outlets"), asset_alias)
        super().__init__(**kwargs)
        check_trusted_arguments(self, pipeline=pipeline, target_path=target_path)
        self.pipeline = pipeline
        self.target_path = target_path
        self.storage_options = storage_options
        self.binlog_conn_id = binlog_conn_id
        self.asset_alias = asset_alias
        self.staging_conn_id = staging_conn_id
        self.refused: dict[str, Any] = {}

    def execute(self, context: Any) -> dict[str, Any]:
        """Verify the merge of this run's window, mark it merged and advance the checkpoint.

        The checkpoint moves across the contiguous merged windows starting at it
        (:func:`~airflow_provider_binlog.pipeline.windows.advance_checkpoint`); an interval window merged out of
        order is recorded and the checkpoint waits for the gap before it.
        """
        from airflow_provider_binlog.pipeline.lock import SourceStateLock
        from airflow_provider_binlog.pipeline.staging import read_manifest, storage_path
        from airflow_provider_binlog.pipeline.state import StateRoots
        from airflow_provider_binlog.pipeline.storage import split_connection
        from airflow_provider_binlog.pipeline.windows import advance_checkpoint, mark_window
        from airflow_provider_binlog.target import check_target, mark_quarantines, target_root

        hook = BinlogHook(self.binlog_conn_id, pipeline=self.pipeline)
        roots = StateRoots(target=self.target_path)
        manager = StateManager(self.pipeline, lock=SourceStateLock(hook), roots=roots)
        state = manager.load()
        run_id = str(context["run_id"])
        window = None if state is None else state.window_of_run(run_id)
        if state is None or window is None:
            raise StateError(
                f"run {run_id!r} of pipeline {self.pipeline!r} has no window in the ledger to commit"
            )
        self._resolve_storage_options(window)
        if window.status == "merged":
            self.log.info("window %s is already committed", window.seq)
            self._emit_assets(context, window, state.checkpoint.updated_at)
            return state_summary(state)
        check_target(self.pipeline, state, self.target_path, [])
        if window.manifest_uri is None:
            raise StateError(
                f"window {window.seq} was never staged (status {window.status}); run the extract first"
            )
        window_dir = storage_path(window.manifest_uri)
        manifest = read_manifest(window_dir)
        if manifest is None:
            raise StateError(f"the manifest of window {window.seq} is missing at {window.manifest_uri}")
        from airflow_provider_binlog.contract.refusals import refused_tables

        refused = refused_tables(split_connection(str(window_dir))[0], self.storage_options)
        self._verify_merged(manifest, window.seq, refused)
        self.remember_staged(manifest, str(window_dir))
        self.refused = refused
        changed = [table for table in manifest.changed_tables() if table not in refused]

        needed = resnapshots_of(manifest, window, refused)
        for entry in manifest.dropped:
            if entry["table"] not in refused:
                self.log.info(
                    "%s was dropped or renamed away at %s:%s (GTID %s): a wait of it for a re-snapshot since an "
                    "earlier schema change ends there",
                    entry["table"], entry["since"]["file"], entry["since"]["pos"], entry.get("gtid"),
                )  # fmt: skip
        for entry in needed:
            self.log.warning(
                "%s waits for a re-snapshot since %s:%s (GTID %s, found by window %s): %s; the snapshot task of the "
                "next run takes it",
                entry.table, entry.since.file, entry.since.pos, entry.gtid, window.seq, entry.reason,
            )  # fmt: skip

        def advance(current: PipelineState) -> PipelineState:
            last_commit_ts = manifest.stats.get("last_commit_ts")
            marked = mark_window(current, window.seq, status="merged", last_commit_ts=last_commit_ts)
            moved = marked.model_copy(
                update={"checkpoint": advance_checkpoint(marked, marked.window(window.seq))}
            )
            return with_schema_changes(
                moved.with_target(target_root(self.target_path), changed), manifest, window, refused
            )

        from airflow_provider_binlog.pipeline.history import StagedStateHistory

        manager.history = StagedStateHistory(window_dir.parent)
        written = manager.update(advance)
        self._report(window, manifest, written.checkpoint.position)
        found = {
            t: quarantine_record(e) for t, e in quarantined(written).items() if t in manifest.quarantines()
        }
        mark_quarantines(self.target_path, found, self.storage_options)
        self._emit_assets(
            context, written.window(window.seq), written.checkpoint.updated_at, manifest, refused, found
        )
        return state_summary(written)

    def get_openlineage_facets_on_start(self) -> Any:
        """Return no datasets: the run's window is known once the task reads the pipeline's ledger."""
        from airflow.providers.openlineage.extractors import OperatorLineage

        return OperatorLineage()

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """Return the OpenLineage lineage of the commit (``docs/lineage.md``).

        Inputs: the staging folders of the window's tables; outputs: their Delta tables, now covered by
        the checkpoint (``outputStatistics``: row changes, 0 for a table the window did not change); run
        facet ``binlogRange``. Tables whose merge was refused are left out.
        """
        from airflow.providers.openlineage.extractors import OperatorLineage

        from airflow_provider_binlog.lineage import manifest_lineage

        if self.staged_manifest is None:
            return OperatorLineage()
        return manifest_lineage(
            self.staged_manifest,
            inputs="staging",
            outputs=["target"],
            tables=[t for t in self.staged_manifest.tables if t not in self.refused],
            staging_uri=self.staged_uri,
            target_path=self.target_path,
        )

    def _resolve_storage_options(self, window: Window) -> None:
        """Derive the storage options from the object store's connection, the explicit ones overriding them.

        The connection is ``staging_conn_id``, else the one in the window's staging URI.
        """
        from airflow_provider_binlog.pipeline.storage import split_connection, storage_options_for

        uri_conn_id = None if window.manifest_uri is None else split_connection(window.manifest_uri)[1]
        self.storage_options = storage_options_for(self.staging_conn_id or uri_conn_id, self.storage_options)

    def _emit_assets(
        self,
        context: Any,
        window: Window,
        committed_at: str,
        manifest: Manifest | None = None,
        refused: dict[str, Any] | None = None,
        quarantines: dict[str, Any] | None = None,
    ) -> None:
        """Emit the Asset event of every table the committed ``window`` changed (none refused its merge).

        :param manifest: the window's manifest; read from its staging when None (a committed window whose
            staging was removed emits nothing and says so).
        :param quarantines: the tables the window quarantined, with their records (an event each).
        """
        from airflow_provider_binlog.assets import emit_table_events, table_events

        if self.asset_alias is None:
            return
        if manifest is None:
            from airflow_provider_binlog.contract.refusals import refused_tables
            from airflow_provider_binlog.pipeline.staging import read_manifest, storage_path

            window_dir = None if window.manifest_uri is None else storage_path(window.manifest_uri)
            manifest = None if window_dir is None else read_manifest(window_dir)
            if window_dir is None or manifest is None:
                self.log.warning("window %s: its staging is gone, so no Asset events are emitted", window.seq)
                return
            from airflow_provider_binlog.pipeline.storage import split_connection

            refused = refused_tables(split_connection(str(window_dir))[0], self.storage_options)
        events = table_events(
            pipeline=self.pipeline,
            target_path=self.target_path,
            kind="window",
            seq=window.seq,
            entries={t: manifest.tables[t] for t in manifest.changed_tables() if t not in (refused or {})},
            start=window.start,
            end=window.end,
            committed_at=committed_at,
            last_commit_ts=manifest.stats.get("last_commit_ts"),
            storage_options=self.storage_options,
            quarantines=quarantines,
        )
        emit_table_events(context, self.asset_alias, events)
        if events:
            self.log.info("Asset events of window %s: %s", window.seq, ", ".join(sorted(events)))

    def _report(self, window: Window, manifest: Manifest, checkpoint: BinlogPosition) -> None:
        """Log the run's one summary line and emit the ``binlog.window.*`` metrics."""
        from airflow_provider_binlog.monitoring.metrics import emit_window

        extracted = int(manifest.stats["rows"])
        merged_tables = {table: manifest.tables[table].rows for table in manifest.changed_tables()}
        cut_at = pendulum.DateTime.fromisoformat(window.cut_at)
        duration = (pendulum.now("UTC") - cut_at).total_seconds()
        emit_window(self.pipeline, extracted, sum(merged_tables.values()), duration)
        self.log.info(
            "window %s of %s: %s row changes extracted, %s merged into %s tables, %.1f s from cut to "
            "checkpoint; checkpoint now %s",
            window.seq,
            self.pipeline,
            extracted,
            sum(merged_tables.values()),
            len(merged_tables),
            duration,
            checkpoint,
        )

    def _verify_merged(self, manifest: Manifest, seq: int, refused: dict[str, Any]) -> None:
        from airflow_provider_binlog.target import window_merged

        for table in manifest.changed_tables():
            if table in refused:
                continue
            if not window_merged(self.target_path, table, self.pipeline, seq, self.storage_options):
                raise MergeError(
                    f"window {seq} of {table} is not in the target {self.target_path} (no merge commit for it in "
                    f"the table's Delta log): the merge did not complete, so the checkpoint stays. Clear the "
                    f"merge task to re-merge the same staged window."
                )
