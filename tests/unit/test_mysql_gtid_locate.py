"""A MySQL GTID set located in recorded MySQL 8.0 / 9.6 binlog files (the resume point after a failover).

No MySQL server is obtainable here: the search runs on the shared corpus's files (``../shared/data/mysql_binlogs``,
its README lists each file's PREVIOUS_GTIDS and transactions), the same code that runs over a MySQL server's
dumps (:func:`~airflow_provider_binlog.extract.resume.server_events`). Skips when the folder is absent.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from airflow_provider_binlog.contract.positions import BinlogPosition
from airflow_provider_binlog.exceptions import BinlogPurgedError, LostTransactionsError
from airflow_provider_binlog.extract.events.feeds import Event, read_binlog_file
from airflow_provider_binlog.extract.events.stream import EventReader
from airflow_provider_binlog.extract.resume import locate_mysql_gtid_position
from airflow_provider_binlog.source.gtid import GtidSet

DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "mysql_binlogs"
pytestmark = pytest.mark.skipif(
    not DATA.exists(), reason=f"{DATA} is absent (shared reference data, not part of the repository)"
)

APE = "apecloud_rust/mysql-bin.000057"  # PREVIOUS_GTIDS 76f3...:1-10, then :11 (DDL), :12, :13 (compressed)
TAGGED = (
    "rust_mysql_common/binlog_transaction_with_GTID_TAG.000001"  # 5577...:1-13 + :mytag:1-2, then mytag:3
)
UUID = "76f3e7be-6720-11ed-9cad-0242ac110002"
TAGGED_UUID = "55778904-0299-11f1-b1b8-4ef0c4956feb"


def events_of(name: str) -> Iterator[Event]:
    # as the server left the file: apecloud's ends after a transaction, no ROTATE, in-use flag cleared (crash
    # recovery's end), which the feed reads only as the file the server stopped writing
    return EventReader().events(
        read_binlog_file(DATA / name, follow_rotations=False, active_file=Path(name).name)
    )


def locate(text: str, *files: str) -> BinlogPosition:
    return locate_mysql_gtid_position(list(files), events_of, GtidSet.parse(text, "mysql"))


def gtid_at(name: str, pos: int) -> str | None:
    """Return the GTID of the transaction starting at ``pos`` (None: no GTID event there)."""
    event = next((e for e in events_of(name) if e.start >= pos and not e.in_payload), None)
    if event is None or event.start != pos or event.name not in ("GTID", "GTID_TAGGED"):
        return None
    return str(event.data.gtid)


@pytest.mark.parametrize(
    ("executed", "next_gtid"), [("1-10", f"{UUID}:11"), ("1-11", f"{UUID}:12"), ("1-12", f"{UUID}:13")]
)
def test_each_boundary_is_the_start_of_the_next_transaction(executed: str, next_gtid: str) -> None:
    found = locate(f"{UUID}:{executed}", APE)
    assert found.file == Path(APE).name  # events name their file as the server does: no folder
    assert found.gtid_set == f"{UUID}:{executed}"
    assert gtid_at(APE, found.pos) == next_gtid


def test_the_whole_file_executed_is_its_end() -> None:
    found = locate(f"{UUID}:1-13", APE)
    assert found.pos == (DATA / APE).stat().st_size
    assert gtid_at(APE, found.pos) is None


def test_tagged_gtids_count_as_any_other() -> None:
    found = locate(f"{TAGGED_UUID}:1-13:mytag:1-2", TAGGED)
    assert gtid_at(TAGGED, found.pos) == f"{TAGGED_UUID}:mytag:3"
    assert locate(f"{TAGGED_UUID}:1-13:mytag:1-3", TAGGED).pos > found.pos


def test_the_file_is_the_newest_whose_previous_gtids_the_set_contains() -> None:
    # two files of other servers: only the one whose PREVIOUS_GTIDS the set holds can contain the boundary
    assert locate(f"{UUID}:1-11", TAGGED, APE).file == Path(APE).name
    assert locate(f"{TAGGED_UUID}:1-13:mytag:1-2", TAGGED, APE).file == Path(TAGGED).name


def test_a_set_older_than_every_file_is_purged_and_a_later_one_lost() -> None:
    with pytest.raises(BinlogPurgedError, match="were purged"):
        locate(f"{UUID}:1-9", APE)
    with pytest.raises(LostTransactionsError) as lost:
        locate(f"{UUID}:1-15", APE)
    assert lost.value.missing == f"{UUID}:14-15"


def test_a_transaction_the_set_lacks_before_its_boundary_is_read_from() -> None:
    # :12 without :11 (an errant transaction of this server, or one the set's server never had): the read starts
    # at :11 and takes :12 again, which converges to the same rows
    found = locate(f"{UUID}:1-10:12", APE)
    assert gtid_at(APE, found.pos) == f"{UUID}:11"
    assert found.gtid_set == f"{UUID}:1-10"  # the GTID state there, not the set's
