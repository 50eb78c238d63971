"""A first load written straight from the snapshot's chunk files equals the merge's (real MariaDB, Spark, Delta).

Each scenario snapshots source tables once and then builds two targets from the same staged snapshot:
``run_snapshot`` with the first load (files from the chunks, no shuffle) and with ``first_load=False`` (every
table merged). Both must hold the same rows in every column (``_binlog_*`` included), the same schema,
configuration and app transactions, and files with the same Delta statistics, read alike by deltalake and
DuckDB (``docs/adr/0026-first-load-without-a-shuffle.md``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

pytest.importorskip("pyspark")
deltalake = pytest.importorskip("deltalake")

from test_type_fidelity import CASES  # noqa: E402  (the type-fidelity tables, pytest's rootdir import)

from airflow_provider_binlog.contract.delta import pipeline_app_id, window_app_id  # noqa: E402
from airflow_provider_binlog.jobs.snapshot import run_snapshot  # noqa: E402
from airflow_provider_binlog.target import live_file_uris, table_uri  # noqa: E402
from airflow_provider_binlog.testing.mariadb import LocalMariaDB  # noqa: E402
from airflow_provider_binlog.testing.snapshots import write_plan  # noqa: E402

pytestmark = [pytest.mark.integration]

PIPELINE = "first"


def stage_snapshot(
    mariadb: LocalMariaDB, staging: Path, keys: dict[str, list[str]], *, seq: int = 1, chunk_rows: int = 400
) -> str:
    """Plan a snapshot of ``keys``' tables into ``staging``; return its folder's URI."""
    folder = staging / PIPELINE / f"snapshot={seq}"
    folder.mkdir(parents=True)
    uri = f"file://{folder}"  # not Path.as_uri(): Spark would not unquote its "%3D"
    write_plan(mariadb.connection_kwargs(), uri, pipeline=PIPELINE, keys=keys, seq=seq, chunk_rows=chunk_rows)
    return uri


@dataclass(frozen=True)
class Source:
    """The private server, a fresh database on it, the Spark session and the test's folder."""

    mariadb: LocalMariaDB
    db: str
    spark: Any
    tmp_path: Path


@pytest.fixture
def source(mariadb: LocalMariaDB, source_db: str, spark: Any, tmp_path: Path) -> Source:
    """Return the server, the test's database, the session and the test's folder."""
    return Source(mariadb, source_db, spark, tmp_path)


def snapshot_both_ways(
    spark: Any,
    mariadb: LocalMariaDB,
    tmp_path: Path,
    keys: dict[str, list[str]],
    *,
    chunk_rows: int = 400,
    **kwargs: Any,
) -> tuple[dict[str, Any], dict[str, Any], str, str]:
    """Read one snapshot, load it into a target by the first load and into another by the merge.

    :returns: (first-load summary, merge summary, first-load target, merge target).
    """
    uri = stage_snapshot(mariadb, tmp_path / "staging", keys, chunk_rows=chunk_rows)
    targets = str(tmp_path / "first"), str(tmp_path / "merged")
    summaries = [
        run_snapshot(
            spark,
            uri,
            target,
            pipeline=PIPELINE,
            source=mariadb.connection_kwargs(),
            max_connections=2,
            first_load=first,
            **kwargs,
        )
        for target, first in zip(targets, (True, False), strict=True)
    ]
    return summaries[0], summaries[1], *targets


