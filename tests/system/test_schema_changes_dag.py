"""Schema changes through the example DAG's operators (the library steps are tested in
``tests/integration/test_schema_changes.py``): a table the binlog cannot follow is recorded by the commit and
re-snapshotted by the next run's snapshot task, and a type change the Spark merge cannot follow refuses only
its table while the window's other tables merge and the checkpoint moves."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import Pipeline, stored_state

pytestmark = pytest.mark.system


@pytest.mark.slow  # three DAG runs with Spark snapshots and merges
def test_resnapshot_and_merge_refusal_through_the_dag(
    connections: Any, scratch_db: str, pipeline_dirs: dict[str, str]
) -> None:
    shop = Pipeline(connections, scratch_db, pipeline_dirs)
    shop.sql(
        "CREATE TABLE items (id INT PRIMARY KEY, v VARCHAR(20))",
        "CREATE TABLE typed (id INT PRIMARY KEY, qty INT)",
        "CREATE TABLE flow (id INT PRIMARY KEY, v VARCHAR(20))",
        "INSERT INTO items SELECT seq, 'a' FROM seq_1_to_20",
        "INSERT INTO typed SELECT seq, seq FROM seq_1_to_20",
        "INSERT INTO flow SELECT seq, 'a' FROM seq_1_to_20",
    )
    shop.run_window()  # the initial snapshot and an empty window

    shop.sql(
        "UPDATE items SET v = 'before' WHERE id = 1",
        "ALTER TABLE items ADD COLUMN c VARCHAR(10) NOT NULL DEFAULT 'dflt'",
        "UPDATE items SET v = 'after' WHERE id = 2",
        "ALTER TABLE typed MODIFY qty VARCHAR(10)",  # followed by the extract, refused by the merge
        "UPDATE typed SET qty = 'many' WHERE id = 3",
        "INSERT INTO flow VALUES (100, 'new')",
    )
    window = shop.run_window()
    state = stored_state(shop.name)
    assert state is not None
    waiting = {r["table"]: r for r in state["resnapshots_needed"]}
    assert waiting.keys() == {f"{scratch_db}.items", f"{scratch_db}.typed"}
    assert waiting[f"{scratch_db}.typed"]["since"] == window["start"]  # the merge refused the whole window
    assert "qty" in waiting[f"{scratch_db}.typed"]["reason"]
    assert (shop.window_dir(window) / f"refused={scratch_db}.typed.json").exists()
    assert shop.mismatches("flow") == []  # merged in the same window

    shop.sql("UPDATE typed SET qty = 'more' WHERE id = 4", "UPDATE flow SET v = 'b' WHERE id = 5")
    shop.run_window()  # its snapshot task re-reads both tables first
    state = stored_state(shop.name)
    assert state is not None
    assert state["resnapshots_needed"] == []
    assert [(s["reason"], sorted(s["tables"])) for s in state["snapshots"]][-1] == (
        "schema_change",
        [f"{scratch_db}.items", f"{scratch_db}.typed"],
    )
    assert shop.mismatches("items", "typed", "flow") == []


@pytest.mark.slow  # two DAG runs with a Spark snapshot and merges
def test_truncate_and_a_table_that_stays_dropped_through_the_dag(
    connections: Any, scratch_db: str, pipeline_dirs: dict[str, str]
) -> None:
    from airflow_provider_binlog.target import read_table

    shop = Pipeline(connections, scratch_db, pipeline_dirs)
    shop.sql(
        "CREATE TABLE items (id INT PRIMARY KEY, v VARCHAR(20))",
        "CREATE TABLE old_items (id INT PRIMARY KEY, v VARCHAR(20))",
        "INSERT INTO items SELECT seq, 'a' FROM seq_1_to_20",
        "INSERT INTO old_items SELECT seq, 'a' FROM seq_1_to_20",
    )
    shop.run_window()  # the initial snapshot and an empty window

    shop.sql(
        "UPDATE items SET v = 'before' WHERE id <= 5",
        "TRUNCATE TABLE items",
        "INSERT INTO items VALUES (3, 'after'), (30, 'after')",
        "UPDATE old_items SET v = 'gone soon' WHERE id = 1",
        "DROP TABLE old_items",  # the extract runs after it: the source no longer has the table
    )
    window = shop.run_window()
    manifest = shop.manifest(window)
    assert manifest["tables"][f"{scratch_db}.items"]["ops"] == {"c": 2, "t": 1, "u": 5}
    assert [d["table"] for d in manifest["dropped"]] == [f"{scratch_db}.old_items"]
    assert manifest["tables"][f"{scratch_db}.old_items"]["ops"] == {"t": 1}
    state = stored_state(shop.name)
    assert state is not None
    assert state["resnapshots_needed"] == []  # exact at this window's merge, nothing waits
    assert shop.mismatches("items") == []
    assert sorted(r["id"] for r in read_table(shop.target, f"{scratch_db}.items").to_pylist()) == [3, 30]
    assert read_table(shop.target, f"{scratch_db}.old_items").num_rows == 0

    shop.sql("INSERT INTO items VALUES (40, 'later')")
    shop.run_window()  # a later window: the dropped table stays empty, the other one flows
    assert shop.mismatches("items") == []
    assert read_table(shop.target, f"{scratch_db}.old_items").num_rows == 0
