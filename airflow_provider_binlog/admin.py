"""Show, validate and restore a pipeline's state: ``python -m airflow_provider_binlog.admin``.

Run it where ``airflow variables`` works (it reads and writes the state Variable through the metadata
database), with the pipeline's CDC DAG paused::

    python -m airflow_provider_binlog.admin show     --pipeline shop
    python -m airflow_provider_binlog.admin validate --pipeline shop
    python -m airflow_provider_binlog.admin history  --pipeline shop --staging /data/staging
    python -m airflow_provider_binlog.admin restore  --pipeline shop --staging /data/staging --revision 41
    python -m airflow_provider_binlog.admin set-target --pipeline shop --target /data/lake2
    python -m airflow_provider_binlog.admin hand-over --target /data/lake --table shop.customers --to shop2
    python -m airflow_provider_binlog.admin health   --pipeline shop [--json] [--tables 'shop.*']
    python -m airflow_provider_binlog.admin verify-history --target /data/lake --table shop.orders

``health`` prints the pipeline's health summary (:mod:`~airflow_provider_binlog.monitoring.health`): checkpoint,
open windows and snapshots with the runs holding them, last merged window, lag, headroom, last error and
the next step; it reads the source through ``--binlog-conn-id`` (default ``binlog_default``) and may run while
the DAG is active. Exit code 0 when nothing needs a person, 1 otherwise.

``restore`` puts a kept revision (:mod:`~airflow_provider_binlog.pipeline.history`) back as the newest
revision. Its ``seq_floor`` is raised above every sequence number the replaced revisions and the
staging used, so windows cut after the restore never reuse a staging folder or a Delta app-transaction
marker. Windows the restored revision does not list as merged are read again from its checkpoint:
their changes are re-applied with newer order keys, which leaves the target as the source had it
once the pipeline has caught up.

``restore`` and ``set-target`` hold the pipeline's state lock on the source of ``--binlog-conn-id``
(default ``binlog_default``; :mod:`~airflow_provider_binlog.pipeline.lock`) while they write.

``set-target`` records a new target root after the table folders were copied there (it checks that
each table the pipeline has merged is there). ``hand-over`` gives one target table to another pipeline
(:func:`~airflow_provider_binlog.target.hand_over`: its rows are removed, then the receiving pipeline
re-snapshots it).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError

from airflow_provider_binlog.pipeline.ledger import PipelineState, state_summary
from airflow_provider_binlog.pipeline.state import VARIABLE_DESCRIPTION, StateLock, StateManager, variable_key


class MetadataVariableStore:
    """Airflow Variables through the metadata database (``airflow.models.Variable``), for use outside tasks."""

    def get(self, key: str) -> str | None:
        """Return the Variable's text, or None when it does not exist."""
        from airflow.models.variable import Variable

        value = Variable.get(key, default_var=None)
        return None if value is None else str(value)

    def set(self, key: str, value: str) -> None:
        """Write the Variable."""
        from airflow.models.variable import Variable

        Variable.set(key, value, description=VARIABLE_DESCRIPTION)


class MetadataRunLookup:
    """A :class:`~airflow_provider_binlog.monitoring.health.RunLookup` over the metadata database (outside tasks)."""

    def state(self, dag_id: str | None, run_id: str) -> str:
        """Return the run's state, or ``missing`` when the DAG has no such run."""
        from airflow.models.dagrun import DagRun

        found = DagRun.find(dag_id=dag_id, run_id=run_id)
        return str(getattr(found[0].state, "value", found[0].state)) if found else "missing"

    def failure(self, dag_id: str | None, run_id: str) -> str | None:
        """Return ``failed tasks: ...`` of the run, or None when none failed."""
        from airflow.models.taskinstance import TaskInstance
        from airflow.utils.session import create_session
        from sqlalchemy import select

        from airflow_provider_binlog.pipeline.runs import failed_tasks_text

        query = select(TaskInstance.task_id, TaskInstance.state).where(TaskInstance.run_id == run_id)
        if dag_id is not None:
            query = query.where(TaskInstance.dag_id == dag_id)
        with create_session() as session:
            return failed_tasks_text({task: state for task, state in session.execute(query)})