def delta_state(target: str, name: str, keys: list[str], *, pipeline: str = PIPELINE) -> dict[str, Any]:
    """Return what readers see of a target table: rows (tombstones too) in key order, schema, config, stats.

    ``apps`` are the versions of ``pipeline``'s app transaction and of its first window's.
    """
    dt = deltalake.DeltaTable(table_uri(target, name))
    rows = pa.table(dt.to_pyarrow_table()).sort_by([(k, "ascending") for k in keys])
    actions = pa.table(dt.get_add_actions(flatten=True)).to_pylist()
    stats = sorted(
        (
            a["num_records"],
            *(a.get(f"{s}.{k}") for k in keys for s in ("min", "max", "null_count")),
        )
        for a in actions
    )
    return {
        "rows": rows,
        "schema": json.loads(dt.schema().to_json()),  # metadata keys come in any order
        "configuration": dt.metadata().configuration,
        "partitions": dt.metadata().partition_columns,
        "stats": stats,
        "apps": [
            dt.transaction_version(pipeline_app_id(pipeline)),
            dt.transaction_version(window_app_id(pipeline, 1)),
        ],
    }


def duckdb_rows(target: str, name: str, keys: list[str]) -> pa.Table:
    """Return the live rows as DuckDB reads the table's live files (its delta extension needs a download)."""
    duckdb = pytest.importorskip("duckdb")
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    order = ", ".join(f'"{k}"' for k in keys)
    return con.execute(
        f"SELECT * FROM read_parquet(?, union_by_name = true) WHERE NOT _binlog_deleted ORDER BY {order}",
        [live_file_uris(target, name)],
    ).to_arrow_table()


def assert_same_target(first: str, merged: str, name: str, keys: list[str]) -> dict[str, Any]:
    """Assert both targets hold the same table (rows, schema, configuration, file statistics); return one."""
    a, b = delta_state(first, name, keys), delta_state(merged, name, keys)
    assert a["rows"].equals(b["rows"]), name
    for what in ("schema", "configuration", "partitions", "stats", "apps"):
        assert a[what] == b[what], (name, what)
    assert duckdb_rows(first, name, keys).equals(duckdb_rows(merged, name, keys)), name
    return a


def test_first_load_equals_the_merge_for_single_composite_and_named_keys(source: Source) -> None:
    mariadb, db, spark, tmp_path = source.mariadb, source.db, source.spark, source.tmp_path
    mariadb.execute(
        f"CREATE TABLE `{db}`.single (id INT PRIMARY KEY, v VARCHAR(20), n DECIMAL(10,2), d DATETIME(6))",
        f"INSERT INTO `{db}`.single SELECT seq, CONCAT('v', seq), seq / 7, "
        f"TIMESTAMP '2024-01-01 00:00:00' + INTERVAL seq SECOND FROM `{db}`.seq_1_to_2500",
        f"CREATE TABLE `{db}`.composite (tenant SMALLINT NOT NULL, id BIGINT UNSIGNED NOT NULL, s TEXT, "
        "PRIMARY KEY (tenant, id))",
        f"INSERT INTO `{db}`.composite SELECT 1 + seq % 3, 18446744073709551615 - seq, MD5(seq) "
        f"FROM `{db}`.seq_1_to_2000",
        # no primary key: the snapshot reads it by the unique NOT NULL key the user names
        f"CREATE TABLE `{db}`.keyless (code INT NOT NULL, v INT, UNIQUE KEY code (code))",
        f"INSERT INTO `{db}`.keyless SELECT seq * 3, seq FROM `{db}`.seq_1_to_900",
        # a string key whose collation order is its byte order (lowercase hex, as UUIDs)
        f"CREATE TABLE `{db}`.uuids (u CHAR(36) PRIMARY KEY, v INT) DEFAULT CHARSET=utf8mb4",
        f"INSERT INTO `{db}`.uuids SELECT UUID(), seq FROM `{db}`.seq_1_to_1200",
    )
    keys = {
        f"{db}.single": ["id"],
        f"{db}.composite": ["tenant", "id"],
        f"{db}.keyless": ["code"],
        f"{db}.uuids": ["u"],
    }

    first, merged, first_target, merged_target = snapshot_both_ways(spark, mariadb, tmp_path, keys)

    for name, key in keys.items():
        assert first["tables"][name].get("first_load") is True, name
        assert "first_load" not in merged["tables"][name], name
        state = assert_same_target(first_target, merged_target, name, key)
        assert len(state["stats"]) == 1  # small tables: one file, by both paths
    assert delta_state(first_target, f"{db}.single", ["id"])["rows"].num_rows == 2500


