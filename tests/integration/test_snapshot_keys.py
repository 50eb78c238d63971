"""Which key a snapshot cuts chunks by: the primary key, or a named unique key of NOT NULL columns."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_provider_binlog.exceptions import BinlogConfigError
from airflow_provider_binlog.hooks.binlog import BinlogHook
from airflow_provider_binlog.pipeline.tables import resolve_key
from airflow_provider_binlog.source.schema import TableInfo, unique_keys
from airflow_provider_binlog.testing.mariadb import LocalMariaDB

pytestmark = pytest.mark.integration


def key(cur: Any, info: TableInfo, keys: dict[str, list[str]] | None = None) -> list[str]:
    """The snapshot level of resolve_key, as BinlogSnapshotOperator uses it."""
    named = (keys or {}).get(info.name)
    return resolve_key(
        info.name, info.columns, info.primary_key, named, unique_keys=unique_keys(cur, info.name)
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
    named = {events.name: ["code", "tenant"], loose.name: ["a"], keyed.name: ["code"]}
    with hook.cursor() as cur:
        assert key(cur, events, named) == ["tenant", "code"]  # the unique index's order: an index range
        assert key(cur, keyed) == ["id"]
        with pytest.raises(BinlogConfigError, match="has no primary key, so a snapshot cannot split it"):
            key(cur, events)
        with pytest.raises(BinlogConfigError, match=r"no UNIQUE index of exactly those NOT NULL columns"):
            key(cur, loose, named)  # unique but nullable: NULLs repeat, so it cannot identify rows
        with pytest.raises(BinlogConfigError, match=r"has primary key \['id'\]"):
            key(cur, keyed, named)
