"""A snapshot read task reads all its chunks over one pair of source connections (real MariaDB, no Spark)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_provider_binlog.snapshot.chunks import chunk_file, read_task
from airflow_provider_binlog.snapshot.plan import TablePlan
from airflow_provider_binlog.testing.mariadb import LocalMariaDB
from airflow_provider_binlog.testing.snapshots import write_plan

pytestmark = pytest.mark.integration


def connections_opened(mariadb: LocalMariaDB) -> int:
    """Return the server's ``Connections`` status: connection attempts so far (this query's included)."""
    ((_, value),) = mariadb.execute("SHOW GLOBAL STATUS LIKE 'Connections'")
    return int(value)


def test_a_read_task_reads_its_chunks_over_one_pair_of_connections(
    mariadb: LocalMariaDB, source_db: str, tmp_path: Path
) -> None:
    mariadb.execute(
        f"CREATE TABLE `{source_db}`.t (id INT PRIMARY KEY, v VARCHAR(10))",
        f"INSERT INTO `{source_db}`.t SELECT seq, CONCAT('v', seq) FROM seq_1_to_100",
        database=source_db,
    )
    name = f"{source_db}.t"
    folder = tmp_path / "snapshot=1"
    folder.mkdir()
    uri = f"file://{folder}"
    plan = write_plan(mariadb.connection_kwargs(), uri, pipeline="chunks", keys={name: ["id"]}, chunk_rows=30)
    tables = [TablePlan.from_json(t) for t in plan["tables"]]
    pending = [(0, chunk) for chunk in tables[0].chunks]
    assert len(pending) >= 4

    # The function a Spark task runs, here in this process: one task (id 0) reads every chunk.
    read = read_task(mariadb.connection_kwargs(), "mariadb", uri, 1, None, tables, pending, 1)
    before = connections_opened(mariadb)
    done = pa.Table.from_batches(list(read(iter([pa.RecordBatch.from_pydict({"id": [0]})]))))
    opened = connections_opened(mariadb) - before - 1  # less the second status query's own

    assert opened == 2  # the watermark / information_schema connection and the row reader's
    assert done.column("chunk_index").to_pylist() == [c.index for c in tables[0].chunks]
    assert sum(done.column("rows").to_pylist()) == 100
    ids = [
        i
        for c in tables[0].chunks
        for i in pq.read_table(folder / chunk_file(name, c.index))["id"].to_pylist()
    ]
    assert ids == list(range(1, 101))