def test_first_load_of_the_type_fidelity_tables_equals_the_merge(source: Source) -> None:
    mariadb, db, spark, tmp_path = source.mariadb, source.db, source.spark, source.tmp_path
    mariadb.execute(
        *(
            f"CREATE TABLE `{db}`.`{c.table}` (id INT PRIMARY KEY, {c.columns}) DEFAULT CHARSET=utf8mb4"
            for c in CASES
        ),
        "SET SESSION sql_mode = ''",
        "SET SESSION time_zone = '+00:00'",
        *(f"INSERT INTO `{c.table}` VALUES {', '.join(c.rows)}" for c in CASES),
        *(u for c in CASES for u in c.updates),
        database=db,
    )
    keys = {f"{db}.{c.table}": ["id"] for c in CASES}

    first, _, first_target, merged_target = snapshot_both_ways(spark, mariadb, tmp_path, keys, chunk_rows=2)

    for name in keys:
        assert first["tables"][name].get("first_load") is True, name
        assert_same_target(first_target, merged_target, name, ["id"])


def test_files_are_cut_at_the_target_size_with_disjoint_exact_key_ranges(source: Source) -> None:
    mariadb, db, spark, tmp_path = source.mariadb, source.db, source.spark, source.tmp_path
    mariadb.execute(
        f"CREATE TABLE `{db}`.t (id INT PRIMARY KEY, v INT)",
        f"INSERT INTO `{db}`.t SELECT seq * 2, seq FROM `{db}`.seq_1_to_3000",
    )
    # 200 bytes per row assumed for a new table (the merge's): 60,000 bytes = 300 rows per file
    first, merged, first_target, merged_target = snapshot_both_ways(
        spark, mariadb, tmp_path, {f"{db}.t": ["id"]}, target_file_bytes=60_000
    )

    assert first["tables"][f"{db}.t"]["first_load"] is True
    a, b = delta_state(first_target, f"{db}.t", ["id"]), delta_state(merged_target, f"{db}.t", ["id"])
    assert a["rows"].equals(b["rows"])
    assert a["configuration"] == b["configuration"]
    # Spark's range partitioner samples its bounds, so the two paths cut files at other keys; both keep
    # every file within the target size, sorted, with exact and disjoint key ranges.
    for state in (a, b):
        ranges = [(low, high) for _, low, high, _ in state["stats"]]
        assert all(rows <= 300 for rows, *_ in state["stats"])
        assert sum(rows for rows, *_ in state["stats"]) == 3000
        ordered = sorted(ranges)
        assert all(prev[1] < nxt[0] for prev, nxt in zip(ordered, ordered[1:], strict=False))
    assert len(a["stats"]) == 10  # 3,000 rows / 300, chunk boundaries or not


