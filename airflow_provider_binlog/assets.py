"""Airflow Assets of the target tables: one Asset event per Delta table a commit changed.

Contract (ADR 0019, ``docs/assets.md``): the Asset of the target table of source table ``db.table`` has
the URI of its Delta table's location, :func:`table_asset_uri`: ``file:///<absolute target>/<db>/<table>``
for a local target, the target's own URI otherwise (``s3://bucket/prefix/<db>/<table>``,
``gs://…``, ``abfs://…``). Its name is the URI too, so ``Asset("file:///lake/target/shop/orders")`` in a
downstream DAG's ``schedule`` is the Asset the commits update. The URI is the table's location, not the
pipeline's name, so two pipelines can never announce the same table under different Assets, and
OpenLineage (which names file and object-store datasets by location) sees the same dataset.

The operators emit the events through an :class:`~airflow.sdk.AssetAlias` (:data:`TARGET_TABLES_ALIAS`
unless the DAG names another) because which tables a window changed is known only at run time; Airflow
creates an Asset the first time an event names it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow_provider_binlog.contract.manifest import TableEntry
    from airflow_provider_binlog.contract.positions import BinlogPosition

TARGET_TABLES_ALIAS = "binlog_target_tables"
"""Name of the Asset alias the commit and snapshot operators declare as their outlet by default."""


def table_asset_uri(target_path: str, table: str) -> str:
    """Return the Asset URI of the target table of ``db.table`` under ``target_path``.

    :param target_path: target root: a local path (made absolute) or a URI such as ``s3://bucket/prefix``.
    :param table: qualified source table name.
    :returns: ``file://`` + the absolute path for a local target, else the table's URI unchanged.
    :raises BinlogConfigError: if ``table`` is not qualified.
    """
    from airflow_provider_binlog.target import table_uri

    uri = table_uri(target_path, table)
    return uri if "://" in uri else f"file://{uri}"


def asset_event_extra(
    *,
    pipeline: str,
    table: str,
    kind: str,
    seq: int,
    entry: TableEntry,
    start: BinlogPosition,
    end: BinlogPosition | None,
    committed_at: str,
    last_commit_ts: str | None,
    delta_version: int | None,
    quarantine: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Return the ``extra`` of the Asset event of one table (JSON values only).

    :param kind: ``window`` (a binlog window committed) or ``snapshot`` (a snapshot merged).
    :param seq: the window's or snapshot's sequence number (its order key in the target).
    :param entry: the table's entry of the staged manifest (its ``rows`` and ``ops`` are used).
    :param start: the position the changes start after (the extra holds its serialised form): the window's
        start, or the snapshot's low watermark.
    :param end: the window's end coordinates (None for a snapshot: it reads the rows as of ``start`` and later).
    :param committed_at: ISO-8601 UTC time the checkpoint or the snapshot was recorded.
    :param last_commit_ts: source commit time of the window's last transaction (ISO-8601 UTC), if any.
    :param delta_version: the Delta table's version read after the merge (at or after its merge commit).
    :param quarantine: when the window or snapshot quarantined the table, where it stopped and why
        (:meth:`~airflow_provider_binlog.contract.manifest.Manifest.quarantines`): its target is not current.
    """
    return {
        "pipeline": pipeline,
        "table": table,
        "kind": kind,
        "seq": seq,
        "rows": entry.rows,
        "ops": dict(entry.ops),
        "start": start.to_dict(),
        "end": None if end is None else end.to_dict(),
        "committed_at": committed_at,
        "last_commit_ts": last_commit_ts,
        "delta_version": delta_version,
        "quarantine": None if quarantine is None else dict(quarantine),
    }


def table_events(
    *,
    pipeline: str,
    target_path: str,
    kind: str,
    seq: int,
    entries: Mapping[str, TableEntry],
    start: BinlogPosition,
    end: BinlogPosition | None,
    committed_at: str,
    last_commit_ts: str | None,
    storage_options: dict[str, str] | None = None,
    quarantines: Mapping[str, Mapping[str, Any]] | None = None,
) -> dict[str, dict[str, Any]]:
    """Return ``{asset URI: extra}`` for the tables of ``entries`` (table -> manifest entry) and of ``quarantines``.

    Each extra is :func:`asset_event_extra` with the table's current :func:`delta_version`; the other
    parameters are the same for every table. A table the window or snapshot quarantined
    (``quarantines``, table -> record) has an event even without row changes, its extra saying so.
    """
    from airflow_provider_binlog.contract.manifest import TableEntry as Entry

    quarantines = quarantines or {}
    entries = {**{t: Entry() for t in quarantines}, **entries}
    return {
        table_asset_uri(target_path, table): asset_event_extra(
            pipeline=pipeline,
            table=table,
            kind=kind,
            seq=seq,
            entry=entry,
            start=start,
            end=end,
            committed_at=committed_at,
            last_commit_ts=last_commit_ts,
            delta_version=delta_version(target_path, table, storage_options),
            quarantine=quarantines.get(table),
        )
        for table, entry in entries.items()
    }


def delta_version(target_path: str, table: str, storage_options: dict[str, str] | None = None) -> int | None:
    """Return the current version of the table's Delta log, or None when there is no table."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    from airflow_provider_binlog.target import table_uri

    try:
        return int(DeltaTable(table_uri(target_path, table), storage_options=storage_options).version())
    except TableNotFoundError:
        return None


def with_alias_outlet(outlets: Any, alias: str | None) -> list[Any]:
    """Return an operator's ``outlets`` with the Asset alias ``alias`` added (unchanged when None)."""
    from airflow.sdk import AssetAlias

    given = [] if outlets is None else list(outlets) if isinstance(outlets, list | tuple) else [outlets]
    return given if alias is None else [*given, AssetAlias(alias)]


def emit_table_events(context: Any, alias: str | None, events: Mapping[str, dict[str, Any]]) -> None:
    """Add one Asset event per table URI in ``events`` (URI -> extra) to the task's alias ``alias``.

    Airflow records the events when the task succeeds (and creates Assets it has not seen); a task that
    fails after this call records none. Nothing is emitted when ``alias`` is None.
    """
    if alias is None or not events:
        return
    from airflow.sdk import Asset, AssetAlias

    accessor = context["outlet_events"][AssetAlias(alias)]
    for uri, extra in sorted(events.items()):
        accessor.add(Asset(uri), extra=extra)
