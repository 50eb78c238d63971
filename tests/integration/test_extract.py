from __future__ import annotations

import datetime as dt
import decimal
import logging
import re
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from airflow_provider_binlog.contract.names import table_folder
from airflow_provider_binlog.contract.positions import BinlogPosition
from airflow_provider_binlog.exceptions import BinlogPurgedError, StagingError, UnsupportedEventError
from airflow_provider_binlog.extract import progress
from airflow_provider_binlog.extract.reader import TableTarget
from airflow_provider_binlog.extract.window import extract_window
from airflow_provider_binlog.hooks.binlog import BinlogHook
from airflow_provider_binlog.pipeline.ledger import Window, now_iso
from airflow_provider_binlog.pipeline.staging import check_writable, storage_path, window_path
from airflow_provider_binlog.testing.mariadb import LocalMariaDB

pytestmark = pytest.mark.integration
UTC = dt.timezone.utc


class Recorder:
    """Cut windows between two heads of the private server and extract them."""

    def __init__(self, server: LocalMariaDB, staging: Path) -> None:
        self.server = server
        self.staging = staging
        self.hook = BinlogHook(pipeline="test")
        self.start: BinlogPosition | None = None

    def mark(self) -> None:
        self.start = self.hook.server_state().head

    def extract(self, tables: dict[str, list[str]], seq: int = 1, **options: Any) -> dict[str, Any]:
        """Return the manifest of a window from the mark to the head (``options``: of ``extract_window``)."""
        state = self.hook.server_state()
        assert self.start is not None
        assert state.head is not None
        window = Window(seq=seq, start=(self.start), end=(state.head), run_id="r", cut_at=now_iso())
        return extract_window(
            self.hook,
            pipeline="test",
            window=window,
            tables={name: TableTarget(name, key) for name, key in tables.items()},
            window_dir=window_path(str(self.staging), "test", seq),
            server=state,
            **options,
        ).to_json()

    def rows(self, table: str, seq: int = 1) -> list[dict[str, Any]]:
        folder = self.staging / "test" / f"window={seq}" / table_folder(table)
        return pq.read_table(folder).to_pylist() if folder.exists() else []


@pytest.fixture
def recorder(connections: LocalMariaDB, tmp_path: Path) -> Recorder:
    return Recorder(connections, tmp_path / "staging")


TYPES_DDL = """CREATE TABLE `{db}`.types (
  id BIGINT UNSIGNED PRIMARY KEY, ti TINYINT, tiu TINYINT UNSIGNED, si SMALLINT UNSIGNED, mi MEDIUMINT,
  i INT UNSIGNED, dec_ DECIMAL(12,4), f FLOAT, d DOUBLE, dt6 DATETIME(6), dt0 DATETIME, ts3 TIMESTAMP(3) NULL,
  da DATE, tm TIME(6), y YEAR, vc VARCHAR(20), ch CHAR(3), bn BINARY(4), vb VARBINARY(8), bl BLOB, tx TEXT,
  js JSON, en ENUM('s','m','l'), st SET('a','b','c'), bt BIT(10)
) DEFAULT CHARSET=utf8mb4"""

TYPES_ROW = (
    "(18446744073709551615, -128, 255, 65535, -8388608, 4294967295, -12345678.1234, 1.5, 2.25,"
    " '2024-02-29 23:59:59.999999', '1000-01-01 00:00:00', '2038-01-19 03:14:07.999', '9999-12-31',"
    " '-838:59:58.999999', 0, 'héllo 😀', 'ab', 0x61000000, '', '', '', '{\"k\": [1, \"é\"]}', 'm', '', b'1000000001')"
)


