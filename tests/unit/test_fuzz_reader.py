"""Fuzz the event reader: mutated real binlogs through the file feed and the dump feed, bounded in time.

Seeds are real binlogs: one a private MariaDB writes here (many column types, DDL, INSERT/UPDATE/DELETE, a
finished file), the MySQL 8.0/9.x files of ``../shared/data/mysql_binlogs`` when that folder is there (read,
never copied), and a crafted file with a zstd TRANSACTION_PAYLOAD (``test_crafted_events.build``). Hypothesis
flips, overwrites, cuts and splices their bytes, with the events' CRC32s left as they are (the checksum must
catch it) or recomputed (a crafted file: the parsers must), and inside the inflated payloads. Every event
is decoded and every row image too; the only failures allowed are the reader's named errors
(:class:`UndecodableEventError` and its subclasses, and :class:`ValueConversionError` for a value that cannot
be staged), and each example must finish within :data:`EXAMPLE_SECONDS` (no loop without progress).

The example counts keep the whole module near 30 s on the 2-core CI machine (``max_examples`` below).
"""

from __future__ import annotations

import re
import signal
import struct
import zlib
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import event as note
from hypothesis import strategies as st
from test_crafted_events import (
    QUERY,
    STOP,
    build,
    dump_channel,
    inner,
    payload,
    zstd,
)

from airflow_provider_binlog.extract.columns import ValueConversionError
from airflow_provider_binlog.extract.errors import UndecodableEventError
from airflow_provider_binlog.extract.events import codes
from airflow_provider_binlog.extract.events.feeds import Event, dump_events, read_binlog_file
from airflow_provider_binlog.extract.events.parsers import RowsQuery, parse_transaction_payload
from airflow_provider_binlog.extract.events.stream import EventReader, RowsEvent
from airflow_provider_binlog.testing.mariadb import LocalMariaDB

DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "mysql_binlogs"
NAMED = (UndecodableEventError, ValueConversionError)
"""The errors the reader may raise on any bytes."""
EXAMPLE_SECONDS = 20
"""Longer than any example takes (a few ms to a few hundred on a loaded machine): past it, a loop is stuck."""
MAX_EVENTS = 200_000
_FUZZ = settings(
    deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large], database=None
)
_INTERESTING = (0, 1, 18, 19, 250, 251, 252, 253, 254, 255, 0xFFFF, 0xFFFFFF, 2**31, 2**32 - 1)
"""Values written over 4 bytes: empty, length-encoded prefixes, header sizes, sign and width limits."""

_WORKLOAD = [
    """CREATE TABLE {db}.wide (
        id INT PRIMARY KEY, u BIGINT UNSIGNED, s SMALLINT, f FLOAT, d DOUBLE, m DECIMAL(20,6),
        c CHAR(5) CHARACTER SET latin1, v VARCHAR(300), t TEXT, b BLOB, vb VARBINARY(20),
        dt DATETIME(6), ts TIMESTAMP(3) NULL, da DATE, ti TIME(2), y YEAR, bi BIT(11),
        e ENUM('a','bb','ccc'), st SET('x','y','z'), j JSON)""",
    """INSERT INTO {db}.wide VALUES
        (1, 18446744073709551615, -32768, 1.5, -2.25e300, -12345678901234.123456, 'ab', REPEAT('v', 300),
         'text ✓', x'00ff10', x'', '2024-02-29 23:59:59.999999', '2038-01-19 03:14:07.123', '0000-00-00',
         '-838:59:59.00', 2155, b'10101010101', 'bb', 'x,z', '{{"k": [1, 2.5, null, true], "s": "é"}}'),
        (2, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
         NULL, NULL, NULL)""",
    "UPDATE {db}.wide SET v = 'changed', m = 0.000001, j = '[]' WHERE id = 1",
    "ALTER TABLE {db}.wide ADD COLUMN extra INT DEFAULT 7",
    "INSERT INTO {db}.wide (id, e) VALUES (3, 'ccc')",
    "DELETE FROM {db}.wide WHERE id = 2",
    "CREATE TABLE {db}.plain (id BIGINT PRIMARY KEY, note VARCHAR(20))",
    "INSERT INTO {db}.plain VALUES " + ", ".join(f"({i}, 'row {i}')" for i in range(40)),
    "UPDATE {db}.plain SET note = CONCAT(note, '!') WHERE id % 3 = 0",
]
"""A workload whose row events hold every column family the decoder reads, with edge values."""


