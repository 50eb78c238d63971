"""A table without a primary key in a wildcard selection (issue 15.7): by default it is left out with a
warning while the other tables flow, and captured exactly once it has a key; ``keyless_tables="fail"``
stops the run; ``!db.table`` excludes it silently; a key named once in the ``keys`` param serves every task."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import Pipeline, stored_state, task_states

pytestmark = pytest.mark.system


def keyless_pipeline(connections: Any, db: str, dirs: dict[str, str], nopk: str, **conf: Any) -> Pipeline:
    pipeline = Pipeline(connections, db, dirs)
    pipeline.conf.update(conf)
    pipeline.sql(
        "CREATE TABLE items (id INT PRIMARY KEY, v VARCHAR(20))",
        f"CREATE TABLE nopk ({nopk})",
        "INSERT INTO items VALUES (1, 'a'), (2, 'b')",
    )
    return pipeline


def target_has(pipeline: Pipeline, table: str) -> bool:
    return (Path(pipeline.target) / pipeline.db / table / "_delta_log").exists()


def same_rows(pipeline: Pipeline, table: str) -> bool:
    """Compare a table without a primary key with its target table as sorted lists of rows."""
    from airflow_provider_binlog.target import read_table

    source = sorted(pipeline.sql(f"SELECT id, v FROM {table}"))
    target = sorted(
        tuple(r.values()) for r in read_table(pipeline.target, f"{pipeline.db}.{table}").to_pylist()
    )
    return source == target


@pytest.mark.slow  # runs the DAG with Spark merges, 45-200 s
def test_a_keyless_table_is_left_out_with_a_warning_and_captured_exactly_once_it_has_a_key(
    connections: Any, scratch_db: str, pipeline_dirs: dict[str, str], capfd: pytest.CaptureFixture[str]
) -> None:
    shop = keyless_pipeline(connections, scratch_db, pipeline_dirs, "id INT NOT NULL, v VARCHAR(20)")
    shop.sql("INSERT INTO nopk VALUES (1, 'a'), (1, 'dup'), (2, 'b')")
    window = shop.run_window()  # snapshot of items, first window
    log = capfd.readouterr().out
    warnings = [line for line in log.splitlines() if "nopk is left out of this run" in line]
    assert len(warnings) == 1  # once per run
    assert "ALTER TABLE" in warnings[0]
    assert f"'!{scratch_db}.nopk'" in warnings[0]
    assert shop.mismatches("items") == []
    assert not target_has(shop, "nopk")
    assert "has no primary key" in shop.manifest(window)["skipped"][f"{scratch_db}.nopk"]

    # Rows sharing an id while it had no key: replayed over the snapshot, the delete of (3, 'c') would
    # also remove (3, 'c2'). The table is captured from its snapshot's start instead.
    shop.sql(
        "INSERT INTO nopk VALUES (3, 'c'), (3, 'c2')",
        "DELETE FROM nopk WHERE v IN ('c', 'dup')",
        "ALTER TABLE nopk ADD PRIMARY KEY (id)",
        "UPDATE nopk SET v = 'b2' WHERE id = 2",
    )
    shop.run_window()
    assert shop.mismatches("items", "nopk") == []
    state = stored_state(shop.name)
    assert state is not None
    assert [s["reason"] for s in state["snapshots"]] == ["initial", "added"]
    assert state["snapshots"][1]["tables"] == [f"{scratch_db}.nopk"]
    shop.sql(
        "UPDATE nopk SET v = 'c3' WHERE id = 3",
        "DELETE FROM nopk WHERE id = 1",
        "INSERT INTO nopk VALUES (4, 'd')",
    )
    shop.run_window()
    assert shop.mismatches("items", "nopk") == []


def test_keyless_tables_fail_stops_the_run_with_the_remedy(
    connections: Any, scratch_db: str, pipeline_dirs: dict[str, str], capfd: pytest.CaptureFixture[str]
) -> None:
    shop = keyless_pipeline(
        connections, scratch_db, pipeline_dirs, "id INT NOT NULL, v VARCHAR(20)", keyless_tables="fail"
    )
    run = shop.runner.run()
    log = capfd.readouterr().out
    assert task_states(run)["snapshot"] == "failed"
    assert task_states(run).get("merge") != "success"
    assert f"KeylessTableError: table {scratch_db}.nopk has no primary key" in log
    assert not target_has(shop, "items")


@pytest.mark.slow  # runs the DAG with Spark merges, 45-200 s
def test_an_excluded_keyless_table_is_never_mentioned(
    connections: Any, scratch_db: str, pipeline_dirs: dict[str, str], capfd: pytest.CaptureFixture[str]
) -> None:
    shop = keyless_pipeline(
        connections,
        scratch_db,
        pipeline_dirs,
        "id INT NOT NULL, v VARCHAR(20)",
        tables=f"{scratch_db}.*, !{scratch_db}.nopk",
        keyless_tables="fail",
    )
    window = shop.run_window()
    mentions = [line for line in capfd.readouterr().out.splitlines() if "nopk" in line]
    assert [line for line in mentions if f"!{scratch_db}.nopk" not in line] == []  # only the selection itself
    manifest = shop.manifest(window)
    assert manifest["skipped"] == {}
    assert list(manifest["tables"]) == [f"{scratch_db}.items"]
    assert shop.mismatches("items") == []


@pytest.mark.slow  # runs the DAG with Spark merges, 45-200 s
def test_a_key_named_once_in_the_keys_param_serves_snapshot_extract_and_merge(
    connections: Any, scratch_db: str, pipeline_dirs: dict[str, str]
) -> None:
    shop = keyless_pipeline(
        connections,
        scratch_db,
        pipeline_dirs,
        "id INT NOT NULL, v VARCHAR(20), UNIQUE KEY uid (id)",
        keys={f"{scratch_db}.nopk": ["id"]},
        keyless_tables="fail",
    )
    shop.sql("INSERT INTO nopk VALUES (1, 'a'), (2, 'b')")
    shop.run_window()
    state = stored_state(shop.name)
    assert state is not None
    assert f"{scratch_db}.nopk" in state["snapshots"][0]["tables"]  # the snapshot cut it by the named key
    shop.sql(
        "UPDATE nopk SET v = 'b2' WHERE id = 2",
        "DELETE FROM nopk WHERE id = 1",
        "INSERT INTO nopk VALUES (3, 'c')",
    )
    window = shop.run_window()
    assert shop.manifest(window)["tables"][f"{scratch_db}.nopk"]["primary_key"] == ["id"]  # extract
    assert same_rows(shop, "nopk")  # merge
    assert shop.mismatches("items") == []
