"""State updates hold a named lock on the source: concurrent writers lose no update, a killed holder frees it.

The state lives in a file here (:class:`FileStore`: get and set like Airflow Variables, no compare-and-set),
shared by threads and forked processes; the lock is the production one, ``GET_LOCK`` on the private server.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from airflow_provider_binlog.contract.positions import BinlogPosition
from airflow_provider_binlog.exceptions import StateConflictError, StateLockTimeoutError
from airflow_provider_binlog.hooks.binlog import BinlogHook
from airflow_provider_binlog.pipeline.ledger import PipelineState
from airflow_provider_binlog.pipeline.lock import SourceStateLock, legacy_lock_name, lock_name
from airflow_provider_binlog.pipeline.state import StateManager
from airflow_provider_binlog.testing.mariadb import LocalMariaDB

pytestmark = pytest.mark.integration

PIPELINE = "locked"
HEAD = BinlogPosition("mariadb-bin.000001", 4)
PROCESSES, THREADS, INCREMENTS = 5, 2, 5
SET_SECONDS = 0.005
"""How long a write takes to land (a Variable write is an API round trip): unguarded writers overlap."""


class FileStore:
    """A Variable store in one file, shared by processes: atomic get and set (landing after
    :data:`SET_SECONDS`), no compare-and-set."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def get(self, key: str) -> str | None:
        return self.path.read_text() if self.path.exists() else None

    def set(self, key: str, value: str) -> None:
        time.sleep(SET_SECONDS)
        temporary = self.path.with_name(f"{self.path.name}.{os.getpid()}.{threading.get_ident()}")
        temporary.write_text(value)
        os.replace(temporary, self.path)


class NoLock:
    """What the state had before the lock: writers guarded by the read-back check only."""

    @contextmanager
    def held(self) -> Iterator[Callable[[], None]]:
        yield lambda: None


def increment(state: PipelineState | None) -> PipelineState:
    assert state is not None
    return state.model_copy(update={"seq_floor": state.seq_floor + 1})


def _updates(path: Path, locked: bool, count: int) -> int:
    """Run ``count`` increments; return how many reported success."""
    lock = SourceStateLock(BinlogHook(pipeline=PIPELINE)) if locked else NoLock()
    manager = StateManager(PIPELINE, FileStore(path), lock=lock)
    done = 0
    for _ in range(count):
        try:
            manager.transact(increment)
            done += 1
        except StateConflictError:
            continue
    return done


def _threads(
    path: Path, locked: bool, queue: multiprocessing.Queue | None = None, threads: int = THREADS
) -> int:
    results: list[int] = []
    workers = [
        threading.Thread(target=lambda: results.append(_updates(path, locked, INCREMENTS)))
        for _ in range(threads)
    ]
    for thread in workers:
        thread.start()
    for thread in workers:
        thread.join()
    if queue is not None:
        queue.put(sum(results))
    return sum(results)


@pytest.fixture
def state_file(connections: LocalMariaDB, tmp_path: Path) -> Path:
    path = tmp_path / "state.json"
    manager = StateManager(PIPELINE, FileStore(path), lock=NoLock())
    manager.save(manager.initial("mariadb:1@h:3306", "mariadb", HEAD), expected_revision=None)
    return path


def _floor(path: Path) -> int:
    state = StateManager(PIPELINE, FileStore(path)).load()
    assert state is not None
    return state.seq_floor


def test_unguarded_writers_lose_updates(state_file: Path) -> None:
    """The control: the same updates without the lock (the test below can fail)."""
    succeeded = _threads(state_file, locked=False, threads=PROCESSES * THREADS)
    print(f"without the lock: {succeeded} updates reported done, {_floor(state_file)} kept")
    assert _floor(state_file) < succeeded


def test_fifty_updates_from_five_processes_and_their_threads_all_land(state_file: Path) -> None:
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    workers = [context.Process(target=_threads, args=(state_file, True, queue)) for _ in range(PROCESSES)]
    started = time.monotonic()
    for worker in workers:
        worker.start()
    done = sum(queue.get(timeout=120) for _ in workers)
    for worker in workers:
        worker.join(timeout=30)
        assert worker.exitcode == 0
    print(f"{done} locked updates in {time.monotonic() - started:.1f} s")
    assert done == PROCESSES * THREADS * INCREMENTS == 50
    assert _floor(state_file) == 50
    assert StateManager(PIPELINE, FileStore(state_file)).load().revision == 51  # type: ignore[union-attr]


def _hold_forever(ready: multiprocessing.Event) -> None:  # type: ignore[valid-type]
    with SourceStateLock(BinlogHook(pipeline=PIPELINE)).held():
        ready.set()  # type: ignore[attr-defined]
        time.sleep(600)


def test_the_lock_of_a_sigkilled_holder_is_free_at_once(connections: LocalMariaDB) -> None:
    context = multiprocessing.get_context("fork")
    ready = context.Event()
    holder = context.Process(target=_hold_forever, args=(ready,))
    holder.start()
    try:
        assert ready.wait(30)
        waiting = SourceStateLock(BinlogHook(pipeline=PIPELINE), wait_seconds=1)
        with pytest.raises(StateLockTimeoutError) as caught, waiting.held():
            pass
        assert f"pipeline {PIPELINE!r}: the state lock on the source" in str(caught.value)
        assert waiting.name not in str(caught.value)  # logs do not tell the name
        assert "root@" in str(caught.value)  # the holder's session, as SHOW PROCESSLIST shows it
        os.kill(holder.pid, signal.SIGKILL)  # type: ignore[arg-type]
        holder.join()
        killed_at = time.monotonic()
        with SourceStateLock(BinlogHook(pipeline=PIPELINE), wait_seconds=10).held():
            freed_after = time.monotonic() - killed_at
    finally:
        if holder.is_alive():
            holder.kill()
    print(f"the lock was taken {freed_after:.3f} s after its holder was SIGKILLed")
    assert holder.exitcode == -signal.SIGKILL
    assert freed_after < 1.0


def test_a_lock_lost_before_the_write_writes_nothing_and_is_tried_again(
    state_file: Path, connections: LocalMariaDB
) -> None:
    """The lock's session ends mid-update (the source killed it, e.g. after its idle lease): no write."""
    calls: list[int] = []

    def lose_lock_once(state: PipelineState | None) -> PipelineState:
        assert state is not None
        calls.append(state.revision)
        if len(calls) == 1:
            name = SourceStateLock(BinlogHook(pipeline=PIPELINE)).name
            (holder,) = connections.execute(f"SELECT IS_USED_LOCK('{name}')")[0]
            connections.execute(f"KILL {holder}")
        return state.model_copy(update={"seq_floor": state.seq_floor + 1})

    manager = StateManager(
        PIPELINE, FileStore(state_file), lock=SourceStateLock(BinlogHook(pipeline=PIPELINE))
    )
    written = manager.transact(lose_lock_once)
    assert calls == [1, 1]  # the first attempt wrote nothing: the second read the same revision
    assert (written.revision, written.seq_floor) == (2, 1)
    assert _floor(state_file) == 1


def test_lock_names_fit_the_64_characters_the_server_allows() -> None:
    names = {
        lock_name("shop", "s"),
        lock_name("p" * 200, "s"),
        lock_name("shop", "t"),
        legacy_lock_name("p" * 41),
    }
    assert len(names) == 4
    assert all(len(name) <= 64 for name in names)
    assert lock_name("shop", "s").startswith("airflow_provider_binlog.lock.")
    assert legacy_lock_name("shop") == "airflow_provider_binlog.state.shop"