def test_every_type_is_staged_exactly(recorder: Recorder, mariadb: LocalMariaDB, source_db: str) -> None:
    mariadb.execute(TYPES_DDL.format(db=source_db))
    recorder.mark()
    mariadb.execute(
        f"INSERT INTO `{source_db}`.types VALUES {TYPES_ROW}",
        f"INSERT INTO `{source_db}`.types (id) VALUES (1)",
    )
    manifest = recorder.extract({f"{source_db}.types": ["id"]})
    rows = recorder.rows(f"{source_db}.types")
    full = {k: v for k, v in rows[0].items() if not k.startswith("_binlog_")}
    assert full == {
        "id": decimal.Decimal("18446744073709551615"),
        "ti": -128,
        "tiu": 255,
        "si": 65535,
        "mi": -8388608,
        "i": 4294967295,
        "dec_": decimal.Decimal("-12345678.1234"),
        "f": 1.5,
        "d": 2.25,
        "dt6": dt.datetime(2024, 2, 29, 23, 59, 59, 999999),
        "dt0": dt.datetime(1000, 1, 1),
        "ts3": dt.datetime(2038, 1, 19, 3, 14, 7, 999000, tzinfo=UTC),
        "da": dt.date(9999, 12, 31),
        "tm": -dt.timedelta(hours=838, minutes=59, seconds=58, microseconds=999999),
        "y": 0,
        "vc": "héllo 😀",
        "ch": "ab",
        "bn": b"a\x00\x00\x00",
        "vb": b"",
        "bl": b"",
        "tx": "",
        "js": '{"k": [1, "é"]}',
        "en": "m",
        "st": "",
        "bt": 513,
    }
    nulls = {k: v for k, v in rows[1].items() if not k.startswith("_binlog_") and k != "id"}
    assert set(nulls.values()) == {None}
    entry = manifest["tables"][f"{source_db}.types"]
    assert entry["rows"] == 2
    assert entry["ops"] == {"c": 2}
    assert {c["name"]: c["arrow_type"] for c in entry["columns"]}["id"] == "decimal128(20, 0)"


def test_changes_keep_commit_order_and_key_moves(
    recorder: Recorder, mariadb: LocalMariaDB, source_db: str
) -> None:
    mariadb.execute(f"CREATE TABLE `{source_db}`.t (id INT PRIMARY KEY, v VARCHAR(10))")
    recorder.mark()
    mariadb.execute(
        f"INSERT INTO `{source_db}`.t VALUES (1, 'a'), (2, 'b')",
        f"UPDATE `{source_db}`.t SET v = 'c' WHERE id = 1",
        f"UPDATE `{source_db}`.t SET id = 3 WHERE id = 2",
        "FLUSH BINARY LOGS",
        f"DELETE FROM `{source_db}`.t WHERE id = 1",
        f"UPDATE `{source_db}`.t SET v = v WHERE id = 3",
    )
    recorder.extract({f"{source_db}.t": ["id"]})
    rows = recorder.rows(f"{source_db}.t")
    assert [(r["_binlog_op"], r["id"], r["v"]) for r in rows] == [
        ("c", 1, "a"),
        ("c", 2, "b"),
        ("u", 1, "c"),
        ("d", 2, "b"),
        ("u", 3, "b"),
        ("d", 1, "c"),
    ]
    seqs = [r["_binlog_seq"] for r in rows]
    assert seqs == sorted(seqs)
    assert len(set(seqs)) == len(seqs)
    assert rows[3]["_binlog_gtid"] == rows[4]["_binlog_gtid"]
    assert rows[-1]["_binlog_file"] != rows[0]["_binlog_file"]


def test_rolled_back_and_unselected_changes_are_not_staged(
    recorder: Recorder, mariadb: LocalMariaDB, source_db: str
) -> None:
    mariadb.execute(
        f"CREATE TABLE `{source_db}`.t (id INT PRIMARY KEY)",
        f"CREATE TABLE `{source_db}`.other (id INT PRIMARY KEY)",
        f"CREATE TABLE `{source_db}`.my (id INT PRIMARY KEY) ENGINE=MyISAM",
    )
    recorder.mark()
    mariadb.execute("BEGIN", f"INSERT INTO `{source_db}`.t VALUES (1)", "ROLLBACK")
    mariadb.execute(f"INSERT INTO `{source_db}`.other VALUES (1)", f"INSERT INTO `{source_db}`.t VALUES (2)")
    manifest = recorder.extract({f"{source_db}.t": ["id"]})
    assert [r["id"] for r in recorder.rows(f"{source_db}.t")] == [2]
    assert list(manifest["tables"]) == [f"{source_db}.t"]


