"""Operator mistakes that used to leave a wrong target behind green tasks (issue 15): each now fails at
once with a clear error, and the documented remedy puts the pipeline back on its feet."""

from __future__ import annotations

import json
from typing import Any

import pytest
from conftest import Pipeline, stored_state, task_states

from airflow_provider_binlog.state import variable_key
from airflow_provider_binlog.state_admin import MetadataVariableStore
from airflow_provider_binlog.state_admin import main as state_admin

pytestmark = pytest.mark.system


@pytest.fixture
def items(connections: Any, scratch_db: str, pipeline_dirs: dict[str, str]) -> Pipeline:
    pipeline = Pipeline(connections, scratch_db, pipeline_dirs)
    pipeline.sql(
        "CREATE TABLE items (id INT PRIMARY KEY, v VARCHAR(20))", "INSERT INTO items VALUES (1, 'a')"
    )
    pipeline.run_window()  # snapshot of the row, then the first window
    pipeline.sql("INSERT INTO items VALUES (2, 'b'), (3, 'c')")
    pipeline.run_window()
    return pipeline


def test_a_hand_edited_checkpoint_fails_the_next_run_and_a_kept_revision_restores_it(
    items: Pipeline, capsys: pytest.CaptureFixture[str]
) -> None:
    good = stored_state(items.name)
    assert good is not None
    edited = json.loads(json.dumps(good))
    edited["checkpoint"]["position"]["pos"] = good["checkpoint"]["position"]["pos"] + 7
    MetadataVariableStore().set(variable_key(items.name), json.dumps(edited))
    items.sql("UPDATE items SET v = 'changed' WHERE id = 1", "DELETE FROM items WHERE id = 2")
    run = items.runner.run()
    states = task_states(run)
    assert states["snapshot"] == "failed"  # the first task that reads the state
    assert states.get("merge") != "success"
    assert stored_state(items.name) == edited  # left untouched

    staging = ["--staging", str(items.staging)]
    assert state_admin(["validate", "--pipeline", items.name]) == 1
    assert f"names window {good['checkpoint']['window']} as the last merged one" in capsys.readouterr().out
    assert state_admin(["history", "--pipeline", items.name, *staging]) == 0
    listing = capsys.readouterr().out
    assert f"revision {good['revision']}: checkpoint" in listing
    assert "stored now: inconsistent" in listing
    assert (
        state_admin(["restore", "--pipeline", items.name, *staging, "--revision", str(good["revision"])]) == 0
    )
    assert state_admin(["validate", "--pipeline", items.name]) == 0

    restored = stored_state(items.name)
    assert restored is not None
    assert restored["checkpoint"] == good["checkpoint"]
    assert restored["revision"] > edited["revision"]
    window = items.run_window()
    assert window["seq"] > max(w["seq"] for w in good["windows"])
    assert items.mismatches("items") == []
