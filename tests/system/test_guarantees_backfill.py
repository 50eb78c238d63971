"""Guarantee 4 of docs/guarantees.md: interval windows, backfills in any order, purged ranges fail fast.

The example DAG runs with ``BINLOG_CDC_CUT_BY=interval`` and 10-second data intervals
(``BINLOG_CDC_SCHEDULE=PT10S``); each dag.test() at logical date ``L`` is the run of ``[L - 10 s, L)``.
"""

from __future__ import annotations

import time
from typing import Any

import pendulum
import pymysql
import pytest
from conftest import (
    REPO,
    STEP,
    DagRunner,
    load_module,
    sleep_until,
    staged_commit_times,
    stored_state,
    write_in_intervals,
)

from airflow_provider_binlog.testing.mariadb import LocalMariaDB
from airflow_provider_binlog.verify import compare_table

pytestmark = [pytest.mark.system, pytest.mark.slow]


@pytest.fixture
def interval_dag(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("BINLOG_CDC_CUT_BY", "interval")
    monkeypatch.setenv("BINLOG_CDC_SCHEDULE", f"PT{STEP}S")
    return load_module(REPO / "example_dags" / "binlog_cdc.py").dag


@pytest.fixture
def items(connections: LocalMariaDB, scratch_db: str) -> str:
    connections.execute(f"CREATE TABLE {scratch_db}.items (id INT PRIMARY KEY, v VARCHAR(20))")
    return scratch_db


def test_backfilled_intervals_tile_the_binlog_and_merge_in_any_order(
    connections: LocalMariaDB,
    items: str,
    pipeline_dirs: dict[str, str],
    interval_dag: Any,
    capfd: pytest.CaptureFixture[str],
) -> None:
    from deltalake import DeltaTable

    from airflow_provider_binlog.target import table_uri

    pipeline = f"p_{items}"
    runner = DagRunner(interval_dag, {"pipeline": pipeline, "tables": f"{items}.*", **pipeline_dirs})
    base = write_in_intervals(connections, f"{items}.items")
    sleep_until(base.add(seconds=3 * STEP + 6))
    runs = {k: (base.add(seconds=STEP * k), pendulum.now("UTC")) for k in (1, 2, 3)}

    for k in (3, 1, 2):  # newest first, then the backfill of the two before it
        assert runner.run(runs[k]).state == "success", f"interval {k}"

    with pymysql.connect(**connections.connection_kwargs()) as conn:
        result = compare_table(conn, pipeline_dirs["target"], f"{items}.items")
    assert result.matched, str(result)
    state = stored_state(pipeline)
    assert state is not None
    windows = sorted(state["windows"], key=lambda w: w["seq"])
    assert [w["status"] for w in windows] == ["merged"] * 3
    assert [w["data_interval_end"] for w in windows] == [
        base.add(seconds=STEP * k).isoformat() for k in (1, 2, 3)
    ]
    assert windows[0]["end"] == windows[1]["start"]
    assert windows[1]["end"] == windows[2]["start"], "consecutive intervals must tile the binlog"
    assert [w["rows"] for w in windows] == [101, 50 + 11 + 50, 10 + 2 + 10]
    for window in windows:
        start, end = (pendulum.parse(window[f"data_interval_{side}"]) for side in ("start", "end"))
        assert all(start <= ts < end for ts in staged_commit_times(window["manifest_uri"])), window["seq"]
    # the pipeline started at its first window (interval 3); the backfilled ones lie behind it
    assert state["checkpoint"]["position"] == windows[2]["end"]

    version = DeltaTable(table_uri(pipeline_dirs["target"], f"{items}.items")).version()
    assert runner.run(runs[1]).state == "success"  # clear and re-run an old interval after newer ones
    assert DeltaTable(table_uri(pipeline_dirs["target"], f"{items}.items")).version() == version
    with pymysql.connect(**connections.connection_kwargs()) as conn:
        assert compare_table(conn, pipeline_dirs["target"], f"{items}.items").matched

    connections.purge_binlogs_before_current()
    capfd.readouterr()
    started = time.monotonic()
    purged = runner.run((base, pendulum.now("UTC")))  # the interval before the first: its binlogs are gone
    states = {ti.task_id: str(ti.state) for ti in purged.get_task_instances()}
    # the purge-risk guard in front of the extract sees the purge before anything is read
    assert (states["purge_risk"], states["extract"]) == ("failed", "upstream_failed")
    assert time.monotonic() - started < 60, "a purged range must fail fast, without retries"
    output = capfd.readouterr().out
    assert "BinlogPurgedError" in output
    assert 'mode="purged"' in output
    after = stored_state(pipeline)
    assert after is not None
    assert len(after["windows"]) == 3
    assert after["checkpoint"] == state["checkpoint"]
