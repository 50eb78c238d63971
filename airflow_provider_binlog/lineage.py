"""OpenLineage metadata of the pipeline's operators, built from a staged window's or snapshot's manifest.

The extract, snapshot, merge and commit operators implement ``get_openlineage_facets_on_start`` and
``get_openlineage_facets_on_complete``, which ``apache-airflow-providers-openlineage`` calls when it is
installed and configured (``docs/lineage.md``). This module imports the OpenLineage client at import time,
so the operators import it inside those methods only.

Datasets (OpenLineage naming, "Dataset naming" in the spec):

* a source table: namespace ``mysql://<host>:<port>`` of the source connection, name ``<db>.<table>``
  (MariaDB too: it speaks the MySQL protocol), with the staged columns and their MySQL types as schema;
* a table's staging: the folder ``<window or snapshot folder>/<db>.<table>`` of its Parquet change
  files, named by location (:func:`location_dataset`), schema with the Arrow types;
* a target table: its Delta table's location, the same place as its Airflow Asset
  (:func:`~airflow_provider_binlog.assets.table_asset_uri`).

Row counts are ``outputStatistics`` output facets of the outputs (row changes of the table in the window or
snapshot). The binlog range is the run facet :class:`BinlogRangeRunFacet` under :data:`BINLOG_RANGE_FACET`.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

import attr
from airflow.providers.common.compat.openlineage.facet import (
    Dataset,
    OutputDataset,
    OutputStatisticsOutputDatasetFacet,
    RunFacet,
    SchemaDatasetFacet,
    SchemaDatasetFacetFields,
)
from airflow.providers.openlineage.extractors import OperatorLineage

if TYPE_CHECKING:
    from airflow_provider_binlog.contract.manifest import Manifest, TableEntry

Role = Literal["source", "staging", "target"]

BINLOG_RANGE_FACET = "binlogRange"
"""Key of :class:`BinlogRangeRunFacet` in an event's ``run.facets``."""


@attr.define
class BinlogRangeRunFacet(RunFacet):
    """The binlog range a run read or applied (custom run facet).

    :param pipeline: pipeline name.
    :param kind: ``window`` or ``snapshot``.
    :param seq: the window's or snapshot's sequence number.
    :param start: coordinates ``{"file", "pos", "gtid_set"}`` the changes start after (a snapshot: its low
        watermark, the source head before its first chunk).
    :param end: the window's end coordinates, the last event it includes (None for a snapshot).
    :param rows: row changes staged (a snapshot: rows read).
    :param transactions: transactions in the window (None for a snapshot).
    :param binlog_bytes: binlog bytes between start and end (None for a snapshot).
    :param last_commit_ts: source commit time of the window's last transaction, ISO-8601 UTC.
    :param quarantined: the tables the window or snapshot quarantined, each with where it stopped and why
        (:meth:`~airflow_provider_binlog.contract.manifest.Manifest.quarantines`): their targets are not current.

    No schema of its own is published yet, so its ``_schemaURL`` is the base ``RunFacet`` schema's.
    """

    pipeline: str
    kind: str
    seq: int
    start: dict[str, Any]
    end: dict[str, Any] | None = None
    rows: int = 0
    transactions: int | None = None
    binlog_bytes: int | None = None
    last_commit_ts: str | None = None
    quarantined: dict[str, Any] = attr.field(factory=dict)


def location_name(uri: str) -> tuple[str, str]:
    """Return the OpenLineage ``(namespace, name)`` of a storage location (local path or URI).

    ``/a/b`` and ``file:///a/b`` give ``("file", "/a/b")``; ``s3://conn@bucket/p`` gives
    ``("s3://bucket", "p")`` (connection ids and passwords dropped).
    """
    parsed = urllib.parse.urlsplit(uri if "://" in uri else f"file://{uri}")
    if parsed.scheme == "file":
        return "file", parsed.path
    return f"{parsed.scheme}://{parsed.hostname or ''}", parsed.path.lstrip("/")


def source_namespace(host: str, port: int) -> str:
    """Return the OpenLineage namespace of a MySQL/MariaDB server: ``mysql://<host>:<port>``."""
    return f"mysql://{host}:{port}"


def _schema(columns: Sequence[Mapping[str, str]], type_key: str) -> SchemaDatasetFacet:
    return SchemaDatasetFacet(
        fields=[SchemaDatasetFacetFields(name=c["name"], type=c.get(type_key)) for c in columns]
    )


