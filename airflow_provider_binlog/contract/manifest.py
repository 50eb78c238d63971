"""The manifest of a staged window or snapshot: one dataclass, one writer, one reader, one version.

A window folder ``<staging>/<pipeline>/window=<seq>/`` (or a snapshot folder ``snapshot=<seq>/``) holds
Parquet change files per table and ``manifest.json``, written last and atomically: a folder without
one is incomplete. The extractor (``extract/window.py``) and the snapshot job (``jobs/snapshot.py``)
build a :class:`Manifest`; the merge job, the commit and the operators read it back with
:meth:`Manifest.from_json`, which is the only validation of the format.

JSON shape (format version :data:`FORMAT_VERSION`)::

    {"format_version": 1, "kind": "window" | "snapshot", "pipeline": str, "window": int,
     "run_id": str, "start": position, "end": position (windows only), "created_at": ISO-8601,
     "tables": {"db.table": {"files": [relative paths], "rows": int, "ops": {"c": n, ...},
                             "primary_key": [col, ...], "columns": [{"name", "mysql_type", "arrow_type"}],
                             "zero_dates": int, "chunks": int (snapshots only),
                             "history": [kind, ...] (tables with history only)}},
     "stats": {...numbers...}, "ddl": [...], "skipped": {"db.table": reason}, "skipped_statements": [...],
     "covered_tables": {"db.table": seq}, "foreign_keys": [...], "resnapshots": [...],
     "schema_skipped_row_events": {"db.table": n},
     "watermarks": {"lowest": position, "highest": position} (snapshots only),
     "schemas": {"db.table": [table-map column, ...]} (windows only)}

A manifest written before ``kind`` existed is a window manifest.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from airflow_provider_binlog.contract import ContractError
from airflow_provider_binlog.contract.columns import OP_TRUNCATE
from airflow_provider_binlog.contract.history import history_kinds
from airflow_provider_binlog.contract.names import split_table_name
from airflow_provider_binlog.contract.positions import BinlogPosition
from airflow_provider_binlog.contract.uris import StorageOptions, atomic_output, filesystem_for, join_uri

MANIFEST_NAME = "manifest.json"
FORMAT_VERSION = 1
"""The format this provider writes; :data:`SUPPORTED_VERSIONS` are the ones it reads."""
SUPPORTED_VERSIONS = frozenset({1})
WINDOW_KIND = "window"
SNAPSHOT_KIND = "snapshot"
"""A snapshot's rows replace the table's rows (target rows missing from it become tombstones)."""


class ManifestError(ContractError):
    """A manifest is not valid JSON or does not follow the format; the message names the file."""


class ManifestMissingError(ManifestError):
    """A staged folder has no manifest: it is not staged completely."""


def only_markers(markers: int, rows: int) -> bool:
    """Return whether a table's ``rows`` staged rows are all truncate markers (``markers`` of them, > 0).

    Such a table stages no data column, and its source table may be gone: it merges by its Delta table's
    own key (``docs/adr/0015-truncate-marker.md``).
    """
    return 0 < markers == rows


@dataclass(frozen=True)
class TableEntry:
    """One table of a manifest.

    :param files: the table's Parquet change files, relative to the window folder.
    :param rows: change rows in the files.
    :param ops: rows per op code.
    :param primary_key: primary key (or chunk key) columns; empty for a table without one.
    :param columns: source column descriptions (``name``, ``mysql_type``, ``arrow_type``).
    :param zero_dates: zero dates staged as null.
    :param chunks: key chunks read (snapshots only).
    :param history: the history kinds the merge writes beside the table
        (:data:`~airflow_provider_binlog.contract.history.HISTORY_KINDS`); a window stages every update of such a
        table with its before image (:mod:`airflow_provider_binlog.contract.history`).
    """

    files: tuple[str, ...] = ()
    rows: int = 0
    ops: Mapping[str, int] = field(default_factory=dict)
    primary_key: tuple[str, ...] = ()
    columns: tuple[Mapping[str, Any], ...] = ()
    zero_dates: int = 0
    chunks: int | None = None
    history: tuple[str, ...] = ()

    @property
    def markers_only(self) -> bool:
        """Return whether every staged row is a truncate marker (:func:`only_markers`)."""
        return only_markers(self.ops.get(OP_TRUNCATE, 0), self.rows)

    def to_json(self) -> dict[str, Any]:
        """Return the entry's JSON object."""
        body: dict[str, Any] = {
            "files": list(self.files),
            "rows": self.rows,
            "ops": dict(sorted(self.ops.items())),
            "primary_key": list(self.primary_key),
            "columns": [dict(c) for c in self.columns],
            "zero_dates": self.zero_dates,
        }
        if self.chunks is not None:
            body["chunks"] = self.chunks
        if self.history:
            body["history"] = list(self.history)
        return body

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> TableEntry:
        """Return the entry of a JSON object.

        :raises KeyError, TypeError, ValueError: when a field has the wrong shape (see :meth:`Manifest.from_json`).
        """
        return cls(
            files=tuple(str(f) for f in body.get("files") or ()),
            rows=int(body.get("rows") or 0),
            ops={str(k): int(v) for k, v in (body.get("ops") or {}).items()},
            primary_key=tuple(str(c) for c in body.get("primary_key") or ()),
            columns=tuple(dict(c) for c in body.get("columns") or ()),
            zero_dates=int(body.get("zero_dates") or 0),
            chunks=None if body.get("chunks") is None else int(body["chunks"]),
            history=history_kinds(body.get("history")),
        )


