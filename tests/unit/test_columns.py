from __future__ import annotations

import datetime as dt

import pytest

from airflow_provider_binlog.extract.columns import fix_negative_time
from airflow_provider_binlog.positions import BinlogPosition, file_index


def _time(text: str) -> dt.timedelta:
    sign = -1 if text.startswith("-") else 1
    hours, minutes, seconds = text.lstrip("-").split(":")
    return sign * dt.timedelta(hours=int(hours), minutes=int(minutes), seconds=float(seconds))


@pytest.mark.parametrize(
    ("decoded", "true"),
    [
        ("-838:59:58.000001", "-838:59:58.999999"),
        ("-00:00:01.500000", "-00:00:01.500000"),
        ("-01:00:00.900000", "-01:00:00.100000"),
        ("-12:00:00", "-12:00:00"),
        ("12:34:56.789", "12:34:56.789"),
    ],
)
def test_negative_time_fraction_is_repaired(decoded: str, true: str) -> None:
    assert fix_negative_time(_time(decoded)) == _time(true)


def test_positions_order_across_files() -> None:
    assert BinlogPosition("b.000002", 4) > BinlogPosition("b.000001", 99999)
    assert BinlogPosition("b.000001", 5) > BinlogPosition("b.000001", 4)
    assert file_index("mysql-bin.1000000") == 1000000


def test_binlog_file_name_without_index_is_rejected() -> None:
    with pytest.raises(ValueError, match="not a binlog file name"):
        file_index("mysql-bin")
