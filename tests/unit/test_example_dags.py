from __future__ import annotations

from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "example_dags"


def test_example_dags_parse_without_errors_or_io(no_io_at_parse_time: None) -> None:
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(EXAMPLES))
    assert bag.import_errors == {}
    assert "binlog_cdc" in bag.dags
    dag = bag.dags["binlog_cdc"]
    assert dag.max_active_runs == 1
    assert [t.task_id for t in dag.topological_sort()] == [
        "purge_risk",
        "snapshot",
        "extract",
        "merge",
        "commit",
        "quarantine",
    ]
    guard = dag.get_task("purge_risk")
    assert (guard.mode, guard.deferrable, guard.tables) == ("poke", False, "shop.*")
    assert dict(dag.params) == {}  # nothing of the pipeline comes from a run's configuration (ADR 0034)
    assert [t.task_id for t in bag.dags["binlog_maintenance"].tasks] == ["maintenance"]
    assert [t.task_id for t in bag.dags["binlog_validate"].tasks] == ["validate"]
    resnapshot = bag.dags["binlog_resnapshot"]
    assert [t.task_id for t in resnapshot.tasks] == ["snapshot"]
    assert resnapshot.schedule is None
    archive = bag.dags["binlog_archive"]
    assert [t.task_id for t in archive.tasks] == ["archive"]
    assert archive.max_active_runs == 1


def test_interval_pipelines_start_without_a_snapshot(monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow.dag_processing.dagbag import DagBag

    monkeypatch.setenv("BINLOG_CDC_CUT_BY", "interval")
    dag = DagBag(dag_folder=str(EXAMPLES)).dags["binlog_cdc"]
    assert [t.task_id for t in dag.topological_sort()] == [
        "purge_risk",
        "extract",
        "merge",
        "commit",
        "quarantine",
    ]
    assert dag.get_task("purge_risk").tables is None  # no snapshot to count in an interval pipeline


def test_example_dag_settings_default_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow.dag_processing.dagbag import DagBag

    monkeypatch.setenv("BINLOG_CDC_PIPELINE", "orders_cdc")
    monkeypatch.setenv("BINLOG_CDC_TABLES", "shop.orders,shop.customers,shop.log")
    monkeypatch.setenv("BINLOG_CDC_STAGING", "s3://bucket/staging")
    monkeypatch.setenv("BINLOG_CDC_TARGET", "/lake/target")
    monkeypatch.setenv("BINLOG_CDC_KEYS", '{"shop.log": ["at", "seq"]}')
    monkeypatch.setenv("BINLOG_CDC_KEYLESS_TABLES", "fail")
    bag = DagBag(dag_folder=str(EXAMPLES))
    dag = bag.dags["binlog_cdc"]
    extract, snapshot, merge = (dag.get_task(t) for t in ("extract", "snapshot", "merge"))
    assert (extract.pipeline, extract.tables, extract.staging_uri, extract.keyless_tables) == (
        "orders_cdc",
        "shop.orders,shop.customers,shop.log",
        "s3://bucket/staging",
        "fail",
    )
    assert (snapshot.target_path, merge.target_path, dag.get_task("commit").target_path) == (
        "/lake/target",
    ) * 3
    # the keys are named once, and every task that needs a key gets them
    for task in (snapshot, extract, merge):
        assert task.keys == {"shop.log": ["at", "seq"]}
    resnapshot = bag.dags["binlog_resnapshot"].get_task("snapshot")
    assert (resnapshot.pipeline, resnapshot.selection, resnapshot.keys) == (
        "orders_cdc",
        "shop.orders,shop.customers,shop.log",
        {"shop.log": ["at", "seq"]},
    )
    assert (
        resnapshot.tables == "{{ params.tables }}"
    )  # what to read again is chosen per run, within the selection
    maintenance = bag.dags["binlog_maintenance"].get_task("maintenance")
    assert (maintenance.pipeline, maintenance.staging_uri, maintenance.target_path) == (
        "orders_cdc",
        "s3://bucket/staging",
        "/lake/target",
    )


def test_monitor_dag_has_both_sensors_per_pipeline(
    no_io_at_parse_time: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow.dag_processing.dagbag import DagBag

    monkeypatch.setenv("BINLOG_MONITOR_PIPELINES", "orders, customers")
    dag = DagBag(dag_folder=str(EXAMPLES)).dags["binlog_monitor"]
    assert sorted(dag.task_ids) == [
        "health__customers",
        "health__orders",
        "lag__customers",
        "lag__orders",
        "purge_risk__customers",
        "purge_risk__orders",
    ]
    assert dag.timetable.expression == "*/10 * * * *"


def test_downstream_dag_is_scheduled_on_its_target_tables_asset(
    no_io_at_parse_time: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow.dag_processing.dagbag import DagBag
    from airflow.sdk import Asset, AssetAlias

    monkeypatch.setenv("BINLOG_DOWNSTREAM_TABLE", "shop.customers")
    monkeypatch.setenv("BINLOG_CDC_TARGET", "s3://lake/target")
    bag = DagBag(dag_folder=str(EXAMPLES))
    downstream = bag.dags["binlog_downstream"]
    assert list(downstream.timetable.asset_condition.objects) == [Asset("s3://lake/target/shop/customers")]
    cdc = bag.dags["binlog_cdc"]
    for task_id in ("snapshot", "commit"):  # both record changes of target tables
        assert AssetAlias("binlog_target_tables") in cdc.get_task(task_id).outlets
