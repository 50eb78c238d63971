"""A snapshot of a million-row table with a composite key through ``run_snapshot`` (real MariaDB, local
Spark, real Delta tables), and the index-range guard of chunk queries.

The large test checks that every source row arrives exactly once: counts and checksums of the source
(SQL) and the target (Delta) agree, the chunks are disjoint and cover the table, and every staged row
is a snapshot read (``_binlog_op = 'r'``). It prints the measured rows/s (``pytest -s``) but asserts
nothing about time: the machines are shared and noisy.
"""

from __future__ import annotations

import json
import logging
import time
import zlib
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pymysql
import pytest

pytest.importorskip("pyspark")
pytest.importorskip("deltalake")

from airflow_provider_binlog.positions import read_head  # noqa: E402
from airflow_provider_binlog.snapshot.chunks import SNAPSHOT_OP  # noqa: E402
from airflow_provider_binlog.snapshot.plan import chunk_bounds, chunk_query, plan_snapshot  # noqa: E402
from airflow_provider_binlog.spark_jobs.merge import MANIFEST_NAME  # noqa: E402
from airflow_provider_binlog.spark_jobs.snapshot import PLAN_NAME, run_snapshot, write_json  # noqa: E402
from airflow_provider_binlog.target import read_table  # noqa: E402
from airflow_provider_binlog.testing.mariadb import LocalMariaDB  # noqa: E402

pytestmark = [pytest.mark.integration]

PIPELINE = "snap_large"
ROWS = 1_000_000
TENANTS = 7
CHUNK_ROWS = 100_000
CONNECTIONS = 2


def create_tenant_table(mariadb: LocalMariaDB, db: str, rows: int) -> None:
    """Create ``db.t`` with key ``(tenant, id)``: row ``n`` of 1..rows is tenant ``1 + n % 7``, id ``n``.

    In key order each tenant holds ids spread over the whole range, so chunk bounds fall inside tenants
    and chunks cross from one tenant to the next. Loaded without binlogging (it is not what is tested).
    """
    mariadb.execute(
        "SET SESSION sql_log_bin = 0",
        f"CREATE TABLE `{db}`.t (tenant SMALLINT NOT NULL, id INT NOT NULL, v INT NOT NULL, "
        "s VARCHAR(64) NOT NULL, PRIMARY KEY (tenant, id)) ENGINE=InnoDB",
        f"INSERT INTO `{db}`.t SELECT 1 + seq % {TENANTS}, seq, (seq * 7919) % 1000003, "
        f"CONCAT('row-', seq, '-', MD5(seq)) FROM `{db}`.seq_1_to_{rows}",
        f"ANALYZE TABLE `{db}`.t",
    )


def combined_key(data: pa.Table) -> pa.Array:
    """Return ``tenant << 32 | id`` (order of the composite key; both columns are small and non-negative)."""
    tenant = pc.cast(data["tenant"], pa.int64())
    return pc.add(pc.shift_left(tenant, 32), pc.cast(data["id"], pa.int64()))


def row_checksum(data: pa.Table) -> int:
    """Return ``BIT_XOR(CRC32(CONCAT_WS('|', tenant, id, v, s)))`` of the rows, as the source computes it."""
    result = 0
    for tenant, id_, v, s in zip(*(data[c].to_pylist() for c in ("tenant", "id", "v", "s")), strict=True):
        result ^= zlib.crc32(f"{tenant}|{id_}|{v}|{s}".encode())
    return result