def health(args: argparse.Namespace, store: Any) -> int:
    """Print the health summary of ``args.pipeline`` (text or JSON); return 0 when it needs nobody."""
    from airflow_provider_binlog.hooks.binlog import BinlogHook
    from airflow_provider_binlog.monitoring.health import pipeline_health
    from airflow_provider_binlog.pipeline.tables import parse_tables

    summary = pipeline_health(
        BinlogHook(args.binlog_conn_id, pipeline=args.pipeline),
        args.pipeline,
        MetadataRunLookup(),
        store=store,
        cdc_dag_id=args.dag_id,
        tables=parse_tables(args.tables) if args.tables else (),
    )
    print(summary.model_dump_json(indent=2) if args.json else summary.render())
    return 0 if summary.last_error is None and not summary.needs_attention else 1


def stored_document(pipeline: str, store: Any) -> tuple[PipelineState | None, str]:
    """Return ``(the parsed state or None, a verdict)`` of the stored Variable, without raising."""
    text = store.get(variable_key(pipeline))
    if text is None:
        return None, f"no state Variable {variable_key(pipeline)!r}"
    try:
        state = PipelineState.model_validate(json.loads(text))
    except (json.JSONDecodeError, ValidationError, ValueError) as err:
        return None, f"not a valid state document: {err}"
    problems = state.inconsistencies()
    return state, ("consistent" if not problems else "inconsistent: " + "; ".join(problems))


def restore(pipeline: str, revision: int, history: Any, store: Any, lock: StateLock) -> PipelineState:
    """Write kept revision ``revision`` back as the pipeline's newest state; return what was written.

    ``lock`` is the pipeline's state lock (the write waits for a running task's update to finish).

    :raises ValueError: when the kept copy is itself inconsistent or belongs to another pipeline.
    """
    chosen = history.read(revision)
    if chosen.pipeline != pipeline:
        raise ValueError(f"revision {revision} in {history.folder} belongs to pipeline {chosen.pipeline!r}")
    problems = chosen.inconsistencies()
    if problems:
        raise ValueError(f"kept revision {revision} is inconsistent too: {'; '.join(problems)}")
    current, _ = stored_document(pipeline, store)
    kept = [history.read(r) for r in history.revisions()]
    replaced = [s for s in (current, *kept) if s is not None]
    floor = max([history.highest_staged_seq(), *(s.next_seq - 1 for s in replaced)])
    newest = max([s.revision for s in replaced], default=0)
    manager = StateManager(pipeline, store=store, history=history, lock=lock)
    return manager.replace(chosen.model_copy(update={"seq_floor": floor}), revision=newest + 1)


