"""The state and the folders a task uses cannot be turned against the pipeline (issue 30, items 6 and 8).

On the private MariaDB, without Spark: another account on the source cannot stall the state lock; a hand-edited
state naming locations outside the task's roots is refused before anything is read there; maintenance leaves a
table another pipeline owns alone; a pipeline name that would leave the staging root creates nothing.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pymysql
import pytest

from airflow_provider_binlog.contract.positions import BinlogPosition
from airflow_provider_binlog.exceptions import PipelineNameError, StateError
from airflow_provider_binlog.hooks.binlog import BinlogHook
from airflow_provider_binlog.pipeline.lock import SourceStateLock, legacy_lock_name, lock_name
from airflow_provider_binlog.pipeline.state import StateManager
from airflow_provider_binlog.testing.mariadb import LocalMariaDB
from airflow_provider_binlog.testing.stores import DictStore

pytestmark = pytest.mark.integration

HEAD = BinlogPosition("mariadb-bin.000001", 4)


@pytest.fixture
def source(mariadb: LocalMariaDB, monkeypatch: pytest.MonkeyPatch) -> LocalMariaDB:
    """``binlog_default`` points at the private server (no Spark connection: nothing here merges)."""
    monkeypatch.setenv("AIRFLOW_CONN_BINLOG_DEFAULT", mariadb.uri())
    return mariadb


@pytest.fixture
def intruder(source: LocalMariaDB) -> Iterator[pymysql.connections.Connection]:
    """A session of another account on the source, with no privilege at all."""
    source.execute("CREATE USER IF NOT EXISTS 'intruder'@'%' IDENTIFIED BY 'intruder-pw'")
    conn = pymysql.connect(**source.connection_kwargs(user="intruder", password="intruder-pw"))
    try:
        yield conn
    finally:
        conn.close()
        source.execute("DROP USER IF EXISTS 'intruder'@'%'")


def test_another_account_holding_the_guessable_lock_names_cannot_stall_state_writes(
    source: LocalMariaDB, intruder: pymysql.connections.Connection
) -> None:
    pipeline = "guarded"
    guesses = [legacy_lock_name(pipeline), lock_name(pipeline, ""), lock_name(pipeline, pipeline)]
    with intruder.cursor() as cur:
        for name in guesses:  # GET_LOCK needs no privilege: the account holds every name it can compute
            cur.execute("SELECT GET_LOCK(%s, 0)", (name,))
            assert cur.fetchone() == (1,)
    lock = SourceStateLock(BinlogHook(pipeline=pipeline), wait_seconds=2)
    assert lock.name not in guesses
    manager = StateManager(pipeline, DictStore(), lock=lock)
    started = time.monotonic()
    written = manager.save(manager.initial("mariadb:1@h:3306", "mariadb", HEAD), expected_revision=None)
    assert written.revision == 1
    assert time.monotonic() - started < 2  # it never waited on the intruder's locks


def test_the_lock_name_follows_the_connection_secret_extra(
    source: LocalMariaDB, monkeypatch: pytest.MonkeyPatch
) -> None:
    by_password = SourceStateLock(BinlogHook(pipeline="p")).name
    assert by_password == lock_name("p", source.root_password)
    uri = f"{source.uri()}?state_lock_secret=s3cret"
    monkeypatch.setenv("AIRFLOW_CONN_BINLOG_DEFAULT", uri)
    assert SourceStateLock(BinlogHook(pipeline="p")).name == lock_name("p", "s3cret") != by_password


def _state_variable(monkeypatch: pytest.MonkeyPatch, pipeline: str, state: Any) -> None:
    """Store ``state`` as the pipeline's Variable (an environment Variable: read-only, as tasks see it)."""
    monkeypatch.setenv(f"AIRFLOW_VAR_BINLOG_STATE__{pipeline.upper()}", state.model_dump_json())


