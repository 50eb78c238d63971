"""Ask Airflow about another DAG run of the pipeline, such as the run holding a window or a snapshot.

Airflow 3 tasks reach the metadata database only through the Task SDK's execution API; the running task
instance (``context["ti"]``) can count and read the state of any DAG run (``RuntimeTaskInstance.get_dr_count``
and ``get_dagrun_state``, Airflow 3.1+, ``airflow/sdk/execution_time/task_runner.py``).

A ledger entry (:class:`~airflow_provider_binlog.pipeline.ledger.Held`: a window or a snapshot) whose holder run has
ended without merging it may be taken over by another run (:func:`has_ended`,
:meth:`Held.handed_to <airflow_provider_binlog.pipeline.ledger.Held.handed_to>`); one whose holder is active, or whose
holder's state Airflow cannot tell, stays with its holder.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow_provider_binlog.pipeline.ledger import Held

log = logging.getLogger(__name__)

HolderState = Callable[["Held"], str]
"""``entry -> the Airflow state of the DAG run holding it``: ``queued``, ``running``, ``success``, ``failed``,
``missing`` (no such run) or ``unknown`` (it cannot be asked): see :func:`run_state`."""
ACTIVE_RUN_STATES = frozenset({"queued", "running", "unknown"})
"""Holder states that keep an entry with its holder (``unknown`` too: never take over on a guess)."""


def never_ended(held: Held) -> str:
    """Return ``unknown`` for every holder: the default where no run may take anything over."""
    return "unknown"


def holder_states(context: Any) -> HolderState:
    """Return a :data:`HolderState` that asks Airflow, through the task's ``context``, about each holder."""
    return lambda held: run_state(context, held.dag_id, held.run_id)


def has_ended(holder: str) -> bool:
    """Return whether a holder run in Airflow state ``holder`` has ended, so its entry may be taken over."""
    return holder not in ACTIVE_RUN_STATES


def run_state(context: Any, dag_id: str | None, run_id: str) -> str:
    """Return the Airflow state of DAG run ``run_id`` of ``dag_id``.

    :param context: the asking task's context (its ``ti`` is the Task SDK's runtime task instance).
    :param dag_id: the DAG of the run; None (a ledger written before DAG ids were recorded) asks the
        asking task's own DAG.
    :param run_id: the run.
    :returns: the run's state (``queued``, ``running``, ``success``, ``failed``), ``missing`` when the
        DAG has no such run (deleted), or ``unknown`` when Airflow cannot be asked (no Task SDK task
        instance, an older Airflow, an API error): callers must then treat the run as active.
    """
    ti = context.get("ti")
    dag = dag_id or getattr(ti, "dag_id", None)
    count, state = getattr(ti, "get_dr_count", None), getattr(ti, "get_dagrun_state", None)
    if dag is None or count is None or state is None:
        return "unknown"
    try:
        if count(dag_id=dag, run_ids=[run_id]) == 0:
            return "missing"
        found = state(dag_id=dag, run_id=run_id)
    except Exception as err:  # any failure to ask means "cannot tell": the caller keeps the run active
        log.warning("cannot read the state of run %r of DAG %r: %s", run_id, dag, err)
        return "unknown"
    return str(getattr(found, "value", found))  # a DagRunState enum, or its text


class ContextRunLookup:
    """A :class:`~airflow_provider_binlog.monitoring.health.RunLookup` for code running inside a task (Task SDK).

    :param context: the asking task's context.
    """

    def __init__(self, context: Any) -> None:
        self.context = context

    def state(self, dag_id: str | None, run_id: str) -> str:
        """Return the run's Airflow state (see :func:`run_state`)."""
        return run_state(self.context, dag_id, run_id)

    def failure(self, dag_id: str | None, run_id: str) -> str | None:
        """Return ``failed tasks: a, b`` of the run (``RuntimeTaskInstance.get_task_states``), or None."""
        ti = self.context.get("ti")
        states = getattr(ti, "get_task_states", None)
        if states is None or dag_id is None:
            return None
        try:
            found = states(dag_id=dag_id, run_ids=[run_id])
        except Exception as err:  # cannot ask: the summary just knows less
            log.warning("cannot read the task states of run %r of DAG %r: %s", run_id, dag_id, err)
            return None
        return failed_tasks_text(dict(found.get(run_id) or {}))


def failed_tasks_text(task_states: dict[str, Any]) -> str | None:
    """Return ``failed tasks: extract`` from ``{task_id: state}``, or None when no task failed."""
    failed = sorted(
        task for task, state in task_states.items() if str(getattr(state, "value", state)) in _FAILED
    )
    return f"failed tasks: {', '.join(failed)}" if failed else None


_FAILED = frozenset({"failed", "upstream_failed"})