@dataclass(frozen=True)
class Manifest:
    """The manifest of one staged window or snapshot (see the module docstring for the JSON shape).

    :param pipeline: pipeline name.
    :param window: window (or snapshot) sequence number.
    :param tables: staged tables by ``db.table``.
    :param kind: :data:`WINDOW_KIND` or :data:`SNAPSHOT_KIND`.
    :param run_id: the DAG run that staged it.
    :param start: the window's start (a snapshot's: the source head before its first chunk).
    :param end: the window's end (windows only).
    :param stats: numbers about the read (``rows``, ``read_seconds``, ``last_commit_ts`` ...).
    :param created_at: when the manifest was written (ISO-8601, UTC).
    :param ddl: DDL statements of the window with their effect per table (``effects``: ``table``, ``action``,
        ``reason``; ``dropped_columns`` for a ``DROP COLUMN``, ``empties`` and ``marker_seq`` for a truncate marker).
    :param skipped: tables the window leaves out, with the reason.
    :param skipped_statements: statement-based writes skipped because a snapshot covers them.
    :param covered_tables: tables a snapshot covers, with its seq.
    :param foreign_keys: cascading foreign keys the merge applies.
    :param resnapshots: tables that need a re-snapshot from a point in the window on.
    :param schema_skipped_row_events: row events left out after a schema change, per table.
    :param dropped: tables dropped or renamed away in the window (table, position, GTID, statement), each
        emptied in the target by a truncate marker (``docs/adr/0015-truncate-marker.md``).
    :param watermarks: ``{"lowest", "highest"}``: the lowest and highest chunk watermark (snapshots only; None
        for a snapshot of no chunks).
    :param schemas: per selected table whose columns the binlog showed (a table map) and no DDL changed since,
        its table-map columns at the window's end (``extract.ddl.column_record``); the next window's reader
        starts from them (a schema history: the old type of a column a ``MODIFY`` changes).
    :param statements: the window's statements side file, relative to the window folder
        (:data:`~airflow_provider_binlog.contract.history.STATEMENTS_FILE`), when a table keeping a change log
        staged rows of statements the source logged; None otherwise.
    """

    pipeline: str
    window: int
    tables: Mapping[str, TableEntry]
    kind: str = WINDOW_KIND
    run_id: str | None = None
    start: BinlogPosition | None = None
    end: BinlogPosition | None = None
    stats: Mapping[str, Any] = field(default_factory=dict)
    created_at: str | None = None
    ddl: list[Any] = field(default_factory=list)
    skipped: Mapping[str, str] = field(default_factory=dict)
    skipped_statements: list[Any] = field(default_factory=list)
    covered_tables: Mapping[str, Any] = field(default_factory=dict)
    foreign_keys: list[Any] = field(default_factory=list)
    resnapshots: list[Any] = field(default_factory=list)
    schema_skipped_row_events: Mapping[str, int] = field(default_factory=dict)
    dropped: list[Any] = field(default_factory=list)
    watermarks: Mapping[str, BinlogPosition | None] | None = None
    schemas: Mapping[str, list[Any]] = field(default_factory=dict)
    statements: str | None = None

    @property
    def is_snapshot(self) -> bool:
        """Return whether the manifest stages a snapshot (its rows replace the tables' rows)."""
        return self.kind == SNAPSHOT_KIND

    def quarantines(self) -> dict[str, dict[str, Any]]:
        """Return ``{"db.table": record}`` of the tables the window or snapshot quarantined.

        From its ``resnapshots`` entries of ``cause`` ``quarantine`` (the first of a table), as the OpenLineage run
        facet shows them: ``{"since": "file:pos", "gtid", "window", "reason"}`` (for a snapshot, ``since`` is its
        start). Where a table's target stopped is the ledger's to say
        (:func:`~airflow_provider_binlog.pipeline.quarantine.quarantine_record`).
        """
        found: dict[str, dict[str, Any]] = {}
        for entry in self.resnapshots:
            if entry.get("cause") == "quarantine" and entry["table"] not in found:
                since = entry["since"]
                found[entry["table"]] = {
                    "since": f"{since['file']}:{since['pos']}",
                    "gtid": entry.get("gtid"),
                    "window": entry["window"],
                    "reason": entry["reason"],
                }
        return found

    def changed_tables(self) -> list[str]:
        """Return the tables with staged rows, sorted."""
        return sorted(name for name, entry in self.tables.items() if entry.rows)

    def keyed_tables(self) -> dict[str, tuple[str, ...]]:
        """Return the tables to merge that need a key from the manifest or the user, with their primary key.

        A table with only truncate markers is left out: the merge takes the key its Delta table was created
        with (``docs/adr/0015-truncate-marker.md``).
        """
        return {
            name: key for name, key in self.tables_to_merge().items() if not self.tables[name].markers_only
        }

    def tables_to_merge(self) -> dict[str, tuple[str, ...]]:
        """Return the tables the merge has work for (:func:`has_changes`), each with its primary key."""
        return {
            name: entry.primary_key
            for name, entry in self.tables.items()
            if has_changes(entry.files, entry.rows, snapshot=self.is_snapshot)
        }

    def to_json(self) -> dict[str, Any]:
        """Return the manifest's JSON object (fields that are None are left out)."""
        body: dict[str, Any] = {
            "format_version": FORMAT_VERSION,
            "kind": self.kind,
            "pipeline": self.pipeline,
            "window": self.window,
            "run_id": self.run_id,
            "start": None if self.start is None else self.start.to_dict(),
            "end": None if self.end is None else self.end.to_dict(),
            "created_at": self.created_at,
            "tables": {name: self.tables[name].to_json() for name in sorted(self.tables)},
            "stats": dict(self.stats),
            "ddl": list(self.ddl),
            "skipped": dict(sorted(self.skipped.items())),
            "skipped_statements": list(self.skipped_statements),
            "covered_tables": dict(self.covered_tables),
            "foreign_keys": list(self.foreign_keys),
            "resnapshots": list(self.resnapshots),
            "schema_skipped_row_events": dict(sorted(self.schema_skipped_row_events.items())),
            "dropped": list(self.dropped),
            "watermarks": None
            if self.watermarks is None
            else {k: None if v is None else v.to_dict() for k, v in self.watermarks.items()},
            "schemas": dict(sorted(self.schemas.items())) or None,
            "statements": self.statements,
        }
        return {key: value for key, value in body.items() if value is not None}

    @classmethod
    def from_json(cls, body: Any, *, where: str = "manifest") -> Manifest:
        """Validate a parsed manifest and return it.

        :param body: the parsed JSON.
        :param where: the manifest's location, for messages.
        :raises ManifestError: if the version is not supported, a required field is missing or has the wrong
            shape, or a table name is not ``db.table``.
        """
        if not isinstance(body, Mapping):
            raise ManifestError(f"{where} does not hold a JSON object")
        version = body.get("format_version")
        if version not in SUPPORTED_VERSIONS:
            raise ManifestError(
                f"{where} has format_version {version!r}; this provider reads {sorted(SUPPORTED_VERSIONS)}: "
                "upgrade the provider where the manifest is read (Airflow workers and Spark alike)"
            )
        try:
            kind = str(body.get("kind") or WINDOW_KIND)
            if kind not in (WINDOW_KIND, SNAPSHOT_KIND):
                raise ValueError(f"unknown kind {kind!r}")
            tables = {
                str(name): TableEntry.from_json(entry) for name, entry in (body.get("tables") or {}).items()
            }
            for name in tables:
                split_table_name(name)
            return cls(
                pipeline=str(body["pipeline"]),
                window=int(body["window"]),
                tables=tables,
                kind=kind,
                run_id=None if body.get("run_id") is None else str(body["run_id"]),
                start=_position(body.get("start")),
                end=_position(body.get("end")),
                stats=dict(body.get("stats") or {}),
                created_at=body.get("created_at"),
                ddl=list(body.get("ddl") or []),
                skipped=dict(body.get("skipped") or {}),
                skipped_statements=list(body.get("skipped_statements") or []),
                covered_tables=dict(body.get("covered_tables") or {}),
                foreign_keys=list(body.get("foreign_keys") or []),
                resnapshots=list(body.get("resnapshots") or []),
                schema_skipped_row_events=dict(body.get("schema_skipped_row_events") or {}),
                dropped=list(body.get("dropped") or []),
                watermarks=None
                if body.get("watermarks") is None
                else {str(k): _watermark(v) for k, v in body["watermarks"].items()},
                schemas={str(k): list(v) for k, v in (body.get("schemas") or {}).items()},
                statements=None if body.get("statements") is None else str(body["statements"]),
            )
        except ContractError as err:
            raise ManifestError(f"{where} does not follow the staging contract: {err}") from err
        except (KeyError, TypeError, ValueError, AttributeError) as err:
            raise ManifestError(f"{where} does not follow the staging contract: {err!r}") from err

    @classmethod
    def from_text(cls, text: str | bytes, *, where: str = "manifest") -> Manifest:
        """Parse and validate a manifest's text.

        :raises ManifestError: if the text is not JSON or not a valid manifest.
        """
        try:
            body = json.loads(text)
        except (ValueError, UnicodeDecodeError) as err:
            raise ManifestError(f"{where} is not valid JSON: {err}") from err
        return cls.from_json(body, where=where)

    def to_text(self) -> bytes:
        """Return the manifest as the bytes :func:`write_manifest` stores (sorted keys, indented)."""
        return json.dumps(self.to_json(), indent=2, sort_keys=True).encode()