def test_a_snapshot_refuses_a_state_naming_a_staging_folder_outside_its_root(
    source: LocalMariaDB, source_db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow_provider_binlog.operators import BinlogSnapshotOperator
    from airflow_provider_binlog.pipeline.ledger import Snapshot

    source.execute(f"CREATE TABLE {source_db}.t (id INT PRIMARY KEY)")
    pipeline = f"p_{source_db}"
    staging, target, elsewhere = tmp_path / "staging", tmp_path / "target", tmp_path / "elsewhere"
    identity = BinlogHook(pipeline=pipeline).validate_source(tables=[f"{source_db}.*"]).server_identity
    state = StateManager(pipeline, DictStore()).initial(identity, "mariadb", HEAD)
    hand_edited = Snapshot(
        seq=state.next_seq,
        tables=[f"{source_db}.t"],
        start=HEAD,
        run_id="run_1",
        started_at="2026-01-01T00:00:00+00:00",
        staging_uri=f"{staging}/{pipeline}/../../elsewhere/snapshot=1",
    )
    _state_variable(monkeypatch, pipeline, state.model_copy(update={"snapshots": [hand_edited]}))
    task = BinlogSnapshotOperator(
        task_id="snapshot",
        pipeline=pipeline,
        tables=f"{source_db}.*",
        staging_uri=str(staging),
        target_path=str(target),
    )
    with pytest.raises(StateError) as caught:
        task.execute({"run_id": "run_1"})
    message = str(caught.value)
    assert f"binlog_state__{pipeline}" in message
    assert "snapshots[0].staging_uri" in message
    assert "outside" in message
    assert "admin history" in message
    assert not elsewhere.exists()
    assert not target.exists()


def test_maintenance_leaves_a_table_another_pipeline_owns_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    from airflow_provider_binlog.contract.delta import OWNER_PROPERTY
    from airflow_provider_binlog.operators import BinlogMaintenanceOperator
    from airflow_provider_binlog.target import table_uri, target_root

    staging, target = tmp_path / "staging", tmp_path / "target"
    rows = pa.table({"id": pa.array([1, 2], pa.int32())})
    for table, owner in (("shop.mine", "cleaner"), ("shop.theirs", "other")):
        write_deltalake(table_uri(str(target), table), rows)
        DeltaTable(table_uri(str(target), table)).alter.set_table_properties(
            {OWNER_PROPERTY: owner}, raise_if_not_exists=False
        )
        stray = Path(table_uri(str(target), table)) / "part-stray.parquet"  # no commit lists it
        stray.write_bytes(b"x")
        os.utime(stray, (time.time() - 7200, time.time() - 7200))
    state = StateManager("cleaner", DictStore()).initial("mariadb:1@h:3306", "mariadb", HEAD)
    _state_variable(
        monkeypatch, "cleaner", state.with_target(target_root(str(target)), ["shop.mine", "shop.theirs"])
    )
    task = BinlogMaintenanceOperator(
        task_id="maintenance",
        pipeline="cleaner",
        staging_uri=str(staging),
        target_path=str(target),
        target_retention_hours=1,
        compact=False,
    )
    report = task.execute({"run_id": "run_1"})
    assert report["target"]["not_owned"] == {"shop.theirs": "other"}
    assert list(report["target"]["tables"]) == ["shop.mine"]
    assert not (Path(table_uri(str(target), "shop.mine")) / "part-stray.parquet").exists()
    assert (Path(table_uri(str(target), "shop.theirs")) / "part-stray.parquet").exists()  # not vacuumed
    assert "belongs to pipeline 'other'" in capsys.readouterr().out  # the task log names it and its owner


@pytest.mark.parametrize("operator", ["extract", "snapshot", "maintenance"])
def test_a_pipeline_name_leaving_the_staging_root_creates_no_folder(
    operator: str, source: LocalMariaDB, source_db: str, tmp_path: Path
) -> None:
    from airflow_provider_binlog.operators import (
        BinlogExtractOperator,
        BinlogMaintenanceOperator,
        BinlogSnapshotOperator,
    )

    source.execute(f"CREATE TABLE {source_db}.t (id INT PRIMARY KEY)")
    staging = tmp_path / "a" / "b" / "staging"
    common: dict[str, Any] = {"task_id": operator, "pipeline": "../../x", "staging_uri": str(staging)}
    tables = {"tables": f"{source_db}.*"}
    task = {
        "extract": lambda: BinlogExtractOperator(**common, **tables),
        "snapshot": lambda: BinlogSnapshotOperator(**common, **tables, target_path=str(tmp_path / "target")),
        "maintenance": lambda: BinlogMaintenanceOperator(**common, target_path=str(tmp_path / "target")),
    }[operator]()
    with pytest.raises(PipelineNameError, match="must be non-empty letters"):
        task.execute({"run_id": "run_1"})
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")) == []
