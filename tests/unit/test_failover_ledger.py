"""The ledger rebased onto another server by GTID (pipeline/failover.py): what moves where, what is re-snapshotted.

The new server is a table of the GTID positions its binlog holds (``locate``); the real lookup on MariaDB servers
is ``tests/integration/test_gtid_resume.py``, and whole failovers are ``tests/system/test_failover.py``.
"""

from __future__ import annotations

import pytest

from airflow_provider_binlog.contract.positions import BinlogPosition
from airflow_provider_binlog.exceptions import LostTransactionsError, StateError
from airflow_provider_binlog.extract.plan import capture_start
from airflow_provider_binlog.extract.resume import check_lost, must_follow
from airflow_provider_binlog.pipeline.failover import plan_switch, switch_source, switch_summary
from airflow_provider_binlog.pipeline.ledger import (
    Checkpoint,
    PipelineState,
    ResnapshotNeeded,
    Snapshot,
    Window,
)
from airflow_provider_binlog.pipeline.windows import advance_checkpoint, cut_window, mark_window
from airflow_provider_binlog.snapshot.ledger import begin_snapshot
from airflow_provider_binlog.source.gtid import GtidSet
from airflow_provider_binlog.source.server import ServerState

OLD, NEW = "mariadb:1@a:3306", "mariadb:2@b:3306"


def at(pos: int, seq: int, file: str = "a.000003") -> BinlogPosition:
    """A boundary of the old server: the first ``seq`` transactions of domain 0 (server 1) behind it."""
    return BinlogPosition(file, pos, f"0-1-{seq}")


def new_server(*seqs: int) -> tuple[dict[int, BinlogPosition], object]:
    """Return the new server's boundaries by sequence number and its ``locate`` (holds ``seqs``, 100 bytes apart)."""
    where = {seq: BinlogPosition("b.000001", 1000 + 100 * seq, f"0-1-{seq}") for seq in seqs}

    def locate(gtids: GtidSet) -> BinlogPosition:
        seq = int(str(gtids).rsplit("-", 1)[1])
        if seq not in where:
            raise LostTransactionsError(f"lacks {gtids}", missing=f"0-1-{max(where)}..{seq}")
        return where[seq]

    return where, locate


def ledger() -> PipelineState:
    """Three merged head windows (to seq 30), one extracted (to 40), a merged snapshot and a schema barrier."""
    windows = [
        Window(seq=11, start=at(100, 10), end=at(200, 20), status="merged", cut_at="t", run_id="r1", rows=5),
        Window(seq=12, start=at(200, 20), end=at(300, 25), status="merged", cut_at="t", run_id="r2", rows=0),
        Window(seq=13, start=at(300, 25), end=at(400, 30), status="merged", cut_at="t", run_id="r3", rows=7),
        Window(seq=14, start=at(400, 30), end=at(500, 40), status="extracted", cut_at="t", run_id="r4", rows=3,
               manifest_uri="file:///s/p/window=14"),
    ]  # fmt: skip
    snapshot = Snapshot(
        seq=10,
        tables=["shop.a", "shop.b", "shop.c"],
        start=at(100, 10),
        status="merged",
        started_at="t",
        staging_uri="file:///s/p/snapshot=10",
        run_id="r0",
    )
    barrier = ResnapshotNeeded(
        table="shop.c",
        since=BinlogPosition("a.000003", 350),
        reason="ADD COLUMN with a default",
        statement="ALTER TABLE shop.c ...",
        window=13,
        detected_at="t",
    )
    state = PipelineState(
        pipeline="p",
        source_identity=OLD,
        flavor="mariadb",
        revision=3,
        checkpoint={"position": at(400, 30), "window": 13, "updated_at": "t"},
        windows=windows,
        snapshots=[snapshot],
        target_tables=["shop.a", "shop.b", "shop.c"],
        resnapshots_needed=[barrier],
    )
    assert state.inconsistencies() == []
    return state


TABLES_OF = {11: {"shop.a"}, 13: {"shop.b"}, 14: {"shop.a", "shop.b"}}


def follow(state: PipelineState, locate: object, head: BinlogPosition | None = None) -> PipelineState:
    plan = plan_switch(
        state,
        locate=locate,  # type: ignore[arg-type]
        window_tables=lambda w: TABLES_OF.get(w.seq),
        head=head or BinlogPosition("b.000009", 4, "0-2-99"),
    )
    return switch_source(state, plan, identity=NEW, run_id="r5")


