"""OpenLineage datasets and Asset event extras are built from the manifest dataclass, read once."""

from __future__ import annotations

from pathlib import Path

from airflow_provider_binlog.assets import asset_event_extra, table_events
from airflow_provider_binlog.contract.manifest import Manifest, TableEntry
from airflow_provider_binlog.contract.positions import BinlogPosition
from airflow_provider_binlog.lineage import BINLOG_RANGE_FACET, manifest_lineage

COLUMNS = (
    {"name": "id", "mysql_type": "int(11)", "arrow_type": "int32"},
    {"name": "note", "mysql_type": "varchar(40)", "arrow_type": "string"},
)


def manifest() -> Manifest:
    """Return a window manifest with one changed table and one table without changes, through its JSON."""
    written = Manifest(
        pipeline="shop",
        window=7,
        tables={
            "shop.orders": TableEntry(
                files=("shop.orders/part-0.parquet",), rows=3, ops={"c": 2, "d": 1}, columns=COLUMNS
            ),
            "shop.idle": TableEntry(columns=COLUMNS),
        },
        start=BinlogPosition("mariadb-bin.000001", 4),
        end=BinlogPosition("mariadb-bin.000001", 900, "0-1-5"),
        stats={
            "rows": 3,
            "transactions": 2,
            "binlog_bytes": 896,
            "last_commit_ts": "2026-01-01T00:00:00+00:00",
        },
    )
    return Manifest.from_json(written.to_json())


def test_lineage_names_every_table_with_its_schema_statistics_and_the_binlog_range() -> None:
    lineage = manifest_lineage(
        manifest(), inputs="source", outputs=["staging"], source="mysql://db:3306", staging_uri="/staging/w7"
    )

    assert [(d.namespace, d.name) for d in lineage.inputs] == [
        ("mysql://db:3306", "shop.idle"),
        ("mysql://db:3306", "shop.orders"),
    ]
    assert [f.type for f in lineage.inputs[1].facets["schema"].fields] == ["int(11)", "varchar(40)"]
    assert [(d.name, d.outputFacets["outputStatistics"].rowCount) for d in lineage.outputs] == [
        ("/staging/w7/shop.idle", 0),
        ("/staging/w7/shop.orders", 3),
    ]
    assert [f.type for f in lineage.outputs[1].facets["schema"].fields] == ["int32", "string"]
    facet = lineage.run_facets[BINLOG_RANGE_FACET]
    assert (facet.pipeline, facet.kind, facet.seq, facet.rows, facet.transactions, facet.binlog_bytes) == (
        "shop",
        "window",
        7,
        3,
        2,
        896,
    )
    assert facet.start["pos"] == 4
    assert facet.end == {"file": "mariadb-bin.000001", "pos": 900, "gtid_set": "0-1-5"}


def test_lineage_of_chosen_tables_leaves_the_others_out() -> None:
    lineage = manifest_lineage(
        manifest(),
        inputs="staging",
        outputs=["target"],
        tables=["shop.orders"],
        staging_uri="s3://b/st",
        target_path="s3://b/lake",
    )

    assert [(d.namespace, d.name) for d in lineage.inputs] == [("s3://b", "st/shop.orders")]
    assert [(d.namespace, d.name) for d in lineage.outputs] == [("s3://b", "lake/shop/orders")]


def test_asset_extras_take_rows_and_ops_from_the_manifest_entry(tmp_path: Path) -> None:
    read = manifest()
    extra = asset_event_extra(
        pipeline="shop",
        table="shop.orders",
        kind="window",
        seq=read.window,
        entry=read.tables["shop.orders"],
        start=read.start or {},
        end=read.end,
        committed_at="2026-01-01T00:00:01+00:00",
        last_commit_ts=read.stats["last_commit_ts"],
        delta_version=4,
    )

    assert (extra["rows"], extra["ops"], extra["delta_version"]) == (3, {"c": 2, "d": 1}, 4)
    events = table_events(
        pipeline="shop",
        target_path=str(tmp_path),
        kind="window",
        seq=7,
        entries={t: read.tables[t] for t in read.changed_tables()},
        start=read.start or {},
        end=read.end,
        committed_at="2026-01-01T00:00:01+00:00",
        last_commit_ts=None,
    )
    assert [(e["table"], e["rows"], e["delta_version"]) for e in events.values()] == [
        ("shop.orders", 3, None)
    ]
