"""A value one table cannot stage exactly quarantines that table alone (issue 29): the window is read again
with the table stopped at the start of the refused transaction, and every other table is staged in full."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from test_snapshot_rows import Recorder

from airflow_provider_binlog.testing.mariadb import LocalMariaDB

pytestmark = pytest.mark.integration


def head(server: LocalMariaDB) -> dict[str, object]:
    """Return the binlog head once it holds still: after a rotation MariaDB appends a Binlog_checkpoint event."""
    seen = None
    for _ in range(30):
        file, pos = server.execute("SHOW MASTER STATUS")[0][:2]
        if (file, pos) == seen:
            break
        seen = (file, pos)
        time.sleep(0.3)
    return {"file": file, "pos": int(pos)}


def ids(table: object) -> list[tuple[str, int]]:
    rows = sorted(table.to_pylist(), key=lambda r: r["_binlog_seq"])  # type: ignore[attr-defined]
    return [(r["_binlog_op"], r["id"]) for r in rows]


@pytest.mark.parametrize("parallel", [False, True], ids=["serial", "parallel"])
def test_a_refused_value_quarantines_its_table_from_its_transaction_on(
    connections: LocalMariaDB, source_db: str, tmp_path: Path, parallel: bool
) -> None:
    a, b = f"{source_db}.a", f"{source_db}.b"
    connections.execute(
        f"CREATE TABLE {a} (id INT PRIMARY KEY, v VARCHAR(5) CHARACTER SET cp1250)",
        f"CREATE TABLE {b} (id INT PRIMARY KEY, v INT)",
    )
    recorder = Recorder(tmp_path / "staging")
    recorder.mark()
    connections.execute(f"INSERT INTO {a} VALUES (1, 'ok')", f"INSERT INTO {b} VALUES (1, 1)")
    if parallel:
        connections.execute("FLUSH BINARY LOGS")
    before = head(connections)
    # cp1250 has no character for 0x81: the server stores it, a SELECT returns '?', the extractor refuses it.
    connections.execute(
        "BEGIN",
        f"INSERT INTO {b} VALUES (2, 2)",
        f"INSERT INTO {a} VALUES (2, 'ok2')",
        f"INSERT INTO {a} VALUES (3, X'4181')",
        f"INSERT INTO {b} VALUES (3, 3)",
        "COMMIT",
    )
    gtid = str(connections.execute("SELECT @@gtid_binlog_pos")[0][0])
    if parallel:
        connections.execute("FLUSH BINARY LOGS")
    connections.execute(
        f"INSERT INTO {a} VALUES (4, 'ok')",
        f"UPDATE {b} SET v = 30 WHERE id = 3",
        f"INSERT INTO {b} VALUES (4, 4)",
    )
    # parallel: a catch-up window over three files, read by worker processes until the refusal
    manifest, staged = recorder.extract(
        {a: ["id"], b: ["id"]},
        on_table_error="quarantine",
        max_workers=2 if parallel else 1,
        parallel_min_bytes=0,
    )

    assert ids(staged[b]) == [("c", 1), ("c", 2), ("c", 3), ("u", 3), ("c", 4)]
    assert ids(staged[a]) == [("c", 1)]  # the refused transaction's 'ok2' too is left out: all or nothing
    assert manifest["tables"][b]["rows"] == 5
    [entry] = manifest["resnapshots"]
    assert entry["table"] == a
    assert entry["cause"] == "quarantine"
    # The start of the refused transaction: the head before it, or past the Binlog_checkpoint event MariaDB
    # appends to a new file asynchronously after a rotation.
    since = entry["since"]
    assert since["file"] == before["file"]
    between = connections.execute(f"SHOW BINLOG EVENTS IN '{since['file']}' FROM {before['pos']}")
    assert {e[2] for e in between if int(e[1]) < since["pos"]} <= {"Binlog_checkpoint"}
    assert [e[2] for e in between if int(e[1]) == since["pos"]] == ["Gtid"]
    assert entry["gtid"] == gtid
    assert entry["at"]["file"] == before["file"]
    assert entry["at"]["pos"] > since["pos"]
    assert entry["column"].startswith(f"{a}.v (varchar(5)")
    assert "0x81" in entry["error"]
    assert "docs/operating.md" in entry["error"]
    assert manifest["schema_skipped_row_events"] == {a: 2}  # the refused row's event and id 4's


def test_fail_mode_fails_the_window(connections: LocalMariaDB, source_db: str, tmp_path: Path) -> None:
    from airflow_provider_binlog.exceptions import UndecodableValueError

    connections.execute(f"CREATE TABLE {source_db}.a (id INT PRIMARY KEY, v VARCHAR(5) CHARACTER SET cp1250)")
    recorder = Recorder(tmp_path / "staging")
    recorder.mark()
    connections.execute(f"INSERT INTO {source_db}.a VALUES (1, X'81')")
    with pytest.raises(UndecodableValueError) as raised:
        recorder.extract({f"{source_db}.a": ["id"]}, on_table_error="fail")
    assert raised.value.table == f"{source_db}.a"
    assert not list((tmp_path / "staging" / "test" / "window=1").glob(f"{source_db}.a/*.parquet"))


def test_a_statement_based_write_quarantines_the_tables_it_writes(
    connections: LocalMariaDB, source_db: str, tmp_path: Path
) -> None:
    """Its rows are not in the binlog: each table it writes stops at its transaction, the others flow."""
    a, b, c = f"{source_db}.a", f"{source_db}.b", f"{source_db}.c"
    for table in (a, b, c):
        connections.execute(f"CREATE TABLE {table} (id INT PRIMARY KEY, v INT)")
    recorder = Recorder(tmp_path / "staging")
    recorder.mark()
    connections.execute(f"INSERT INTO {a} VALUES (1, 1)", f"INSERT INTO {c} VALUES (1, 1)")
    before = head(connections)
    connections.execute(  # one statement writes a and b
        "SET SESSION binlog_format = 'STATEMENT'", "UPDATE a, b SET a.v = 10, b.v = 10", database=source_db
    )
    connections.execute(f"INSERT INTO {a} VALUES (2, 2)", f"INSERT INTO {c} VALUES (2, 2)")

    manifest, staged = recorder.extract({a: ["id"], b: ["id"], c: ["id"]}, on_table_error="quarantine")

    assert ids(staged[c]) == [("c", 1), ("c", 2)]
    assert ids(staged[a]) == [
        ("c", 1)
    ]  # stopped at the statement: its insert of id 2 waits for the re-snapshot
    entries = {e["table"]: e for e in manifest["resnapshots"]}
    assert sorted(entries) == [a, b]
    for entry in entries.values():
        assert entry["cause"] == "quarantine"
        assert entry["since"]["pos"] >= before["pos"]
        assert "statement-based DML" in entry["error"]
    assert manifest["schema_skipped_row_events"] == {a: 1}


def test_a_column_named_with_the_reserved_prefix_quarantines_its_table_alone(
    connections: LocalMariaDB, source_db: str, tmp_path: Path
) -> None:
    """A source column ``_binlog_op`` (any case) would be a staged file's field twice: its table stops, not the window."""
    a, b = f"{source_db}.a", f"{source_db}.b"
    connections.execute(
        f"CREATE TABLE {a} (id INT PRIMARY KEY, `_BINLOG_Op` VARCHAR(5), `_binlog_before` INT)",
        f"CREATE TABLE {b} (id INT PRIMARY KEY, v INT)",
    )
    recorder = Recorder(tmp_path / "staging")
    recorder.mark()
    connections.execute(f"INSERT INTO {b} VALUES (1, 1)")
    before = head(connections)
    connections.execute(f"INSERT INTO {a} VALUES (1, 'd', 7)", f"INSERT INTO {b} VALUES (2, 2)")

    manifest, staged = recorder.extract({a: ["id"], b: ["id"]}, on_table_error="quarantine")

    assert ids(staged[b]) == [("c", 1), ("c", 2)]
    assert a not in staged
    [entry] = manifest["resnapshots"]
    assert (entry["table"], entry["cause"]) == (a, "quarantine")
    assert entry["since"]["pos"] >= before["pos"]
    assert entry["column"].startswith(f"{a}._BINLOG_Op ")
    assert "reserves" in entry["error"]
    assert "RENAME COLUMN" in entry["error"]


def test_the_snapshot_refuses_a_column_named_with_the_reserved_prefix(
    connections: LocalMariaDB, source_db: str
) -> None:
    import pymysql

    from airflow_provider_binlog.snapshot.rows import describe_columns

    connections.execute(f"CREATE TABLE {source_db}.a (id INT PRIMARY KEY, `_binlog_SEQ` INT)")
    with pymysql.connect(**connections.connection_kwargs()) as conn, conn.cursor() as cur:
        with pytest.raises(ValueError) as raised:
            describe_columns(cur, source_db, "a")
    assert f"column '_binlog_SEQ' of `{source_db}`.`a`" in str(raised.value)
    assert "RENAME COLUMN" in str(raised.value)
