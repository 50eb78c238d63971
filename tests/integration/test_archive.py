"""The binlog archive (issue 34): its copy is the server's binlog byte for byte, and its feed yields a dump's events.

A private MariaDB of this module (its binlog files are few and small, and the tests read them from its datadir to
compare) and the least-privileged replication user (REPLICATION SLAVE and BINLOG MONITOR only). The copy: finished
files equal the server's, the active file's copy continues where it ended, a copy stopped mid-file (as a killed
archiver leaves it) continues, archivers at once write the same archive, a flipped byte is refused with the file
and offset named, a folder refuses a second server's files, files purged before their copy are reported. The
feed (``read_archive``): from a file's start, from a transaction inside a file and from the active file's parts,
the same events, offsets and bytes as a dump from the server. Windows that read the archive come next.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from airflow_provider_binlog.archive.copy import ArchiveError, BinlogArchive, archive_binlogs
from airflow_provider_binlog.archive.feed import ArchiveFeed, read_archive
from airflow_provider_binlog.contract.positions import BinlogPosition
from airflow_provider_binlog.exceptions import BinlogPurgedError
from airflow_provider_binlog.extract.connections import open_dump
from airflow_provider_binlog.extract.events import codes
from airflow_provider_binlog.extract.events.feeds import read_binlog_file
from airflow_provider_binlog.extract.reader import TableTarget
from airflow_provider_binlog.extract.window import extract_window
from airflow_provider_binlog.hooks.binlog import BinlogHook
from airflow_provider_binlog.pipeline.ledger import Window, now_iso
from airflow_provider_binlog.pipeline.staging import window_path
from airflow_provider_binlog.testing.mariadb import LocalMariaDB

pytestmark = pytest.mark.integration

USER, PASSWORD = "archiver", "archiver-pw"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalMariaDB]:
    with LocalMariaDB(base_dir=tmp_path_factory.mktemp("archive-db")) as db:
        db.execute(
            f"CREATE USER '{USER}'@'127.0.0.1' IDENTIFIED BY '{PASSWORD}'",
            f"GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO '{USER}'@'127.0.0.1'",
            "CREATE DATABASE shop",
            "CREATE TABLE shop.orders (id INT PRIMARY KEY, note TEXT)",
        )
        yield db


def settings(server: LocalMariaDB) -> dict[str, Any]:
    kwargs = server.connection_kwargs()
    kwargs.pop("unix_socket", None)
    return {**kwargs, "host": "127.0.0.1", "user": USER, "password": PASSWORD}


def write(server: LocalMariaDB, first: int, count: int, *, rotate: bool = False) -> None:
    """Insert ``count`` rows from id ``first`` in transactions of 10, update some; rotate the binlog after."""
    for start in range(first, first + count, 10):
        values = ", ".join(
            f"({i}, REPEAT('n{i}-é', 20))" for i in range(start, min(start + 10, first + count))
        )
        server.execute("BEGIN", f"INSERT INTO shop.orders VALUES {values}", "COMMIT")
    server.execute(
        f"UPDATE shop.orders SET note = CONCAT(note, '!') WHERE id BETWEEN {first} AND {first + 5}"
    )
    if rotate:
        server.execute("FLUSH BINARY LOGS")


def run(server: LocalMariaDB, archive: BinlogArchive, **kwargs: Any) -> Any:
    files = [(str(name), int(size)) for name, size, *_ in server.execute("SHOW BINARY LOGS")]
    return archive_binlogs(archive, settings(server), files, server_id=7001, flavor="mariadb", **kwargs)


def assert_same_as_server(server: LocalMariaDB, root: Path) -> None:
    """The archive's finished files are the server's, byte for byte, and a run of them (the server's purged files
    are only in the archive); the active file's parts are its bytes so far."""
    archive = BinlogArchive(str(root))
    finished = archive.finished_files()
    names = [str(name) for name, *_ in server.execute("SHOW BINARY LOGS")]
    kept = [n for n in finished if n in names]  # the finished files the server still has: a run of its files
    assert kept == [n for n in names if n >= min(kept, default="")][: len(kept)]
    for name, record in ((n, r) for n, r in finished.items() if n in names):
        assert (root / name).read_bytes() == (server.datadir / name).read_bytes(), name
        assert record.size == (server.datadir / name).stat().st_size
        assert not archive.parts(name)
    active = names[-1]
    if active not in finished:
        copied = b"".join(Path(p.path).read_bytes() for p in archive.parts(active))
        assert copied == (server.datadir / active).read_bytes()[: len(copied)]


