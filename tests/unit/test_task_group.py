"""BinlogPipeline: a pipeline's tasks from one validated configuration, built offline at parse time."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pendulum
import pytest
from airflow.sdk import DAG

from airflow_provider_binlog.exceptions import BinlogConfigError
from airflow_provider_binlog.task_group import BinlogPipeline, PipelineConfig

SETTINGS: dict[str, Any] = {
    "pipeline": "shop",
    "tables": "shop.*, !shop.tmp_*",
    "staging": "/lake/staging",
    "target": "/lake/target",
}


@pytest.fixture(autouse=True)
def offline(no_io_at_parse_time: None) -> None:
    """Every DAG here is defined offline: a connection, Variable or database access fails the test."""


def _dag(**kwargs: Any) -> DAG:
    return DAG("cdc", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"), **kwargs)


def _edges(dag: DAG) -> set[tuple[str, str]]:
    return {(t.task_id, d) for t in dag.tasks for d in t.downstream_task_ids}


def test_a_pipeline_is_one_call_with_its_tasks_wired_and_the_window_pulled_from_its_extract() -> None:
    with _dag() as dag:
        group = BinlogPipeline(**SETTINGS, keys={"shop.log": ["at", "seq"]}, write_mode="copy_on_write")

    assert group.group_id == "shop"
    assert sorted(dag.task_ids) == sorted(
        f"shop.{t}" for t in ("purge_risk", "snapshot", "extract", "merge", "commit", "quarantine")
    )
    chain = ["purge_risk", "snapshot", "extract", "merge", "commit", "quarantine"]
    assert _edges(dag) == {(f"shop.{a}", f"shop.{b}") for a, b in zip(chain, chain[1:], strict=False)}
    merge = dag.get_task("shop.merge")
    assert merge.window_uri == "{{ ti.xcom_pull(task_ids='shop.extract')['window_uri'] }}"
    assert (merge.write_mode, merge.target_path) == ("copy_on_write", "/lake/target")
    extract, snapshot = dag.get_task("shop.extract"), dag.get_task("shop.snapshot")
    assert extract.staging_uri == snapshot.staging_uri == "/lake/staging"
    for task in (extract, snapshot, merge):
        assert task.keys == {"shop.log": ["at", "seq"]}  # given once, used by every task that needs it
    assert dag.get_task("shop.purge_risk").tables == SETTINGS["tables"]


def test_two_pipelines_share_a_dag_and_a_group_can_keep_the_example_task_ids() -> None:
    with _dag() as dag:
        BinlogPipeline(**SETTINGS)
        BinlogPipeline(**{**SETTINGS, "pipeline": "crm", "tables": "crm.*", "staging": "/lake/crm-staging"})
    assert len(dag.tasks) == 12
    assert dag.get_task("crm.merge").window_uri == "{{ ti.xcom_pull(task_ids='crm.extract')['window_uri'] }}"

    with _dag() as single:
        BinlogPipeline(PipelineConfig(**SETTINGS), prefix_group_id=False)
    assert "extract" in single.task_ids
    assert single.get_task("merge").window_uri == "{{ ti.xcom_pull(task_ids='extract')['window_uri'] }}"


def test_history_settings_reach_the_extract_and_the_snapshot() -> None:
    with _dag() as dag:
        BinlogPipeline(**SETTINGS, history="changelog", table_history={"shop.log": "off"})
    for task in ("shop.extract", "shop.snapshot"):
        history = dag.get_task(task).history
        assert (history.kinds_for("shop.orders"), history.kinds_for("shop.log")) == (("changelog",), ())


def test_an_interval_pipeline_takes_no_snapshot_and_its_check_counts_none() -> None:
    with _dag() as dag:
        BinlogPipeline(**SETTINGS, cut_by="interval", deferrable=True, spark_conn_id="spark_connect")
    assert "shop.snapshot" not in dag.task_ids
    assert ("shop.purge_risk", "shop.extract") in _edges(dag)
    assert dag.get_task("shop.purge_risk").tables is None
    merge = dag.get_task("shop.merge")
    assert (merge.deferrable, merge._conn_id) == (
        True,
        "spark_connect",
    )  # SparkSubmitOperator keeps it private
    assert dag.get_task("shop.extract").cut_by == "interval"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"snapshot_chunk_rows": "many"}, "snapshot_chunk_rows: Input should be a valid integer"),
        ({"snapshot_connections": 0}, "snapshot_connections: Input should be greater than 0"),
        ({"tabels": "shop.*"}, "tabels: Extra inputs are not permitted"),
        ({"tables": "orders"}, "table selection entry 'orders' must be 'db.table'"),
        ({"tables": "!shop.tmp"}, "only excludes tables"),
        ({"pipeline": "../etc"}, "pipeline name '../etc' must be non-empty letters"),
        ({"write_mode": "mor"}, "write_mode: Input should be 'copy_on_write', 'merge_on_read' or 'auto'"),
        (
            {"keys": {"crm.log": ["id"]}},
            "keys or table_history name crm.log, which the table selection shop.*, !shop.tmp_* does not",
        ),
        (
            {"table_history": {"crm.log": "changelog"}},
            "table_history name crm.log, which the table selection",
        ),
        ({"history": "audit"}, "['audit'] is not a history kind"),
        ({"keys": {"shop.log": []}}, "keys['shop.log'] must be a non-empty list of column names"),
        ({"target": "/lake/staging/delta"}, "must be separate roots, neither inside the other"),
        (
            {"cut_by": "interval", "snapshot_chunk_rows": 10},
            "snapshot_chunk_rows set on a pipeline cutting by",
        ),
    ],
)
def test_each_wrong_setting_is_named_when_the_dag_file_is_parsed(
    change: dict[str, Any], message: str
) -> None:
    with _dag(), pytest.raises(BinlogConfigError, match="pipeline '.*'") as err:
        BinlogPipeline(**{**SETTINGS, **change})
    assert message in str(err.value)


def test_every_problem_is_listed_at_once_and_a_group_id_airflow_refuses_is_asked_for() -> None:
    with _dag(), pytest.raises(BinlogConfigError) as err:
        BinlogPipeline(**{**SETTINGS, "retries": -1, "cut_by": "tail"})
    assert "retries:" in str(err.value)
    assert "cut_by:" in str(err.value)
    with _dag(), pytest.raises(BinlogConfigError, match="cannot be a task group id .* pass group_id"):
        BinlogPipeline(**{**SETTINGS, "pipeline": "заказы"})
    with _dag() as dag:
        BinlogPipeline(**{**SETTINGS, "pipeline": "заказы"}, group_id="orders")
    assert dag.get_task("orders.extract").pipeline == "заказы"
    with _dag(), pytest.raises(BinlogConfigError, match="a config or settings, not both"):
        BinlogPipeline(PipelineConfig(**SETTINGS), retries=1)


def test_the_readme_s_ten_line_dag_builds_a_pipeline() -> None:
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    section = readme[readme.index("## A pipeline in ten lines") :]
    start = section.index("```python") + len("```python")
    code = section[start : section.index("```", start)]
    assert len([line for line in code.splitlines() if line.strip()]) <= 10
    namespace: dict[str, Any] = {}
    exec(compile(code, "README.md", "exec"), namespace)  # noqa: S102 (the project's own README example)
    dag = namespace["dag"]
    assert len(dag.tasks) == 6
    assert dag.get_task("shop.merge").target_path == "s3://lake/cdc"
