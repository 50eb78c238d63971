"""A small window rewritten in the driver with Arrow gives the rows Spark's rewrite gives (issue 32, ADR 0040).

The same random windows are merged into two targets, one on Spark (``driver_max_rows=0``), one in the driver:
inserts into several key-range files, then updates and deletes merged on read (deletion vectors, on Spark for
both), then a window with a new column, key moves, re-inserts of deleted keys, keys in gaps and above the table,
rewritten copy-on-write. After each window the two targets hold the same rows, tombstones and order keys.
"""

from __future__ import annotations

import random
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from test_merge import PIPELINE, StagedTableSpec, stage_window

from airflow_provider_binlog.jobs.merge.job import merge_window
from airflow_provider_binlog.target import read_table, table_uri

pytestmark = pytest.mark.integration

TABLE = "shop.items"
SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("name", pa.string()),
        ("price", pa.decimal128(10, 2)),
        ("qty", pa.int32()),
    ]
)
WITH_NOTE = SCHEMA.append(pa.field("note", pa.string()))


def item(rng: random.Random, key: int, round_: int) -> dict[str, Any]:
    return {
        "id": key,
        "name": f"item-{key}-{round_}",
        "price": Decimal(rng.randrange(100, 99_999)) / 100,
        "qty": rng.choice([None, rng.randrange(-5, 500)]),
    }


def random_window(rng: random.Random, live: dict[int, dict[str, Any]], round_: int, size: int) -> list[Any]:
    """Return ``size`` random changes against the live rows ``live`` (updated in place): inserts in gaps and
    above, updates, deletes, re-inserts of deleted keys and key moves (a ``d`` then a ``c``)."""
    changes: list[tuple[str, dict[str, Any]]] = []
    for _ in range(size):
        action = rng.random()
        if action < 0.35 or not live:
            key = rng.choice([rng.randrange(0, 2_000), 5_000 + round_ * 100 + rng.randrange(100)])
            if key in live:
                continue
            live[key] = item(rng, key, round_)
            changes.append(("c", live[key]))
        elif action < 0.7:
            key = rng.choice(sorted(live))
            live[key] = item(rng, key, round_)
            changes.append(("u", live[key]))
        elif action < 0.85:
            key = rng.choice(sorted(live))
            changes.append(("d", live.pop(key)))
        else:  # a key update: the before image's delete, then the after image
            old = rng.choice(sorted(live))
            new = rng.randrange(0, 3_000)
            if new in live:
                continue
            changes.append(("d", live.pop(old)))
            live[new] = {**item(rng, new, round_), "id": new}
            changes.append(("u", live[new]))
    return changes


def both(spark: Any, window: str, targets: dict[str, str], **kwargs: Any) -> dict[str, set[str]]:
    """Merge ``window`` into both targets; return the engines each used."""
    engines = {}
    for engine, target in targets.items():
        limit = 0 if engine == "spark" else 10_000
        summary = merge_window(spark, window, target, pipeline=PIPELINE, driver_max_rows=limit, **kwargs)
        engines[engine] = {t["engine"] for t in summary["tables"].values()}
    return engines


def content(target: str) -> list[dict[str, Any]]:
    return sorted(
        read_table(target, TABLE, with_metadata=True, include_tombstones=True).to_pylist(),
        key=lambda r: r["id"],
    )


def test_the_driver_rewrite_writes_the_rows_the_spark_rewrite_writes(spark: Any, tmp_path: Path) -> None:
    import deltalake

    rng = random.Random(32)
    staging = tmp_path / "staging"
    targets = {"spark": str(tmp_path / "spark"), "driver": str(tmp_path / "driver")}
    live: dict[int, dict[str, Any]] = {}
    first = [("c", item(rng, key, 0)) for key in rng.sample(range(2_000), 300)]
    live.update((row["id"], row) for _, row in first)
    window = stage_window(staging, 1, {TABLE: StagedTableSpec(SCHEMA, first)})
    # small files: several key ranges, so that the later windows rewrite some of them and cut segments
    assert both(spark, window, targets, target_file_bytes=2_000) == {"spark": {"spark"}, "driver": {"driver"}}
    assert content(targets["spark"]) == content(targets["driver"])
    assert len(deltalake.DeltaTable(table_uri(targets["driver"], TABLE)).file_uris()) > 3

    changes = random_window(rng, live, 1, 40)
    window = stage_window(staging, 2, {TABLE: StagedTableSpec(SCHEMA, changes)})
    both(spark, window, targets, write_mode="merge_on_read")  # deletion vectors in both targets, on Spark
    assert content(targets["spark"]) == content(targets["driver"])

    for seq in (3, 4):
        changes = random_window(rng, live, seq, 60)
        changes = [(op, {**row, "note": f"n{seq}"}) for op, row in changes]
        window = stage_window(staging, seq, {TABLE: StagedTableSpec(WITH_NOTE, changes)})
        assert both(spark, window, targets, write_mode="copy_on_write") == {
            "spark": {"spark"},
            "driver": {"driver"},
        }
        assert content(targets["spark"]) == content(targets["driver"]), seq
    assert both(spark, window, targets) == {"spark": {""}, "driver": {""}}  # merged again: a no-op
    got = read_table(targets["driver"], TABLE).to_pylist()
    assert sorted(({k: r[k] for k in SCHEMA.names} for r in got), key=lambda r: r["id"]) == sorted(
        live.values(), key=lambda r: r["id"]
    )
