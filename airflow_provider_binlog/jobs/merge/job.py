"""The merge application: merge every table of a staged window, and its command line.

Run it with ``spark-submit merge/job.py --window-uri <staging>/<pipeline>/window=<seq> --target <target>
--pipeline <name> [--key db.table=col1,col2 ...] [--target-file-bytes N] [--write-mode MODE] [--driver-max-rows N] [--storage-option KEY=VALUE ...]``. It
prints one JSON summary line to stdout and exits non-zero on failure
(:func:`~airflow_provider_binlog.jobs.application.run_application`). Over Spark Connect the operator runs
``application(argv).job`` on its session instead. How one table is merged:
:mod:`airflow_provider_binlog.jobs.merge.table`.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from airflow_provider_binlog.contract.deletion_vectors import DeletionVectorError
from airflow_provider_binlog.contract.keys import parse_key_overrides
from airflow_provider_binlog.contract.refusals import record_refusal
from airflow_provider_binlog.contract.remedies import resnapshot_remedy
from airflow_provider_binlog.contract.uris import StorageOptions
from airflow_provider_binlog.contract.write_modes import DRIVER_REWRITE_ROWS, WRITE_MODES, check_write_mode
from airflow_provider_binlog.jobs.application import (
    Application,
    MergeJobError,
    add_storage_option_argument,
    configure_session,
    job_storage_options,
    run_application,
)
from airflow_provider_binlog.jobs.merge.cascades import drop_cascades
from airflow_provider_binlog.jobs.merge.history import HistoryWriter
from airflow_provider_binlog.jobs.merge.history_schema import HistoryTypeChange
from airflow_provider_binlog.jobs.merge.plan import plan_window
from airflow_provider_binlog.jobs.merge.schema import UnfollowableSchemaChange
from airflow_provider_binlog.jobs.merge.table import merge_table
from airflow_provider_binlog.jobs.merge.window import load_window

if TYPE_CHECKING:
    from concurrent.futures import Future

    from pyspark.sql import SparkSession

    from airflow_provider_binlog.contract.write_modes import WriteMode
    from airflow_provider_binlog.jobs.merge.plan import TablePlan

log = logging.getLogger(__name__)


def merge_window(
    spark: SparkSession,
    window_uri: str,
    target: str,
    *,
    pipeline: str,
    key_overrides: Mapping[str, Sequence[str]] | None = None,
    target_file_bytes: int | None = None,
    storage_options: StorageOptions | None = None,
    write_mode: str = "auto",
    driver_max_rows: int = DRIVER_REWRITE_ROWS,
) -> dict[str, Any]:
    """Merge every table of a staged window into the target; return the summary.

    The window's plan is made first (:func:`~airflow_provider_binlog.jobs.merge.plan.plan_window`: staged
    schemas, truncate markers, the child changes of the manifest's ``foreign_keys``, keys checked for all
    tables before any table is touched), then applied table by table, parents first. Each table is committed
    atomically; tables already holding the window are skipped, so a failed run can simply be repeated. A table
    whose manifest entry asks for a change log gets the window's rows appended to it, exactly once likewise, in a
    thread beside the merges, every table's started before the first merge
    (:class:`~airflow_provider_binlog.jobs.merge.history.HistoryWriter`).

    :param spark: the session (its SQL settings are adjusted by :func:`configure_session`).
    :param window_uri: window directory ``<staging>/<pipeline>/window=<seq>``.
    :param target: target root; table ``db.t`` lives at ``<target>/db/t``.
    :param pipeline: pipeline name; must match the manifest.
    :param key_overrides: user-named keys for tables without a primary key, by ``db.table``.
    :param target_file_bytes: target data file size in bytes of tables created (or moved from hash buckets to
        key ranges) by this merge; None for the default (``docs/adr/0020-key-range-file-layout.md``).
    :param storage_options: storage options of the staging and target stores
        (:mod:`airflow_provider_binlog.contract.uris`).
    :param write_mode: ``copy_on_write``, ``merge_on_read`` (deletion vectors; local and S3 targets) or ``auto``
        (:func:`~airflow_provider_binlog.jobs.merge.merge_on_read.choose_mode`, ``docs/adr/0037-deletion-vectors.md``).
    :param driver_max_rows: a table whose window holds at most this many change rows is rewritten in the driver
        with Arrow when it can be, without a Spark job (:mod:`~airflow_provider_binlog.jobs.merge.driver_rewrite`);
        0 merges every table on Spark.
    :raises MergeJobError: if the window is incomplete, belongs to another pipeline or a table cannot
        be merged.
    """
    if target_file_bytes is not None and target_file_bytes < 1:
        raise MergeJobError(f"target_file_bytes must be >= 1, got {target_file_bytes}")
    if driver_max_rows < 0:
        raise MergeJobError(f"driver_max_rows must be >= 0, got {driver_max_rows}")
    mode = check_write_mode(write_mode)
    configure_session(spark)
    window = load_window(window_uri, storage_options)
    if window.pipeline != pipeline:
        raise MergeJobError(
            f"window {window_uri} belongs to pipeline {window.pipeline!r}, not {pipeline!r}: check the paths"
        )
    plan = plan_window(window, target, key_overrides=key_overrides, storage_options=storage_options)
    tables: dict[str, dict[str, Any]] = {}
    histories = HistoryWriter(spark, window.manifest, window.uri, target=target, pipeline=pipeline,
                                 target_file_bytes=target_file_bytes, storage_options=storage_options)  # fmt: skip
    with histories:
        pending = histories.start_all(plan.tables)
        for table in plan.tables:
            tables[table.name] = _merge_table_and_history(
                spark, pending.get(table.name), table, window_uri, target=target, pipeline=pipeline,
                seq=window.seq, target_file_bytes=target_file_bytes, storage_options=storage_options,
                write_mode=mode, driver_max_rows=driver_max_rows,
            )  # fmt: skip
    drop_cascades(target, pipeline, window.seq, storage_options)
    return {"pipeline": pipeline, "window": window.seq, "tables": tables}


def _merge_table_and_history(
    spark: SparkSession,
    pending: Future[dict[str, Any] | None] | None,
    table: TablePlan,
    window_uri: str,
    *,
    target: str,
    pipeline: str,
    seq: int,
    target_file_bytes: int | None,
    storage_options: StorageOptions | None,
    write_mode: WriteMode,
    driver_max_rows: int,
) -> dict[str, Any]:
    """Merge one table of the window, then wait for its history (``pending``); return the table's summary entry.

    A schema change the table (or its change log) cannot follow, and a lost deletion vector, refuse this table
    alone (:func:`~airflow_provider_binlog.contract.refusals.record_refusal`); other errors fail the job.
    """
    try:
        try:
            result = merge_table(
                spark,
                table,
                target=target,
                pipeline=pipeline,
                seq=seq,
                target_file_bytes=target_file_bytes,
                storage_options=storage_options,
                write_mode=write_mode,
                driver_max_rows=driver_max_rows,
            )
        finally:
            history = HistoryWriter.finish(pending)
    except UnfollowableSchemaChange as err:
        if table.staged.refresh and not isinstance(err, HistoryTypeChange):
            raise  # a snapshot replaces the schema (replaced_columns); this is a bug, not the source
        log.warning("%s: window %d is not merged into it: %s", table.name, seq, err)
        record_refusal(
            window_uri,
            table=err.table,
            column=err.column,
            detail=err.detail,
            window=seq,
            message=str(err),
            storage_options=storage_options,
        )
        return {"refused": str(err), "skipped": True}
    except DeletionVectorError as err:
        if table.staged.refresh:
            raise  # a re-snapshot reads the table without its vectors (table.py): this is another fault
        return _refuse_for_lost_vectors(window_uri, pipeline, table.name, seq, err, storage_options)
    return {**asdict(result), **(history or {})}


def _refuse_for_lost_vectors(
    window_uri: str,
    pipeline: str,
    table: str,
    seq: int,
    err: DeletionVectorError,
    storage_options: StorageOptions | None,
) -> dict[str, Any]:
    """Record that ``table`` was not merged because a deletion vector of its target cannot be read.

    Only that table waits (for a re-snapshot, whose merge reads the target without its vectors: exact, since a
    row is marked deleted only by the commit that writes a newer version of its key); the window's other
    tables merge. Returns the table's entry of the job's summary.
    """
    message = (
        f"pipeline {pipeline!r}: window {seq} is not merged into {table}: {err}. The table's other files are "
        f"intact; the other tables of the window are merged. The pipeline's next snapshot task re-snapshots "
        f"{table} by itself, reading its rows without the lost vector (ADR 0037); to do it sooner, "
        f"{resnapshot_remedy(pipeline, table)}. Never run delta-rs's full vacuum on these tables: it deletes "
        "deletion vector files in use (the maintenance DAG's vacuum keeps them)"
    )
    log.warning("%s", message)
    record_refusal(
        window_uri,
        table=table,
        column="",
        detail=str(err),
        window=seq,
        message=message,
        reason=f"the merge of window {seq} was refused: a deletion vector of the target cannot be read: {err}",
        storage_options=storage_options,
    )
    return {"refused": message, "skipped": True}


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parse the command line of the merge application.

    :param argv: arguments without the program name (default ``sys.argv[1:]``).
    """
    parser = argparse.ArgumentParser(description="Merge a staged binlog window into Delta Lake tables.")
    parser.add_argument(
        "--window-uri", required=True, help="staged window dir <staging>/<pipeline>/window=<seq>"
    )
    parser.add_argument("--target", required=True, help="target root; table db.t is at <target>/db/t")
    parser.add_argument("--pipeline", required=True, help="pipeline name (must match the manifest)")
    parser.add_argument(
        "--key", action="append", default=[], metavar="DB.TABLE=COL[,COL]", help="key of a table without PK"
    )
    parser.add_argument(
        "--target-file-bytes", type=int, default=None, help="target data file size of tables created now"
    )
    parser.add_argument(
        "--write-mode",
        choices=WRITE_MODES,
        default="auto",
        help="copy_on_write, merge_on_read (deletion vectors) or auto",
    )
    parser.add_argument(
        "--driver-max-rows",
        type=int,
        default=DRIVER_REWRITE_ROWS,
        help="a table's window of at most this many change rows is rewritten in the driver (0: always on Spark)",
    )
    add_storage_option_argument(parser)
    parser.add_argument("--log-level", default="INFO")
    return parser.parse_args(argv)


def application(argv: Sequence[str]) -> Application:
    """Bind the merge application to its command line (see :func:`parse_args`).

    Storage options come from ``--storage-option`` and the environment
    (:func:`~airflow_provider_binlog.jobs.application.job_storage_options`), read when the job runs.

    :param argv: arguments without the program name.
    """
    args = parse_args(argv)
    return Application(
        f"binlog-merge-{args.pipeline}",
        args.log_level,
        lambda spark: merge_window(
            spark,
            args.window_uri,
            args.target,
            pipeline=args.pipeline,
            key_overrides=parse_key_overrides(args.key),
            target_file_bytes=args.target_file_bytes,
            storage_options=job_storage_options(args.storage_option),
            write_mode=args.write_mode,
            driver_max_rows=args.driver_max_rows,
        ),
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run the merge application under spark-submit; print the JSON summary line, return the exit code.

    :param argv: command line arguments without the program name (default ``sys.argv[1:]``).
    """
    return run_application(application(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    # Run the package's copy of this module (spark-submit runs this file as __main__), which the helpers it
    # imports (cascades) share with it.
    from airflow_provider_binlog.jobs.merge import job as _job

    sys.exit(_job.main())
