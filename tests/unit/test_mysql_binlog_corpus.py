"""Our event reader on real MySQL 8.0/9.x binlog files: one case per file of the shared corpus.

The files are in ``../shared/data/mysql_binlogs`` next to the project (reference data, never copied here;
its README lists each file's origin, event counts, GTIDs and the values its source project asserts). The
tests skip when the folder is absent. Expected values are the README's, not our reader's output.
"""

from __future__ import annotations

import datetime as dt
import decimal
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from airflow_provider_binlog.contract.positions import BinlogPosition
from airflow_provider_binlog.extract.decoder import unsupported_reason
from airflow_provider_binlog.extract.errors import UndecodableEventError
from airflow_provider_binlog.extract.events.feeds import read_binlog_file
from airflow_provider_binlog.extract.events.stream import Event, EventReader, RowsEvent
from airflow_provider_binlog.extract.reader import ReaderState, TableTarget, WindowReader

DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "mysql_binlogs"
pytestmark = pytest.mark.skipif(
    not DATA.exists(), reason=f"{DATA} is absent (shared reference data, not part of the repository)"
)

DIGITS = "0123456789"


@dataclass
class Case:
    """One corpus file and what its README says about it."""

    path: str
    version: str
    outer: dict[str, int]
    inner: dict[str, int] = field(default_factory=dict)
    gtids: list[str | None] = field(default_factory=list)
    previous: str = ""
    check: Callable[[list[Event]], None] | None = None


def as_left(path: Path) -> Iterator[Event]:
    """Return the raw events of a corpus file, read as its server left it.

    apecloud's ``mysql-bin.000057`` ends after a transaction with no ROTATE or STOP and the in-use flag cleared
    (what MySQL's crash recovery leaves), which the file feed takes for a file cut short unless told it is the
    file the server stopped writing (``active_file``; the rule's own tests are in ``test_crafted_events.py``).
    """
    return read_binlog_file(path, follow_rotations=False, active_file=path.name)


def rows_of(events: list[Event]) -> list[tuple[str, str, Any]]:
    """Return ``(kind, db.table, rows)`` of every rows event, rows decoded by the reader."""
    return [
        (e.data.kind, e.data.table_map.name, e.data.rows()) for e in events if isinstance(e.data, RowsEvent)
    ]


def check_enum_string_set(events: list[Event]) -> None:
    (write, update, delete) = rows_of(events)
    assert write[0:2] == ("write", "mysql.t")
    row = write[2][0]
    # The README's "300-char" digit strings hold 298 digits (three runs of 0..8 are one digit short);
    # the columns after them decode exactly, so the 2-byte length prefix of VARCHAR(300) is read right.
    assert row[0] == DIGITS * 10
    assert row[2:] == ["var1", "one,three", DIGITS]
    assert len(row[1]) == 298
    assert set(row[1]) == set(DIGITS)
    before, after = update[2][0]
    assert before == row
    assert after[:4] == ["field1", "field_2", "variant2", "two,four"]
    assert after[4] == row[1]
    assert delete[2] == [after]
    table_map = next(e.data for e in events if e.name == "TABLE_MAP")
    assert [c.name for c in table_map.columns] == ["f1", "f2", "f3", "f4", "f5"]
    assert table_map.columns[2].enum_values == ["", "var1", "variant2", "foo"]
    assert table_map.columns[3].set_values == ["one", "two", "three", "four"]


def check_invisible_columns(events: list[Event]) -> None:
    (first, second, update) = rows_of(events)
    assert first[2] == [[1, 2, -3, "4", b"\x05", decimal.Decimal(6000000000)]]
    assert second[2] == [[None, None, -33, "44", b"\x55", None]]
    assert update[2] == [([None, None, -33, "44", b"\x55", None], [111, 222, -333, "444", b"\x55", None])]
    table_map = next(e.data for e in events if e.name == "TABLE_MAP")
    unsigned = {c.name: c.unsigned for c in table_map.columns}
    assert unsigned["f6"] is True
    assert unsigned["f3"] is False
    assert not all(c.visible for c in table_map.columns)  # the table has INVISIBLE columns


def check_bit(events: list[Event]) -> None:
    assert rows_of(events) == [("write", "mysql.foo", [[0b100, "foo", 0b00100000]])]


