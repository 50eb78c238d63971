"""Hundreds of tables (issue 32): a pattern selecting 300 tables, writes across all of them, 20 tables created
mid-window, as the least-privileged user the connection Test recommends; every table equals its source, and the
window's small per-table changes are merged without a Spark job (``docs/adr/0040-small-windows-merged-in-the-driver.md``)."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import Pipeline, xcom

pytestmark = pytest.mark.system

TABLES = [f"t{i:03d}" for i in range(300)]
CREATED = [f"new{i:02d}" for i in range(20)]


def create(shop: Pipeline, names: list[str]) -> None:
    statements = []
    for name in names:
        statements += [
            f"CREATE TABLE {name} (id INT PRIMARY KEY, v VARCHAR(20), n INT)",
            f"INSERT INTO {name} VALUES (1, 'a', 1), (2, 'b', 2), (3, 'c', 3), (4, 'd', 4)",
        ]
    shop.sql(*statements)


@pytest.mark.slow  # two DAG runs: a snapshot of 300 tables, then a window over 320
def test_a_window_over_three_hundred_tables_and_twenty_new_ones_keeps_every_target_equal_to_its_source(
    connections: Any, scratch_db: str, pipeline_dirs: dict[str, str], least_privileged: None
) -> None:
    shop = Pipeline(connections, scratch_db, pipeline_dirs)
    create(shop, TABLES)
    shop.run_window()  # the snapshot of every table
    assert shop.mismatches(*TABLES) == []

    statements = []
    for n, name in enumerate(TABLES):
        statements += [
            "BEGIN",
            f"UPDATE {name} SET n = n + {n}, v = 'u' WHERE id <= 2",
            f"INSERT INTO {name} VALUES (10, 'x', {n}), (11, 'y', {n})",
            f"DELETE FROM {name} WHERE id = 3",
            "COMMIT",
        ]
    shop.sql(*statements[: len(statements) // 2])
    create(shop, CREATED)  # mid-window
    shop.sql(
        *statements[len(statements) // 2 :], *(f"UPDATE {name} SET v = 'z' WHERE id = 4" for name in CREATED)
    )
    window = shop.run_window()

    assert shop.mismatches(*TABLES, *CREATED) == []
    assert set(shop.manifest(window)["tables"]) == {f"{scratch_db}.{t}" for t in [*TABLES, *CREATED]}
    merged = xcom(shop.last_run, "merge")["tables"]
    assert {merged[f"{scratch_db}.{t}"]["engine"] for t in TABLES} == {"driver"}
    snapshot = xcom(shop.last_run, "snapshot")  # the run's snapshot task loaded the new tables alone
    assert sorted(snapshot["tables"]) == [f"{scratch_db}.{t}" for t in CREATED]
