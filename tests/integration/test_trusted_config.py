"""A DAG run's configuration cannot redirect a pipeline (issue 30, item 5; ADR 0034).

Whoever may trigger a DAG with a configuration sets ``dag_run.conf``, which Airflow merges into ``params``
(``[core] dag_run_conf_overrides_params``). The example DAGs take the pipeline, its tables, keys, staging and
target from the DAG file, and the operators refuse templates of these arguments that read the run's context;
a re-snapshot's tables, chosen per run, must be tables of the pipeline's selection.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from airflow_provider_binlog.exceptions import BinlogConfigError
from airflow_provider_binlog.testing.mariadb import LocalMariaDB

pytestmark = pytest.mark.integration

EXAMPLES = Path(__file__).resolve().parents[2] / "example_dags"
SETTINGS = {
    "BINLOG_CDC_PIPELINE": "orders_cdc",
    "BINLOG_CDC_TABLES": "shop.orders,shop.log",  # keys may name only tables the selection takes
    "BINLOG_CDC_STAGING": "/lake/staging",
    "BINLOG_CDC_TARGET": "/lake/target",
    "BINLOG_CDC_KEYS": '{"shop.log": ["at"]}',
}
EVIL = {
    "pipeline": "evil",
    "tables": "mysql.user,evil.*",
    "selection": "mysql.*",
    "staging": "s3://aws_default@evil-bucket/staging",
    "target": "/tmp/evil-target",
    "keys": {"mysql.user": ["evil"]},
    "keyless_tables": "fail",
    "mode": "requested",
}
"""A run configuration naming another pipeline, tables, key, staging and target."""
TRUSTED = ("pipeline", "tables", "selection", "staging_uri", "target_path", "keys")


class XComStub:
    """The ``ti`` of the template context: the merge's window comes from the extract's XCom."""

    def xcom_pull(self, task_ids: str) -> dict[str, Any]:
        return {"window_uri": "/lake/staging/orders_cdc/window=7"}


@pytest.fixture
def bag(monkeypatch: pytest.MonkeyPatch) -> Any:
    from airflow.dag_processing.dagbag import DagBag

    for name, value in SETTINGS.items():
        monkeypatch.setenv(name, value)
    bag = DagBag(dag_folder=str(EXAMPLES))
    assert bag.import_errors == {}
    return bag


@pytest.mark.parametrize(
    "dag_id", ["binlog_cdc", "binlog_resnapshot", "binlog_maintenance", "binlog_validate", "binlog_monitor"]
)
def test_a_run_configuration_does_not_redirect_the_example_dags(bag: Any, dag_id: str) -> None:
    from airflow.sdk.definitions.param import process_params

    dag = bag.dags[dag_id]
    for task in dag.tasks:
        context = {
            "params": process_params(dag, task, EVIL, suppress_exception=False),
            "dag_run": SimpleNamespace(conf=EVIL),
            "ti": XComStub(),
        }
        task.render_template_fields(context)
        rendered = {name: getattr(task, name) for name in TRUSTED if getattr(task, name, None) is not None}
        if getattr(task, "selection", None) is not None:
            assert rendered.pop("tables") == EVIL["tables"]  # chosen per run; execute checks it (test below)
        if (
            dag_id == "binlog_validate"
        ):  # a filter over the pipeline's own target tables: it compares, reads only
            assert rendered.pop("tables") == EVIL["tables"]
        assert "evil" not in repr(rendered), (task.task_id, rendered)
        assert "mysql" not in repr(rendered), (task.task_id, rendered)
        if "pipeline" in rendered:
            assert rendered["pipeline"] == "orders_cdc"
        for name, expected in (("staging_uri", "/lake/staging"), ("target_path", "/lake/target")):
            assert rendered.get(name, expected) == expected


@pytest.mark.parametrize(
    "template",
    [
        "{{ params.pipeline }}",
        "{{ params['staging'] }}",
        "{{ dag_run.conf['target'] }}",
        "{{ dag_run.conf.get('x') or 'p' }}",
        "{% if params.x %}a{% endif %}b",
        "{{ ti.xcom_pull(task_ids='t') }}",
    ],
)
def test_the_operators_refuse_trusted_arguments_templated_from_the_run(template: str) -> None:
    from airflow_provider_binlog.operators import (
        BinlogCommitOperator,
        BinlogExtractOperator,
        BinlogMaintenanceOperator,
        BinlogMergeOperator,
        BinlogSnapshotOperator,
    )

    builds = [
        lambda: BinlogExtractOperator(task_id="e", pipeline=template, tables="shop.*", staging_uri="/s"),
        lambda: BinlogExtractOperator(task_id="e", pipeline="p", tables=[template], staging_uri="/s"),
        lambda: BinlogExtractOperator(task_id="e", pipeline="p", tables="shop.*", staging_uri=template),
        lambda: BinlogMergeOperator(task_id="m", pipeline="p", window_uri="/w", target_path=template),
        lambda: BinlogCommitOperator(task_id="c", pipeline="p", target_path=template),
        lambda: BinlogMaintenanceOperator(task_id="x", pipeline="p", staging_uri=template, target_path="/t"),
        lambda: BinlogSnapshotOperator(
            task_id="s", pipeline="p", tables=template, staging_uri="/s", target_path="/t"
        ),
        lambda: BinlogSnapshotOperator(
            task_id="s", pipeline="p", tables="a.b", selection=template, staging_uri="/s", target_path="/t"
        ),
    ]
    for build in builds:
        with pytest.raises(ValueError, match="dag_run.conf overrides params") as caught:
            build()
        assert "docs/adr/0034" in str(caught.value)


def test_trusted_arguments_may_come_from_variables_connections_and_constants() -> None:
    from airflow_provider_binlog.operators import BinlogExtractOperator, BinlogSnapshotOperator

    BinlogExtractOperator(
        task_id="e",
        pipeline="orders",
        tables="{{ var.value.binlog_tables }}",
        staging_uri="s3://{{ conn.lake.host }}/{{ var.value.get('prefix', 'staging') }}",
    )
    # a re-snapshot's tables may be a param when the selection they must lie within is the author's
    task = BinlogSnapshotOperator(
        task_id="s",
        pipeline="orders",
        selection="shop.*",
        tables="{{ params.tables }}",
        mode="{{ params.mode }}",
        staging_uri="/s",
        target_path="/t",
    )
    assert "selection" in task.template_fields


def test_a_resnapshot_of_tables_outside_the_selection_reads_nothing(
    mariadb: LocalMariaDB, source_db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow_provider_binlog.operators import BinlogSnapshotOperator

    monkeypatch.setenv("AIRFLOW_CONN_BINLOG_DEFAULT", mariadb.uri())
    mariadb.execute(
        f"CREATE TABLE {source_db}.mine (id INT PRIMARY KEY)",
        f"CREATE TABLE {source_db}.secret (id INT PRIMARY KEY)",
    )
    staging, target = tmp_path / "staging", tmp_path / "target"
    task = BinlogSnapshotOperator(
        task_id="snapshot",
        pipeline=f"p_{source_db}",
        selection=f"{source_db}.*,!{source_db}.secret",
        tables=f"{source_db}.*",  # as a triggered run's params would name them
        mode="requested",
        staging_uri=str(staging),
        target_path=str(target),
    )
    with pytest.raises(BinlogConfigError) as caught:
        task.execute({"run_id": "run_1"})
    message = str(caught.value)
    assert f"does not select {source_db}.secret" in message
    assert "Nothing was read" in message
    assert f"{source_db}.mine" not in message.split("(its selection")[0]
    assert not staging.exists()
    assert not target.exists()
