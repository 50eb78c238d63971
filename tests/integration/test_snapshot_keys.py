"""Which key a snapshot cuts chunks by: the primary key, or a named unique key of NOT NULL columns."""

from __future__ import annotations

import pytest

from airflow_provider_binlog.exceptions import BinlogConfigError
from airflow_provider_binlog.hooks.binlog import BinlogHook
from airflow_provider_binlog.operators.snapshot import BinlogSnapshotOperator
from airflow_provider_binlog.testing.mariadb import LocalMariaDB

pytestmark = pytest.mark.integration


def operator(keys: dict[str, list[str]] | None = None) -> BinlogSnapshotOperator:
    return BinlogSnapshotOperator(
        task_id="snapshot",
        pipeline="keys",
        tables="x.*",
        staging_uri="/tmp/s",
        target_path="/tmp/t",
        keys=keys,
    )


def test_snapshot_keys(connections: LocalMariaDB, source_db: str) -> None:
    connections.execute(
        f"CREATE TABLE `{source_db}`.events (tenant INT NOT NULL, code VARCHAR(20) NOT NULL, v INT, "
        "UNIQUE KEY tc (tenant, code))",
        f"CREATE TABLE `{source_db}`.loose (a INT NULL, b INT, UNIQUE KEY a (a))",
        f"CREATE TABLE `{source_db}`.keyed (id INT PRIMARY KEY, code INT NOT NULL UNIQUE)",
    )
    hook = BinlogHook(pipeline="keys")
    tables = hook.describe_tables([f"{source_db}.*"])
    events, loose, keyed = (tables[f"{source_db}.{name}"] for name in ("events", "loose", "keyed"))
    named = operator(
        {events.name: ["code", "tenant"], loose.name: ["a"], keyed.name: ["code"]},
    )
    with hook.cursor() as cur:
        assert named._key(cur, events) == ["tenant", "code"]  # the unique index's order: an index range
        assert operator()._key(cur, keyed) == ["id"]
        with pytest.raises(BinlogConfigError, match="has no primary key, so a snapshot cannot split it"):
            operator()._key(cur, events)
        with pytest.raises(BinlogConfigError, match=r"no UNIQUE index of exactly those NOT NULL columns"):
            named._key(cur, loose)  # unique but nullable: NULLs repeat, so it cannot identify rows
        with pytest.raises(BinlogConfigError, match=r"has primary key \['id'\]"):
            named._key(cur, keyed)
