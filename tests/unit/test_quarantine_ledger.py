"""Quarantined tables in the ledger: a failed re-snapshot, when a retry is due, healing, the report."""

from __future__ import annotations

from test_snapshot_ledger import HEAD, TABLES, begin, fresh

from airflow_provider_binlog.contract.positions import BinlogPosition
from airflow_provider_binlog.pipeline.ledger import PipelineState, ResnapshotNeeded
from airflow_provider_binlog.pipeline.quarantine import (
    probes,
    quarantine_report,
    quarantined,
    retry_due,
    with_retries_due,
)
from airflow_provider_binlog.snapshot.ledger import finish_snapshot

PROBE = {"key": ["id"], "chunk": {"index": 3, "lower": [300], "upper": [400]}}
REFUSAL = {
    "reason": "a value of column shop.b.v cannot be staged exactly",
    "error": "full message",
    "column": None,
    "probe": PROBE,
}


def snapshotted(state: PipelineState, run: str, refused: dict[str, dict[str, object]]) -> PipelineState:
    """Begin and finish a snapshot of run ``run`` whose read of the ``refused`` tables failed."""
    state, snapshot = begin(state, run)
    assert snapshot is not None
    merged = [t for t in snapshot.tables if t not in refused]
    return finish_snapshot(state, snapshot.seq, 10, "/target", written=merged, refused=refused)


def test_a_table_the_initial_snapshot_cannot_read_is_quarantined_and_not_retried_until_it_changes() -> None:
    state = snapshotted(fresh(), "r1", {"shop.b": REFUSAL})
    assert state.snapshots[0].tables == ["shop.a"]  # the snapshot does not claim the table
    assert state.target_tables == ["shop.a"]
    [entry] = quarantined(state).values()
    assert (entry.table, entry.since, entry.attempts, entry.retry_due) == ("shop.b", HEAD, 1, False)
    assert entry.error == "full message"
    assert not retry_due(entry)
    assert retry_due(entry, version="99.0")  # a provider upgrade may decode it
    assert begin(state, "r2")[1] is None  # its refused chunk was not read again: no hopeless re-read
    assert probes(state) == {"shop.b": PROBE}

    changed = with_retries_due(state, ["shop.b"])  # the probe of its refused chunk read
    assert retry_due(quarantined(changed)["shop.b"])
    assert probes(changed) == {}
    state, snapshot = begin(changed, "r3")
    assert snapshot is not None
    assert (snapshot.tables, snapshot.reason) == (["shop.b"], "quarantine")
    healed = finish_snapshot(state, snapshot.seq, 4, "/target", written=["shop.b"])
    assert quarantined(healed) == {}
    assert healed.target_tables == TABLES


def test_a_failed_resnapshot_turns_a_schema_change_wait_into_a_quarantine() -> None:
    state = snapshotted(fresh(), "r1", {})
    wait = ResnapshotNeeded(
        table="shop.a",
        since=BinlogPosition("b.000002", 900),
        reason="ADD COLUMN c with DEFAULT fills existing rows",
        statement="ALTER TABLE a ADD COLUMN c INT NOT NULL DEFAULT 1",
        window=state.next_seq,
        detected_at="2026-11-27T00:00:00+00:00",
    )
    state = state.model_copy(update={"resnapshots_needed": [wait]})
    state = snapshotted(state.model_copy(update={"seq_floor": state.next_seq}), "r2", {"shop.a": REFUSAL})
    [entry] = state.resnapshots_needed
    assert (entry.cause, entry.since, entry.attempts, entry.statement) == (
        "quarantine",
        wait.since,
        1,
        wait.statement,
    )
    assert entry.probe == PROBE
    assert not retry_due(with_retries_due(state, ["shop.b"]).resnapshots_needed[0])  # another table's probe
    assert retry_due(with_retries_due(state, ["shop.a"]).resnapshots_needed[0])


def test_the_report_names_table_column_coordinates_gtid_and_remedy() -> None:
    entry = ResnapshotNeeded(
        table="shop.b",
        since=BinlogPosition("b.000003", 344),
        at=BinlogPosition("b.000003", 963),
        gtid="0-1-16",
        column="shop.b.v (varchar(5), character set cp1250)",
        reason="a value of column shop.b.v cannot be staged exactly: UnicodeDecodeError ... 0x81",
        statement="",
        window=7,
        detected_at="2026-11-27T00:00:00+00:00",
        cause="quarantine",
    )
    report = quarantine_report("p", [entry])
    for part in ("shop.b", "b.000003:344", "b.000003:963", "0-1-16", "cp1250", "0x81", "binlog_resnapshot"):
        assert part in report
    assert report.startswith("pipeline 'p': 1 table(s) quarantined; the other tables flow as usual.")


def test_a_table_refusal_keeps_where_it_is_across_processes() -> None:
    """A parallel read's worker sends its error to the task process pickled: the quarantine needs its fields."""
    import pickle

    from airflow_provider_binlog.exceptions import UndecodableValueError

    sent = UndecodableValueError(
        "message", table="shop.b", column="shop.b.v", file="b.000003", pos=963, gtid="0-1-16", reason="0x81"
    )
    got = pickle.loads(pickle.dumps(sent))
    assert (type(got), str(got), got.table, got.column, got.file, got.pos, got.gtid, got.reason) == (
        UndecodableValueError,
        "message",
        "shop.b",
        "shop.b.v",
        "b.000003",
        963,
        "0-1-16",
        "0x81",
    )
