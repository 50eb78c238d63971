"""Snapshots in the ledger: sequence numbers, which tables, resume, busy tables, purge recovery."""

from __future__ import annotations

import json

import pytest

from airflow_provider_binlog.contract.manifest import Manifest
from airflow_provider_binlog.contract.positions import BinlogPosition
from airflow_provider_binlog.exceptions import BinlogConfigError, PipelineBusyError
from airflow_provider_binlog.pipeline.ledger import PipelineState, ResnapshotNeeded
from airflow_provider_binlog.pipeline.state import StateManager
from airflow_provider_binlog.pipeline.windows import cut_window, mark_window
from airflow_provider_binlog.snapshot.ledger import begin_snapshot, finish_snapshot
from airflow_provider_binlog.snapshot.plan import Chunk, decode_value, encode_value

HEAD = BinlogPosition("b.000002", 500, "0-1-10")
TABLES = ["shop.a", "shop.b"]


class _Store:
    def get(self, key: str) -> str | None:
        return None

    def set(self, key: str, value: str) -> None:
        raise AssertionError("not written in these tests")


def fresh() -> PipelineState:
    return StateManager("p", store=_Store()).initial("id", "mariadb", HEAD)


def begin(
    state: PipelineState,
    run: str,
    mode: str = "missing",
    tables: list[str] | None = None,
    head=HEAD,
    holders: dict[str, str] | None = None,
):
    return begin_snapshot(
        state,
        run_id=run,
        tables=tables or TABLES,
        mode=mode,  # type: ignore[arg-type]
        head=head,
        staging_uri=lambda seq: f"file:///s/p/snapshot={seq}",
        new_pipeline=not state.windows and not state.snapshots,
        dag_id="binlog_cdc",
        holder_state=lambda snapshot: (holders or {}).get(snapshot.run_id, "running"),
    )


def test_a_new_pipeline_snapshots_every_table_and_its_windows_rank_above() -> None:
    state, snapshot = begin(fresh(), "r1")
    assert snapshot is not None
    assert snapshot.tables == TABLES
    assert snapshot.reason == "initial"
    assert snapshot.start == HEAD
    assert snapshot.seq == state.checkpoint.window + 1
    state, window, _ = cut_window(state, run_id="r1", head=BinlogPosition("b.000002", 900))
    assert window.seq == snapshot.seq + 1
    assert window.start == HEAD  # the first window starts where the snapshot started


def test_a_retry_gets_its_snapshot_back_and_covered_tables_are_skipped() -> None:
    state, snapshot = begin(fresh(), "r1")
    again_state, again = begin(state, "r1")
    assert again == snapshot
    assert again_state is state
    merged = finish_snapshot(state, snapshot.seq, rows=7, target="/t", written=TABLES)
    assert merged.snapshots[0].status == "merged"
    assert merged.snapshots[0].rows == 7
    unchanged, nothing = begin(merged, "r2")
    assert nothing is None
    assert unchanged is merged
    added_state, added = begin(merged, "r3", tables=[*TABLES, "shop.c"])
    assert added is not None
    assert added.tables == ["shop.c"]
    assert added.reason == "added"
    assert added.seq == snapshot.seq + 1


def test_a_window_cut_while_a_resnapshot_runs_ranks_above_it_and_old_windows_stay_below() -> None:
    state, snapshot = begin(fresh(), "r0")
    state = finish_snapshot(state, snapshot.seq, rows=0, target="/t", written=TABLES)
    state, old, _ = cut_window(state, run_id="w1", head=BinlogPosition("b.000002", 700))
    state, again = begin(
        state, "rs", mode="requested", tables=["shop.a"], head=BinlogPosition("b.000002", 800)
    )
    assert again is not None
    assert old.seq < again.seq
    state = mark_window(state, old.seq, status="merged")
    state, later, _ = cut_window(state, run_id="w2", head=BinlogPosition("b.000002", 900))
    assert later.seq > again.seq
    assert later.start == old.end  # windows keep tiling: the re-snapshot does not move them


def test_a_running_snapshot_turns_away_another_of_the_same_table() -> None:
    state, _ = begin(fresh(), "r1")
    with pytest.raises(PipelineBusyError, match="still reading shop.a"):
        begin(state, "r2", mode="requested", tables=["shop.a"])
    _, other = begin(state, "r3", mode="requested", tables=["shop.z"])
    assert other is not None


@pytest.mark.parametrize("holder", ["queued", "running", "unknown"])
def test_an_unmerged_snapshot_of_an_active_run_is_never_skipped(holder: str) -> None:
    state, first = begin(fresh(), "r1")
    assert first is not None
    with pytest.raises(PipelineBusyError, match="still reading shop.a, shop.b, and that run is still active"):
        begin(state, "r2", holders={"r1": holder})