def set_target(pipeline: str, target_path: str, store: Any, lock: StateLock) -> PipelineState:
    """Record ``target_path`` as the pipeline's target root; return the state written (holding ``lock``).

    :raises ValueError: when a table the pipeline has merged has no Delta table under the new root.
    """
    from deltalake import DeltaTable

    from airflow_provider_binlog.target import table_uri, target_root

    root = target_root(target_path)

    def change(state: PipelineState) -> PipelineState:
        missing = [t for t in state.target_tables if not DeltaTable.is_deltatable(table_uri(root, t))]
        if missing:
            raise ValueError(
                f"{', '.join(missing)} merged by {pipeline} have no Delta table under {root}; copy them first"
            )
        return state.model_copy(update={"target": root})

    return StateManager(pipeline, store=store, lock=lock).update(change)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit code (0 ok, 1 inconsistent or failed)."""
    parser = argparse.ArgumentParser(prog="python -m airflow_provider_binlog.admin", description=__doc__)
    parser.add_argument(
        "command",
        choices=[
            "show",
            "validate",
            "history",
            "restore",
            "set-target",
            "hand-over",
            "health",
            "verify-history",
        ],
    )
    parser.add_argument("--pipeline", help="the pipeline (every command but hand-over)")
    parser.add_argument(
        "--target", help="target root (set-target: the new one; hand-over: where the table is)"
    )
    parser.add_argument("--table", help="hand-over: the db.table to give away; verify-history: the db.table")
    parser.add_argument("--to", help="hand-over: the pipeline receiving the table")
    parser.add_argument("--staging", help="staging root (BINLOG_CDC_STAGING); needed by history and restore")
    parser.add_argument("--staging-conn-id", default=None)
    parser.add_argument("--revision", type=int, help="kept revision to restore")
    parser.add_argument(
        "--binlog-conn-id",
        default="binlog_default",
        help="the pipeline's source connection: health reads it, restore and set-target take the state lock there",
    )
    parser.add_argument(
        "--dag-id", default="binlog_cdc", help="health: the CDC DAG whose runs cut the windows"
    )
    parser.add_argument(
        "--tables", help="health: the table selection, for the snapshot estimate of the headroom"
    )
    parser.add_argument("--json", action="store_true", help="health: print JSON instead of text")
    args = parser.parse_args(argv)
    if args.command == "verify-history":
        if not (args.target and args.table):
            parser.error("verify-history needs --target and --table")
        from airflow_provider_binlog.contract.uris import storage_options_from_env
        from airflow_provider_binlog.history import verify_history

        report = verify_history(args.target, args.table, storage_options=storage_options_from_env())
        print(report)
        if report.first_bad_window is not None:
            print(f"first window that no longer matches: {report.first_bad_window}")
        return 0 if report.ok else 1
    if args.command == "hand-over":
        if not (args.target and args.table and args.to):
            parser.error("hand-over needs --target, --table and --to")
        from airflow_provider_binlog.target import hand_over

        writers = hand_over(args.target, args.table, args.to)
        print(
            f"{args.table} under {args.target} now belongs to {args.to} (written before by {', '.join(writers) or 'nobody'}) "
            f"and holds no rows: re-snapshot it in {args.to} (binlog_resnapshot, mode requested)"
        )
        return 0
    if not args.pipeline:
        parser.error(f"{args.command} needs --pipeline")
    store = MetadataVariableStore()
    if args.command == "health":
        return health(args, store)
    if args.command == "set-target":
        if not args.target:
            parser.error("set-target needs --target")
        try:
            written = set_target(args.pipeline, args.target, store, _lock(args))
        except ValueError as err:
            print(f"target not changed: {err}", file=sys.stderr)
            return 1
        print(f"pipeline {args.pipeline} now merges into {written.target}")
        return 0
    state, verdict = stored_document(args.pipeline, store)
    if args.command in ("show", "validate"):
        if args.command == "show" and state is not None:
            print(json.dumps(state_summary(state) | {"revision": state.revision}, indent=2))
        print(f"state of {args.pipeline}: {verdict}")
        return 0 if verdict == "consistent" else 1
    if not args.staging:
        parser.error(f"{args.command} needs --staging")
    from airflow_provider_binlog.pipeline.history import StagedStateHistory
    from airflow_provider_binlog.pipeline.staging import pipeline_root

    history = StagedStateHistory(pipeline_root(args.staging, args.pipeline, args.staging_conn_id))
    if args.command == "history":
        for revision in history.revisions():
            kept = history.read(revision)
            problems = kept.inconsistencies()
            position = kept.checkpoint.position
            print(
                f"revision {revision}: source {kept.source_identity}, checkpoint {position.file}:{position.pos} "
                f"(window {kept.checkpoint.window}), {len(kept.windows)} windows, "
                f"{'consistent' if not problems else 'INCONSISTENT'}"
            )
        print(f"stored now: {verdict}")
        return 0
    if args.revision is None:
        parser.error("restore needs --revision (see the history command)")
    try:
        written = restore(args.pipeline, args.revision, history, store, _lock(args))
    except (ValueError, FileNotFoundError) as err:
        print(f"nothing restored: {err}", file=sys.stderr)
        return 1
    print(f"restored revision {args.revision} of {args.pipeline} as revision {written.revision}")
    return 0


def _lock(args: argparse.Namespace) -> StateLock:
    """Return the state lock of ``args.pipeline`` on the source of ``args.binlog_conn_id``."""
    from airflow_provider_binlog.hooks.binlog import BinlogHook
    from airflow_provider_binlog.pipeline.lock import SourceStateLock

    return SourceStateLock(BinlogHook(args.binlog_conn_id, pipeline=args.pipeline))


if __name__ == "__main__":
    raise SystemExit(main())
