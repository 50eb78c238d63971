"""BinlogMaintenanceOperator: remove staging the pipeline no longer needs, vacuum its target tables."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseOperator

from airflow_provider_binlog.exceptions import BinlogConfigError, StateError
from airflow_provider_binlog.operators.trusted import check_trusted_arguments


class BinlogMaintenanceOperator(BaseOperator):
    """Free the storage a pipeline no longer needs and report what went (``docs/maintenance.md``).

    1. Staging: the folders of windows the ledger records as ``merged`` (or that it no longer lists and
       the checkpoint is past) and of ``merged`` snapshots, once nothing in them was written for
       ``staging_retention_hours`` (:func:`~airflow_provider_binlog.maintenance.clean_staging`). Windows
       that are cut or extracted (open, or waiting for the next run to adopt them) and running snapshots
       keep their folders, whatever their age.
    2. Target: in each Delta table of the pipeline (its state's ``target_tables``) runs of adjacent small
       data files are joined (:func:`~airflow_provider_binlog.maintenance.compact_table`, with ``compact``),
       a log checkpoint is written (:func:`~airflow_provider_binlog.maintenance.checkpoint_table`), and the
       table is vacuumed: files merges and compactions removed from its log more than
       ``target_retention_hours`` ago are deleted, and so are data files no commit lists and Spark output
       folders under ``<table>/_binlog_staging/`` older than that (what failed or abandoned writes left;
       :func:`~airflow_provider_binlog.maintenance.vacuum_table`).
       Keep this above the longest read of the target and the oldest version readers time-travel to.
       A table another pipeline owns is left alone with a warning
       (:func:`~airflow_provider_binlog.maintenance.foreign_owner`), as a merge refuses it.

    The state's locations are checked against ``staging_uri`` and ``target_path`` before any is used
    (:class:`~airflow_provider_binlog.pipeline.state.StateRoots`).

    Returns (XCom) ``{"pipeline", "report_only", "staging": {"folders", "files", "bytes", "kept"},
    "target": {"tables": {table: {"files", "bytes"}}, "files", "bytes", "compacted": {table: {"files_removed",
    "files_added", "bytes", "conflict"}}, "not_owned": {table: owner}}}``.

    :param pipeline: pipeline name (templated).
    :param staging_uri: staging root (templated), as given to the extract task.
    :param target_path: target root (templated).
    :param staging_retention_hours: staging folders younger than this stay (default 168, a week).
    :param target_retention_hours: removed target files younger than this stay (default 168, a week).
    :param compact: join small data files of key-range tables and write log checkpoints (default true).
    :param report_only: report what would be freed, delete nothing (a dry run; ``BaseOperator`` has a
        ``dry_run`` method of its own).
    :param staging_conn_id: the Airflow connection of the staging (and target) object store, if any; the
        storage options of the target are derived from it
        (:func:`~airflow_provider_binlog.pipeline.storage.storage_options_for`).
    :param storage_options: deltalake storage options for object-store targets; they override the derived
        ones key by key.
    :raises ValueError: on a negative retention.
    """

    template_fields: Sequence[str] = ("pipeline", "staging_uri", "target_path")
    ui_color = "#f4efe6"

    def __init__(
        self,
        *,
        pipeline: str,
        staging_uri: str,
        target_path: str,
        staging_retention_hours: float = 168,
        target_retention_hours: int = 168,
        compact: bool = True,
        report_only: bool = False,
        staging_conn_id: str | None = None,
        storage_options: dict[str, str] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        for name, value in (
            ("staging_retention_hours", staging_retention_hours),
            ("target_retention_hours", target_retention_hours),
        ):
            if value < 0:
                raise ValueError(f"{name}={value!r} must be 0 or more")
        check_trusted_arguments(self, pipeline=pipeline, staging_uri=staging_uri, target_path=target_path)
        self.pipeline = pipeline
        self.staging_uri = staging_uri
        self.target_path = target_path
        self.staging_retention_hours = staging_retention_hours
        self.target_retention_hours = int(target_retention_hours)
        self.compact = compact
        self.report_only = report_only
        self.staging_conn_id = staging_conn_id
        self.storage_options = storage_options

    def _history_tables(self, table: str, options: dict[str, str] | None) -> list[tuple[str, str, str]]:
        """Return ``(name, location, kind)`` of the history tables of ``table`` that exist (``docs/history.md``).

        Compacted and vacuumed with the table: an SCD2 table's merges replace files, a change log gets a file per
        window, and a killed merge leaves files no commit lists.
        """
        from airflow_provider_binlog.contract.delta import open_table
        from airflow_provider_binlog.contract.history import HISTORY_KINDS, history_uri

        found = []
        for kind in HISTORY_KINDS:
            location = history_uri(kind, self.target_path, table)
            if open_table(location, options) is not None:
                found.append((f"{table} ({kind})", location, kind))
        return found

    def execute(self, context: Any) -> dict[str, Any]:
        """Clean the pipeline's staging, vacuum its target tables, log and return what was freed.

        :raises StateError: when the pipeline has no state (nothing is known to be safe to remove).
        :raises BinlogConfigError: when ``target_path`` is not the target the pipeline's state records.
        """
        import datetime as dt

        from airflow_provider_binlog.contract.columns import UTC
        from airflow_provider_binlog.contract.history import CHANGELOG
        from airflow_provider_binlog.maintenance import (
            Compacted,
            Freed,
            checkpoint_table,
            clean_staging,
            compact_table,
            foreign_owner,
            vacuum_table,
        )
        from airflow_provider_binlog.pipeline.staging import pipeline_root
        from airflow_provider_binlog.pipeline.state import StateManager, StateRoots
        from airflow_provider_binlog.pipeline.storage import storage_options_for
        from airflow_provider_binlog.target import table_uri, target_root

        options = storage_options_for(self.staging_conn_id, self.storage_options)

        root = pipeline_root(self.staging_uri, self.pipeline, self.staging_conn_id)
        state = StateManager(
            self.pipeline, roots=StateRoots(staging=str(root), target=self.target_path)
        ).load()
        if state is None:
            raise StateError(f"pipeline {self.pipeline!r} has no state: nothing to clean up")
        if state.target is not None and state.target != target_root(self.target_path):
            raise BinlogConfigError(
                f"pipeline {self.pipeline!r} writes its target at {state.target}, not {self.target_path}: give "
                f"the maintenance task the pipeline's target root"
            )
        now = dt.datetime.now(UTC)
        staging, kept = clean_staging(
            root,
            state,
            retention=dt.timedelta(hours=self.staging_retention_hours),
            now=now,
            dry_run=self.report_only,
        )
        tables: dict[str, Freed] = {}
        compacted: dict[str, Compacted] = {}
        not_owned: dict[str, str] = {}
        for table in state.target_tables:
            uri = table_uri(self.target_path, table)
            owner = foreign_owner(uri, self.pipeline, options)
            if owner is not None:
                not_owned[table] = owner
                self.log.warning(
                    "%s (%s) belongs to pipeline %r, not %r: left alone, neither compacted nor vacuumed. Its owner's "
                    "maintenance task keeps it; if %r should own it, hand it over (docs/operating.md, 'Two "
                    "pipelines, one target table')",
                    table, uri, owner, self.pipeline, self.pipeline,
                )  # fmt: skip
                continue
            for name, location, kind in ((table, uri, ""), *self._history_tables(table, options)):
                if self.compact:
                    changelog = kind == CHANGELOG  # its commits hold the digest chain: its log is kept whole
                    compacted[name] = compact_table(
                        location, dry_run=self.report_only, storage_options=options, appended=changelog
                    )
                    if not self.report_only:
                        checkpoint_table(location, storage_options=options, keep_log=changelog)
                tables[name] = vacuum_table(
                    location,
                    retention_hours=self.target_retention_hours,
                    dry_run=self.report_only,
                    storage_options=options,
                )
        target_files = sum(f.files for f in tables.values())
        target_bytes = sum(f.bytes for f in tables.values())
        self.log.info(
            "%s%s: staging %s folders (%s files, %s bytes) freed, %s kept for the ledger (%s); target %s removed "
            "files (%s bytes) vacuumed from %s tables",
            "dry run, would free: " if self.report_only else "", self.pipeline, len(staging.folders), staging.files,
            staging.bytes, len(kept), ", ".join(kept) or "none", target_files, target_bytes,
            sum(1 for f in tables.values() if f.files),
        )  # fmt: skip
        return {
            "pipeline": self.pipeline,
            "report_only": self.report_only,
            "staging": {**staging.as_dict(), "kept": kept},
            "target": {
                "tables": {t: {"files": f.files, "bytes": f.bytes} for t, f in sorted(tables.items())},
                "files": target_files,
                "bytes": target_bytes,
                "compacted": {t: c.as_dict() for t, c in sorted(compacted.items())},
                "not_owned": not_owned,
            },
        }