def test_million_row_composite_key_snapshot_arrives_exactly_once(
    mariadb: LocalMariaDB, source_db: str, spark: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    table = f"{source_db}.t"
    loaded = time.monotonic()
    create_tenant_table(mariadb, source_db, ROWS)
    print(f"\nloaded {ROWS:,} rows in {time.monotonic() - loaded:.1f} s")
    ((count, sum_tenant, sum_id, sum_v, crc),) = mariadb.execute(
        "SELECT COUNT(*), SUM(tenant), SUM(id), SUM(v), "
        "BIT_XOR(CRC32(CONCAT_WS('|', tenant, id, v, s))) FROM t",
        database=source_db,
    )
    assert count == ROWS

    snapshot_dir = tmp_path / "staging" / PIPELINE / "snapshot=1"
    snapshot_dir.mkdir(parents=True)
    snapshot_uri = f"file://{snapshot_dir}"  # not Path.as_uri(): Spark would not unquote its "%3D"
    target = str(tmp_path / "target")
    conn = pymysql.connect(**mariadb.connection_kwargs())
    try:
        with conn.cursor() as cur:
            head = read_head(cur, "mariadb")
            assert head is not None
            planned = time.monotonic()
            plan = plan_snapshot(
                cur,
                pipeline=PIPELINE,
                seq=1,
                run_id="test",
                flavor="mariadb",
                start=head.to_dict(),
                keys={table: ["tenant", "id"]},
                chunk_rows=CHUNK_ROWS,
            )
            plan_seconds = time.monotonic() - planned
    finally:
        conn.close()
    write_json(f"{snapshot_uri}/{PLAN_NAME}", plan)
    (table_plan,) = plan["tables"]
    # Ten full chunks, then the open-ended chunk after the last key (empty now; it would catch rows
    # inserted beyond the end while the snapshot runs).
    expected_chunks = ROWS // CHUNK_ROWS + 1
    assert len(table_plan["chunks"]) == expected_chunks
    assert table_plan["chunks"][-1]["upper"] is None
    tenants_of_bounds = {c["upper"][0] for c in table_plan["chunks"][:-1]}
    assert len(tenants_of_bounds) > 1

    started = time.monotonic()
    caplog.set_level(logging.INFO, logger="airflow_provider_binlog.spark_jobs.snapshot")
    summary = run_snapshot(
        spark,
        snapshot_uri,
        target,
        pipeline=PIPELINE,
        source=mariadb.connection_kwargs(),
        max_connections=CONNECTIONS,
    )
    total_seconds = time.monotonic() - started
    manifest = json.loads((snapshot_dir / MANIFEST_NAME).read_text())
    stats = manifest["stats"]
    assert summary["snapshot"] == stats
    print(
        f"snapshot of {stats['rows']:,} rows: plan {plan_seconds:.1f} s; read {stats['read_seconds']:.1f} s "
        f"in {stats['read_tasks']} tasks = {stats['rows'] / stats['read_seconds']:,.0f} rows/s; "
        f"read + merge {total_seconds:.1f} s = {stats['rows'] / total_seconds:,.0f} rows/s"
    )
    assert stats["rows"] == ROWS
    assert stats["chunks"] == expected_chunks
    # Progress lines come once each: the end is reported by one line, not by the loop and again after it.
    progress = [r.getMessage() for r in caplog.records if r.getMessage().startswith("snapshot progress:")]
    assert progress[-1].startswith(
        f"snapshot progress: {expected_chunks}/{expected_chunks} chunks, {ROWS:,} rows"
    )
    assert sum(line.startswith(f"snapshot progress: {expected_chunks}/") for line in progress) == 1, progress
    assert stats["read_tasks"] == CONNECTIONS
    assert manifest["tables"][table]["rows"] == ROWS

    # Chunks: the stats files' rows add up, and the staged key ranges are disjoint, in order and
    # inside each chunk's planned bounds.
    chunk_stats = sorted(
        (json.loads(p.read_text()) for p in (snapshot_dir / table).glob("chunk-*.json")),
        key=lambda c: c["index"],
    )
    assert [c["index"] for c in chunk_stats] == list(range(expected_chunks))
    assert [c["rows"] for c in chunk_stats] == [CHUNK_ROWS] * (expected_chunks - 1) + [0]
    assert sum(c["rows"] for c in chunk_stats) == ROWS
    previous_max = -1
    staged_rows = 0
    for planned_chunk, chunk in zip(table_plan["chunks"], chunk_stats, strict=True):
        staged = pq.read_table(snapshot_dir / chunk["file"])
        assert staged.num_rows == chunk["rows"]
        staged_rows += staged.num_rows
        if staged.num_rows == 0:
            continue
        assert pc.all(pc.equal(staged["_binlog_op"], SNAPSHOT_OP)).as_py()
        keys = combined_key(staged)
        low, high = pc.min(keys).as_py(), pc.max(keys).as_py()
        assert low > previous_max, f"chunk {chunk['index']} overlaps the one before it"
        lower, upper = planned_chunk["lower"], planned_chunk["upper"]
        if lower is not None:
            assert low > (lower[0] << 32) + lower[1]
        if upper is not None:
            assert high == (upper[0] << 32) + upper[1]
        previous_max = high
    assert staged_rows == ROWS

    # Target: every source row exactly once, with the same data.
    rows = read_table(target, table, with_metadata=True)
    assert rows.num_rows == ROWS
    assert pc.count_distinct(combined_key(rows)).as_py() == ROWS
    assert pc.all(pc.equal(rows["_binlog_op"], SNAPSHOT_OP)).as_py()
    assert pc.all(pc.equal(rows["_binlog_window"], 1)).as_py()
    assert pc.sum(rows["tenant"]).as_py() == sum_tenant
    assert pc.sum(rows["id"]).as_py() == sum_id
    assert pc.sum(rows["v"]).as_py() == sum_v
    assert row_checksum(rows) == crc


def test_middle_chunk_of_composite_key_reads_an_index_range(mariadb: LocalMariaDB, source_db: str) -> None:
    """A chunk's query must be an index range on the key, not a full scan filtered per chunk."""
    create_tenant_table(mariadb, source_db, 20_000)
    table = f"{source_db}.t"
    conn = pymysql.connect(**mariadb.connection_kwargs())
    try:
        with conn.cursor() as cur:
            chunks = chunk_bounds(cur, table, ["tenant", "id"], 2_000)
            middle = chunks[len(chunks) // 2]
            assert middle.lower is not None
            assert middle.upper is not None
            assert middle.lower[0] != middle.upper[0], "the chunk should cross from one tenant to the next"
            sql, params = chunk_query(table, ["*"], ["tenant", "id"], middle)
            cur.execute(f"EXPLAIN {sql}", params)
            names = [d[0].lower() for d in cur.description]
            plans = [dict(zip(names, row, strict=True)) for row in cur.fetchall()]
    finally:
        conn.close()
    assert len(plans) == 1, plans
    (explained,) = plans
    assert explained["type"] == "range", explained
    assert explained["key"] == "PRIMARY", explained
    assert "filesort" not in str(explained.get("extra") or "").lower(), explained
