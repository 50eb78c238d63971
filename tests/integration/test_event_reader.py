"""Our event reader on a real MariaDB: binlog files against mysql-replication, and the socket against files.

A private server (``testing/mariadb.py``) writes a mixed workload; its binlog file is read by our file
feed and compared with mysql-replication's decoding of the same range (plus the value converters, the
extractor's old path); then the same range read over COM_BINLOG_DUMP must give the same events as the
file.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterator
from typing import Any

import pymysql
import pytest
from test_decoder import RANDOM_ROW_CHANGES, exact, through_library, write_random_rows

from airflow_provider_binlog.extract.events import codes
from airflow_provider_binlog.extract.events.feeds import read_binlog_file, read_binlog_socket
from airflow_provider_binlog.extract.events.parsers import MariadbGtid
from airflow_provider_binlog.extract.events.stream import Event, EventReader, RowsEvent
from airflow_provider_binlog.testing.mariadb import LocalMariaDB

pytestmark = pytest.mark.integration

_server_ids = itertools.count(32_000)
_KINDS = {"write": "insert", "update": "update", "delete": "delete"}


def _from_file(server: LocalMariaDB, start: tuple[str, int]) -> list[Event]:
    """Return the events of the binlog file holding ``start``, from ``start`` on (the FDE decoded first)."""
    server.execute("FLUSH BINARY LOGS")  # the file is complete and ends with a ROTATE
    reader = EventReader()
    events = reader.events(read_binlog_file(server.datadir / start[0], follow_rotations=False))
    return [e for e in events if e.start >= start[1] or e.type_code == codes.FORMAT_DESCRIPTION]


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
