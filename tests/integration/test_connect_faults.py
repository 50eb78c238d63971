"""A Spark Connect server that dies during a merge: the task fails with a retryable error, commits nothing, and
its retry on a server that answers again merges the window (issue 12, guarantee 2 of docs/guarantees.md)."""

from __future__ import annotations

import os
import signal
import threading
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")
deltalake = pytest.importorskip("deltalake")

from airflow.sdk.exceptions import AirflowFailException  # noqa: E402
from test_merge import PIPELINE, order, orders, rows, stage_window  # noqa: E402

from airflow_provider_binlog.contract.delta import already_merged  # noqa: E402
from airflow_provider_binlog.exceptions import MergeError  # noqa: E402
from airflow_provider_binlog.jobs.merge.files import STAGING_DIR  # noqa: E402
from airflow_provider_binlog.target import read_table, table_uri  # noqa: E402
from airflow_provider_binlog.testing.spark_connect import LocalSparkConnect  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROWS = 20_000


def kill_when_writing(
    server: LocalSparkConnect, table_folder: Path, timeout: float = 120
) -> threading.Thread:
    """SIGKILL the server's process group once the merge's Spark write shows up under ``table_folder``."""

    def watch() -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if (table_folder / STAGING_DIR).exists():
                assert server.process is not None
                os.killpg(server.process.pid, signal.SIGKILL)
                return
            time.sleep(0.005)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def test_a_connect_server_killed_during_the_merge_is_a_retryable_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow_provider_binlog.operators.merge import BinlogMergeOperator

    window = stage_window(
        tmp_path / "staging", 1, orders([("c", order(i, "new", f"{i}.00")) for i in range(1, ROWS + 1)])
    )
    target = str(tmp_path / "target")
    task: dict[str, Any] = {
        "task_id": "merge",
        "pipeline": PIPELINE,
        "window_uri": window,
        "target_path": target,
    }
    table = Path(table_uri(target, "shop.orders"))

    with LocalSparkConnect(conf={"spark.sql.shuffle.partitions": "4"}) as server:
        monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", server.connection_json())
        killer = kill_when_writing(server, table)
        started = time.monotonic()
        with pytest.raises(MergeError) as failure:
            BinlogMergeOperator(**task).execute(context={})
        failed_after = time.monotonic() - started
        killer.join()
    print(f"failed {failed_after:.1f} s after the start: {failure.value}")
    assert not isinstance(failure.value, AirflowFailException)  # Airflow retries it
    assert "window 1 of pipeline shop_cdc" in str(failure.value)
    assert f"Spark Connect server sc://127.0.0.1:{server.port}/ stopped answering" in str(failure.value)
    # The window's rows were never committed (the table may have been created, empty, before the kill).
    assert not (table / "_delta_log").exists() or not already_merged(
        deltalake.DeltaTable(str(table)), PIPELINE, 1
    )
    assert not (table / "_delta_log").exists() or read_table(target, "shop.orders").num_rows == 0
    assert failed_after < 60, "the client waited out pyspark's own retries (10 minutes) on a dead server"

    with LocalSparkConnect(conf={"spark.sql.shuffle.partitions": "4"}) as server:  # the server is back
        monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", server.connection_json())
        result = BinlogMergeOperator(**task).execute(context={})
    assert result["tables"]["shop.orders"]["rows_written"] == ROWS
    assert already_merged(deltalake.DeltaTable(str(table)), PIPELINE, 1)
    merged = rows(read_table(target, "shop.orders"))
    assert len(merged) == ROWS
    assert merged[-1] == {"id": ROWS, "status": "new", "amount": Decimal(f"{ROWS}.00")}
