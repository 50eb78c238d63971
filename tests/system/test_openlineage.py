"""OpenLineage events of the example DAG's operators, written by the OpenLineage provider's file transport."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import Pipeline, stored_state

from airflow_provider_binlog.testing.mariadb import LocalMariaDB

pytestmark = pytest.mark.system


def lineage_events(path: Path) -> dict[tuple[str, str], dict[str, Any]]:
    """Return the events of the file transport by ``(task id, eventType)`` (the newest of each)."""
    events = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return {
        (e["job"]["name"].split(".", 1)[1], e["eventType"]): e for e in events if "." in e["job"]["name"]
    }  # the DAG run's own events are named by the DAG id alone


def datasets(event: dict[str, Any], side: str) -> list[tuple[str, str]]:
    return [(d["namespace"], d["name"]) for d in event[side]]


def schema(dataset: dict[str, Any]) -> list[tuple[str, str]]:
    return [(f["name"], f["type"]) for f in dataset["facets"]["schema"]["fields"]]


def rows_of(dataset: dict[str, Any]) -> int:
    return int(dataset["outputFacets"]["outputStatistics"]["rowCount"])


def test_operators_emit_source_staging_and_target_datasets_with_the_binlog_range(
    connections: LocalMariaDB,
    scratch_db: str,
    pipeline_dirs: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    events_file = tmp_path / "openlineage.jsonl"
    transport = {"type": "file", "log_file_path": str(events_file), "append": True}
    monkeypatch.setenv("AIRFLOW__OPENLINEAGE__TRANSPORT", json.dumps(transport))
    monkeypatch.setenv("AIRFLOW__OPENLINEAGE__NAMESPACE", "binlog_test")
    table = f"{scratch_db}.items"
    items = Pipeline(connections, scratch_db, pipeline_dirs)
    items.sql("CREATE TABLE items (id INT PRIMARY KEY, v VARCHAR(10))", "INSERT INTO items VALUES (1, 'a')")
    pipeline, runner = items.name, items.runner
    # each run in its own process: the OpenLineage listener reads its configuration once per process
    assert runner.start_in_child(runner.next_dates()).wait(timeout=900) == 0  # snapshot of 1 row
    snapshot = lineage_events(events_file)[("snapshot", "COMPLETE")]
    source = (f"mysql://127.0.0.1:{connections.port}", table)
    staging_root = Path(pipeline_dirs["staging"]) / pipeline
    target = ("file", f"{pipeline_dirs['target']}/{scratch_db}/items")
    assert datasets(snapshot, "inputs") == [source]
    # MySQL types as the staged manifest records them (a VARCHAR's length there is in bytes: 4 per utf8mb4 char)
    assert [(n, t.split("(")[0]) for n, t in schema(snapshot["inputs"][0])] == [
        ("id", "int"),
        ("v", "varchar"),
    ]
    state = stored_state(pipeline)
    assert state is not None
    snapshot_seq = state["snapshots"][-1]["seq"]
    assert datasets(snapshot, "outputs") == [
        ("file", f"{staging_root}/snapshot={snapshot_seq}/{table}"),
        target,
    ]
    assert [rows_of(d) for d in snapshot["outputs"]] == [1, 1]
    assert schema(snapshot["outputs"][1]) == [("id", "int32"), ("v", "string")]
    facet = snapshot["run"]["facets"]["binlogRange"]
    assert (facet["kind"], facet["seq"], facet["rows"], facet.get("end")) == (
        "snapshot",
        snapshot_seq,
        1,
        None,
    )
    assert facet["start"] == state["snapshots"][-1]["start"]

    events_file.unlink()
    items.sql("INSERT INTO items VALUES (2, 'b'), (3, 'c')", "DELETE FROM items WHERE id = 1")
    assert runner.start_in_child(runner.next_dates()).wait(timeout=900) == 0
    events = lineage_events(events_file)
    state = stored_state(pipeline)
    assert state is not None
    window = state["windows"][-1]
    staged = ("file", f"{staging_root}/window={window['seq']}/{table}")
    assert datasets(events[("extract", "START")], "inputs") == []  # a pattern names no table before the read
    extract, merge, commit = (events[(task, "COMPLETE")] for task in ("extract", "merge", "commit"))
    assert (datasets(extract, "inputs"), datasets(extract, "outputs")) == ([source], [staged])
    assert (datasets(merge, "inputs"), datasets(merge, "outputs")) == ([staged], [target])
    assert (datasets(commit, "inputs"), datasets(commit, "outputs")) == ([staged], [target])
    assert datasets(events[("merge", "START")], "outputs") == [target]
    assert [rows_of(e["outputs"][0]) for e in (extract, merge, commit)] == [3, 3, 3]
    for event in (extract, merge, commit):
        facet = event["run"]["facets"]["binlogRange"]
        assert (facet["pipeline"], facet["kind"], facet["seq"]) == (pipeline, "window", window["seq"])
        assert (facet["start"], facet["end"]) == (window["start"], window["end"])
        assert (facet["rows"], facet["transactions"]) == (3, 2)
        assert facet["last_commit_ts"] == window["last_commit_ts"]