def test_large_transaction_is_spilled_and_complete(
    recorder: Recorder, mariadb: LocalMariaDB, source_db: str
) -> None:
    mariadb.execute(f"CREATE TABLE `{source_db}`.big (id INT PRIMARY KEY, pad VARCHAR(20))")
    recorder.mark()
    values = ",".join(f"({i}, 'row{i}')" for i in range(120_000))
    mariadb.execute("BEGIN", f"INSERT INTO `{source_db}`.big VALUES {values}", "COMMIT")
    manifest = recorder.extract({f"{source_db}.big": ["id"]})
    rows = pq.read_table(
        Path(recorder.staging, "test", "window=1", f"{source_db}.big"), columns=["id", "_binlog_ts"]
    )
    assert manifest["stats"]["rows"] == 120_000
    assert rows.column("id").to_pylist() == list(range(120_000))
    assert rows.column("_binlog_ts").null_count == 0
    assert len(set(rows.column("_binlog_ts").to_pylist())) == 1


def test_a_write_error_in_the_writer_thread_fails_the_extract_with_it_and_writes_no_manifest(
    recorder: Recorder, mariadb: LocalMariaDB, source_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Part files are written in a thread of their own (``WindowWriters``): its error is the extract's."""
    from airflow_provider_binlog.extract import reader
    from airflow_provider_binlog.extract.writer import TableWriter

    original = TableWriter.write
    written: list[int] = []
    disk_full = OSError(28, "No space left on device")

    def write(self: TableWriter, *args: Any) -> None:
        if written:  # the second batch
            raise disk_full
        written.append(args[0].num_rows)
        original(self, *args)

    monkeypatch.setattr(TableWriter, "write", write)
    monkeypatch.setattr(reader, "BATCH_ROWS", 100)  # a batch per 100 committed rows
    mariadb.execute(f"CREATE TABLE `{source_db}`.t (id INT PRIMARY KEY)")
    recorder.mark()
    for first in range(0, 1000, 100):
        values = ",".join(f"({i})" for i in range(first, first + 100))
        mariadb.execute(f"INSERT INTO `{source_db}`.t VALUES {values}")
    with pytest.raises(OSError) as raised:
        recorder.extract({f"{source_db}.t": ["id"]})
    assert raised.value is disk_full
    assert written == [100]
    window_dir = Path(recorder.staging, "test", "window=1")
    assert not (window_dir / "manifest.json").exists()
    assert not list(window_dir.glob("*.json"))


def test_a_long_window_logs_progress_with_bytes_left_and_an_eta(
    recorder: Recorder,
    mariadb: LocalMariaDB,
    source_db: str,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(progress, "PROGRESS_SECONDS", 0.0)  # a line at every check (every 256 events)
    mariadb.execute(f"CREATE TABLE `{source_db}`.ticks (id INT PRIMARY KEY)")
    recorder.mark()
    mariadb.execute(*(f"INSERT INTO `{source_db}`.ticks VALUES ({i})" for i in range(1500)))
    with caplog.at_level(logging.INFO, logger=progress.__name__):
        manifest = recorder.extract({f"{source_db}.ticks": ["id"]})

    lines = [r.getMessage() for r in caplog.records if r.name == progress.__name__]
    parsed = [
        re.fullmatch(
            r"window 1: ([\d,]+) rows \([\d,]+ rows/s\) at (\S+):(\d+), ([\d,]+) of ([\d,]+) bytes left, ETA .+",
            line,
        )
        for line in lines
    ]
    assert len(lines) >= 10, lines
    assert all(parsed), lines
    numbers = [(int(m[1].replace(",", "")), int(m[4].replace(",", ""))) for m in parsed if m]
    assert [rows for rows, _ in numbers] == sorted(rows for rows, _ in numbers)
    assert [left for _, left in numbers] == sorted((left for _, left in numbers), reverse=True)
    assert 0 < numbers[-1][0] <= manifest["stats"]["rows"] == 1500
    total = int(parsed[0][5].replace(",", ""))  # type: ignore[index]  # the window's bytes, as staged
    assert total == manifest["stats"]["binlog_bytes"] > 0


def test_ddl_is_recorded_and_layout_change_starts_a_new_file(
    recorder: Recorder, mariadb: LocalMariaDB, source_db: str
) -> None:
    mariadb.execute(f"CREATE TABLE `{source_db}`.t (id INT PRIMARY KEY)")
    recorder.mark()
    mariadb.execute(
        f"INSERT INTO `{source_db}`.t VALUES (1)",
        f"ALTER TABLE `{source_db}`.t ADD COLUMN note VARCHAR(10)",
        f"INSERT INTO `{source_db}`.t VALUES (2, 'x')",
    )
    manifest = recorder.extract({f"{source_db}.t": ["id"]})
    entry = manifest["tables"][f"{source_db}.t"]
    assert len(entry["files"]) == 2
    assert [c["name"] for c in entry["columns"]] == ["id", "note"]
    assert any("ADD COLUMN note" in d["query"] for d in manifest["ddl"])


def test_statement_based_dml_fails_the_window_under_on_table_error_fail(
    recorder: Recorder, mariadb: LocalMariaDB, source_db: str
) -> None:
    mariadb.execute(f"CREATE TABLE `{source_db}`.t (id INT PRIMARY KEY)")
    recorder.mark()
    mariadb.execute("SET SESSION binlog_format = 'STATEMENT'", f"INSERT INTO `{source_db}`.t VALUES (1)")
    with pytest.raises(UnsupportedEventError, match="statement-based DML .* its rows are not in the binlog"):
        recorder.extract({f"{source_db}.t": ["id"]}, on_table_error="fail")


def test_purged_window_start_asks_for_a_snapshot(
    recorder: Recorder, mariadb: LocalMariaDB, source_db: str
) -> None:
    mariadb.execute(f"CREATE TABLE `{source_db}`.t (id INT PRIMARY KEY)")
    recorder.mark()
    mariadb.execute(f"INSERT INTO `{source_db}`.t VALUES (1)")
    mariadb.purge_binlogs_before_current()
    with pytest.raises(BinlogPurgedError, match="is no longer on the source .* re-snapshot every table"):
        recorder.extract({f"{source_db}.t": ["id"]})


def test_password_never_reaches_the_logs(
    recorder: Recorder, mariadb: LocalMariaDB, source_db: str, caplog: pytest.LogCaptureFixture
) -> None:
    mariadb.execute(f"CREATE TABLE `{source_db}`.t (id INT PRIMARY KEY)")
    recorder.mark()
    mariadb.execute(f"INSERT INTO `{source_db}`.t VALUES (1)")
    with caplog.at_level(logging.DEBUG):
        recorder.extract({f"{source_db}.t": ["id"]})
    assert caplog.records
    assert mariadb.root_password not in caplog.text


def test_staging_on_a_file_is_a_clear_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(StagingError, match="is not writable"):
        check_writable(storage_path(str(blocker / "staging")))


def test_compressed_events_are_refused_not_dropped(
    recorder: Recorder, mariadb: LocalMariaDB, source_db: str
) -> None:
    mariadb.execute(f"CREATE TABLE `{source_db}`.t (id INT PRIMARY KEY, body TEXT)")
    recorder.mark()
    mariadb.execute("SET GLOBAL log_bin_compress = ON")
    try:
        mariadb.execute(f"INSERT INTO `{source_db}`.t VALUES (1, REPEAT('x', 5000))")
    finally:
        mariadb.execute("SET GLOBAL log_bin_compress = OFF")
    with pytest.raises(UnsupportedEventError, match="MariaDB compressed event .* would be lost"):
        recorder.extract({f"{source_db}.t": ["id"]})