@pytest.fixture(scope="module")
def seeds(mariadb: LocalMariaDB) -> dict[str, bytes]:
    """Return the seed binlogs by name: the MariaDB one, the crafted payload file, the MySQL corpus if there."""
    with mariadb.scratch_database("fuzz") as db:
        mariadb.execute("FLUSH BINARY LOGS")
        name = mariadb.execute("SHOW MASTER STATUS")[0][0]
        mariadb.execute(*(statement.format(db=db) for statement in _WORKLOAD))
        mariadb.execute("FLUSH BINARY LOGS")  # finished: it ends with a ROTATE
    found = {name: (mariadb.datadir / name).read_bytes(), "crafted.000001": _crafted_payloads()}
    if DATA.exists():
        found.update({path.name: path.read_bytes() for path in sorted(DATA.glob("*/*")) if path.is_file()})
    return found


def _crafted_payloads() -> bytes:
    """Return a crafted file with two zstd TRANSACTION_PAYLOADs (MariaDB writes none), ending with a STOP."""
    events = inner(codes.QUERY, QUERY[1]) + inner(codes.XID, b"\x05" * 8)
    return build(
        [
            payload(zstd(events), stated=len(events)),
            QUERY,
            payload(zstd(events * 3), stated=3 * len(events)),
            STOP,
        ]
    )


@contextmanager
def time_limit(seconds: int) -> Iterator[None]:
    """Raise ``TimeoutError`` in this (the main) thread when the block runs longer than ``seconds``."""

    def expire(signum: int, frame: object) -> None:
        raise TimeoutError(f"an example ran over {seconds} s: a loop of the reader does not progress")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def consume(raw: Iterable[Event]) -> tuple[int, int]:
    """Decode every event and every row image of ``raw``; return the count of events and of refused images.

    A rows event whose images raise a named error (a layout the decoder refuses, a value it cannot stage) does
    not end the read: rows are decoded lazily, so the events after it are read, as the window reader reads
    the events of tables it does not stage.
    """
    count = refused = 0
    for event in EventReader().events(raw):
        count += 1
        assert count < MAX_EVENTS, "the reader yields events without end"
        if isinstance(event.data, RowsEvent):
            try:
                event.data.rows()
            except NAMED:
                refused += 1
        elif isinstance(event.data, RowsQuery):
            assert isinstance(event.data.query, str)
    return count, refused


def only_named_errors(read: Callable[[], object]) -> None:
    """Run ``read``; fail on anything it raises but the reader's named errors, or on running too long."""
    error: Exception | None = None
    with time_limit(EXAMPLE_SECONDS):
        try:
            read()
        except NAMED as err:  # a clean, named error: what the reader promises
            error = err
    if error is None:
        note("read to its end")
        return
    message = str(error)
    assert re.search(r"\S+:\d+|offset \d+|position \d+", message), message  # it names where
    note(f"{type(error).__name__}: {message.split(': ')[1][:40] if ': ' in message else ''}")


# Mutations: each returns the mutated bytes; the events' boundaries are found by their header sizes.


def event_spans(data: bytes | bytearray) -> list[tuple[int, int]]:
    """Return ``(start, end)`` of each event whose header size fits the bytes, from offset 4."""
    spans, pos = [], 4
    while pos + 19 <= len(data):
        size = struct.unpack_from("<I", data, pos + 9)[0]
        if size < 19 or pos + size > len(data):
            break
        spans.append((pos, pos + size))
        pos += size
    return spans


def recrc_all(data: bytearray) -> bytearray:
    """Recompute the CRC32 of every event (a crafted file, which no checksum catches)."""
    for start, end in event_spans(data):
        if end - start >= 23:
            data[end - 4 : end] = zlib.crc32(data[start : end - 4]).to_bytes(4, "little")
    return data


mutation = st.one_of(
    st.tuples(st.just("flip"), st.integers(0, 2**32), st.integers(1, 255)),
    st.tuples(st.just("word"), st.integers(0, 2**32), st.sampled_from(_INTERESTING)),
    st.tuples(st.just("cut"), st.integers(0, 2**32), st.just(0)),
    st.tuples(st.just("splice"), st.integers(0, 2**32), st.integers(-64, 64)),
)
"""``(kind, where, value)``: where is taken modulo the length; a splice repeats (>0) or drops (<0) bytes."""


