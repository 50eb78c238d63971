"""Unit tests of the archive feed's view of an archive folder (records written as the archiver writes them)."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from airflow_provider_binlog.archive.copy import ArchivedFile, BinlogArchive
from airflow_provider_binlog.archive.feed import ArchiveFeed
from airflow_provider_binlog.contract.positions import BinlogPosition
from airflow_provider_binlog.contract.uris import write_json


def feed(root: Path, sizes: dict[str, int]) -> ArchiveFeed:
    for name, size in sizes.items():
        record = ArchivedFile(
            name, size, "0" * 64, server_id=1, events=3, first_timestamp=1, last_timestamp=2
        )
        write_json(str(root / f"{name}.json"), asdict(record))
    return ArchiveFeed(BinlogArchive(str(root)))


def test_a_file_both_archived_and_on_the_source_is_counted_once(tmp_path: Path) -> None:
    archive = feed(tmp_path, {"bin.000001": 100, "bin.000002": 200})

    assert archive.files_with([("bin.000002", 200), ("bin.000003", 50)]) == [
        ("bin.000001", 100),
        ("bin.000002", 200),
        ("bin.000003", 50),
    ]


def test_the_source_is_needed_from_its_first_file_the_archive_has_not_finished(tmp_path: Path) -> None:
    archive = feed(tmp_path, {"bin.000001": 100, "bin.000002": 200})
    server = [("bin.000002", 200), ("bin.000003", 50)]

    assert archive.gap("bin.000001", server) is None
    assert archive.first_needed(BinlogPosition("bin.000001", 40), server) == BinlogPosition("bin.000003", 4)
    assert archive.first_needed(BinlogPosition("bin.000003", 40), server) == BinlogPosition("bin.000003", 40)
    assert archive.gap("bin.000001", [("bin.000004", 10)]) == (
        f"the binlog archive at {tmp_path} does not hold bin.000003, which is gone from the source"
    )
