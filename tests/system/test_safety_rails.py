"""Operator mistakes that used to leave a wrong target behind green tasks (issue 15): each now fails at
once with a clear error, and the documented remedy puts the pipeline back on its feet."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO, DagRunner, Pipeline, load_module, stored_state, task_states

from airflow_provider_binlog.admin import MetadataVariableStore
from airflow_provider_binlog.admin import main as admin
from airflow_provider_binlog.exceptions import BinlogConfigError
from airflow_provider_binlog.pipeline.state import variable_key
from airflow_provider_binlog.target import check_target

pytestmark = pytest.mark.system


@pytest.fixture
def items(connections: Any, scratch_db: str, pipeline_dirs: dict[str, str]) -> Pipeline:
    pipeline = Pipeline(connections, scratch_db, pipeline_dirs)
    pipeline.sql("CREATE TABLE items (id INT PRIMARY KEY, v VARCHAR(20))")
    pipeline.run_window()  # an empty table: its snapshot and first window start no Spark job
    pipeline.sql("INSERT INTO items VALUES (1, 'a'), (2, 'b'), (3, 'c')")
    pipeline.run_window()  # the window that creates the target table, owned by this pipeline
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
    assert states["purge_risk"] == "failed"  # the first task that reads the state
    assert states.get("merge") != "success"
    assert stored_state(items.name) == edited  # left untouched

    staging = ["--staging", str(items.staging)]
    assert admin(["validate", "--pipeline", items.name]) == 1
    assert f"names window {good['checkpoint']['window']} as the last merged one" in capsys.readouterr().out
    assert admin(["history", "--pipeline", items.name, *staging]) == 0
    listing = capsys.readouterr().out
    assert f"revision {good['revision']}: source {good['source_identity']}, checkpoint" in listing
    assert "stored now: inconsistent" in listing
    assert admin(["restore", "--pipeline", items.name, *staging, "--revision", str(good["revision"])]) == 0
    assert admin(["validate", "--pipeline", items.name]) == 0

    restored = stored_state(items.name)
    assert restored is not None
    assert restored["checkpoint"] == good["checkpoint"]
    assert restored["revision"] > edited["revision"]
    window = items.run_window()
    assert window["seq"] > max(w["seq"] for w in good["windows"])
    assert items.mismatches("items") == []


def test_a_typo_in_the_target_path_writes_nothing_and_the_right_path_carries_on(
    items: Pipeline, tmp_path: Path
) -> None:
    typo = str(tmp_path / "targt")
    items.sql("UPDATE items SET v = 'typo-window' WHERE id = 3")
    dates = items.runner.next_dates()
    wrong = DagRunner(items.dag, {**items.conf, "target": typo}).run(dates)
    assert task_states(wrong)["snapshot"] == "failed"  # the first task given the target refuses it
    assert task_states(wrong)["extract"] == "upstream_failed"
    assert not Path(typo).exists() or not any(Path(typo).rglob("_delta_log"))
    items.runner.run(dates)  # the same run again with the right path merges the same window
    assert items.mismatches("items") == []


def test_a_deleted_target_table_is_not_started_anew_until_it_is_re_snapshotted(items: Pipeline) -> None:
    shutil.rmtree(Path(items.target) / items.db / "items")
    items.sql("INSERT INTO items VALUES (4, 'd')")
    dates = items.runner.next_dates()
    run = items.runner.run(dates)
    assert task_states(run)["merge"] == "failed"
    assert not (Path(items.target) / items.db / "items").exists()
    resnapshot = DagRunner(
        load_module(REPO / "example_dags" / "binlog_resnapshot.py").dag,
        {"pipeline": items.name, "tables": f"{items.db}.items", "mode": "requested",
         "staging": str(items.staging), "target": items.target},
    )  # fmt: skip
    assert resnapshot.run().state == "success"
    items.runner.run(dates)  # the held window merges now
    assert items.mismatches("items") == []


def test_a_second_pipeline_cannot_write_a_table_another_owns_until_it_is_handed_over(
    items: Pipeline, pipeline_dirs: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other_conf = {**items.conf, "pipeline": f"{items.name}_b", "staging": str(tmp_path / "staging_b")}
    other = DagRunner(items.dag, other_conf)
    refused = other.run()
    assert task_states(refused)["snapshot"] == "failed"
    with pytest.raises(BinlogConfigError, match=f"belongs to pipeline '{items.name}'"):
        check_target(other_conf["pipeline"], None, items.target, [f"{items.db}.items"])
    items.sql("UPDATE items SET v = 'still-a' WHERE id = 1")
    items.run_window()  # the owner carries on untouched
    assert items.mismatches("items") == []

    assert admin(["hand-over", "--target", items.target, "--table", f"{items.db}.items",
                        "--to", other_conf["pipeline"]]) == 0  # fmt: skip
    assert f"now belongs to {other_conf['pipeline']}" in capsys.readouterr().out
    taken = other.run()  # its first snapshot loads the table it now owns
    assert taken.state == "success", task_states(taken)
    items.sql("UPDATE items SET v = 'by-b' WHERE id = 1")
    assert other.run().state == "success"
    assert items.mismatches("items") == []
    assert task_states(items.runner.run())["merge"] == "failed"  # the old owner is refused now
