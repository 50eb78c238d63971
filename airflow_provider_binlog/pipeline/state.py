"""Pipeline state in one Airflow Variable: checkpoint, window ledger and a compare-and-set guard.

The Variable ``binlog_state__<pipeline>`` holds a versioned JSON document
(:class:`~airflow_provider_binlog.pipeline.ledger.PipelineState`).
Airflow's Variables have no compare-and-set, so every write holds the pipeline's :class:`StateLock`
(in production a named lock on the source server, :mod:`airflow_provider_binlog.pipeline.lock`, ADR 0012)
from the read to the write: writers of one pipeline take turns and none loses an update. Under the lock,
a write still checks that the stored ``revision`` is the one that was read, writes ``revision + 1`` with
a unique writer token and reads back to confirm the token, so a writer that bypasses the lock (a hand
edit) makes the update fail loudly with :class:`StateConflictError` instead of being lost silently.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol

from pydantic import ValidationError

from airflow_provider_binlog.contract.positions import BinlogPosition
from airflow_provider_binlog.exceptions import PipelineNameError, StateConflictError, StateError
from airflow_provider_binlog.pipeline.ledger import Checkpoint, PipelineState, location_problems, now_iso

CONFLICT_ATTEMPTS = 5
"""How often a read-modify-write of the state is tried when another writer wins the race."""
VARIABLE_DESCRIPTION = "airflow-provider-binlog pipeline state (do not edit by hand)"
"""The description every writer gives the state Variable (shown in the Airflow UI)."""
PIPELINE_NAME_MAX_LENGTH = 200
"""Longest pipeline name: it names a folder, a Variable key (``binlog_state__`` + name, 250 characters at most
in Airflow's ``variable`` table) and a Spark application."""
STATE_MAX_DEPTH = 16
"""Deepest nesting of objects and lists a state document may have (a valid one has 6 levels at most): a
deeper one is refused before it is validated, instead of exhausting Python's recursion limit."""


def check_pipeline_name(pipeline: str) -> str:
    """Return ``pipeline`` when it is a valid pipeline name: 1 to 200 letters, digits, ``_`` or ``-``.

    The name becomes a folder under the staging root (``<staging>/<pipeline>``), a Variable key and part of a
    lock name, so every task checks it before it creates anything (``..`` or ``/`` would leave the staging root).

    :raises PipelineNameError: naming the pipeline and the allowed characters (a ``ValueError`` too).
    """
    if (
        not isinstance(pipeline, str)
        or not 0 < len(pipeline) <= PIPELINE_NAME_MAX_LENGTH
        or not all(c.isalnum() or c in "_-" for c in pipeline)
    ):
        raise PipelineNameError(
            f"pipeline name {pipeline!r} must be non-empty letters, digits, '_' or '-' (at most "
            f"{PIPELINE_NAME_MAX_LENGTH} characters): it names the pipeline's staging folder and state Variable. Nothing was "
            f"created. Fix the pipeline argument of the task."
        )
    return pipeline


def variable_key(pipeline: str) -> str:
    """Return the Airflow Variable key holding the state of ``pipeline``."""
    return f"binlog_state__{pipeline}"


@dataclass(frozen=True)
class StateRoots:
    """The locations a task was configured with, which every location a state document names must lie within.

    :param staging: the pipeline's staging folder ``<staging>/<pipeline>`` as its ObjectStoragePath prints it
        (``str(root)``, with a connection id if any), or None when the task has none.
    :param target: the target root the task was given, or None.
    """

    staging: str | None = None
    target: str | None = None

    @property
    def bare_staging(self) -> str | None:
        """Return ``staging`` without its connection id, as snapshots record their folders."""
        from airflow_provider_binlog.pipeline.storage import split_connection

        return None if self.staging is None else split_connection(self.staging)[0]


class VariableStore(Protocol):
    """Where state documents live: Airflow Variables in production."""

    def get(self, key: str) -> str | None:
        """Return the stored text, or None when the key does not exist."""

    def set(self, key: str, value: str) -> None:
        """Store the text under ``key``."""


class AirflowVariableStore:
    """Airflow Variables through the Task SDK (``airflow.sdk.Variable``), usable inside tasks."""

    def get(self, key: str) -> str | None:
        """Return the Variable's text, or None when it does not exist."""
        from airflow.sdk import Variable

        value = Variable.get(key, default=None)
        return None if value is None else str(value)

    def set(self, key: str, value: str) -> None:
        """Write the Variable."""
        from airflow.sdk import Variable

        Variable.set(key, value, description=VARIABLE_DESCRIPTION)


class StateHistory(Protocol):
    """Where copies of the last revisions of a state document are kept (see :mod:`~airflow_provider_binlog.pipeline.history`)."""

    def keep(self, state: PipelineState) -> None:
        """Keep a copy of ``state`` as written (never raises: a lost copy must not fail the write)."""


class StateLock(Protocol):
    """A lock that serializes the state updates of one pipeline across threads, processes and hosts."""

    def held(self) -> AbstractContextManager[Callable[[], None]]:
        """Hold the lock for a ``with`` block; yield a check to call right before writing.

        The check raises :class:`StateConflictError` when the lock was lost meanwhile.
        """


class StateManager:
    """Read and write one pipeline's state; every write holds ``lock`` and checks the revision.

    :param pipeline: pipeline name (letters, digits, ``_`` and ``-``).
    :param store: Variable backend; Airflow Variables by default.
    :param history: where each written revision is also copied (the pipeline's staging), if anywhere.
    :param lock: the pipeline's state lock (:class:`~airflow_provider_binlog.pipeline.lock.SourceStateLock`
        in production); a manager without one can only read.
    :param roots: the staging and target roots of the task: a document naming a location outside them is
        refused on load (:func:`~airflow_provider_binlog.pipeline.ledger.location_problems`).
    :raises PipelineNameError: for an invalid pipeline name (:func:`check_pipeline_name`).
    """

    def __init__(
        self,
        pipeline: str,
        store: VariableStore | None = None,
        history: StateHistory | None = None,
        *,
        lock: StateLock | None = None,
        roots: StateRoots | None = None,
    ) -> None:
        self.pipeline = check_pipeline_name(pipeline)
        self.roots = roots or StateRoots()
        self.key = variable_key(pipeline)
        self.store = store or AirflowVariableStore()
        self.history = history
        self.lock = lock

    def load(self) -> PipelineState | None:
        """Return the stored state, or None when the pipeline has none yet.

        :raises StateError: when the Variable holds anything but a valid state document of this
            pipeline (not JSON, nested deeper than :data:`STATE_MAX_DEPTH`, a field of the wrong type or out
            of bounds, a location outside the task's roots); the message names the Variable, the fields and
            how to repair it, and says it was left untouched.
        """
        text = self.store.get(self.key)
        if text is None:
            return None
        try:
            document = json.loads(text)
            _check_depth(document)
            state = PipelineState.model_validate(document)
        except (ValidationError, ValueError, RecursionError) as err:
            raise StateError(
                f"the state Variable {self.key!r} of pipeline {self.pipeline!r} is corrupt or was edited by hand; it "
                f"was left untouched: {_describe(err)}. {self._repair_advice()}"
            ) from err
        if state.pipeline != self.pipeline:
            raise StateError(f"the state Variable {self.key!r} belongs to pipeline {state.pipeline!r}")
        self._check_consistent(
            state,
            "holds an inconsistent state document; it was left untouched",
            advice=f" Nothing was read or merged on it. Was it edited by hand? Restore an earlier revision: "
            f"`python -m airflow_provider_binlog.admin history --pipeline {self.pipeline}` lists the kept "
            f"ones (docs/operating.md, 'Pipeline state').",
        )
        outside = location_problems(
            state, staging=self.roots.staging, target=self.roots.target, bare_staging=self.roots.bare_staging
        )
        if outside:
            raise StateError(
                f"the state Variable {self.key!r} of pipeline {self.pipeline!r} (revision {state.revision}) names "
                f"locations outside the roots this task was given; it was left untouched and nothing was read, "
                f"written or deleted there: {'; '.join(outside)}. {self._repair_advice()}"
            )
        return state

    def _repair_advice(self) -> str:
        return (
            f"Restore a kept revision (`python -m airflow_provider_binlog.admin history --pipeline {self.pipeline}` "
            f"lists them; docs/operating.md, 'Pipeline state'), or delete the Variable to start the pipeline again "
            f"from the current head (the target then misses the changes in between: re-snapshot its tables)."
        )

    def _check_consistent(self, state: PipelineState, what: str, advice: str = "") -> None:
        """Raise :class:`StateError` naming every inconsistency of ``state`` (see ``inconsistencies``).

        :param what: what the document does, e.g. "holds an inconsistent state document".
        :param advice: what to do, appended to the message (the read side; a write refused is our bug).
        """
        problems = state.inconsistencies()
        if problems:
            raise StateError(
                f"the state Variable {self.key!r} of pipeline {self.pipeline!r} (revision {state.revision}) {what}: "
                f"{'; '.join(problems)}.{advice}"
            )

    def check_source(self, state: PipelineState | None, source_identity: str) -> None:
        """Refuse ``state`` when it was written for another server than ``source_identity``.

        A run follows a change of server before it cuts anything
        (:func:`~airflow_provider_binlog.extract.resume.follow_source`); a state that still names another server
        under the lock changed sources between that step and this write.

        :raises StateError: naming both servers.
        """
        if state is not None and state.source_identity != source_identity:
            raise StateError(
                f"the state of pipeline {self.pipeline!r} was written for source {state.source_identity!r} "
                f"but the connection now reaches {source_identity!r}, and it changed while this run started: is "
                f"the Airflow connection being re-pointed, or does its host name resolve to several servers? "
                f"Clear the task to retry once the connection reaches one server (docs/failover.md)."
            )

    def initial(self, source_identity: str, flavor: str, head: BinlogPosition) -> PipelineState:
        """Return a new state whose checkpoint is ``head`` (a new pipeline starts at the current head).

        Window sequence numbers of a new state start after the current Unix time in milliseconds: a
        pipeline re-created under the same name (its Variable deleted) then orders every change after
        anything an earlier incarnation merged into the same target (order keys start with the window
        seq), and never reuses an earlier window's staging folder or Delta app-transaction marker.
        An incarnation cannot outrun the clock: cutting, staging and merging a window takes far longer
        than a millisecond.
        """
        return PipelineState(
            pipeline=self.pipeline,
            source_identity=source_identity,
            flavor=flavor,  # type: ignore[arg-type]
            revision=0,
            checkpoint=Checkpoint(position=(head), window=int(time.time() * 1000), updated_at=now_iso()),
        )

    def save(self, new: PipelineState, *, expected_revision: int | None) -> PipelineState:
        """Write ``new`` if the stored revision still equals ``expected_revision`` (None: no state yet).

        :returns: the document as written (revision incremented, writer token set).
        :raises StateConflictError: when another run changed the state in between.
        :raises StateLockTimeoutError: when the lock stayed held by another writer (retryable).
        """
        with self._locked() as confirm:
            return self._save_held(new, expected_revision, confirm)

    def replace(self, new: PipelineState, *, revision: int) -> PipelineState:
        """Write ``new`` as ``revision`` whatever is stored now (an administrator's restore, pipeline paused).

        :raises StateError: when ``new`` is inconsistent.
        :raises StateConflictError: when another writer overwrote it right after.
        """
        with self._locked() as confirm:
            return self._write(new, revision, confirm)

    def _locked(self) -> AbstractContextManager[Callable[[], None]]:
        if self.lock is None:
            raise TypeError(f"this StateManager of pipeline {self.pipeline!r} has no lock: it may only read")
        return self.lock.held()

    def _save_held(
        self, new: PipelineState, expected_revision: int | None, confirm: Callable[[], None]
    ) -> PipelineState:
        self._check_revision(expected_revision)
        return self._write(new, (expected_revision or 0) + 1, confirm)

    def _write(self, new: PipelineState, revision: int, confirm: Callable[[], None]) -> PipelineState:
        """Write ``new`` as ``revision`` (the lock held; ``confirm`` checks it is still ours) and read back."""
        self._check_consistent(
            new, "would become inconsistent (a bug: please report it); nothing was written"
        )
        token = uuid.uuid4().hex
        written = new.pruned().model_copy(update={"revision": revision, "writer": token})
        confirm()
        self.store.set(self.key, written.model_dump_json())
        stored = self.load()
        if stored is None or stored.writer != token:
            raise self._conflict("another writer overwrote it right after our write")
        if self.history is not None:
            self.history.keep(written)
        return written

    def transact(self, change: Callable[[PipelineState | None], PipelineState]) -> PipelineState:
        """Read the state (None when there is none), apply ``change`` and write the result, holding the lock.

        The lock is held from the read to the write, so concurrent updates of the pipeline take turns and
        each applies ``change`` to the state the one before wrote. A lost compare-and-set
        (:class:`StateConflictError`: a writer bypassed the lock, or the lock was lost before the write)
        reads again and re-applies ``change``, up to :data:`CONFLICT_ATTEMPTS` times with a random pause.
        ``change`` returning the state it was given writes nothing.

        :returns: the state as written (or as read, when unchanged).
        :raises StateConflictError: when every attempt lost its race.
        :raises StateLockTimeoutError: when the lock stayed held by another writer (retryable).
        """
        from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_random

        for attempt in Retrying(
            retry=retry_if_exception_type(StateConflictError),
            stop=stop_after_attempt(CONFLICT_ATTEMPTS),
            wait=wait_random(0.05, 0.5),
            reraise=True,
        ):
            with attempt, self._locked() as confirm:
                current = self.load()
                new = change(current)
                if new is current:
                    return new
                return self._save_held(new, None if current is None else current.revision, confirm)
        raise AssertionError("unreachable: tenacity re-raises the last conflict")

    def update(self, change: Callable[[PipelineState], PipelineState]) -> PipelineState:
        """Apply ``change`` to the existing state (see :meth:`transact`).

        :raises StateError: when there is no state yet.
        :raises StateConflictError: when every attempt lost its race.
        """

        def existing(state: PipelineState | None) -> PipelineState:
            if state is None:
                raise StateError(f"pipeline {self.pipeline!r} has no state Variable {self.key!r} yet")
            return change(state)

        return self.transact(existing)

    def _check_revision(self, expected: int | None) -> None:
        current = self.load()
        current_revision = None if current is None else current.revision
        if current_revision != expected:
            raise self._conflict(f"its revision is {current_revision}, this run read {expected}")

    def _conflict(self, detail: str) -> StateConflictError:
        return StateConflictError(
            f"the state of pipeline {self.pipeline!r} changed under this run ({detail}): is another run of "
            f"the same pipeline active? Keep max_active_runs=1 and give each pipeline its own name; then "
            f"clear this run to retry it."
        )


def _check_depth(document: Any) -> None:
    """Raise ValueError when ``document`` nests objects and lists deeper than :data:`STATE_MAX_DEPTH`."""
    level: list[Any] = [document]
    for _ in range(STATE_MAX_DEPTH + 1):
        level = [
            child
            for value in level
            if isinstance(value, dict | list)
            for child in (value.values() if isinstance(value, dict) else value)
        ]
        if not level:
            return
    raise ValueError(f"the document nests objects or lists deeper than {STATE_MAX_DEPTH} levels")


def _describe(err: Exception) -> str:
    """Return what is wrong with a state document: each invalid field by its path, or the parse error."""
    if isinstance(err, RecursionError):
        return "the document nests objects or lists too deeply to be read"
    if isinstance(err, ValidationError):
        fields = [_field_error(e) for e in err.errors(include_url=False)[:10]]
        more = f" and {err.error_count() - 10} more" if err.error_count() > 10 else ""
        return f"invalid field{'s' if len(fields) > 1 else ''} {'; '.join(fields)}{more}"
    return str(err)


def _field_error(error: Any) -> str:
    """Return ``<field path>: <message> (found <value>)`` for one pydantic error."""
    path = ".".join(str(part) for part in error["loc"]) or "the document"
    if error["type"] == "missing":
        return f"{path}: {error['msg']}"
    found = repr(error.get("input"))
    return f"{path}: {error['msg']} (found {found if len(found) <= 60 else found[:57] + '...'})"