def table_dataset(
    role: Role,
    table: str,
    entry: TableEntry | None,
    *,
    source: str | None = None,
    staging_uri: str | None = None,
    target_path: str | None = None,
    statistics: bool = False,
) -> Dataset:
    """Return the dataset of ``table`` in ``role``.

    :param entry: the table's manifest entry (its ``columns`` and ``rows``), None when not known yet.
    :param source: the source namespace (:func:`source_namespace`), for ``source``.
    :param staging_uri: the window's or snapshot's staging folder, for ``staging``.
    :param target_path: the target root, for ``target``.
    :param statistics: return an output dataset with the ``outputStatistics`` output facet (the table's
        row changes in ``entry``).
    :raises ValueError: when the location of ``role`` is not given.
    """
    facets: dict[str, Any] = {}
    if entry is not None and entry.columns:
        facets["schema"] = _schema(entry.columns, "mysql_type" if role == "source" else "arrow_type")
    if role == "source":
        if source is None:
            raise ValueError("a source dataset needs the source namespace")
        namespace, name = source, table
    elif role == "staging":
        if staging_uri is None:
            raise ValueError("a staging dataset needs the staging folder")
        namespace, name = location_name(f"{staging_uri.rstrip('/')}/{table}")
    else:
        if target_path is None:
            raise ValueError("a target dataset needs the target root")
        from airflow_provider_binlog.target import table_uri

        namespace, name = location_name(table_uri(target_path, table))
    if not statistics:
        return Dataset(namespace=namespace, name=name, facets=facets)
    rows = 0 if entry is None else entry.rows
    return OutputDataset(
        namespace=namespace,
        name=name,
        facets=facets,
        outputFacets={"outputStatistics": OutputStatisticsOutputDatasetFacet(rowCount=rows)},
    )


def manifest_lineage(
    manifest: Manifest,
    *,
    inputs: Role,
    outputs: Sequence[Role],
    tables: Iterable[str] | None = None,
    source: str | None = None,
    staging_uri: str | None = None,
    target_path: str | None = None,
) -> OperatorLineage:
    """Return the lineage of one step over a staged window or snapshot.

    :param manifest: the window's or snapshot's manifest.
    :param inputs: the role of the input datasets (one per table).
    :param outputs: the roles of the output datasets (one per table each), with ``outputStatistics``.
    :param tables: the tables to name (default: every table of the manifest, also those without row
        changes: the step read them, and an empty lineage would make the OpenLineage provider report the
        files the task wrote instead).
    :param source: the source namespace, when a role is ``source``.
    :param staging_uri: the staging folder, when a role is ``staging``.
    :param target_path: the target root, when a role is ``target``.
    """
    entries = manifest.tables
    names = sorted(entries if tables is None else tables)
    where = {"source": source, "staging_uri": staging_uri, "target_path": target_path}
    stats = manifest.stats
    facet = BinlogRangeRunFacet(
        pipeline=manifest.pipeline,
        kind=manifest.kind,
        seq=manifest.window,
        start={} if manifest.start is None else manifest.start.to_dict(),
        end=None if manifest.end is None else manifest.end.to_dict(),
        rows=int(stats.get("rows") or 0),
        transactions=stats.get("transactions"),
        binlog_bytes=stats.get("binlog_bytes"),
        last_commit_ts=stats.get("last_commit_ts"),
        quarantined=manifest.quarantines(),
    )
    return OperatorLineage(
        inputs=[table_dataset(inputs, name, entries.get(name), **where) for name in names],  # type: ignore[arg-type]
        outputs=[
            table_dataset(role, name, entries.get(name), statistics=True, **where)  # type: ignore[arg-type]
            for role in outputs
            for name in names
        ],
        run_facets={BINLOG_RANGE_FACET: facet},
    )


def selection_lineage(
    tables: Iterable[str], *, source: str, target_path: str | None = None
) -> OperatorLineage:
    """Return the lineage known before a run reads anything: the explicitly named source tables.

    Patterns (``shop.*``) and exclusions (``!db.table``) name no table until the source is read, so they
    are left out; ``target_path`` adds the named tables' target datasets as outputs.
    """
    named = sorted(t for t in tables if not t.startswith("!") and not any(c in t for c in "*?["))
    return OperatorLineage(
        inputs=[table_dataset("source", t, None, source=source) for t in named],
        outputs=[table_dataset("target", t, None, target_path=target_path) for t in named]
        if target_path
        else [],
    )