def check_json(events: list[Event]) -> None:
    rows = [e for e in events if isinstance(e.data, RowsEvent)]
    first = rows[0].data.rows()[0]
    assert first[1] == '{"age": 24, "data": "xxxxxxxxxx", "name": "Joe"}'  # keys are text, not bytes
    update = next(e for e in rows if e.data.kind == "update" and not e.data.partial)
    pairs = update.data.rows()
    assert [after[3] - before[3] for before, after in pairs] == [1] * len(pairs)  # age + 1
    partial = next(e for e in rows if e.data.partial)
    with pytest.raises(UndecodableEventError, match="binlog_row_value_options='' and binlog_row_image=FULL"):
        partial.data.rows()


def check_minimal_metadata(events: list[Event]) -> None:
    rows = next(e.data for e in events if isinstance(e.data, RowsEvent))
    table_map = rows.table_map
    assert table_map.name == "noria.t1"
    assert len(table_map.columns) == 5
    assert table_map.columns[4].unsigned
    assert not table_map.columns[0].unsigned
    assert table_map.columns[2].mysql_charset == "utf8mb4"  # collation 255, utf8mb4_0900_ai_ci
    values = dict(zip([c.name for c in rows.present_columns()], rows.image_rows()[0], strict=True))
    assert values["UNKNOWN_COL4"] == 3230202323  # -1064764973 when read signed


def check_time(events: list[Event]) -> None:
    assert rows_of(events)[0][2] == [[-dt.timedelta(hours=507, minutes=48, seconds=27)]]


def check_compression(events: list[Event]) -> None:
    payload = next(e.data for e in events if e.name == "TRANSACTION_PAYLOAD")
    assert payload.compression == "zstd"
    assert (payload.compressed_size, payload.uncompressed_size) == (124, 179)
    assert rows_of(events) == [("write", "test.tb1", [[1]])]


def check_tagged(events: list[Event]) -> None:
    gtid = next(e.data for e in events if e.name == "GTID_TAGGED")
    assert gtid.tag == "mytag"
    assert gtid.immediate_commit_us > 1_700_000_000_000_000
    assert rows_of(events) == [("write", "test.orders", [[3, 100, decimal.Decimal("250.00")]])]


def check_json_opaque(events: list[Event]) -> None:
    assert [rows[0][0] for _, _, rows in rows_of(events)] == [
        '{"a": "base64:type15:VQ=="}',
        '{"b": "2012-03-18"}',
        '{"c": "2012-03-18 11:30:45.000000"}',
        '{"c": "87:31:46.654321"}',
        '{"d": 123.456}',  # an opaque DECIMAL is a JSON number, as MySQL's JSON_EXTRACT prints it
        '{"e": 9.00}',
        '{"e": [0, 1, true, false]}',
        '{"e": null}',
    ]


def check_vector(events: list[Event]) -> None:
    foo = [rows for kind, table, rows in rows_of(events) if table == "dtb.foo"][0]
    assert [row[0] for row in foo] == [1, 2]
    assert foo[0][1] == pytest.approx([1.1, 2.2, 3.3], rel=1e-6)
    assert foo[1][1] == [1.0, -1.0, 0.0]
    dims = {t.name: [c.dimensions for c in t.columns if c.dimensions] for t in _table_maps(events)}
    assert dims == {"dtb.foo": [3], "dtb.bar": [2, 4]}
    assert all(t.primary_key == ["id"] for t in _table_maps(events))  # SIMPLE_PRIMARY_KEY


def check_hidden_gcol(events: list[Event]) -> None:
    rows = next(e.data for e in events if isinstance(e.data, RowsEvent))
    assert len(rows.image_rows()) == 1
    with pytest.raises(UndecodableEventError, match="binlog_row_image=FULL"):
        rows.rows()  # the hidden column of the functional index is not in the image


def check_apecloud(events: list[Event]) -> None:
    assert sum(1 for e in events if e.in_payload and e.name == "ROWS_QUERY") == 3
    table_maps = {t.name: t for t in _table_maps(events)}
    assert len(table_maps["a.test_table_3"].columns) == 20


def check_osheroff(events: list[Event]) -> None:
    ((kind, _, pairs),) = rows_of(events)
    before, after = pairs[0]
    assert kind == "update"
    assert len(after) == 11
    assert before[0] == after[0] == 1


def _table_maps(events: list[Event]) -> list[Any]:
    return [e.data for e in events if e.name == "TABLE_MAP"]