@pytest.mark.parametrize("holder", ["failed", "success", "missing"])
def test_an_unmerged_snapshot_whose_run_ended_is_taken_over_with_its_seq_and_staging(holder: str) -> None:
    state, first = begin(fresh(), "r1")
    assert first is not None
    taken_state, taken = begin(state, "r2", holders={"r1": holder})
    assert taken is not None
    assert (taken.seq, taken.tables, taken.start, taken.staging_uri) == (
        first.seq, first.tables, first.start, first.staging_uri,
    )  # fmt: skip
    assert taken.run_id == "r2"
    assert taken.status == "running"
    assert [(h.from_run, h.to_run, h.holder_state) for h in taken.handovers] == [("r1", "r2", holder)]
    assert taken_state.snapshots == [taken]
    assert taken_state.next_seq == state.next_seq  # no new seq: the same snapshot goes on
    again_state, again = begin(taken_state, "r2", holders={"r1": holder})
    assert again == taken  # a retry of the run that took it over resumes it
    assert again_state is taken_state


def test_a_purged_snapshot_whose_run_ended_is_taken_over_even_when_nothing_is_missing() -> None:
    state, initial = begin(fresh(), "r0")
    assert initial is not None
    state = finish_snapshot(state, initial.seq, rows=0, target="/t", written=TABLES)
    state, recovery = begin(state, "rp", mode="purged", head=BinlogPosition("b.000009", 120, "0-1-99"))
    assert recovery is not None
    state, taken = begin(state, "r5", holders={"rp": "failed"})  # binlog_cdc's snapshot task, mode missing
    assert taken is not None
    assert (taken.seq, taken.reason, taken.run_id) == (recovery.seq, "purged", "r5")


def test_purge_recovery_moves_the_checkpoint_to_the_snapshot_start() -> None:
    state, snapshot = begin(fresh(), "r0")
    state = finish_snapshot(state, snapshot.seq, rows=0, target="/t", written=TABLES)
    state, stuck, _ = cut_window(state, run_id="w1", head=BinlogPosition("b.000003", 300))
    later = BinlogPosition("b.000009", 120, "0-1-99")
    state, recovery = begin(state, "rp", mode="purged", head=later)
    assert recovery is not None
    assert recovery.reason == "purged"
    assert state.windows == []
    assert state.checkpoint.position == later
    state, window, _ = cut_window(state, run_id="w2", head=BinlogPosition("b.000009", 400))
    assert window.start == later
    assert window.seq == recovery.seq + 1 > stuck.seq


def test_interval_pipelines_and_unknown_modes_are_refused() -> None:
    state, window, _ = cut_window(fresh(), run_id="w", head=HEAD)
    interval = state.model_copy(update={"windows": [window.model_copy(update={"cut_by": "interval"})]})
    with pytest.raises(BinlogConfigError, match="cuts windows by interval"):
        begin(interval, "r1")
    with pytest.raises(BinlogConfigError, match="snapshot mode"):
        begin(fresh(), "r1", mode="everything")


@pytest.mark.parametrize(
    "value",
    [7, "käse", None, b"\x00\xff", "2026-01-01", 1.5],
)
def test_chunk_bounds_round_trip_through_the_plan_file(value: object) -> None:
    import datetime as dt
    import decimal

    values = (value, decimal.Decimal("-12.50"), dt.datetime(2026, 1, 2, 3, 4, 5, 6), dt.date(2026, 2, 3))
    values += (dt.timedelta(hours=-5, microseconds=7),)
    chunk = Chunk(index=3, lower=values, upper=None)
    assert Chunk.from_json(json.loads(json.dumps(chunk.to_json()))) == chunk
    assert decode_value(encode_value(value)) == value


def test_a_finished_snapshot_records_only_the_tables_it_wrote_into_the_target() -> None:
    state, snapshot = begin(fresh(), "r1")
    assert snapshot is not None
    nothing = finish_snapshot(state, snapshot.seq, rows=0, target="/t", written=[])
    assert (nothing.target, nothing.target_tables) == ("/t", [])
    loaded = finish_snapshot(state, snapshot.seq, rows=9, target="/t", written=TABLES)
    assert loaded.target_tables == TABLES


def needed(table: str, pos: int, window: int = 1) -> ResnapshotNeeded:
    return ResnapshotNeeded(
        table=table,
        since=BinlogPosition(file="b.000002", pos=pos),
        reason="ADD COLUMN c with DEFAULT 'x' fills existing rows",
        statement="ALTER TABLE a ADD COLUMN c INT DEFAULT 1",
        window=window,
        detected_at="2026-01-01T00:00:00+00:00",
    )


def test_a_table_waiting_for_a_resnapshot_is_snapshotted_again_and_cleared_by_its_merge() -> None:
    state, first = begin(fresh(), "r1")
    assert first is not None
    state = finish_snapshot(state, first.seq, 10, "/t", written=TABLES)
    state = state.with_resnapshots_needed([needed("shop.a", 700)])
    assert state.with_resnapshots_needed([needed("shop.a", 700)]) is state  # recorded once
    assert [r.table for r in state.pending_resnapshots()] == ["shop.a"]
    state, again = begin(state, "r2", head=BinlogPosition("b.000002", 800))
    assert again is not None
    assert again.tables == ["shop.a"]
    assert again.reason == "schema_change"
    assert state.pending_resnapshots() == []  # the running snapshot covers it
    assert not state.inconsistencies()
    state = finish_snapshot(state, again.seq, 10, "/t", written=again.tables)
    assert state.resnapshots_needed == []
    _, none = begin(state, "r3")
    assert none is None