def test_tables_the_shortcut_cannot_load_exactly_are_merged(source: Source) -> None:
    mariadb, db, spark, tmp_path = source.mariadb, source.db, source.spark, source.tmp_path
    mariadb.execute(
        # a string key: the source's collation orders it otherwise than Parquet's bytes ('b' < 'C' < 'd')
        f"CREATE TABLE `{db}`.s (k VARCHAR(10) PRIMARY KEY, v INT) DEFAULT CHARSET=utf8mb4",
        f"INSERT INTO `{db}`.s VALUES ('b', 1), ('C', 2), ('d', 3)",
        f"CREATE TABLE `{db}`.r (id INT PRIMARY KEY, v INT)",
        f"INSERT INTO `{db}`.r VALUES (1, 1), (2, 2), (3, 3)",
    )
    keys = {f"{db}.s": ["k"], f"{db}.r": ["id"]}
    uri = stage_snapshot(mariadb, tmp_path / "staging", {f"{db}.r": ["id"]})
    target = str(tmp_path / "target")
    source = mariadb.connection_kwargs()
    run_snapshot(spark, uri, target, pipeline=PIPELINE, source=source, max_connections=2)
    # A re-snapshot of a table that has rows replaces them (tombstones): the merge does it.
    mariadb.execute(f"DELETE FROM `{db}`.r WHERE id = 2")
    again = stage_snapshot(mariadb, tmp_path / "staging", keys, seq=2)

    summary = run_snapshot(spark, again, target, pipeline=PIPELINE, source=source, max_connections=2)

    assert "first_load" not in summary["tables"][f"{db}.s"]  # refused by the tasks: 'C' sorts before 'b'
    assert "first_load" not in summary["tables"][f"{db}.r"]
    r = delta_state(target, f"{db}.r", ["id"])["rows"]
    assert r.select(["id", "_binlog_deleted"]).to_pylist() == [
        {"id": 1, "_binlog_deleted": False},
        {"id": 2, "_binlog_deleted": True},
        {"id": 3, "_binlog_deleted": False},
    ]
    s = delta_state(target, f"{db}.s", ["k"])
    assert s["rows"]["k"].to_pylist() == ["C", "b", "d"]


def test_a_first_load_that_loses_its_commit_race_is_left_to_the_merge(
    source: Source, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another writer commits to the table between the first load's plan (version 0) and its commit.

    The other writer is a second run of the same snapshot (a retried task racing the attempt it replaced),
    started once the first run has created the table and planned its files and before it writes them. The
    first run's commit must fail on the moved version, its files be deleted, and the table go the merge path,
    which finds the snapshot already merged: every source row once, no file left uncommitted.
    """
    import airflow_provider_binlog.jobs.first_load as first_load_job

    mariadb, db, spark, tmp_path = source.mariadb, source.db, source.spark, source.tmp_path
    mariadb.execute(
        f"CREATE TABLE `{db}`.t (id INT PRIMARY KEY, v VARCHAR(20))",
        f"INSERT INTO `{db}`.t SELECT seq, CONCAT('row ', seq) FROM seq_1_to_1000",
        database=db,
    )
    name = f"{db}.t"
    uri = stage_snapshot(mariadb, tmp_path / "staging", {name: ["id"]})
    target = str(tmp_path / "target")
    kwargs: dict[str, Any] = {
        "pipeline": PIPELINE,
        "source": mariadb.connection_kwargs(),
        "max_connections": 2,
    }
    write_task = first_load_job.write_task
    other: list[dict[str, Any]] = []

    def other_writer_first(*args: Any) -> Any:
        if not other:  # the racing run's own first load calls this too: it writes undisturbed
            other.append({})
            other[0] = run_snapshot(spark, uri, target, **kwargs)
        return write_task(*args)

    monkeypatch.setattr(first_load_job, "write_task", other_writer_first)

    summary = run_snapshot(spark, uri, target, **kwargs)

    assert other[0]["tables"][name]["first_load"] is True  # the other writer won the table
    # The first run lost its commit and left the table to the merge.
    assert "first_load" not in summary["tables"][name]
    dt = deltalake.DeltaTable(table_uri(target, name))
    assert dt.version() == 1  # created, then the other writer's first load; the merge found the window merged
    assert dt.history(1)[0]["binlog.first_load"] is True
    rows = dt.to_pyarrow_table().sort_by("id")
    expected = [tuple(r) for r in mariadb.execute(f"SELECT id, v FROM `{db}`.t ORDER BY id")]
    assert list(zip(rows["id"].to_pylist(), rows["v"].to_pylist(), strict=True)) == expected
    assert not any(rows["_binlog_deleted"].to_pylist())
    folder = Path(table_uri(target, name).removeprefix("file://"))
    on_disk = {p.name for p in folder.rglob("*.parquet") if "_delta_log" not in p.parts}
    assert on_disk == {Path(u).name for u in dt.file_uris()}  # the loser's files were deleted