def test_finished_files_are_the_servers_byte_for_byte_and_the_active_one_continues(
    server: LocalMariaDB, tmp_path: Path
) -> None:
    write(server, 1, 40, rotate=True)
    write(server, 100, 30)
    archive = BinlogArchive(str(tmp_path))

    first = run(server, archive)

    active = str(server.execute("SHOW BINARY LOGS")[-1][0])
    assert first.finished
    assert active in first.unfinished
    assert_same_as_server(server, tmp_path)
    records = archive.finished_files()
    assert all(r.checksums and r.events > 3 and r.gtid_list is not None for r in records.values())
    assert records[first.finished[-1]].last_gtid is not None
    assert list(
        read_binlog_file(tmp_path / first.finished[0], follow_rotations=False)
    )  # a readable binlog file

    write(server, 200, 30, rotate=True)
    second = run(server, archive)

    assert active in second.finished
    assert second.copied_bytes < sum(
        (server.datadir / n).stat().st_size for n in second.finished
    )  # continued
    assert_same_as_server(server, tmp_path)


def test_a_copy_stopped_mid_file_continues_where_it_ended(server: LocalMariaDB, tmp_path: Path) -> None:
    write(server, 1000, 60, rotate=True)
    archive = BinlogArchive(str(tmp_path))
    stops = 0
    while run(
        server, archive, part_bytes=2048, stop_after_bytes=3000
    ).copied_bytes:  # as a killed run leaves it
        stops += 1
        assert_same_as_server(server, tmp_path)
        assert stops < 200

    assert stops > 2
    assert_same_as_server(server, tmp_path)
    assert not run(server, archive).finished  # nothing left to finish