def test_a_switch_without_loss_rebases_every_position_and_the_extracted_window_stays() -> None:
    where, locate = new_server(10, 20, 25, 30, 40, 41)
    switched = follow(ledger(), locate)
    assert switched.inconsistencies() == []
    assert switched.source_identity == NEW
    assert switched.checkpoint.position == BinlogPosition("b.000001", 4000, "0-1-30")
    assert [(w.seq, w.status) for w in switched.windows] == [
        (11, "merged"),
        (12, "merged"),
        (13, "merged"),
        (14, "extracted"),
    ]
    extracted = switched.window(14)
    assert (extracted.start, extracted.end) == (where[30], where[40])  # same GTID sets: its staging is reused
    assert extracted.end.gtid_set == "0-1-40"
    assert switched.resnapshots_needed[0].since == where[30]  # the barrier waits from the checkpoint on
    assert capture_start(switched, "shop.a") == where[30]  # merged snapshot: before anything still to read
    (switch,) = switched.switches
    assert (switch.from_identity, switch.to_identity, switch.lost) == (OLD, NEW, "")
    assert switch.old_checkpoint == at(400, 30)
    assert "lies at b.000001:4000 now" in switch_summary(switch)
    merged = mark_window(switched, 14, status="merged")
    assert advance_checkpoint(merged, merged.window(14)).position == where[40]


def test_the_next_window_on_the_new_server_starts_at_the_rebased_checkpoint() -> None:
    where, locate = new_server(10, 20, 25, 30, 40)
    state = mark_window(ledger(), 14, status="merged")
    state = state.model_copy(update={"checkpoint": advance_checkpoint(state, state.window(14))})
    switched = follow(state, locate)
    head = BinlogPosition("b.000002", 700, "0-1-55")
    after, window, reused = cut_window(switched, run_id="r6", head=head)
    assert not reused
    assert (window.start, window.end, window.seq) == (where[40], head, 15)
    assert after.inconsistencies() == []


def test_lost_transactions_resume_at_the_newest_boundary_the_new_server_holds_and_resnapshot_their_tables() -> (
    None
):
    where, locate = new_server(10, 20, 25)  # the replica never received 26..40
    switched = follow(ledger(), locate)
    assert switched.inconsistencies() == []
    assert switched.checkpoint.position == where[25]
    (switch,) = switched.switches
    assert switch.lost == "0-1-26..30"  # merged after the resume point (25)
    # window 13 (merged, after 25) changed shop.b; window 14 (extracted, dropped: it holds lost transactions)
    # shop.a and shop.b
    assert switch.resnapshot == ["shop.a", "shop.b"]
    assert switch.dropped_windows == [14]
    assert [w.seq for w in switched.windows] == [11, 12, 13]
    assert switched.seq_floor == 14  # never reused: its staging folder and Delta markers may exist
    pending = {r.table: r for r in switched.pending_resnapshots()}
    assert pending["shop.a"].cause == pending["shop.b"].cause == "lost_transactions"
    assert pending["shop.a"].since == where[25]
    assert "re-snapshots shop.a, shop.b" in switch_summary(switch)
    # the snapshot task of the next run re-reads them (and shop.c, waiting for its schema change) on the new server
    head = BinlogPosition("b.000002", 900, "0-2-31")
    after, snapshot = begin_snapshot(
        switched, run_id="r6", tables=["shop.a", "shop.b", "shop.c"], mode="missing", head=head,
        staging_uri=lambda seq: f"file:///s/p/snapshot={seq}",
    )  # fmt: skip
    assert snapshot is not None
    assert snapshot.seq == 15
    assert snapshot.tables == ["shop.a", "shop.b", "shop.c"]
    assert snapshot.reason == "lost_transactions"
    assert after.pending_resnapshots() == []
    window_after, window, _ = cut_window(after, run_id="r6", head=head)
    assert window.start == where[25]
    assert window.seq == 16
    assert window_after.inconsistencies() == []


def test_a_server_holding_no_boundary_of_the_ledger_resnapshots_every_table_from_its_head() -> None:
    _, locate = new_server(5)
    head = BinlogPosition("b.000009", 4, "0-2-99")
    switched = follow(ledger(), locate, head=head)
    assert switched.checkpoint.position == head
    assert switched.switches[0].resnapshot == ["shop.a", "shop.b", "shop.c"]
    assert switched.inconsistencies() == []