def mutate(
    data: bytes, mutations: list[tuple[str, int, int]], *, recrc: bool, in_event: bool = True
) -> bytes:
    """Return ``data`` with ``mutations`` applied (after the magic bytes), CRC32s recomputed when ``recrc``.

    With ``in_event``, positions are taken inside one event's body, where most of the parsing is.
    """
    out = bytearray(data)
    for kind, where, value in mutations:
        spans = event_spans(out) if in_event else []
        if spans:
            start, end = spans[where % len(spans)]
            at = start + 19 + (where // len(spans)) % max(1, end - start - 19)
        else:
            at = 4 + where % max(1, len(out) - 4)
        if kind == "flip" and at < len(out):
            out[at] ^= value
        elif kind == "word":
            out[at : at + 4] = value.to_bytes(4, "little")
        elif kind == "cut":
            del out[at:]
        elif value > 0:
            out[at:at] = out[at : at + value]
        else:
            del out[at : at - value]
    return bytes(recrc_all(out) if recrc else out)


def mutate_payloads(data: bytes, mutations: list[tuple[str, int, int]], *, state_size: bool) -> bytes:
    """Return ``data`` with the inflated events of each TRANSACTION_PAYLOAD mutated, recompressed, CRC32s fixed.

    :param state_size: the payload header states the mutated size (else the original one).
    """
    out = bytearray(data[:4])
    for start, end in event_spans(data):
        event = data[start:end]
        if event[4] == codes.TRANSACTION_PAYLOAD:
            original = parse_transaction_payload(event[19:-4])
            changed = bytearray(zstandard.ZstdDecompressor().decompressobj().decompress(original.payload))
            for kind, where, value in mutations:
                at = where % max(1, len(changed))
                if kind == "flip" and at < len(changed):
                    changed[at] ^= value
                elif kind == "word":
                    changed[at : at + 4] = value.to_bytes(4, "little")
                elif kind == "cut":
                    del changed[at:]
            stated = len(changed) if state_size else original.uncompressed_size
            body = payload(zstd(bytes(changed)), stated=stated)[1]
            head = bytearray(event[:19])
            struct.pack_into("<I", head, 9, 19 + len(body) + 4)
            event = bytes(head) + body + bytes(4)  # its CRC32 is written below
        out += event
    return bytes(recrc_all(out))


def _file(tmp: Path, name: str, data: bytes) -> Path:
    path = tmp / name
    path.write_bytes(data)
    return path


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder the examples write their mutated file into (one at a time)."""
    return tmp_path_factory.mktemp("fuzz")


def test_the_seeds_read_whole(seeds: dict[str, bytes], tmp_path: Path) -> None:
    """Unmutated, every seed reads to its end through both feeds (what the fuzzing starts from).

    The MySQL corpus has layouts the decoder refuses (VECTOR, ENUM without FULL metadata): their images raise
    named errors; the MariaDB seed's and the crafted file's all decode.
    """
    for name, data in seeds.items():
        path = _file(tmp_path, name, data)
        count, refused = consume(read_binlog_file(path, follow_rotations=False, active_file=name))
        assert count > 2
        # a dump leaves out ROTATEs with log_pos 0 (a relay log's source ROTATE): the same rows, maybe fewer events
        dumped = consume(dump_events(dump_channel(data), file=name, checksum=4))  # type: ignore[arg-type]
        assert dumped[1] == refused
        assert count - 2 <= dumped[0] <= count
        if name.startswith(
            ("mariadb-bin.", "crafted.")
        ):  # written here: every layout is one RowDecoder reads
            assert refused == 0, name


@settings(_FUZZ, max_examples=400)
@given(case=st.data(), mutations=st.lists(mutation, min_size=1, max_size=4), recrc=st.booleans())
def test_the_file_feed_raises_only_named_errors(
    seeds: dict[str, bytes],
    scratch: Path,
    case: st.DataObject,
    mutations: list[tuple[str, int, int]],
    recrc: bool,
) -> None:
    name = case.draw(st.sampled_from(sorted(seeds)))
    active = case.draw(st.booleans())
    data = mutate(seeds[name], mutations, recrc=recrc, in_event=case.draw(st.booleans()))
    path = _file(scratch, name, data)
    only_named_errors(
        lambda: consume(read_binlog_file(path, follow_rotations=False, active_file=name if active else None))
    )


@settings(_FUZZ, max_examples=200)
@given(case=st.data(), mutations=st.lists(mutation, min_size=1, max_size=4), recrc=st.booleans())
def test_the_dump_feed_raises_only_named_errors(
    seeds: dict[str, bytes], case: st.DataObject, mutations: list[tuple[str, int, int]], recrc: bool
) -> None:
    name = case.draw(st.sampled_from(sorted(seeds)))
    data = mutate(seeds[name], mutations, recrc=recrc, in_event=case.draw(st.booleans()))
    only_named_errors(lambda: consume(dump_events(dump_channel(data), file=name, checksum=4)))  # type: ignore[arg-type]


@settings(_FUZZ, max_examples=200)
@given(case=st.data(), mutations=st.lists(mutation, min_size=1, max_size=4), state_size=st.booleans())
def test_mutated_payload_events_raise_only_named_errors(
    seeds: dict[str, bytes],
    scratch: Path,
    case: st.DataObject,
    mutations: list[tuple[str, int, int]],
    state_size: bool,
) -> None:
    with_payloads = sorted(
        n for n, d in seeds.items() if any(d[s + 4] == codes.TRANSACTION_PAYLOAD for s, _ in event_spans(d))
    )
    name = case.draw(st.sampled_from(with_payloads))
    data = mutate_payloads(seeds[name], mutations, state_size=state_size)
    path = _file(scratch, name, data)
    only_named_errors(lambda: consume(read_binlog_file(path, follow_rotations=False, active_file=name)))
