"""Our event reader on a real MariaDB: binlog files against mysql-replication, and the socket against files.

A private server (``testing/mariadb.py``) writes a mixed workload; its binlog file is read by our file
feed and compared with mysql-replication's decoding of the same range (plus the value converters, the
extractor's old path); then the same range read over COM_BINLOG_DUMP must give the same events as the
file.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pymysql
import pytest
from test_decoder import (
    RANDOM_ROW_CHANGES,
    _convert_image,
    exact,
    head,
    open_stream,
    stream_events,
    through_library,
    write_random_rows,
)

from airflow_provider_binlog.contract.positions import BinlogPosition
from airflow_provider_binlog.extract.columns import charset_of
from airflow_provider_binlog.extract.decoder import LAYOUT_ATTRIBUTES
from airflow_provider_binlog.extract.events import codes
from airflow_provider_binlog.extract.events.feeds import read_binlog_file, read_binlog_socket
from airflow_provider_binlog.extract.events.parsers import MariadbGtid
from airflow_provider_binlog.extract.events.stream import Event, EventReader, RowsEvent
from airflow_provider_binlog.extract.reader import TableTarget
from airflow_provider_binlog.extract.window import extract_window
from airflow_provider_binlog.hooks.binlog import BinlogHook
from airflow_provider_binlog.pipeline.ledger import Window, now_iso
from airflow_provider_binlog.pipeline.staging import window_path
from airflow_provider_binlog.testing.mariadb import LocalMariaDB

pytestmark = pytest.mark.integration

_server_ids = itertools.count(32_000)
_KINDS = {"write": "insert", "update": "update", "delete": "delete"}


def _from_file(server: LocalMariaDB, start: tuple[str, int]) -> list[Event]:
    """Return the events of the binlog file holding ``start``, from ``start`` on (the FDE decoded first)."""
    server.execute("FLUSH BINARY LOGS")  # the file is complete and ends with a ROTATE
    raw = read_binlog_file(server.datadir / start[0], follow_rotations=False)
    # Events before ``start`` are left out before they are parsed: the server is shared by the test files of
    # a worker, and one of them (test_extract.py) writes MariaDB compressed events, which the reader refuses.
    wanted = (e for e in raw if e.start >= start[1] or e.data[4] == codes.FORMAT_DESCRIPTION)
    return list(EventReader().events(wanted))


def _row_events(events: list[Event], database: str) -> list[tuple[str, str, list[Any]]]:
    return [
        (_KINDS[e.data.kind], e.data.table, e.data.rows())
        for e in events
        if isinstance(e.data, RowsEvent) and e.data.schema == database
    ]


def test_mariadb_binlog_file_decodes_like_mysql_replication(mariadb: LocalMariaDB, source_db: str) -> None:
    start = write_random_rows(mariadb, source_db, 20261124)
    gtid_pos = str(mariadb.execute("SELECT @@gtid_binlog_pos")[0][0])
    events = _from_file(mariadb, start)
    ours = _row_events(events, source_db)
    library = through_library(mariadb, start, source_db)
    assert sum(len(rows) for _, _, rows in ours) == RANDOM_ROW_CHANGES
    assert exact(ours) == exact(library)
    gtids = [e.data.gtid for e in events if isinstance(e.data, MariadbGtid)]
    assert gtids[-1] == gtid_pos  # one domain: the last GTID of the file is the server's position
    assert (
        len(gtids) == 16 + 2
    )  # 16 insert batches, the UPDATE, the DELETE (autocommit; the DDL is before start)
    assert events[-1].name == "ROTATE"
    assert events[0].data.flavor == "mariadb"
    assert events[0].data.checksum == 1  # binlog_checksum=CRC32: every event above passed its check


def _identity(event: Event) -> tuple[Any, ...]:
    data = event.data.rows() if isinstance(event.data, RowsEvent) else event.data
    if event.type_code == codes.TABLE_MAP:
        data = (data.table_id, data.name, [c.name for c in data.columns])
    return (event.file, event.start, event.end_pos, event.type_code, exact(data))


def _from_socket(server: LocalMariaDB, start: tuple[str, int]) -> Iterator[Event]:
    conn = pymysql.connect(**server.connection_kwargs())
    try:
        raw = read_binlog_socket(conn, server_id=next(_server_ids), file=start[0], position=start[1])
        yield from EventReader().events(raw)
    finally:
        conn.close()


def test_socket_and_file_give_the_same_events(mariadb: LocalMariaDB, source_db: str) -> None:
    start = write_random_rows(mariadb, source_db, 20261124)
    from_file = _from_file(mariadb, start)
    from_socket = [e for e in _from_socket(mariadb, start) if e.file == start[0]]
    # The dump thread re-sends the file's FORMAT_DESCRIPTION for a start after 4, with end position 0
    # (and the creation time of the server's first file only).
    assert dataclasses.replace(from_socket[0].data, created=0) == dataclasses.replace(
        from_file[0].data, created=0
    )
    assert from_socket[0].end_pos == 0
    assert [_identity(e) for e in from_socket[1:]] == [_identity(e) for e in from_file[1:]]
    assert sum(1 for e in from_socket if isinstance(e.data, RowsEvent)) >= 17


WIDE_DDL = """CREATE TABLE w (
  id INT PRIMARY KEY, g GEOMETRY, p POINT, b64 BIT(64), b1 BIT(1), d6530 DECIMAL(65,30), c255 CHAR(255),
  bn BINARY(10), l1 VARCHAR(300) CHARACTER SET latin1, u16 VARCHAR(20) CHARACTER SET utf16,
  big ENUM({members}), s64 SET({set_members}), t6 TIME(6), dt3 DATETIME(3), ts6 TIMESTAMP(6) NULL,
  mb MEDIUMBLOB, lt LONGTEXT, tt TINYTEXT CHARACTER SET ascii, y YEAR, f FLOAT, db DOUBLE,
  hidden INT INVISIBLE
) DEFAULT CHARSET=utf8mb4"""
_ATTRIBUTES = [a for a in LAYOUT_ATTRIBUTES if a not in ("character_set_name", "mysql_charset")]
"""What the decoder reads of a column, but the charset (the library keeps a codec name, we the server's)."""


def test_table_maps_parse_like_mysql_replication(mariadb: LocalMariaDB, source_db: str) -> None:
    """Every column attribute the decoder reads, on a table of the awkward cases, against the library's."""
    members = ", ".join(f"'m{i}'" for i in range(300))  # 300 members: a 2-byte ENUM
    set_members = ", ".join(f"'s{i}'" for i in range(64))  # 64 members: an 8-byte SET
    mariadb.execute(WIDE_DDL.format(members=members, set_members=set_members), database=source_db)
    start = head(mariadb)
    mariadb.execute(
        "INSERT INTO w (id, g, p, b64, b1, d6530, c255, bn, l1, u16, big, s64, t6, dt3, ts6, mb, lt, tt, y, f, db, "
        "hidden) VALUES (1, ST_GeomFromText('LINESTRING(0 0,1 1)'), POINT(1, 2), b'1', b'1', 1.5, 'ü', 'ab', "
        "'é', 'x', 'm299', 's0,s63', '-838:59:58.999999', '2024-02-29 23:59:59.999', '2038-01-19 03:14:07.5', "
        "'blob', 'long', 'tiny', 2155, 1.5, 2.5, 7), (2, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, "
        "NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)",
        database=source_db,
    )
    events = _from_file(mariadb, start)
    ours = next(e.data for e in events if e.type_code == codes.TABLE_MAP and e.data.schema == source_db)
    library = next(iter(stream_events(mariadb, start, source_db))).columns
    assert [[getattr(c, a, None) or None for a in _ATTRIBUTES] for c in ours.columns] == [
        [getattr(c, a, None) or None for a in _ATTRIBUTES] for c in library
    ]
    assert [charset_of(c) for c in ours.columns] == [charset_of(c) for c in library]
    assert [(c.enum_values, c.set_values) for c in ours.columns] == [
        (c.enum_values, c.set_values) for c in library
    ]
    assert ours.columns[2].type != ours.columns[3].type  # POINT is GEOMETRY (255), BIT(64) is BIT (16)
    ((_, _, rows),) = _row_events(events, source_db)
    values = dict(zip([c.name for c in ours.columns], rows[0], strict=True))
    assert values["c255"] == "ü"  # CHAR(255) utf8mb4: 1020 bytes, the length's high bits in the real type
    assert values["u16"] == "x"  # utf16, which the library path refuses
    assert (values["big"], values["s64"]) == ("m299", "s0,s63")
    assert values["t6"] == -dt.timedelta(hours=838, minutes=59, seconds=58, microseconds=999999)
    assert (values["b64"], values["bn"], values["l1"], values["hidden"]) == (1, b"ab" + bytes(8), "é", 7)
    assert rows[1] == [2] + [None] * 21


def _extract(server: LocalMariaDB, start: BinlogPosition, table: str, staging: Path) -> Any:
    """Extract the window from ``start`` to the head; return (manifest, staged rows per file)."""
    hook = BinlogHook(pipeline="equivalence")
    state = hook.server_state()
    assert state.head is not None
    window = Window(seq=7, start=(start), end=(state.head), run_id="r", cut_at=now_iso())
    manifest = extract_window(
        hook,
        pipeline="equivalence",
        window=window,
        tables={table: TableTarget(table, ["id"])},
        window_dir=window_path(str(staging), "equivalence", 7),
        server=state,
    ).to_json()
    folder = staging / "equivalence" / "window=7" / table
    files = sorted(folder.rglob("*.parquet"))
    return manifest, [pq.read_table(f).to_pylist() for f in files]


def _reference_rows(
    server: LocalMariaDB, start: BinlogPosition, table: str, until: tuple[str, int]
) -> list[dict[str, Any]]:
    """Return what the window must stage of ``table`` up to ``until``, decoded by the reference decoder.

    mysql-replication plus the value converters decode each row event; the order keys follow the window's
    rules: one ``_binlog_seq`` per staged row from 1 in binlog order, an UPDATE that moves the key is a
    delete of the before image plus the after image, file and end position of the row event.
    """
    database, name = table.split(".")
    rows: list[dict[str, Any]] = []
    stream = open_stream(server, (start.file, start.pos), database)
    try:
        for event in stream:
            at = (stream.log_file, event.packet.log_pos)
            if BinlogPosition(*at).key > BinlogPosition(*until).key:
                break
            if event.table != name:
                continue
            columns = event.columns
            names = [c.name for c in columns]
            images: list[tuple[str, list[Any]]] = []
            for row in event.rows:
                if "before_values" in row:
                    before = _convert_image(columns, row["before_values"], row["before_none_sources"])
                    after = _convert_image(columns, row["after_values"], row["after_none_sources"])
                    if before[0] != after[0]:  # the key (id) moved
                        images.append(("d", before))
                    images.append(("u", after))
                else:
                    op = "c" if event.__class__.__name__ == "WriteRowsEvent" else "d"
                    images.append((op, _convert_image(columns, row["values"], row["none_sources"])))
            for op, values in images:
                meta = {"_binlog_op": op, "_binlog_window": 7, "_binlog_seq": len(rows) + 1}
                meta |= {"_binlog_file": at[0], "_binlog_pos": at[1]}
                rows.append(dict(zip(names, values, strict=True)) | meta)
    finally:
        stream.close()
    return rows


def test_a_window_stages_the_rows_and_order_keys_of_the_reference_decoder(
    mariadb: LocalMariaDB, source_db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A window over a mixed workload stages what mysql-replication decodes, with the order keys of the contract."""
    monkeypatch.setenv("AIRFLOW_CONN_BINLOG_DEFAULT", mariadb.uri())
    hook = BinlogHook(pipeline="equivalence")
    before = hook.server_state().head
    assert before is not None
    write_random_rows(mariadb, source_db, 20261125)
    table = f"{source_db}.r"
    mariadb.execute(
        f"UPDATE {table} SET id = id + 1000 WHERE id IN (1, 2)",  # key moves: a delete plus the after image
        "BEGIN",
        f"DELETE FROM {table} WHERE id = 3",
        "ROLLBACK",  # rolled back: nothing staged
        "FLUSH BINARY LOGS",  # the window spans two files
    )
    until = head(mariadb)
    mariadb.execute(
        f"ALTER TABLE {table} ADD COLUMN extra INT DEFAULT 5",  # a new layout, a new file
        f"INSERT INTO {table} (id, vc, extra) VALUES (5000, 'after', 6)",
        f"UPDATE {table} SET extra = 7 WHERE id = 4",
    )
    manifest, files = _extract(mariadb, before, table, tmp_path / "own")
    # Two key moves stage a delete and an update each; the ADD COLUMN with a DEFAULT waits for a re-snapshot,
    # so the window stages none of the table's later changes.
    assert [r["table"] for r in manifest["resnapshots"]] == [table]
    staged = sorted((row for rows in files for row in rows), key=lambda r: r["_binlog_seq"])
    assert len(staged) == RANDOM_ROW_CHANGES + 4 == manifest["stats"]["rows"]
    assert all(r["_binlog_gtid"] and r["_binlog_ts"] for r in staged)
    reference = _reference_rows(mariadb, before, table, until)
    schema = pq.read_schema(next((tmp_path / "own").rglob("*.parquet")))
    keys = list(reference[0])
    through_arrow = pa.Table.from_pylist(reference, schema=pa.schema([schema.field(k) for k in keys]))
    assert exact([[r[k] for k in keys] for r in staged]) == exact(
        [[r[k] for k in keys] for r in through_arrow.to_pylist()]
    )
