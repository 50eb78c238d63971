from __future__ import annotations

import dataclasses
import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

from airflow_provider_binlog.contract.positions import BinlogPosition
from airflow_provider_binlog.exceptions import PipelineBusyError, StateConflictError, StateError
from airflow_provider_binlog.pipeline.ledger import MERGED_WINDOWS_KEPT, Held, PipelineState
from airflow_provider_binlog.pipeline.state import StateManager, variable_key
from airflow_provider_binlog.pipeline.windows import cut_window, mark_window
from airflow_provider_binlog.testing.stores import DictStore

HEAD = BinlogPosition("mariadb-bin.000001", 800, "0-1-10")


class ThreadLock:
    """A state lock for writers in one process (production locks on the source: state_lock.py)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()

    @contextmanager
    def held(self) -> Iterator[Callable[[], None]]:
        with self._lock:
            yield lambda: None


class RacingStore(DictStore):
    """A store where another writer replaces the document right after each of our writes."""

    def set(self, key: str, value: str) -> None:
        document = json.loads(value)
        document["writer"] = "someone-else"
        self.data[key] = json.dumps(document)


@pytest.fixture
def manager() -> StateManager:
    return StateManager("shop", DictStore(), lock=ThreadLock())


def test_a_manager_without_a_lock_only_reads() -> None:
    reader = StateManager("shop", DictStore())
    with pytest.raises(TypeError, match="has no lock: it may only read"):
        reader.save(reader.initial("id", "mariadb", HEAD), expected_revision=None)
    assert reader.load() is None


def test_new_pipeline_has_no_state(manager: StateManager) -> None:
    assert manager.load() is None


def test_initial_state_round_trips(manager: StateManager) -> None:
    written = manager.save(manager.initial("mariadb:1@h:3306", "mariadb", HEAD), expected_revision=None)
    loaded = manager.load()
    assert loaded == written
    assert loaded.revision == 1
    assert loaded.checkpoint.position == HEAD


def test_stale_revision_is_refused(manager: StateManager) -> None:
    first = manager.save(manager.initial("id", "mariadb", HEAD), expected_revision=None)
    manager.save(first, expected_revision=1)
    with pytest.raises(StateConflictError, match="another run of the same pipeline"):
        manager.save(first, expected_revision=1)


def test_write_overtaken_by_another_writer_is_detected() -> None:
    racing = StateManager("shop", RacingStore(), lock=ThreadLock())
    with pytest.raises(StateConflictError, match="overwrote it"):
        racing.save(racing.initial("id", "mariadb", HEAD), expected_revision=None)


@pytest.mark.parametrize(
    "text",
    ["not json", "{}", '{"format_version": 2}', json.dumps({"format_version": 1, "pipeline": "shop"})],
)
def test_corrupt_state_is_a_clear_error_and_left_untouched(manager: StateManager, text: str) -> None:
    manager.store.set(variable_key("shop"), text)
    with pytest.raises(StateError, match="corrupt or was edited by hand; it was left untouched"):
        manager.load()
    assert manager.store.get(variable_key("shop")) == text


def test_a_write_for_another_server_is_refused(manager: StateManager) -> None:
    state = manager.save(manager.initial("mariadb:1@a:3306", "mariadb", HEAD), expected_revision=None)
    with pytest.raises(StateError, match="changed while this run started"):
        manager.check_source(state, "mariadb:1@b:3306")


def test_hand_edited_position_is_refused(manager: StateManager) -> None:
    manager.save(manager.initial("id", "mariadb", HEAD), expected_revision=None)
    document = json.loads(manager.store.get(variable_key("shop")))
    document["checkpoint"]["position"]["file"] = "not-a-binlog"
    manager.store.set(variable_key("shop"), json.dumps(document))
    with pytest.raises(StateError, match="not a binlog file name"):
        manager.load()


def test_windows_tile_the_binlog(manager: StateManager) -> None:
    state = manager.initial("id", "mariadb", HEAD)
    heads = [BinlogPosition("mariadb-bin.000001", 900), BinlogPosition("mariadb-bin.000003", 120)]
    for number, head in enumerate(heads, start=1):
        state, window, reused = cut_window(state, run_id=f"run{number}", head=head)
        assert not reused
        state = mark_window(state, window.seq, status="merged")
    first, second = state.windows
    assert (first.seq, second.seq) == (state.checkpoint.window + 1, state.checkpoint.window + 2)
    assert first.start == HEAD
    assert first.end == second.start
    assert second.end == heads[1]


def test_a_retry_reuses_its_window(manager: StateManager) -> None:
    state = manager.initial("id", "mariadb", HEAD)
    state, window, _ = cut_window(state, run_id="run1", head=BinlogPosition("mariadb-bin.000001", 900))
    again, same, reused = cut_window(state, run_id="run1", head=BinlogPosition("mariadb-bin.000002", 4))
    assert reused
    assert same == window
    assert again == state


def test_no_new_window_while_one_is_unmerged(manager: StateManager) -> None:
    state = manager.initial("id", "mariadb", HEAD)
    state, _, _ = cut_window(state, run_id="run1", head=BinlogPosition("mariadb-bin.000001", 900))
    with pytest.raises(PipelineBusyError, match=r"is held by run 'run1': its window \d+ is cut, not merged"):
        cut_window(state, run_id="run2", head=BinlogPosition("mariadb-bin.000001", 990))


@pytest.mark.parametrize("holder", ["running", "queued", "unknown"])
def test_a_window_whose_holder_is_active_or_untold_turns_the_next_run_away(
    manager: StateManager, holder: str
) -> None:
    state = manager.initial("id", "mariadb", HEAD)
    state, window, _ = cut_window(state, run_id="run1", head=BinlogPosition("mariadb-bin.000001", 900))
    asked: list[tuple[str | None, str]] = []

    def holder_state(held: Held) -> str:
        asked.append((held.dag_id, held.run_id))
        return holder

    told = (
        "cannot tell whether that run is still active"
        if holder == "unknown"
        else f"shows that run as {holder}"
    )
    with pytest.raises(
        PipelineBusyError,
        match=rf"held by run 'run1': its window \d+ is cut, not merged yet \(binlog range \(mariadb-bin.000001:800, mariadb-bin.000001:900\]\), and .*{told}",
    ):
        cut_window(
            state, run_id="run2", head=BinlogPosition("mariadb-bin.000001", 990), holder_state=holder_state
        )
    assert asked == [(None, "run1")]


@pytest.mark.parametrize("holder", ["failed", "success", "missing"])
def test_a_window_whose_holder_ended_is_adopted_with_its_bounds_seq_and_manifest(
    manager: StateManager, holder: str
) -> None:
    state = manager.initial("id", "mariadb", HEAD)
    state, window, _ = cut_window(
        state, run_id="run1", head=BinlogPosition("mariadb-bin.000001", 900), dag_id="binlog_cdc"
    )
    state = mark_window(state, window.seq, status="extracted", manifest_uri="file:///s/p/window=1", rows=5)
    adopted_state, adopted, reused = cut_window(
        state,
        run_id="run2",
        head=BinlogPosition("mariadb-bin.000002", 4),
        dag_id="binlog_cdc",
        holder_state=lambda held: holder if held.run_id == "run1" else "running",
    )
    assert reused
    assert adopted_state.windows == [adopted]
    assert (adopted.seq, adopted.start, adopted.end) == (window.seq, window.start, window.end)
    assert (adopted.status, adopted.manifest_uri, adopted.rows) == ("extracted", "file:///s/p/window=1", 5)
    assert adopted.run_id == "run2"
    assert [(h.from_run, h.to_run, h.holder_state) for h in adopted.handovers] == [("run1", "run2", holder)]
    assert adopted.staging_name == f"window={window.seq}.handover-1"
    assert window.staging_name == f"window={window.seq}"
    assert adopted_state.window_of_run("run2") == adopted
    assert adopted_state.window_of_run("run1") is None  # the dead run can no longer commit it
    # the adopter's retry finds it; a third run waits for the adopter, which is running
    assert cut_window(adopted_state, run_id="run2", head=HEAD)[1] == adopted
    with pytest.raises(PipelineBusyError, match="held by run 'run2'"):
        cut_window(
            adopted_state,
            run_id="run3",
            head=BinlogPosition("mariadb-bin.000002", 4),
            holder_state=lambda held: holder if held.run_id == "run1" else "running",
        )
    manager.save(adopted_state, expected_revision=None)  # a consistent ledger


def test_head_behind_window_start_is_refused(manager: StateManager) -> None:
    state = manager.initial("id", "mariadb", HEAD)
    with pytest.raises(StateError, match="binlog was reset"):
        cut_window(state, run_id="run1", head=BinlogPosition("mariadb-bin.000001", 100))


def test_ledger_keeps_unmerged_and_recent_merged_windows(manager: StateManager) -> None:
    state = manager.initial("id", "mariadb", HEAD)
    for number in range(MERGED_WINDOWS_KEPT + 5):
        state, window, _ = cut_window(
            state, run_id=f"r{number}", head=BinlogPosition(HEAD.file, 900 + number)
        )
        state = mark_window(state, window.seq, status="merged")
    state, pending, _ = cut_window(state, run_id="last", head=BinlogPosition(HEAD.file, 5000))
    pruned = state.pruned()
    assert len(pruned.windows) == MERGED_WINDOWS_KEPT + 1
    assert pruned.windows[0].seq == state.windows[5].seq
    assert pruned.windows[-1] == pending


def test_a_recreated_pipeline_orders_after_its_earlier_incarnation(manager: StateManager) -> None:
    earlier = manager.initial("id", "mariadb", HEAD)
    for number in range(3):
        time.sleep(0.002)  # a real window takes far longer than the millisecond the seq base counts in
        earlier, window, _ = cut_window(
            earlier, run_id=f"r{number}", head=BinlogPosition(HEAD.file, 900 + number)
        )
        earlier = mark_window(earlier, window.seq, status="merged")
    time.sleep(0.002)
    later = manager.initial("id", "mariadb", HEAD)
    _, first_window, _ = cut_window(later, run_id="again", head=BinlogPosition(HEAD.file, 990))
    assert first_window.seq > earlier.windows[-1].seq


def test_pipeline_names_are_checked() -> None:
    with pytest.raises(ValueError, match="must be non-empty letters"):
        StateManager("bad name/with slash", DictStore())


class OnceRacingStore(DictStore):
    """Lets a competing writer overwrite the state right after our first write (a lost compare-and-set)."""

    def __init__(self) -> None:
        super().__init__()
        self.competitor: Callable[[str], str] | None = None

    def set(self, key: str, value: str) -> None:
        super().set(key, value)
        if self.competitor is not None:
            compete, self.competitor = self.competitor, None
            super().set(key, compete(value))


def test_transact_retries_a_lost_race_on_fresh_state() -> None:
    def competitor(text: str) -> str:
        doc = json.loads(text)
        doc["writer"], doc["windows"] = "other", []  # their document, without our window
        return json.dumps(doc)

    store = OnceRacingStore()
    manager = StateManager("shop", store, lock=ThreadLock())
    manager.save(manager.initial("id", "mariadb", HEAD), expected_revision=None)
    store.competitor = competitor
    calls: list[int] = []

    def cut(state: PipelineState | None) -> PipelineState:
        assert state is not None
        calls.append(state.revision)
        return cut_window(state, run_id="ours", head=BinlogPosition(HEAD.file, 900 + len(calls)))[0]

    written = manager.transact(cut)
    assert len(calls) == 2  # the first attempt lost to the competitor and was re-applied
    assert written.windows[-1].run_id == "ours"


def _merged_pipeline(manager: StateManager, windows: int = 3) -> PipelineState:
    state = manager.initial("id", "mariadb", HEAD)
    for n in range(windows):
        end = BinlogPosition(HEAD.file, HEAD.pos + 100 * (n + 1), f"0-1-{11 + n}")
        state, window, _ = cut_window(state, run_id=f"r{n}", head=end)
        state = mark_window(state, window.seq, status="merged")
        checkpoint = state.checkpoint.model_copy(update={"position": window.end, "window": window.seq})
        state = state.model_copy(update={"checkpoint": checkpoint})
    return state


def test_a_hand_edited_checkpoint_is_refused_on_read_and_left_untouched(manager: StateManager) -> None:
    written = manager.save(_merged_pipeline(manager), expected_revision=None)
    document = json.loads(manager.store.get(variable_key("shop")))
    document["checkpoint"]["position"]["pos"] = 5400
    edited = json.dumps(document)
    manager.store.set(variable_key("shop"), edited)
    last = written.windows[-1]
    with pytest.raises(StateError) as raised:
        manager.load()
    message = str(raised.value)
    assert f"the checkpoint mariadb-bin.000001:5400 names window {last.seq} as the last merged one" in message
    assert f"ends at mariadb-bin.000001:{last.end.pos}" in message
    assert "admin history --pipeline shop" in message
    assert manager.store.get(variable_key("shop")) == edited


def test_a_ledger_that_no_longer_tiles_or_runs_ahead_of_the_checkpoint_is_inconsistent(
    manager: StateManager,
) -> None:
    state = _merged_pipeline(manager)
    first, second, third = state.windows
    gap = second.model_copy(update={"start": dataclasses.replace(second.start, pos=second.start.pos + 1)})
    assert any(
        "no longer tiles" in p
        for p in state.model_copy(update={"windows": [first, gap, third]}).inconsistencies()
    )
    behind = state.checkpoint.model_copy(update={"position": second.end, "window": second.seq})
    problems = state.model_copy(update={"checkpoint": behind}).inconsistencies()
    assert problems == [
        f"window {third.seq} is merged but the checkpoint mariadb-bin.000001:{second.end.pos} (window {second.seq}) is behind it"
    ]
    unmerged = second.model_copy(update={"status": "extracted"})
    assert any(
        "was cut" in p
        for p in state.model_copy(update={"windows": [first, unmerged, third]}).inconsistencies()
    )
    twice = state.model_copy(
        update={"windows": [first, second, third.model_copy(update={"seq": second.seq})]}
    )
    assert f"sequence number {second.seq} is used more than once" in twice.inconsistencies()
    assert state.inconsistencies() == []


def test_an_inconsistent_state_is_never_written(manager: StateManager) -> None:
    state = _merged_pipeline(manager)
    wrong = state.checkpoint.model_copy(update={"position": state.windows[0].end})
    with pytest.raises(StateError, match="would become inconsistent"):
        manager.save(state.model_copy(update={"checkpoint": wrong}), expected_revision=None)
    assert manager.store.get(variable_key("shop")) is None


def test_kept_revisions_restore_with_a_seq_floor_above_every_replaced_one(tmp_path) -> None:
    from airflow_provider_binlog.admin import restore
    from airflow_provider_binlog.pipeline.history import KEPT_REVISIONS, StagedStateHistory
    from airflow_provider_binlog.pipeline.staging import storage_path

    history = StagedStateHistory(storage_path(str(tmp_path)) / "shop")
    manager = StateManager("shop", DictStore(), history=history, lock=ThreadLock())
    state = manager.save(_merged_pipeline(manager, windows=1), expected_revision=None)
    good = state.revision
    for n in range(KEPT_REVISIONS + 3):
        end = BinlogPosition(HEAD.file, 5000 + n, f"0-1-{50 + n}")
        state, window, _ = cut_window(state, run_id=f"later{n}", head=end)
        state = manager.save(state, expected_revision=state.revision)
        state = manager.save(
            mark_window(state, window.seq, status="merged").model_copy(
                update={
                    "checkpoint": state.checkpoint.model_copy(
                        update={"position": window.end, "window": window.seq}
                    )
                }
            ),
            expected_revision=state.revision,
        )
    kept = history.revisions()
    assert len(kept) == KEPT_REVISIONS
    assert kept[-1] == state.revision
    assert good not in kept  # pruned: the oldest go first
    staged_beyond = history.pipeline_root / f"window={state.next_seq + 40}"  # a seq no revision lists
    staged_beyond.mkdir(parents=True)
    chosen = kept[0]
    chosen_windows = history.read(chosen).windows
    restored = restore("shop", chosen, history, manager.store, ThreadLock())
    assert restored.revision == state.revision + 1
    assert restored.windows == chosen_windows
    assert restored.next_seq == state.next_seq + 41  # above the ledger it replaced and the staged folders
    assert manager.load() == restored
    assert history.revisions()[-1] == restored.revision