def test_a_snapshot_that_started_before_the_schema_change_does_not_clear_it() -> None:
    state, first = begin(fresh(), "r1")
    assert first is not None
    state = state.with_resnapshots_needed([needed("shop.a", 900), needed("shop.b", 100)])
    state = finish_snapshot(state, first.seq, 10, "/t", written=TABLES)  # started at 500
    assert [(r.table, r.since.pos) for r in state.resnapshots_needed] == [("shop.a", 900)]
    assert state.covering_snapshot(state.resnapshots_needed[0]) is None


def test_the_commit_records_what_the_manifest_found_and_the_merge_refused() -> None:
    from airflow_provider_binlog.operators.commit import resnapshots_of

    state, window, _ = cut_window(fresh(), run_id="r1", head=BinlogPosition("b.000002", 900))
    manifest = Manifest(
        pipeline="shop",
        window=window.seq,
        tables={},
        created_at="2026-01-01T00:00:00+00:00",
        resnapshots=[
            {
                "table": "shop.a",
                "since": {"file": "b.000002", "pos": 700},
                "gtid": "0-1-9",
                "reason": "RENAME COLUMN",
                "statement": "ALTER TABLE a RENAME COLUMN x TO y",
                "window": window.seq,
            }
        ],
    )
    refused = {
        "shop.b": {"table": "shop.b", "column": "qty", "detail": "changed type from int32 to string"},
        "shop.c": {"table": "shop.c", "column": "", "detail": "gone", "reason": "a deletion vector is lost"},
    }
    found = resnapshots_of(manifest, window, refused)
    assert [(r.table, r.since.pos, r.window) for r in found] == [
        ("shop.b", 500, window.seq),
        ("shop.c", 500, window.seq),
        ("shop.a", 700, window.seq),
    ]
    assert "qty" in found[0].reason
    assert found[1].reason == "a deletion vector is lost"  # a refusal not about a column says why itself
    recorded = state.with_resnapshots_needed(found)
    assert not recorded.inconsistencies()
    assert json.loads(recorded.model_dump_json())["resnapshots_needed"][2]["gtid"] == "0-1-9"


def test_a_snapshot_ordered_before_the_window_that_found_the_entry_does_not_cover_it() -> None:
    state, first = begin(fresh(), "r1")  # started at 500
    assert first is not None
    state = finish_snapshot(state, first.seq, 10, "/t", written=TABLES)
    state, window, _ = cut_window(state, run_id="r1", head=BinlogPosition("b.000002", 600))
    # The merge refused the window, which starts where the snapshot did: the snapshot read none of its changes.
    assert window.start.pos == 500
    refused = needed("shop.a", 500, window=window.seq)
    state = state.with_resnapshots_needed([refused])
    assert state.covering_snapshot(refused) is None
    assert [r.table for r in state.pending_resnapshots()] == ["shop.a"]
    state, again = begin(state, "r2", head=BinlogPosition("b.000002", 800))
    assert again is not None
    assert again.tables == ["shop.a"]
    assert finish_snapshot(state, again.seq, 10, "/t", written=again.tables).resnapshots_needed == []


def test_the_commit_records_the_dropped_columns_the_target_keeps_and_a_snapshot_clears_them() -> None:
    from airflow_provider_binlog.operators.commit import with_schema_changes

    state, window, _ = cut_window(fresh(), run_id="r1", head=BinlogPosition("b.000002", 900))
    drops = [
        {"table": "shop.a", "action": "follow", "reason": "DROP COLUMN x", "dropped_columns": ["x", "Y"]},
        {"table": "shop.b", "action": "follow", "reason": "DROP COLUMN z", "dropped_columns": ["z"]},
    ]
    manifest = Manifest(
        pipeline="p",
        window=window.seq,
        tables={},
        created_at="2026-01-01T00:00:00+00:00",
        ddl=[{"query": "ALTER TABLE ...", "file": "b.000002", "pos": 600, "effects": drops}],
    )
    refused = {"shop.b": {"table": "shop.b", "column": "q", "detail": "changed type"}}  # none of it merged
    state = with_schema_changes(state, manifest, window, refused)
    assert state.kept_columns == {"shop.a": ["x", "Y"]}
    assert state.with_kept_columns({"shop.a": ["y", "w"]}).kept_columns == {"shop.a": ["x", "Y", "w"]}
    assert state.with_kept_columns({"shop.a": ["X"]}) is state  # names are case-insensitive
    later = BinlogPosition("b.000002", 950)
    state, snapshot = begin(state, "r2", mode="requested", tables=["shop.a"], head=later)
    assert snapshot is not None
    state = finish_snapshot(state, snapshot.seq, 10, "/t", written=snapshot.tables)
    assert state.kept_columns == {}  # its merge replaced the table's schema with the source's
