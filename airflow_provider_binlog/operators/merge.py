"""Operator that merges a staged binlog window into the Delta Lake target with a Spark job."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow_provider_binlog.exceptions import BinlogConfigError, MergeError, StagingError
from airflow_provider_binlog.operators.spark import SparkJobOperator
from airflow_provider_binlog.tables import is_template, parse_keys

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_provider_binlog.spark_jobs.merge import StagedWindow

#: The PySpark application submitted by :class:`BinlogMergeOperator`.
MERGE_APPLICATION = Path(__file__).resolve().parent.parent / "spark_jobs" / "merge.py"
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
    :param buckets: number of hash buckets of tables created by this merge (existing tables keep theirs).
    :param conn_id: Spark connection id.
    :param conf: extra Spark configuration; it overrides the settings the job needs only if you say so.
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
    job_module = "airflow_provider_binlog.spark_jobs.merge"

    def __init__(
        self,
        *,
        pipeline: str,
        window_uri: str,
        target_path: str,
        keys: Mapping[str, Sequence[str]] | str | None = None,
        buckets: int = 16,
        conn_id: str = "spark_default",
        conf: dict[str, Any] | None = None,
        name: str | None = None,
        **kwargs: Any,
    ) -> None:
        self.check_arguments(kwargs, buckets=buckets)
        if not pipeline or not isinstance(pipeline, str):
            raise ValueError(f"pipeline must be a non-empty string, got {pipeline!r}")
        self.keys: Any = keys if is_template(keys) else parse_keys(keys)
        super().__init__(
            application=str(MERGE_APPLICATION),
            conf=dict(conf or {}),
            conn_id=conn_id,
            name=name or f"binlog-merge-{pipeline}",
            **kwargs,
        )
        self.pipeline = pipeline
        self.window_uri = window_uri
        self.target_path = target_path
        self.buckets = buckets

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
        from airflow_provider_binlog.operators.commit import window_merged
        from airflow_provider_binlog.spark_jobs import merge as job
        from airflow_provider_binlog.state import StateManager
        from airflow_provider_binlog.target import check_target

        self.keys = parse_keys(self.keys)
        window = self._load_window()
        refused = job.refused_tables(self.window_uri)
        changed = [
            table.name for table in window.tables if job.has_changes(table) and table.name not in refused
        ]
        pending = [
            name for name in changed if not window_merged(self.target_path, name, self.pipeline, window.seq)
        ]
        if not pending:
            self.log.info(
                "Window %s of %s: %s; Spark not started",
                window.seq,
                self.pipeline,
                "already merged into every table it changes"
                if changed
                else "no row changes, nothing to merge",
            )
            return self.verify(window)
        check_target(self.pipeline, StateManager(self.pipeline).load(), self.target_path, pending)
        self.log.info("Merging window %s of %s into %s", window.seq, self.pipeline, self.target_path)
        self.submit(
            context,
            self._application_args(),
            failure=f"the Spark merge of window {window.seq} of pipeline {self.pipeline} failed; the "
            f"target is unchanged for tables not yet committed, and a retry is safe",
        )
        return self.verify(window)

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

        from airflow_provider_binlog.lineage import manifest_lineage
        from airflow_provider_binlog.spark_jobs import merge as job

        if is_template(self.window_uri):
            return OperatorLineage()
        manifest = job.read_json(job.join_uri(self.window_uri, job.MANIFEST_NAME))
        if manifest is None:
            return OperatorLineage()
        refused = job.refused_tables(self.window_uri)
        return manifest_lineage(
            manifest,
            inputs="staging",
            outputs=["target"],
            tables=[t for t in manifest["tables"] if t not in refused],
            staging_uri=self.window_uri,
            target_path=self.target_path,
        )

    def _load_window(self) -> StagedWindow:
        from airflow_provider_binlog.spark_jobs import merge as job

        try:
            window = job.load_window(self.window_uri)
        except job.MergeJobError as err:
            raise StagingError(str(err)) from err
        try:
            if window.pipeline != self.pipeline:
                raise job.MergeJobError(
                    f"window {self.window_uri} belongs to pipeline {window.pipeline!r}, not {self.pipeline!r}"
                )
            job.resolve_keys(window, self.keys)
        except job.MergeJobError as err:
            raise BinlogConfigError(str(err)) from err
        return window

    def _application_args(self) -> list[str]:
        args = [
            "--window-uri",
            self.window_uri,
            "--target",
            self.target_path,
            "--pipeline",
            self.pipeline,
            "--buckets",
            str(self.buckets),
        ]
        for table, columns in sorted(self.keys.items()):
            args += ["--key", f"{table}={','.join(columns)}"]
        return args

    def verify(self, window: StagedWindow) -> dict[str, Any]:
        """Check that every table of the window holds it; return the per-table summary.

        A table whose merge the job refused for a schema change it cannot follow
        (:func:`~airflow_provider_binlog.spark_jobs.merge.refused_tables`) is reported, not checked: the
        window's commit records it as waiting for a re-snapshot.

        :param window: the staged window.
        :raises MergeError: if a table lacks the window's app transaction.
        """
        from deltalake import DeltaTable

        from airflow_provider_binlog.spark_jobs import merge as job

        tables: dict[str, dict[str, Any]] = {}
        refused = job.refused_tables(self.window_uri)
        for staged in window.tables:
            if not job.has_changes(staged):
                tables[staged.name] = {"rows_in_window": 0, "skipped": True}
                continue
            if staged.name in refused:
                self.log.warning(
                    "%s: window %s was not merged into it (the table waits for a re-snapshot): %s",
                    staged.name, window.seq, refused[staged.name]["message"],
                )  # fmt: skip
                tables[staged.name] = {
                    "rows_in_window": staged.rows,
                    "refused": refused[staged.name]["detail"],
                }
                continue
            uri = job.table_uri(self.target_path, staged.name)
            if not DeltaTable.is_deltatable(uri):
                raise MergeError(f"the merge job finished but there is no Delta table at {uri}")
            dt = DeltaTable(uri)
            high_water = dt.transaction_version(job.pipeline_app_id(self.pipeline))
            marker = dt.transaction_version(job.window_app_id(self.pipeline, window.seq))
            if high_water is None or high_water < window.seq or marker != window.seq:
                raise MergeError(
                    f"the merge job finished but {uri} does not record window {window.seq} "
                    f"(app transaction {job.pipeline_app_id(self.pipeline)}={high_water}, "
                    f"{job.window_app_id(self.pipeline, window.seq)}={marker})"
                )
            tables[staged.name] = {
                "rows_in_window": staged.rows,
                **_commit_numbers(dt, self.pipeline, window.seq),
                "delta_version": dt.version(),
            }
        # The job logged each table's numbers as it merged it; this line only confirms the Delta logs agree.
        self.log.info(
            "window %s is in the Delta log of %s",
            window.seq,
            ", ".join(
                f"{name} (version {numbers['delta_version']})"
                for name, numbers in tables.items()
                if "delta_version" in numbers  # tables without changes, or refused, have no merge commit
            )
            or "no table (nothing merged)",
        )
        return {"pipeline": self.pipeline, "window": window.seq, "tables": tables}


def _commit_numbers(dt: Any, pipeline: str, seq: int) -> dict[str, Any]:
    """Return the numbers the merge job recorded in the commit info of the window's commit."""
    for commit in dt.history(_HISTORY_LIMIT):
        if commit.get("binlog.pipeline") == pipeline and commit.get("binlog.window") == seq:
            return {
                "rows_written": commit.get("binlog.rows_written"),
                "buckets_touched": commit.get("binlog.buckets_touched"),
                "files_added": commit.get("binlog.files_added"),
                "files_removed": commit.get("binlog.files_removed"),
            }
    return {}