def test_archivers_at_once_write_the_same_archive(server: LocalMariaDB, tmp_path: Path) -> None:
    write(server, 2000, 40, rotate=True)
    write(server, 2100, 20)
    archive = BinlogArchive(str(tmp_path))
    errors: list[BaseException] = []

    def archiver(server_id: int) -> None:
        for _ in range(3):  # small parts: many chances for one to finish a file while another copies it
            files = [(str(name), int(size)) for name, size, *_ in server.execute("SHOW BINARY LOGS")]
            try:
                archive_binlogs(
                    archive, settings(server), files, server_id=server_id, flavor="mariadb", part_bytes=300
                )
            except BaseException as err:  # a race must not fail an archiver
                errors.append(err)

    threads = [threading.Thread(target=archiver, args=(sid,)) for sid in (7101, 7102, 7103)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert errors == []
    assert_same_as_server(server, tmp_path)


def test_a_flipped_byte_in_a_part_is_refused_naming_the_file_and_offset(
    server: LocalMariaDB, tmp_path: Path
) -> None:
    write(server, 3000, 30)
    archive = BinlogArchive(str(tmp_path))
    run(server, archive, part_bytes=1 << 30)  # the active file: one part, not finished
    active = str(server.execute("SHOW BINARY LOGS")[-1][0])
    (part,) = archive.parts(active)
    data = bytearray(Path(part.path).read_bytes())
    data[len(data) - 40] ^= 0x01  # inside the last events, past their headers' sizes
    Path(part.path).write_bytes(bytes(data))
    server.execute("FLUSH BINARY LOGS")

    with pytest.raises(ArchiveError, match=rf"at {active}:\d+: CRC32 checksum mismatch; .* delete the parts"):
        run(server, archive)

    assert active not in archive.finished_files()
    assert not (tmp_path / active).exists()


def test_a_finish_missing_a_part_writes_nothing(server: LocalMariaDB, tmp_path: Path) -> None:
    # What a second archiver's finish sees when the first deletes the parts it is reading: a valid but short chain.
    write(server, 5000, 40, rotate=True)
    archive = BinlogArchive(str(tmp_path))
    run(server, archive, part_bytes=1500, stop_after_bytes=3000)
    name, size = [(str(n), int(z)) for n, z, *_ in server.execute("SHOW BINARY LOGS")][0]
    first, second = archive.parts(name)
    Path(second.path).unlink()

    with pytest.raises(
        ArchiveError, match=rf"{name} ends at offset {first.end} where the file is {size} bytes"
    ):
        archive.finish(name, size)

    assert not (tmp_path / name).exists()
    assert name not in archive.finished_files()


def least_privileged(server: LocalMariaDB, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_BINLOG_DEFAULT", f"mysql://{USER}:{PASSWORD}@127.0.0.1:{server.port}")


def test_the_operator_archives_with_replication_grants_and_reports_files_purged_before_their_copy(
    server: LocalMariaDB, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow_provider_binlog.operators.archive import BinlogArchiveOperator

    least_privileged(server, monkeypatch)
    operator = BinlogArchiveOperator(task_id="archive", archive=str(tmp_path))
    write(server, 4000, 20, rotate=True)

    first = operator.execute({})

    assert first["finished"]
    assert first["gaps"] == []
    assert first["server"].startswith("mariadb:")
    assert_same_as_server(server, tmp_path)
    # Files written and purged between two runs never reach the archive: the next run names them.
    write(server, 4100, 20, rotate=True)
    write(server, 4200, 20, rotate=True)
    lost = [str(name) for name, *_ in server.execute("SHOW BINARY LOGS")][:-1]
    server.purge_binlogs_before_current()
    write(server, 4300, 10)

    second = operator.execute({})

    unfinished = [name for name in first["unfinished"] if name in lost]
    assert set(lost) - set(first["finished"]) <= set(second["gaps"])
    assert set(unfinished) <= set(second["gaps"])
    assert second["unfinished"]
    assert_same_as_server(server, tmp_path)


def test_a_folder_of_one_server_refuses_another_servers_files(
    server: LocalMariaDB,
    tmp_path: Path,
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from airflow.sdk.exceptions import AirflowFailException

    from airflow_provider_binlog.operators.archive import BinlogArchiveOperator

    operator = BinlogArchiveOperator(task_id="archive", archive=str(tmp_path))
    least_privileged(server, monkeypatch)
    operator.execute({})
    before = sorted(p.name for p in tmp_path.iterdir())
    with LocalMariaDB(base_dir=tmp_path_factory.mktemp("other-db")) as other:  # a promoted replica, say
        other.execute("CREATE DATABASE shop")
        monkeypatch.setenv("AIRFLOW_CONN_BINLOG_DEFAULT", other.uri())

        with pytest.raises(AirflowFailException, match=r"holds the files of server .* give each server"):
            operator.execute({})

    assert sorted(p.name for p in tmp_path.iterdir()) == before


def comparable(events: Any) -> list[tuple[str, int, bytes]]:
    """``(file, offset, bytes)`` of each event; of a FORMAT_DESCRIPTION without its log_pos, flags and checksum.

    A dump sends a file's FORMAT_DESCRIPTION with the in-use flag cleared, and from a start after 4 with log_pos 0
    and its checksum computed again; the archive holds the file's own.
    """
    out = []
    for e in events:
        data = bytes(e.data)
        if e.type_code == codes.FORMAT_DESCRIPTION:
            data = data[:13] + bytes(6) + data[19:-4]
        out.append((e.file, e.start, data))
    return out


def test_the_archive_feed_yields_the_events_a_dump_from_the_server_yields(
    server: LocalMariaDB, tmp_path: Path
) -> None:
    write(server, 6000, 30, rotate=True)
    write(server, 6100, 30, rotate=True)
    write(server, 6200, 20)
    archive = BinlogArchive(str(tmp_path))
    run(server, archive, part_bytes=700)  # the active file in many parts, read as one
    names = [str(name) for name, *_ in server.execute("SHOW BINARY LOGS")]
    active = names[-1]
    middle = next(  # a transaction boundary inside a finished file
        e.start
        for e in read_archive(archive, BinlogPosition(names[-2], 4))
        if e.type_code == codes.MARIADB_GTID and e.file == names[-2]
    )

    for start in (BinlogPosition(names[0], 4), BinlogPosition(names[-2], middle), BinlogPosition(active, 4)):
        archived = comparable(read_archive(archive, start))
        with open_dump(
            settings(server), server_id=7301, start=start, flavor="mariadb", annotate_rows=True
        ) as dump:
            dumped = comparable(dump)

        assert archived == dumped[: len(archived)], start
        assert archived[-1][0] == active
        assert len(archive.parts(active)) > 3
        assert archived[-1][1] + len(archived[-1][2]) == archive.copied_end(active)  # to the archive's end
        if start.pos > 4:
            assert archived[0][:2] == (start.file, 4)  # the file's FORMAT_DESCRIPTION first, as from a dump

    with pytest.raises(ArchiveError, match="holds nothing of mariadb-bin.999999"):
        list(read_archive(archive, BinlogPosition("mariadb-bin.999999", 4)))


def extract(staging: Path, start: BinlogPosition, end: BinlogPosition, archive: Any = None) -> dict[str, Any]:
    """Stage the window ``(start, end]`` of ``shop.orders``; return its manifest (no timings) and rows."""
    hook = BinlogHook(pipeline="test")
    manifest = extract_window(
        hook,
        pipeline="test",
        window=Window(seq=5, start=start, end=end, run_id="r", cut_at=now_iso()),
        tables={"shop.orders": TableTarget("shop.orders", ["id"])},
        window_dir=window_path(str(staging), "test", 5),
        server=hook.server_state(),
        archive=archive,
    ).to_json()
    folder = staging / "test" / "window=5"
    rows = [
        r for f in manifest["tables"]["shop.orders"]["files"] for r in pq.read_table(folder / f).to_pylist()
    ]
    manifest = {k: v for k, v in manifest.items() if k != "created_at"}
    manifest["stats"] = {k: v for k, v in manifest["stats"].items() if k != "read_seconds"}
    return {"manifest": manifest, "rows": rows}


def test_a_window_whose_start_the_source_purged_is_read_from_the_archive_and_stages_the_same_rows(
    server: LocalMariaDB, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    least_privileged(server, monkeypatch)
    head = lambda: BinlogHook(pipeline="test").server_state().head  # noqa: E731
    write(server, 7000, 30)
    start = head()
    write(server, 7100, 40, rotate=True)
    server.execute(
        "DELETE FROM shop.orders WHERE id BETWEEN 7100 AND 7105",
        "UPDATE shop.orders SET id = 79999 WHERE id = 7106",
    )
    write(server, 7200, 30, rotate=True)
    archive = BinlogArchive(str(tmp_path / "archive"))
    run(server, archive)  # every file but the new active one finished
    write(server, 7300, 20)
    end = head()
    assert start is not None
    assert end is not None
    from_source = extract(tmp_path / "from-source", start, end)
    partial = BinlogArchive(str(tmp_path / "partial"))
    run(server, partial)
    (tmp_path / "partial" / f"{start.file}.json").unlink()  # as if its copy had been stopped mid-file

    server.purge_binlogs_to(end.file)

    from_archive = extract(tmp_path / "from-archive", start, end, archive=ArchiveFeed(archive))
    assert from_archive == from_source
    assert len(from_archive["rows"]) > 100
    with pytest.raises(BinlogPurgedError, match=rf"binlog {start.file} .* is no longer on the source"):
        extract(tmp_path / "without", start, end)
    with pytest.raises(
        BinlogPurgedError, match=rf"archive at .*partial does not hold {start.file}, which is gone"
    ):
        extract(tmp_path / "partial-read", start, end, archive=ArchiveFeed(partial))
