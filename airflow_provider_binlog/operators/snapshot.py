"""BinlogSnapshotOperator: a consistent, lock-free, chunked snapshot of tables, read and merged by Spark."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from airflow_provider_binlog.assets import TARGET_TABLES_ALIAS
from airflow_provider_binlog.contract.history import HistorySettings
from airflow_provider_binlog.contract.manifest import Manifest, TableEntry, read_manifest
from airflow_provider_binlog.exceptions import BinlogConfigError, MergeError, StagingError
from airflow_provider_binlog.hooks.binlog import BinlogHook
from airflow_provider_binlog.operators.lineage import StagedLineageMixin
from airflow_provider_binlog.operators.spark import SparkJobOperator
from airflow_provider_binlog.operators.trusted import check_trusted_arguments
from airflow_provider_binlog.pipeline.failover import OnLostTransactions, check_on_lost_transactions
from airflow_provider_binlog.pipeline.ledger import PipelineState, Snapshot
from airflow_provider_binlog.pipeline.quarantine import (
    probes,
    quarantine_record,
    quarantined,
    snapshot_refusals,
    with_retries_due,
)
from airflow_provider_binlog.pipeline.state import StateManager
from airflow_provider_binlog.pipeline.tables import (
    KeylessMode,
    TableKeys,
    check_keyless_mode,
    is_template,
    parse_keys,
    parse_tables,
    skipped_warning,
    table_keys,
    takes,
)
from airflow_provider_binlog.snapshot.ledger import (
    SnapshotMode,
    begin_snapshot,
    check_snapshot_mode,
    finish_snapshot,
)
from airflow_provider_binlog.snapshot.plan import CHUNK_ROWS, plan_snapshot
from airflow_provider_binlog.source.schema import TableInfo, unique_keys

#: The PySpark application submitted by :class:`BinlogSnapshotOperator`.
SNAPSHOT_APPLICATION = Path(__file__).resolve().parent.parent / "jobs" / "snapshot.py"


class BinlogSnapshotOperator(StagedLineageMixin, SparkJobOperator):
    """Load the rows tables hold now into the target, without locks, while the binlog keeps flowing.

    The snapshot takes a sequence number and the source head in the pipeline's ledger, splits each table
    into primary-key chunks of ``chunk_rows`` rows, and submits the bundled Spark application, which
    reads the chunks in at most ``max_connections`` parallel tasks (one source connection each; the
    binlog head read before each chunk is its low watermark) and merges them as ``_binlog_op = 'r'``
    rows (DBLog watermark algorithm, see :mod:`airflow_provider_binlog.snapshot`). Windows merged before
    or after it give the same target. Needs only SELECT on the tables and the privilege to read the
    binlog status (``BINLOG MONITOR`` on MariaDB, ``REPLICATION CLIENT`` on MySQL).

    A retry of the same run resumes after the chunks already read; a second run while it is running is
    turned away (:class:`~airflow_provider_binlog.exceptions.PipelineBusyError`). Returns (XCom) a dict
    with ``pipeline``, ``snapshot`` (seq, or None when nothing needed one), ``tables``, ``rows``,
    ``chunks``, ``read_tasks`` and ``read_rows_per_second``.

    :param pipeline: pipeline name (templated).
    :param tables: ``db.table`` names or patterns (templated; list or comma-separated); ``!db.table``
        excludes the tables it matches. Set by the DAG's author (``docs/adr/0034-trusted-pipeline-configuration.md``)
        unless ``selection`` is given.
    :param selection: the pipeline's table selection, set by the DAG's author (templated from Variables at most):
        when given, ``tables`` may come from the run's params (a re-snapshot's tables, chosen when it is
        triggered) and each table it names must be one ``selection`` takes, else nothing is read.
    :param staging_uri: staging root (templated); the snapshot goes to ``<staging>/<pipeline>/snapshot=<seq>``.
    :param target_path: target root of the Delta tables (templated).
    :param mode: ``missing`` (default: the tables no snapshot of the pipeline has read, so all of them
        for a new pipeline and a table newly added to the selection), ``requested`` (re-snapshot the
        tables named) or ``purged`` (the binlogs the pipeline needed were purged: re-snapshot the tables
        named and move the checkpoint to the snapshot's start, dropping windows not merged yet).
    :param keys: ``{"db.table": [columns]}`` (or its JSON text; templated) naming a unique key (a UNIQUE index of NOT NULL columns)
        for tables without a primary key.
    :param keyless_tables: (templated) ``skip`` (default: a selected table with no primary key and no named key is left
        out of the snapshot; once it has a key, a ``missing`` snapshot loads it as a table new to the
        pipeline) or ``fail`` (:class:`~airflow_provider_binlog.pipeline.tables.KeylessTableError`).
    :param chunk_rows: rows per chunk.
    :param max_connections: most source connections (Spark read tasks) at once.
    :param target_file_bytes: target data file size in bytes of target tables the snapshot creates (default
        128 MiB; ``docs/adr/0020-key-range-file-layout.md``).
    :param binlog_conn_id: a ``mysql`` or ``mysqlbinlog`` connection.
    :param staging_conn_id: the Airflow connection of the staging (and target) object store, if any: the
        staging is written through it and the job's storage options are derived from it
        (:func:`~airflow_provider_binlog.pipeline.storage.storage_options_for`).
    :param conn_id: Spark connection id.
    :param storage_options: storage options (credentials, endpoint) of the staging and target object stores,
        in deltalake's keys; handed to the job in its environment (:mod:`airflow_provider_binlog.contract.uris`).
        They override the options derived from ``staging_conn_id`` key by key.
    :param asset_alias: name of the :class:`~airflow.sdk.AssetAlias` added to the task's outlets, through
        which a merged snapshot emits one Asset event per table it loaded (kind ``snapshot``; the snapshot
        commits without a separate commit task; ``docs/assets.md``). None emits nothing.
    :param deferrable: over a ``spark_connect`` connection, run the long Spark actions as detached operations
        and wait in the triggerer (:class:`~airflow_provider_binlog.operators.spark.SparkJobOperator`,
        ``docs/adr/0024-deferrable-spark-work.md``); default from ``[operators] default_deferrable``.
        ``defer_after_seconds`` (a keyword of that class, default 10): an action that ends within it is taken
        in the worker without deferring.
    :param on_lost_transactions: when the connection reaches another server than the pipeline's state was
        written for, the run follows it by GTID (``docs/failover.md``); ``resnapshot`` (default) or ``fail``
        decides what happens when that server lacks transactions the target may hold (see
        :class:`~airflow_provider_binlog.operators.extract.BinlogExtractOperator`).
    :param history: the history kept beside the tables (``docs/history.md``), as the extract's; the snapshot's
        rows enter each change log as snapshot reads (``r``), where the table's history (re)starts.
    :param table_history: ``{"db.table": kinds}`` overriding ``history`` for single tables.
    :raises ValueError: on an invalid argument.
    """

    job_module = "airflow_provider_binlog.jobs.snapshot"
    template_fields: Sequence[str] = (
        *SparkJobOperator.template_fields,
        "pipeline",
        "tables",
        "staging_uri",
        "target_path",
        "mode",
        "keys",
        "keyless_tables",
        "selection",
    )
    ui_color = "#eaf6ea"

    def __init__(
        self,
        *,
        pipeline: str,
        tables: str | Sequence[str],
        staging_uri: str,
        target_path: str,
        mode: SnapshotMode | str = "missing",
        keys: dict[str, list[str]] | str | None = None,
        keyless_tables: KeylessMode | str = "skip",
        selection: str | Sequence[str] | None = None,
        chunk_rows: int = CHUNK_ROWS,
        max_connections: int = 4,
        target_file_bytes: int | None = None,
        binlog_conn_id: str = BinlogHook.default_conn_name,
        staging_conn_id: str | None = None,
        conn_id: str = "spark_default",
        conf: dict[str, Any] | None = None,
        allow_minimal_row_metadata: bool = False,
        storage_options: dict[str, str] | None = None,
        asset_alias: str | None = TARGET_TABLES_ALIAS,
        on_lost_transactions: OnLostTransactions = "resnapshot",
        history: str | Sequence[str] | None = None,
        table_history: Mapping[str, str | Sequence[str] | None] | None = None,
        **kwargs: Any,
    ) -> None:
        from airflow_provider_binlog.assets import with_alias_outlet

        self.history = HistorySettings.parse(history, table_history)

        self.on_lost_transactions = check_on_lost_transactions(on_lost_transactions)

        kwargs["outlets"] = with_alias_outlet(kwargs.get("outlets"), asset_alias)
        sizes = {} if target_file_bytes is None else {"target_file_bytes": target_file_bytes}
        self.check_arguments(kwargs, chunk_rows=chunk_rows, max_connections=max_connections, **sizes)
        if not is_template(keyless_tables):
            check_keyless_mode(keyless_tables)
        self.keyless_tables = keyless_tables
        super().__init__(
            application=str(SNAPSHOT_APPLICATION),
            conf=dict(conf or {}),
            conn_id=conn_id,
            name=f"binlog-snapshot-{pipeline}",
            **kwargs,
        )
        chosen = {"tables": tables} if selection is None else {"selection": selection}
        check_trusted_arguments(
            self, pipeline=pipeline, staging_uri=staging_uri, target_path=target_path, keys=keys, **chosen
        )
        self.selection = selection
        self.pipeline = pipeline
        self.tables = tables
        self.staging_uri = staging_uri
        self.target_path = target_path
        self.mode = mode
        self.keys: Any = keys if is_template(keys) else parse_keys(keys)
        self.chunk_rows = chunk_rows
        self.max_connections = max_connections
        self.target_file_bytes = target_file_bytes
        self.binlog_conn_id = binlog_conn_id
        self.staging_conn_id = staging_conn_id
        self.allow_minimal_row_metadata = allow_minimal_row_metadata
        self.storage_options = storage_options
        self.asset_alias = asset_alias

    def execute(self, context: Any) -> dict[str, Any]:  # type: ignore[override]
        """Start or resume this run's snapshot, read and merge it on Spark, record it as merged.

        :raises BinlogConfigError: for a table without a usable key, a bad mode, or an interval pipeline.
        :raises PipelineBusyError: when another run's snapshot is reading one of the tables.
        :raises MergeError: when the Spark application fails (a retry resumes) or the target lacks the rows.
        """
        from airflow_provider_binlog.contract.uris import join_uri, read_json
        from airflow_provider_binlog.extract.resume import follow_pipeline
        from airflow_provider_binlog.pipeline.staging import check_writable, pipeline_root
        from airflow_provider_binlog.pipeline.storage import split_connection, storage_options_for
        from airflow_provider_binlog.snapshot.chunks import SOURCE_ENV
        from airflow_provider_binlog.snapshot.plan import PLAN_NAME
        from airflow_provider_binlog.target import check_target, mark_quarantines, target_root

        mode = check_snapshot_mode(self.mode)
        keyless_tables = check_keyless_mode(self.keyless_tables)
        self.keys = parse_keys(self.keys)
        self.storage_options = storage_options_for(self.staging_conn_id, self.storage_options)
        hook = BinlogHook(self.binlog_conn_id, pipeline=self.pipeline)
        selection = parse_tables(self.tables)
        server = hook.validate_source(
            allow_minimal_row_metadata=self.allow_minimal_row_metadata, tables=selection
        )
        described = hook.describe_tables(selection)
        resolved = self._keys(hook, described, keyless_tables)
        self._check_selected(resolved.keys)
        # The start is read after the tables were described: a table that got its key before that is
        # captured from a position after the change, so windows never stage its keyless past.
        server = self._with_head_now(hook, server)
        root = pipeline_root(self.staging_uri, self.pipeline, self.staging_conn_id)
        check_writable(root)
        manager, state = follow_pipeline(
            hook,
            server,
            root,
            pipeline=self.pipeline,
            staging_conn_id=self.staging_conn_id,
            run_id=str(context["run_id"]),
            on_lost=self.on_lost_transactions,
            logger=self.log,
            target_path=self.target_path,
        )
        new_to_target = sorted(t for t in resolved.keys if state is None or t not in state.target_tables)
        check_target(
            self.pipeline,
            state,
            self.target_path,
            new_to_target,
            recreate=True,
            storage_options=self.storage_options,
        )
        snapshot = self._begin(
            manager,
            server,
            sorted(resolved.keys),
            mode=mode,
            ready=self._probe_quarantined(hook, state),
            context=context,
            # The Spark job and pyarrow write and read the folder with the storage options: no conn id in it.
            staging_uri=lambda seq: split_connection(str(root / f"snapshot={seq}"))[0],
        )
        if snapshot is None:
            self.log.info("every selected table of %s has a snapshot already; nothing to read", self.pipeline)
            return {"pipeline": self.pipeline, "snapshot": None, "tables": [], "rows": 0, "chunks": 0}
        if snapshot.status == "merged":
            self.log.info("snapshot %s is merged already", snapshot.seq)
            merged_manifest = read_manifest(snapshot.staging_uri, self.storage_options)
            if merged_manifest is not None:
                self.remember_staged(merged_manifest, snapshot.staging_uri)
                self._emit_assets(context, snapshot, merged_manifest)
            return self._result(snapshot, snapshot.rows or 0)
        target = target_root(self.target_path)
        if self._nothing_to_read(hook, snapshot):
            manager.update(lambda state: finish_snapshot(state, snapshot.seq, 0, target, written=[]))
            self.log.info(
                "snapshot %s: every table is empty and has no target table yet; Spark not started",
                snapshot.seq,
            )
            return self._result(snapshot, 0)
        if read_json(join_uri(snapshot.staging_uri, PLAN_NAME), self.storage_options) is None:
            self._write_plan(hook, server.flavor, snapshot, {n: resolved.keys[n] for n in snapshot.tables})
        self.submit(
            context,
            [
                "--snapshot-uri",
                snapshot.staging_uri,
                "--target",
                self.target_path,
                "--pipeline",
                self.pipeline,
                "--max-connections",
                str(self.max_connections),
                *(
                    ()
                    if self.target_file_bytes is None
                    else ("--target-file-bytes", str(self.target_file_bytes))
                ),
            ],  # fmt: skip
            failure=f"the Spark snapshot {snapshot.seq} of pipeline {self.pipeline} failed; a retry resumes it after "
            f"its finished chunks",
            env={SOURCE_ENV: json.dumps(hook.sql_settings())},
        )
        manifest = read_manifest(snapshot.staging_uri, self.storage_options)
        if manifest is None:
            raise StagingError(
                f"the snapshot application finished but wrote no manifest in {snapshot.staging_uri}"
            )
        refused = snapshot_refusals(manifest)
        self._verify(snapshot, refused)
        self.remember_staged(manifest, snapshot.staging_uri)
        rows = int(manifest.stats["rows"])
        merged = [t for t in snapshot.tables if t not in refused]
        written = manager.update(
            lambda state: finish_snapshot(state, snapshot.seq, rows, target, written=merged, refused=refused)
        )
        found = {t: quarantine_record(e) for t, e in quarantined(written).items() if t in refused}
        mark_quarantines(self.target_path, {**dict.fromkeys(merged), **found}, self.storage_options)
        for table, record in refused.items():
            self.log.error(
                "%s is quarantined: %s. The other tables of snapshot %s are merged; the table is re-snapshotted "
                "once it changes at the source (docs/operating.md, 'Quarantined tables')",
                table, record["error"], snapshot.seq,
            )  # fmt: skip
        self._emit_assets(
            context, next(s for s in written.snapshots if s.seq == snapshot.seq), manifest, found
        )
        result = self._result(snapshot, rows, dict(manifest.stats))
        self.log.info(
            "snapshot %s of %s merged: %s rows of %s in %s chunks, read at %.0f rows/s by %s Spark tasks",
            snapshot.seq, self.pipeline, rows, ", ".join(snapshot.tables), result["chunks"],
            result["read_rows_per_second"], result["read_tasks"],
        )  # fmt: skip
        return result

    def get_openlineage_facets_on_start(self) -> Any:
        """Return the OpenLineage datasets known before the snapshot starts: the explicitly named tables."""
        from airflow_provider_binlog.lineage import selection_lineage

        return selection_lineage(
            self.selected_tables(self.tables), source=self.source_namespace(), target_path=self.target_path
        )

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """Return the OpenLineage lineage of the merged snapshot (``docs/lineage.md``).

        Inputs: the snapshot's source tables; outputs: their staging folders and Delta tables (with
        ``outputStatistics``: rows read); run facet ``binlogRange`` (kind ``snapshot``, ``start`` its low
        watermark).
        """
        from airflow.providers.openlineage.extractors import OperatorLineage

        from airflow_provider_binlog.lineage import manifest_lineage

        if self.staged_manifest is None:
            return OperatorLineage()
        return manifest_lineage(
            self.staged_manifest,
            inputs="source",
            outputs=["staging", "target"],
            tables=self.staged_manifest.tables,
            source=self.source_namespace(),
            staging_uri=self.staged_uri,
            target_path=self.target_path,
        )

    def _keys(
        self, hook: BinlogHook, described: dict[str, TableInfo], keyless_tables: KeylessMode
    ) -> TableKeys:
        """Resolve every table's chunk key (:func:`~airflow_provider_binlog.pipeline.tables.resolve_key`, snapshot level).

        :raises KeylessTableError: for a keyless table with ``keyless_tables="fail"``.
        :raises BinlogConfigError: for a named key that is not a UNIQUE index of NOT NULL columns.
        """
        uniques: dict[str, list[tuple[str, ...]]] = {}
        if any(name in self.keys for name in described):
            with hook.cursor() as cur:
                uniques = {name: unique_keys(cur, name) for name in described if name in self.keys}
        resolved = table_keys(
            {name: (info.columns, info.primary_key) for name, info in described.items()},
            self.keys,
            keyless_tables=keyless_tables,
            unique_keys=uniques,
        )
        for name, reason in resolved.skipped.items():
            if self.mode == "missing":  # the extract task of the run warns about it
                self.log.info("%s is left out of the snapshot: it has no key", name)
            else:
                self.log.warning(skipped_warning(name, reason))
        return resolved

    def _check_selected(self, tables: Iterable[str]) -> None:
        """Refuse tables ``selection`` does not take (when it was given), before anything is read or written.

        :raises BinlogConfigError: naming the tables and the selection.
        """
        if self.selection is None:
            return
        allowed = parse_tables(self.selection)
        outside = sorted(name for name in tables if not takes(allowed, name))
        if outside:
            raise BinlogConfigError(
                f"pipeline {self.pipeline!r} does not select {', '.join(outside)} (its selection: "
                f"{', '.join(allowed)}): a re-snapshot reads only tables of the pipeline. Nothing was read. Name "
                f"tables its selection takes, or add them to the selection in the DAG file."
            )

    @staticmethod
    def _with_head_now(hook: BinlogHook, server: Any) -> Any:
        """Return ``server`` with the source head read now."""
        import dataclasses

        with hook.cursor() as cur:
            return dataclasses.replace(server, head=hook.head_position(cur, server.flavor))

    def _begin(
        self,
        manager: StateManager,
        server: Any,
        tables: list[str],
        *,
        mode: SnapshotMode,
        ready: Sequence[str],
        context: Any,
        staging_uri: Any,
    ) -> Snapshot | None:
        """Start, find or take over this run's snapshot in a read-modify-write of the state.

        :param ready: quarantined tables whose refused chunk reads now: due for a re-snapshot.
        """
        from airflow_provider_binlog.pipeline.runs import holder_states

        run_id = str(context["run_id"])
        started: dict[str, Snapshot | None] = {}

        def change(current: PipelineState | None) -> PipelineState:
            manager.check_source(current, server.server_identity)
            state = current or manager.initial(server.server_identity, server.flavor, server.head)
            new, started["snapshot"] = begin_snapshot(
                with_retries_due(state, ready),
                run_id=run_id,
                tables=tables,
                mode=mode,
                head=server.head,
                staging_uri=staging_uri,
                new_pipeline=current is None,
                dag_id=getattr(context.get("dag"), "dag_id", None),
                holder_state=holder_states(context),
            )
            return new  # the state it was given when nothing needs a snapshot: transact writes nothing

        manager.transact(change)
        snapshot = started["snapshot"]
        if snapshot is None:
            return None
        self.log.info(
            "snapshot %s of %s (%s): %s from %s", snapshot.seq, self.pipeline, snapshot.reason,
            ", ".join(snapshot.tables), snapshot.start,
        )  # fmt: skip
        handover = snapshot.handovers[-1] if snapshot.handovers else None
        if handover is not None and handover.to_run == run_id and snapshot.status == "running":
            self.log.warning(
                "snapshot %s was held by run %r, which ended (%s) before merging it; this run took it over and "
                "resumes it after its finished chunks. Tables this run selected beyond it are snapshotted by "
                "the next run.", snapshot.seq, handover.from_run, handover.holder_state,
            )  # fmt: skip
        return snapshot

    def _probe_quarantined(self, hook: BinlogHook, state: PipelineState | None) -> list[str]:
        """Read the refused chunk of each quarantined table not due for a retry; return the tables it now reads.

        One chunk per table (:func:`~airflow_provider_binlog.snapshot.chunks.probe_chunk`), read here, not on Spark.
        """
        from airflow_provider_binlog.snapshot.chunks import SourceConnections, probe_chunk

        ready: list[str] = []
        found = probes(state)
        if not found:
            return ready
        with SourceConnections(hook.sql_settings()) as source:
            for table, probe in sorted(found.items()):
                still = probe_chunk(source, table, probe)
                if still is None:
                    self.log.info(
                        "%s: the chunk its last re-snapshot refused reads now; it is re-snapshotted", table
                    )
                    ready.append(table)
                else:
                    self.log.warning("%s stays quarantined: %s", table, still)
        return ready

    def _nothing_to_read(self, hook: BinlogHook, snapshot: Snapshot) -> bool:
        """Return True when every table is empty now and has no target table (nothing to load or replace).

        An empty read after the snapshot started is a one-chunk snapshot of zero rows: rows committed
        later are in the binlog after the snapshot's start, so the windows bring them.
        """
        from deltalake import DeltaTable

        from airflow_provider_binlog.source.sql import quote_table
        from airflow_provider_binlog.target import table_uri

        if any(DeltaTable.is_deltatable(table_uri(self.target_path, t)) for t in snapshot.tables):
            return False
        with hook.cursor() as cur:
            for table in snapshot.tables:
                cur.execute(f"SELECT 1 FROM {quote_table(table)} LIMIT 1")
                if cur.fetchone() is not None:
                    return False
        return True

    def _write_plan(
        self,
        hook: BinlogHook,
        flavor: str,
        snapshot: Snapshot,
        keys: dict[str, list[str]],
    ) -> None:
        """Plan every table's chunks by its key and write ``plan.json`` (a retry reuses it)."""
        from airflow_provider_binlog.contract.uris import join_uri, write_json
        from airflow_provider_binlog.snapshot.plan import PLAN_NAME

        with hook.cursor() as cur:
            plan = plan_snapshot(
                cur,
                pipeline=self.pipeline,
                seq=snapshot.seq,
                run_id=snapshot.run_id,
                flavor=flavor,
                start=snapshot.start.to_dict(),
                keys=keys,
                chunk_rows=self.chunk_rows,
            )
        plan["history"] = {name: list(kinds) for name in keys if (kinds := self.history.kinds_for(name))}
        for table in plan["tables"]:
            self.log.info(
                "%s: %s chunks of up to %s rows by key %s",
                table["name"],
                len(table["chunks"]),
                self.chunk_rows,
                table["key"],
            )
        write_json(join_uri(snapshot.staging_uri, PLAN_NAME), plan, self.storage_options)

    def _verify(self, snapshot: Snapshot, refused: Mapping[str, Any]) -> None:
        """Check that every table of the snapshot but the ``refused`` ones records its merge commit.

        :raises MergeError: naming the table that does not.
        """
        from airflow_provider_binlog.target import window_merged

        for table in (t for t in snapshot.tables if t not in refused):
            if not window_merged(self.target_path, table, self.pipeline, snapshot.seq, self.storage_options):
                raise MergeError(
                    f"snapshot {snapshot.seq} of {table} is not in the target {self.target_path} (no merge commit "
                    f"for it in the table's Delta log); clear the task to resume it"
                )

    def _emit_assets(
        self, context: Any, snapshot: Snapshot, manifest: Manifest, quarantines: dict[str, Any] | None = None
    ) -> None:
        """Emit the Asset event of every table the merged ``snapshot`` loaded (:mod:`~airflow_provider_binlog.assets`)."""
        from airflow_provider_binlog.assets import emit_table_events, table_events

        events = table_events(
            pipeline=self.pipeline,
            target_path=self.target_path,
            kind="snapshot",
            seq=snapshot.seq,
            entries={table: manifest.tables.get(table, TableEntry()) for table in snapshot.tables},
            start=snapshot.start,
            end=None,
            committed_at=snapshot.finished_at or "",
            last_commit_ts=None,
            quarantines=quarantines,
        )
        emit_table_events(context, self.asset_alias, events)

    def _result(self, snapshot: Snapshot, rows: int, stats: dict[str, Any] | None = None) -> dict[str, Any]:
        stats = stats or {}
        return {
            "pipeline": self.pipeline,
            "snapshot": snapshot.seq,
            "tables": snapshot.tables,
            "rows": rows,
            "chunks": stats.get("chunks", 0),
            "read_tasks": stats.get("read_tasks", 0),
            "read_rows_per_second": rows / max(float(stats.get("read_seconds") or 0), 1e-6) if stats else 0.0,
        }
