"""The local Spark Connect server forks its Python workers from the provider's daemon, reader preloaded."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_provider_binlog.jobs.python_daemon import PRELOADED

pytestmark = pytest.mark.integration


def test_python_workers_start_with_the_snapshot_code_imported(spark: Any) -> None:
    def report(batches: Any) -> Any:
        import gc
        import os
        import sys

        import pyarrow as pa

        with open(f"/proc/{os.getppid()}/cmdline", "rb") as f:
            parent = f.read().replace(b"\0", b" ").decode()
        for batch in batches:
            yield pa.RecordBatch.from_pydict(
                {
                    "id": batch.column("id"),
                    "parent": [parent] * batch.num_rows,
                    # gc.freeze() runs in the daemon after its imports, before any fork: a worker of
                    # pyspark's own daemon has nothing frozen, whatever it imported since.
                    "frozen": [gc.get_freeze_count()] * batch.num_rows,
                    "modules": [",".join(sorted(m for m in sys.modules if m in PRELOADED))] * batch.num_rows,
                }
            )

    rows = (
        spark.range(0, 2, 1, 2)
        .mapInArrow(report, "id long, parent string, frozen long, modules string")
        .collect()
    )

    for row in rows:
        assert "-m airflow_provider_binlog.jobs.python_daemon" in row["parent"]
        assert row["frozen"] > 10_000
        assert row["modules"].split(",") == sorted(PRELOADED)
