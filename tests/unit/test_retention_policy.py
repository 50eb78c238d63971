from __future__ import annotations

from airflow_provider_binlog.contract.positions import BinlogPosition
from airflow_provider_binlog.source.server import binlog_bytes_between, retention_policy


def test_binlog_expire_logs_seconds_decides_over_expire_logs_days() -> None:
    policy = retention_policy({"binlog_expire_logs_seconds": "7200", "expire_logs_days": "3"})
    assert (policy.seconds, policy.setting) == (7200, "binlog_expire_logs_seconds")


def test_expire_logs_days_when_seconds_are_unset() -> None:
    policy = retention_policy({"binlog_expire_logs_seconds": "0", "expire_logs_days": "1.5"})
    assert (policy.seconds, policy.setting) == (129600, "expire_logs_days")


def test_no_retention_means_never_expired() -> None:
    assert retention_policy({"binlog_expire_logs_seconds": "0", "expire_logs_days": "0"}).seconds is None


def test_rds_configuration_overrides_the_server_variables() -> None:
    policy = retention_policy({"binlog_expire_logs_seconds": "2592000"}, rds_retention_hours="24")
    assert policy.seconds == 86400
    assert "rds_configuration" in policy.setting


def test_rds_null_retention_means_purged_almost_at_once() -> None:
    policy = retention_policy({"binlog_expire_logs_seconds": "2592000"}, rds_retention_hours="")
    assert policy.seconds == 0
    assert "mysql.rds_set_configuration('binlog retention hours', 168)" in policy.notes[0]


def test_size_limit_is_noted() -> None:
    policy = retention_policy({"binlog_expire_logs_seconds": "60", "max_binlog_total_size": "1073741824"})
    assert "max_binlog_total_size=1073741824" in policy.notes[0]


def test_bytes_between_positions_across_files() -> None:
    files = [("b.000001", 1000), ("b.000002", 500), ("b.000003", 300)]
    start, end = BinlogPosition("b.000001", 400), BinlogPosition("b.000003", 120)
    assert binlog_bytes_between(files, start, end) == 600 + 500 + 120
    assert binlog_bytes_between(files, start, BinlogPosition("b.000001", 900)) == 500
    assert binlog_bytes_between(files, end, start) == 0
