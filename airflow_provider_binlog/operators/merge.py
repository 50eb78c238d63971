"""Operator that merges a staged binlog window into the Delta Lake target with a Spark job."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow_provider_binlog.contract import ContractError
from airflow_provider_binlog.contract.keys import key_spec
from airflow_provider_binlog.contract.write_modes import DRIVER_REWRITE_ROWS, check_write_mode
from airflow_provider_binlog.exceptions import BinlogConfigError, MergeError, StagingError
from airflow_provider_binlog.operators.spark import SparkJobOperator
from airflow_provider_binlog.operators.trusted import check_trusted_arguments
from airflow_provider_binlog.pipeline.tables import is_template, parse_keys

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_provider_binlog.contract.manifest import Manifest, TableEntry

#: The PySpark application submitted by :class:`BinlogMergeOperator`.
MERGE_APPLICATION = Path(__file__).resolve().parent.parent / "jobs" / "merge" / "job.py"
_HISTORY_LIMIT = 100


class BinlogMergeOperator(SparkJobOperator):
    """Merge one staged binlog window into per-table Delta Lake tables by submitting the bundled Spark job.

    The Spark connection (``conn_id``) decides where the job runs (local, standalone, YARN, Kubernetes).
    When no Spark home is configured (``SPARK_HOME`` unset in the environment and in ``env_vars``), the
    operator points ``spark-submit`` at the ``pyspark`` package it runs with (``SPARK_HOME`` and ``PATH``
    for the submit process), and for a local master runs the job's Python with this interpreter
    (``PYSPARK_PYTHON``/``PYSPARK_DRIVER_PYTHON``), so it works from a virtualenv that is not activated.

    After the job, every table of the window is checked: its Delta log must hold the window's app
    transaction. The return value (XCom) summarises the merge per table.

    :param pipeline: pipeline name (must match the window's manifest).
    :param window_uri: staged window directory ``<staging>/<pipeline>/window=<seq>``. (templated)
    :param target_path: target root; source table ``db.t`` is merged into ``<target_path>/db/t``. (templated)
    :param keys: user-named keys for tables without a primary key, e.g. ``{"shop.log": ["a", "b"]}``, or
        its JSON text (templated).
    :param target_file_bytes: target data file size in bytes of tables created by this merge (default 128 MiB;
        existing tables keep theirs; ``docs/adr/0020-key-range-file-layout.md``).
    :param write_mode: how windows are merged into tables: ``auto`` (the default: merge-on-read for a window
        changing at most a quarter of the rows of the files its keys can be in, on a local or S3 target, else
        copy-on-write), ``copy_on_write`` (the files a window's keys can be in are rewritten; tables keep a
        protocol every Delta reader reads) or ``merge_on_read`` (the window's rows go to new files and the rows
        they replace are marked in deletion vectors; local and S3 targets). Once a table has deletion vectors its
        readers must apply them: ``target.read_table``, deltalake's ``DeltaTable.scan``, Polars, DuckDB's
        ``delta`` extension, Spark with delta-spark 2.3+; not deltalake's ``to_pyarrow_dataset``. Whole-table
        operations (snapshots, truncates) always rewrite. See ``docs/adr/0037-deletion-vectors.md``.
    :param driver_max_rows: a table whose window holds at most this many change rows is rewritten
        copy-on-write in the job's driver with Arrow, without a Spark job, also under ``auto`` (default from
        ``[binlog] merge_driver_max_rows``, else 10,000; 0: every table on Spark); ``merge_on_read``, whole-table
        operations and rewrites reading more than 32 MiB of current files stay on Spark
        (``docs/adr/0040-small-windows-merged-in-the-driver.md``).
    :param conn_id: Spark connection id.
    :param conf: extra Spark configuration; it overrides the settings the job needs only if you say so.
    :param storage_options: storage options (credentials, endpoint) of the staging and target object stores,
        in deltalake's keys (``AWS_ACCESS_KEY_ID``, ``AWS_ENDPOINT_URL`` ...); handed to the job in its
        environment (:mod:`airflow_provider_binlog.contract.uris`). They override the options derived from
        ``staging_conn_id`` key by key.
    :param staging_conn_id: the Airflow connection of the object store (an ``aws`` connection for
        ``s3://``; also taken from a window URI ``s3://<conn_id>@bucket/...``): the job's storage options
        are derived from it (:func:`~airflow_provider_binlog.pipeline.storage.storage_options_for`).
    :param deferrable: over a ``spark_connect`` connection, run the long Spark actions as detached operations
        and wait in the triggerer (:class:`~airflow_provider_binlog.operators.spark.SparkJobOperator`,
        ``docs/adr/0024-deferrable-spark-work.md``); default from ``[operators] default_deferrable``.
        ``defer_after_seconds`` (a keyword of that class, default 10): an action that ends within it is taken
        in the worker without deferring.
    :param kwargs: further :class:`~airflow.providers.apache.spark.operators.spark_submit.SparkSubmitOperator`
        arguments (``executor_memory``, ``env_vars``, ...), except ``application`` and ``application_args``.
    :raises ValueError: if an argument is invalid.
    """

    template_fields: Sequence[str] = (
        *SparkJobOperator.template_fields,
        "pipeline",
        "window_uri",
        "target_path",
        "keys",
    )
    ui_color = "#e8f1fb"
    job_module = "airflow_provider_binlog.jobs.merge.job"

    def __init__(
        self,
        *,
        pipeline: str,
        window_uri: str,
        target_path: str,
        keys: Mapping[str, Sequence[str]] | str | None = None,
        target_file_bytes: int | None = None,
        write_mode: str = "auto",
        driver_max_rows: int | None = None,
        conn_id: str = "spark_default",
        conf: dict[str, Any] | None = None,
        name: str | None = None,
        storage_options: dict[str, str] | None = None,
        staging_conn_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        self.check_arguments(
            kwargs, **({} if target_file_bytes is None else {"target_file_bytes": target_file_bytes})
        )
        if not pipeline or not isinstance(pipeline, str):
            raise ValueError(f"pipeline must be a non-empty string, got {pipeline!r}")
        self.keys: Any = keys if is_template(keys) else parse_keys(keys)
        try:
            self.write_mode = check_write_mode(write_mode)
        except ContractError as err:
            raise ValueError(str(err)) from err
        if driver_max_rows is None:
            from airflow.sdk import conf as airflow_conf

            driver_max_rows = airflow_conf.getint(
                "binlog", "merge_driver_max_rows", fallback=DRIVER_REWRITE_ROWS
            )
        if not isinstance(driver_max_rows, int) or driver_max_rows < 0:
            raise ValueError(f"driver_max_rows must be an int >= 0, got {driver_max_rows!r}")
        self.driver_max_rows = driver_max_rows
        super().__init__(
            application=str(MERGE_APPLICATION),
            conf=dict(conf or {}),
            conn_id=conn_id,
            name=name or f"binlog-merge-{pipeline}",
            **kwargs,
        )
        check_trusted_arguments(self, pipeline=pipeline, target_path=target_path, keys=keys)
        self.pipeline = pipeline
        self.window_uri = window_uri
        self.target_path = target_path
        self.target_file_bytes = target_file_bytes
        self.storage_options = storage_options
        self.staging_conn_id = staging_conn_id

    def execute(self, context: Context) -> dict[str, Any]:  # type: ignore[override]
        """Submit the merge job for the window, verify the target and return the per-table summary.

        Spark is not started when the window has no row changes, or when every table it changes already
        records the window's merge commit (a retry after the merge succeeded, a cleared run).

        :param context: the task context.
        :raises StagingError: if the window is not staged completely.
        :raises BinlogConfigError: if a table has no key, the window belongs to another pipeline or the
            Spark connection does not exist.
        :raises MergeError: if the Spark job fails or the target does not hold the window afterwards.
        """
        from airflow_provider_binlog.contract.refusals import refused_tables
        from airflow_provider_binlog.pipeline.state import StateManager, StateRoots
        from airflow_provider_binlog.pipeline.storage import split_connection, storage_options_for
        from airflow_provider_binlog.target import check_target, window_merged

        self.keys = parse_keys(self.keys)
        self.window_uri, uri_conn_id = split_connection(self.window_uri)
        self.storage_options = storage_options_for(self.staging_conn_id or uri_conn_id, self.storage_options)
        manifest = self._load_manifest()
        refused = refused_tables(self.window_uri, self.storage_options)
        changed = [name for name in manifest.tables_to_merge() if name not in refused]
        pending = [
            name
            for name in changed
            if not window_merged(self.target_path, name, self.pipeline, manifest.window, self.storage_options)
        ]
        if not pending:
            self.log.info(
                "Window %s of %s: %s; Spark not started",
                manifest.window,
                self.pipeline,
                "already merged into every table it changes"
                if changed
                else "no row changes, nothing to merge",
            )
            return self.verify(manifest)
        check_target(
            self.pipeline,
            StateManager(self.pipeline, roots=StateRoots(target=self.target_path)).load(),
            self.target_path,
            pending,
            storage_options=self.storage_options,
        )
        self.log.info("Merging window %s of %s into %s", manifest.window, self.pipeline, self.target_path)
        self.submit(
            context,
            self._application_args(),
            failure=f"the Spark merge of window {manifest.window} of pipeline {self.pipeline} failed; the "
            f"target is unchanged for tables not yet committed, and a retry is safe",
        )
        return self.verify(manifest)

    def get_openlineage_facets_on_start(self) -> Any:
        """Return the OpenLineage lineage of the merge about to run (the staged window names it whole)."""
        return self._lineage()

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """Return the OpenLineage lineage of the merge (``docs/lineage.md``).

        Inputs: the staging folders of the window's tables; outputs: their Delta tables (with
        ``outputStatistics``: row changes, 0 for a table the window did not change), a table whose merge
        was refused left out; run facet ``binlogRange``.
        """
        return self._lineage()

    def _lineage(self) -> Any:
        from airflow.providers.openlineage.extractors import OperatorLineage

        from airflow_provider_binlog.contract.manifest import read_manifest
        from airflow_provider_binlog.contract.refusals import refused_tables
        from airflow_provider_binlog.lineage import manifest_lineage

        if is_template(self.window_uri):
            return OperatorLineage()
        manifest = read_manifest(self.window_uri, self.storage_options)
        if manifest is None:
            return OperatorLineage()
        refused = refused_tables(self.window_uri, self.storage_options)
        return manifest_lineage(
            manifest,
            inputs="staging",
            outputs=["target"],
            tables=[t for t in manifest.tables if t not in refused],
            staging_uri=self.window_uri,
            target_path=self.target_path,
        )

    def _load_manifest(self) -> Manifest:
        """Return the window's manifest after checking its pipeline and that every table has a key.

        :raises StagingError: if the window is not staged completely or its manifest is invalid.
        :raises BinlogConfigError: if it belongs to another pipeline or a table has no key.
        """
        from airflow_provider_binlog.contract.keys import MergeKeyError, resolve_keys
        from airflow_provider_binlog.contract.manifest import ManifestError, require_manifest

        try:
            manifest = require_manifest(self.window_uri, self.storage_options)
        except ManifestError as err:
            raise StagingError(str(err)) from err
        if manifest.pipeline != self.pipeline:
            raise BinlogConfigError(
                f"window {self.window_uri} belongs to pipeline {manifest.pipeline!r}, not {self.pipeline!r}"
            )
        try:
            resolve_keys(manifest.keyed_tables(), self.keys, window=manifest.window)
        except MergeKeyError as err:
            raise BinlogConfigError(str(err)) from err
        return manifest

    def _application_args(self) -> list[str]:
        args = [
            "--window-uri",
            self.window_uri,
            "--target",
            self.target_path,
            "--pipeline",
            self.pipeline,
        ]
        if self.target_file_bytes is not None:
            args += ["--target-file-bytes", str(self.target_file_bytes)]
        args += ["--write-mode", self.write_mode]
        args += ["--driver-max-rows", str(self.driver_max_rows)]
        if self.keys:
            args += ["--key", key_spec(self.keys)]
        return args

    def _verify_history(self, name: str, entry: TableEntry, seq: int) -> dict[str, Any]:
        """Check that the history tables of a table with history hold the window; return their Delta versions.

        :raises MergeError: if one does not.
        """
        from airflow_provider_binlog.contract.delta import open_table, window_app_id
        from airflow_provider_binlog.contract.history import history_uri

        versions: dict[str, Any] = {}
        if not entry.files:
            return versions
        for kind in entry.history:
            uri = history_uri(kind, self.target_path, name)
            dt = open_table(uri, self.storage_options)
            if dt is None and entry.markers_only:
                continue  # only truncate markers of a table with no history yet: nothing to record
            if dt is None or dt.transaction_version(window_app_id(self.pipeline, seq)) != seq:
                raise MergeError(
                    f"the merge job finished but the {kind} table {uri} does not record window {seq}"
                )
            versions[f"{kind}_version"] = dt.version()
        return versions

    def verify(self, manifest: Manifest) -> dict[str, Any]:
        """Check that every table of the window holds it; return the per-table summary.

        A table whose merge the job refused for a schema change it cannot follow
        (:func:`~airflow_provider_binlog.contract.refusals.refused_tables`) is reported, not checked: the
        window's commit records it as waiting for a re-snapshot.

        :param manifest: the window's manifest.
        :raises MergeError: if a table lacks the window's app transaction.
        """
        from airflow_provider_binlog.contract.delta import open_table, pipeline_app_id, window_app_id
        from airflow_provider_binlog.contract.refusals import refused_tables
        from airflow_provider_binlog.target import table_uri

        seq = manifest.window
        tables: dict[str, dict[str, Any]] = {}
        refused = refused_tables(self.window_uri, self.storage_options)
        to_merge = manifest.tables_to_merge()
        for name, entry in manifest.tables.items():
            if name not in to_merge:
                tables[name] = {"rows_in_window": 0, "skipped": True}
                continue
            if name in refused:
                self.log.warning(
                    "%s: window %s was not merged into it (the table waits for a re-snapshot): %s",
                    name, seq, refused[name]["message"],
                )  # fmt: skip
                tables[name] = {"rows_in_window": entry.rows, "refused": refused[name]["detail"]}
                continue
            uri = table_uri(self.target_path, name)
            dt = open_table(uri, self.storage_options)
            if dt is None:
                raise MergeError(f"the merge job finished but there is no Delta table at {uri}")
            high_water = dt.transaction_version(pipeline_app_id(self.pipeline))
            marker = dt.transaction_version(window_app_id(self.pipeline, seq))
            if high_water is None or high_water < seq or marker != seq:
                raise MergeError(
                    f"the merge job finished but {uri} does not record window {seq} "
                    f"(app transaction {pipeline_app_id(self.pipeline)}={high_water}, "
                    f"{window_app_id(self.pipeline, seq)}={marker})"
                )
            tables[name] = {
                "rows_in_window": entry.rows,
                **_commit_numbers(dt, self.pipeline, seq),
                "delta_version": dt.version(),
                **self._verify_history(name, entry, seq),
            }
        # The job logged each table's numbers as it merged it; this line only confirms the Delta logs agree.
        self.log.info(
            "window %s is in the Delta log of %s",
            seq,
            ", ".join(
                f"{name} (version {numbers['delta_version']})"
                for name, numbers in tables.items()
                if "delta_version" in numbers  # not the skipped and refused tables
            )
            or "no table (nothing to merge)",
        )
        return {"pipeline": self.pipeline, "window": seq, "tables": tables}


def _commit_numbers(dt: Any, pipeline: str, seq: int) -> dict[str, Any]:
    """Return the numbers the merge job recorded in the commit info of the window's commit."""
    from airflow_provider_binlog.contract.delta import COMMIT_PIPELINE_KEY, COMMIT_WINDOW_KEY

    for commit in dt.history(_HISTORY_LIMIT):
        if commit.get(COMMIT_PIPELINE_KEY) == pipeline and commit.get(COMMIT_WINDOW_KEY) == seq:
            return {
                "rows_written": commit.get("binlog.rows_written"),
                "files_added": commit.get("binlog.files_added"),
                "files_removed": commit.get("binlog.files_removed"),
                "engine": commit.get("binlog.engine"),
            }
    return {}