RMC = "rust_mysql_common/"
ANON = [None]
CASES = [
    Case(
        RMC + "mysql-enum-string-set.000001",
        "8.0.28",
        {"FORMAT_DESCRIPTION": 1, "PREVIOUS_GTIDS": 1, "GTID": 5, "QUERY": 5, "TABLE_MAP": 3, "WRITE_ROWS_V2": 1,
         "UPDATE_ROWS_V2": 1, "DELETE_ROWS_V2": 1, "XID": 3},
        gtids=[f"93e95066-a2f4-11ec-9b69-9657f0ae95e2:{n}" for n in range(1, 6)],
        check=check_enum_string_set,
    ),
    Case(
        RMC + "binlog-invisible-columns.000001",
        "8.0.26",
        {"FORMAT_DESCRIPTION": 1, "PREVIOUS_GTIDS": 1, "GTID": 5, "QUERY": 5, "TABLE_MAP": 3, "WRITE_ROWS_V2": 2,
         "UPDATE_ROWS_V2": 1, "XID": 3, "STOP": 1},
        check=check_invisible_columns,
    ),
    Case(
        RMC + "mysql_type_bit.000001",
        "8.0.26",
        {"FORMAT_DESCRIPTION": 1, "PREVIOUS_GTIDS": 1, "GTID": 3, "QUERY": 3, "TABLE_MAP": 1, "WRITE_ROWS_V2": 1,
         "XID": 1},
        check=check_bit,
    ),
    Case(
        RMC + "json.binlog.000001",
        "8.0.22",
        {"FORMAT_DESCRIPTION": 1, "PREVIOUS_GTIDS": 1, "ANONYMOUS_GTID": 8, "QUERY": 8, "TABLE_MAP": 6,
         "WRITE_ROWS_V2": 4, "UPDATE_ROWS_V2": 1, "PARTIAL_UPDATE_ROWS": 1, "XID": 6},
        gtids=ANON * 8,
        check=check_json,
    ),
    Case(
        RMC + "minimal_row_metadata.000001",
        "8.0.40",
        {"FORMAT_DESCRIPTION": 1, "PREVIOUS_GTIDS": 1, "ANONYMOUS_GTID": 1, "QUERY": 1, "TABLE_MAP": 1,
         "WRITE_ROWS_V2": 1, "XID": 1, "ROTATE": 1},
        gtids=ANON,
        check=check_minimal_metadata,
    ),
    Case(
        RMC + "time_issue.000001",
        "8.0.40",
        {"FORMAT_DESCRIPTION": 1, "PREVIOUS_GTIDS": 1, "ANONYMOUS_GTID": 1, "QUERY": 1, "TABLE_MAP": 1,
         "WRITE_ROWS_V2": 1, "XID": 1, "ROTATE": 1},
        gtids=ANON,
        check=check_time,
    ),
    Case(
        RMC + "transaction_compression.000001",
        "8.0.32",
        {"FORMAT_DESCRIPTION": 1, "PREVIOUS_GTIDS": 1, "ANONYMOUS_GTID": 1, "TRANSACTION_PAYLOAD": 1, "ROTATE": 1},
        {"QUERY": 1, "TABLE_MAP": 1, "WRITE_ROWS_V2": 1, "XID": 1},
        gtids=ANON,
        previous="357df524-4139-11ee-9979-b033ee13919e:1",
        check=check_compression,
    ),
    Case(
        RMC + "binlog_transaction_previous_GTID_no_tag.000001",
        "8.0.40",
        {"FORMAT_DESCRIPTION": 1, "PREVIOUS_GTIDS": 1, "ROTATE": 1},
        previous="b9b88c66-0755-11f1-9899-4a9da94c4d71:1-2",
    ),
    Case(
        RMC + "binlog_transaction_with_GTID_TAG.000001",
        "9.6.0",
        {"FORMAT_DESCRIPTION": 1, "PREVIOUS_GTIDS": 1, "GTID_TAGGED": 1, "QUERY": 1, "TABLE_MAP": 1,
         "WRITE_ROWS_V2": 1, "XID": 1, "ROTATE": 1},
        gtids=["55778904-0299-11f1-b1b8-4ef0c4956feb:mytag:3"],
        previous="55778904-0299-11f1-b1b8-4ef0c4956feb:1-13,55778904-0299-11f1-b1b8-4ef0c4956feb:mytag:1-2",
        check=check_tagged,
    ),
    Case(
        RMC + "json-opaque.binlog",
        "9.0.1",
        {"FORMAT_DESCRIPTION": 1, "PREVIOUS_GTIDS": 1, "ANONYMOUS_GTID": 3, "QUERY": 3, "TABLE_MAP": 8,
         "WRITE_ROWS_V2": 8, "XID": 1},
        gtids=ANON * 3,
        check=check_json_opaque,
    ),
    Case(
        RMC + "vector.binlog",
        "9.0.1",
        {"FORMAT_DESCRIPTION": 1, "PREVIOUS_GTIDS": 1, "ANONYMOUS_GTID": 10, "QUERY": 10, "TABLE_MAP": 6,
         "WRITE_ROWS_V2": 5, "DELETE_ROWS_V2": 1, "XID": 3, "STOP": 1},
        gtids=ANON * 10,
        check=check_vector,
    ),
    Case(
        RMC + "rpl_unfiltered_hidden_gcol.000001",
        "8.0.17-debug",
        {"FORMAT_DESCRIPTION": 2, "ROTATE": 2, "PREVIOUS_GTIDS": 1, "ANONYMOUS_GTID": 3, "QUERY": 3, "TABLE_MAP": 1,
         "WRITE_ROWS_V2": 1, "XID": 1, "STOP": 1},
        gtids=ANON * 3,
        check=check_hidden_gcol,
    ),
    Case(
        "apecloud_rust/mysql-bin.000057",
        "8.0.31",
        {"FORMAT_DESCRIPTION": 1, "PREVIOUS_GTIDS": 1, "GTID": 3, "QUERY": 1, "TRANSACTION_PAYLOAD": 2},
        {"QUERY": 2, "ROWS_QUERY": 3, "TABLE_MAP": 3, "WRITE_ROWS_V2": 2, "UPDATE_ROWS_V2": 1, "XID": 2},
        gtids=[f"76f3e7be-6720-11ed-9cad-0242ac110002:{n}" for n in (11, 12, 13)],
        previous="76f3e7be-6720-11ed-9cad-0242ac110002:1-10",
        check=check_apecloud,
    ),
    Case(
        "osheroff_java/mysql-bin.compressed",
        "8.0.28",
        {"FORMAT_DESCRIPTION": 1, "PREVIOUS_GTIDS": 1, "ANONYMOUS_GTID": 1, "TRANSACTION_PAYLOAD": 1, "ROTATE": 1},
        {"QUERY": 1, "TABLE_MAP": 1, "UPDATE_ROWS_V2": 1, "XID": 1},
        gtids=ANON,
        check=check_osheroff,
    ),
]  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=[c.path.split("/")[-1] for c in CASES])
def test_corpus_file(case: Case) -> None:
    reader = EventReader()
    events = list(reader.events(as_left(DATA / case.path)))
    assert reader.format is not None
    assert reader.format.server_version == case.version
    assert reader.flavor == "mysql"
    assert Counter(e.name for e in events if not e.in_payload) == case.outer
    assert Counter(e.name for e in events if e.in_payload) == case.inner
    gtid_events = [e for e in events if e.name in ("GTID", "ANONYMOUS_GTID", "GTID_TAGGED")]
    if case.gtids:
        assert [e.data.gtid for e in gtid_events] == case.gtids
    for event in gtid_events:  # commit timestamps in microseconds, within a second of the header's seconds
        assert abs(event.data.immediate_commit_us // 1_000_000 - event.timestamp) <= 1
    previous = [e.data.gtid_set for e in events if e.name == "PREVIOUS_GTIDS"]
    assert previous == [case.previous] * len(previous)
    for event in events:
        if event.in_payload:  # inner events take the payload event's coordinates
            assert event.end_pos > event.start
    if case.check:
        case.check(events)


def test_corrupt_byte_fails_the_checksum(tmp_path: Path) -> None:
    raw = bytearray((DATA / RMC / "mysql_type_bit.000001").read_bytes())
    raw[-30] ^= 0x01  # inside the last event
    broken = tmp_path / "broken.000001"
    broken.write_bytes(bytes(raw))
    with pytest.raises(UndecodableEventError, match="CRC32 checksum mismatch"):
        list(EventReader().events(read_binlog_file(broken)))


def test_rotation_is_followed_to_the_next_file(tmp_path: Path) -> None:
    """A file ending in a ROTATE continues in the file it names (the second one here starts over)."""
    source = (DATA / RMC / "time_issue.000001").read_bytes()
    rotate_at = 428  # the last event, a ROTATE to binlog.000005 position 4 (README: the file's 8 events)
    (tmp_path / "binlog.000004").write_bytes(source)
    (tmp_path / "binlog.000005").write_bytes(source[:rotate_at])  # the next file, without a ROTATE
    # the next file stands for the server's active one: it may end without a ROTATE
    events = list(
        EventReader().events(read_binlog_file(tmp_path / "binlog.000004", active_file="binlog.000005"))
    )
    assert [e.file for e in events if e.name == "FORMAT_DESCRIPTION"] == ["binlog.000004", "binlog.000005"]
    assert sum(1 for e in events if isinstance(e.data, RowsEvent)) == 2


def test_reading_from_a_later_position_decodes_with_the_files_format_description() -> None:
    path = DATA / RMC / "mysql-enum-string-set.000001"
    whole = list(EventReader().events(read_binlog_file(path)))
    last_gtid = [e for e in whole if e.name == "GTID"][-1]  # the DELETE's transaction
    tail = list(EventReader().events(read_binlog_file(path, last_gtid.start)))
    assert [e.start for e in tail] == [4] + [e.start for e in whole if e.start >= last_gtid.start]
    assert rows_of(tail) == [rows_of(whole)[-1]]


def _stage(path: Path, history: tuple[str, ...] = ()) -> tuple[list[Event], list[dict[str, Any]]]:
    """Read a corpus file through the window reader (the tables of its rows events that RowDecoder decodes
    selected, keeping ``history``); return (its events, the staged rows)."""
    events, staged, _ = _read(path, history)
    return events, staged


def _read(path: Path, history: tuple[str, ...] = ()) -> tuple[list[Event], list[dict[str, Any]], ReaderState]:
    """:func:`_stage`, and the reader's final state."""
    events = list(EventReader().events(as_left(path)))
    tables = {
        e.data.table_map.name
        for e in events
        if isinstance(e.data, RowsEvent) and unsupported_reason(e.data.columns) is None
    }
    staged: list[dict[str, Any]] = []
    reader = WindowReader(
        iter(events),
        start=BinlogPosition(events[0].file, 4),
        end=BinlogPosition(events[0].file, max(e.end_pos for e in events)),
        tables={name: TableTarget(name, [], history=history) for name in tables},
        window=1,
        sink=lambda table, batch, specs, key: staged.extend(batch.to_pylist()),
    )
    reader.run()
    return events, staged, reader.state


def test_rows_query_statements_are_recorded_unless_one_payload_holds_several() -> None:
    """MySQL's ROWS_QUERY events give change logs their statements; inside a compressed transaction every event
    has the payload's coordinates, so a payload of two statements records none (its rows could not tell them
    apart), and a payload of one records it for each of its rows events."""
    events, staged, state = _read(DATA / "apecloud_rust/mysql-bin.000057", history=("changelog",))
    texts: dict[int, list[str]] = {}
    for e in events:
        if e.name == "ROWS_QUERY" and e.in_payload:
            texts.setdefault(e.start, []).append(e.data.query)
    assert sorted(len(t) for t in texts.values()) == [1, 2]
    (single,) = [start for start, found in texts.items() if len(found) == 1]
    entries = pa.Table.from_batches(state.statement_batches()).to_pylist()
    assert entries
    assert {e["_binlog_statement_pos"] for e in entries} == {single}
    assert [e["_binlog_statement"] for e in entries if e["_binlog_statement"]] == texts[single]
    payload_end = next(e.end_pos for e in events if e.start == single and e.name == "ROWS_QUERY")
    assert {(r["_binlog_file"], r["_binlog_pos"]) for r in staged if r["_binlog_pos"] == payload_end} == {
        (e["_binlog_file"], e["_binlog_pos"]) for e in entries
    }


def test_mysql_commit_times_are_the_gtid_events_microseconds() -> None:
    """``_binlog_ts`` of a MySQL transaction is its GTID's immediate_commit_timestamp, compressed or not."""
    events, staged = _stage(DATA / "apecloud_rust/mysql-bin.000057")
    commit_us = {e.data.gtid: e.data.immediate_commit_us for e in events if e.name == "GTID"}
    rows = sum(
        len(e.data.rows())
        for e in events
        if isinstance(e.data, RowsEvent) and unsupported_reason(e.data.columns) is None
    )
    assert rows
    assert len(staged) >= rows
    epoch = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
    for row in staged:
        assert row["_binlog_ts"] == epoch + dt.timedelta(microseconds=commit_us[row["_binlog_gtid"]])
    assert any(row["_binlog_ts"].microsecond for row in staged)  # not the commit event's whole seconds


def test_an_anonymous_mysql_transaction_gets_its_commit_time_too() -> None:
    events, staged = _stage(DATA / RMC / "transaction_compression.000001")
    (gtid,) = [e.data for e in events if e.name == "ANONYMOUS_GTID"]
    assert staged
    assert gtid.immediate_commit_us
    epoch = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
    assert {row["_binlog_ts"] for row in staged} == {
        epoch + dt.timedelta(microseconds=gtid.immediate_commit_us)
    }
    assert {row["_binlog_gtid"] for row in staged} == {None}