def has_changes(files: Sequence[str], rows: int, *, snapshot: bool) -> bool:
    """Return whether a staged table has anything to merge: change rows, or a snapshot's files.

    Even an empty snapshot (files without rows) replaces the table's rows.

    :param files: the table's staged files.
    :param rows: its staged rows.
    :param snapshot: whether the folder stages a snapshot.
    """
    return bool(files) and (rows > 0 or snapshot)


def manifest_uri(window_uri: str) -> str:
    """Return the location of the manifest of the window (or snapshot) folder ``window_uri``."""
    return join_uri(window_uri, MANIFEST_NAME)


def read_manifest(window_uri: str, storage_options: StorageOptions | None = None) -> Manifest | None:
    """Return the manifest of a staged folder, or None when it has none (not staged completely).

    :param window_uri: window or snapshot folder (local path or URI).
    :param storage_options: storage options for object stores (:mod:`.uris`).
    :raises ManifestError: if a manifest exists but is not valid.
    """
    uri = manifest_uri(window_uri)
    fs, path = filesystem_for(uri, storage_options)
    try:
        with fs.open_input_stream(path) as stream:
            text = stream.read()
    except FileNotFoundError:
        return None
    return Manifest.from_text(text, where=uri)


def require_manifest(window_uri: str, storage_options: StorageOptions | None = None) -> Manifest:
    """Return the manifest of a staged folder that must be complete.

    :param window_uri: window or snapshot folder (local path or URI).
    :param storage_options: storage options for object stores (:mod:`.uris`).
    :raises ManifestMissingError: if there is none (the folder is not staged completely).
    :raises ManifestError: if it is not valid.
    """
    manifest = read_manifest(window_uri, storage_options)
    if manifest is None:
        raise ManifestMissingError(
            f"{manifest_uri(window_uri)} does not exist: the window is not staged completely "
            "(the extractor writes the manifest last); re-run the extract task"
        )
    return manifest


def write_manifest(window_uri: str, manifest: Manifest, storage_options: StorageOptions | None = None) -> str:
    """Write the manifest last and atomically into a staged folder; return its location.

    :param window_uri: window or snapshot folder.
    :param manifest: the manifest.
    :param storage_options: storage options for object stores (:mod:`.uris`).
    """
    uri = manifest_uri(window_uri)
    with atomic_output(uri, storage_options) as out:
        out.write(manifest.to_text())
    return uri


def _position(data: Any) -> BinlogPosition | None:
    """Return the position of a manifest's ``start`` or ``end`` (None when absent).

    :raises ValueError: when it is malformed.
    """
    return None if data is None else BinlogPosition.from_dict(data)


def _watermark(data: Any) -> BinlogPosition | None:
    """Return a snapshot manifest's watermark (None for a snapshot of no chunks).

    It is a position's serialised form, or ``[file, pos, gtid_set]`` in manifests written before issue 27.

    :raises ValueError: when it is malformed.
    """
    if isinstance(data, list):
        return BinlogPosition(*data)
    return _position(data)