def test_a_window_whose_manifest_is_gone_counts_every_target_table() -> None:
    _, locate = new_server(10, 20, 25)
    plan = plan_switch(ledger(), locate=locate, window_tables=lambda w: None, head=at(4, 1))  # type: ignore[arg-type]
    assert plan.lost_tables == {"shop.a", "shop.b", "shop.c"}


def test_a_checkpoint_without_gtids_cannot_be_followed() -> None:
    state = ledger()
    state = state.model_copy(
        update={
            "checkpoint": state.checkpoint.model_copy(update={"position": BinlogPosition("a.000003", 400)})
        }
    )
    with pytest.raises(StateError, match="records no GTID set .* gtid_mode=ON"):
        plan_switch(state, locate=new_server(30)[1], window_tables=lambda w: None, head=at(4, 1))  # type: ignore[arg-type]


def test_interval_windows_follow_too() -> None:
    def interval(seq: int, start: BinlogPosition, end: BinlogPosition, status: str, hour: int) -> Window:
        return Window(
            seq=seq, start=start, end=end, status=status, cut_at="t", run_id=f"r{seq}", cut_by="interval", rows=1,
            data_interval_start=f"2026-01-01T{hour:02}:00:00+00:00",
            data_interval_end=f"2026-01-01T{hour + 1:02}:00:00+00:00",
        )  # fmt: skip

    state = ledger().model_copy(
        update={
            "windows": [
                interval(1000, at(100, 10), at(200, 20), "merged", 1),
                interval(2000, at(200, 20), at(300, 30), "merged", 2),  # the checkpoint
                interval(3000, at(300, 30), at(400, 35), "cut", 3),  # the gap
                interval(4000, at(400, 35), at(500, 40), "merged", 4),  # a backfill merged ahead of it
            ],
            "snapshots": [],
            "resnapshots_needed": [],
            "checkpoint": Checkpoint(position=at(300, 30), window=2000, updated_at="t"),
        }
    )
    assert state.inconsistencies() == []
    where, locate = new_server(10, 20, 30, 35, 40)
    switched = follow(state, locate)
    assert switched.inconsistencies() == []
    assert switched.checkpoint.position == where[30]
    gap, ahead = switched.window(3000), switched.window(4000)
    assert (gap.start, gap.end, ahead.start, ahead.end) == (where[30], where[35], where[35], where[40])
    merged = mark_window(switched, 3000, status="merged")
    assert advance_checkpoint(merged, merged.window(3000)).position == where[40]  # across the backfill


def test_a_rewritten_binlog_of_the_same_server_is_followed_and_a_reset_gtid_state_refused() -> None:
    state = ledger()  # checkpoint a.000003:400 gtid 0-1-30

    def server(head: BinlogPosition, identity: str = OLD) -> ServerState:
        return ServerState(
            flavor="mariadb", version="10.11", server_identity=identity, variables={}, head=head
        )

    ahead = server(at(900, 40))
    assert not must_follow(state, ahead)  # the binlog went on
    assert not must_follow(state, ahead, at_checkpoint="0-1-30")  # and the checkpoint is still its boundary
    assert must_follow(state, server(at(900, 40), identity=NEW))  # another server
    assert must_follow(state, ahead, at_checkpoint="")  # the checkpoint's offset is no boundary any more
    assert must_follow(state, ahead, at_checkpoint="0-1-12")  # it is another transaction's boundary
    assert must_follow(
        state, server(BinlogPosition("a.000001", 300, "0-1-40"))
    )  # RESET MASTER, state restored
    assert must_follow(state, server(BinlogPosition("renamed-bin.000007", 300, "0-1-40")))
    with pytest.raises(StateError, match="RESET MASTER reset it too"):
        must_follow(state, server(BinlogPosition("a.000001", 300, "0-1-3")))  # the GTID state was reset too


def test_lost_transactions_fail_the_run_when_asked_naming_the_tables_and_the_command() -> None:
    _, locate = new_server(10, 20, 25)
    state = ledger()
    plan = plan_switch(state, locate=locate, window_tables=lambda w: TABLES_OF.get(w.seq), head=at(4, 1))  # type: ignore[arg-type]
    check_lost(state, plan, "resnapshot")  # a head pipeline repairs them by re-snapshots
    with pytest.raises(LostTransactionsError) as failed:
        check_lost(state, plan, "fail")
    assert failed.value.missing == "0-1-26..30"
    for part in (
        "pipeline 'p'",
        "0-1-26..30",
        "shop.a, shop.b",
        "on_lost_transactions='fail'",
        '"mode": "requested"',
    ):
        assert part in str(failed.value), part
