"""Apply foreign-key actions the source did not log: synthesise the child row changes of a window.

InnoDB changes child rows for ``ON DELETE CASCADE``, ``ON UPDATE CASCADE`` and ``ON DELETE/UPDATE SET
NULL`` below the layer that writes the binlog (see :mod:`airflow_provider_binlog.contract.foreign_keys`), so a
window holds the parent's change but not the child rows it changed. The extractor records the acting keys
among the selected tables in the manifest (``foreign_keys``); here the merge replays them, as the source
did, before any table is merged (see ``docs/adr/0011-foreign-key-cascades.md``):

1. **Parent changes.** A parent's staged ``d`` row is a delete, unless it and the table's next change are
   one key change (:func:`~airflow_provider_binlog.contract.columns.is_key_change`: the extractor stages an
   update that changes the key or a referenced column as the ``d`` of the before image and the ``u`` of the
   after image at the next order key): then the pair is an update from the ``d`` image to the ``u`` image.
   Changes synthesised for a table are parent changes of its own children (multi-level cascades), and of
   itself for a self-referencing table.
2. **Child states.** The child rows that held an old parent key in any version (the target's row or a
   staged change of the window) are read with all their versions.
3. **Replay.** The versions and the parent changes are replayed in order key order
   ``(_binlog_window, _binlog_seq)``. At a parent change, every live child row whose foreign key holds the
   old parent key gets a new full image at the parent change's order key: a tombstone (``ON DELETE
   CASCADE``), its foreign-key columns set to NULL (``SET NULL``) or to the new key (``ON UPDATE
   CASCADE``). A later change of the child row in the window still wins, as in the source.
4. The synthesised rows of each child are written as one extra Parquet change file, with the child's
   staged schema, to ``<target>/_binlog_cascades/<pipeline>/window=<seq>/`` (its ``_done.json`` written
   last), and merged with the child's staged files. For a child that keeps a change log, the before image
   of each synthesised update that keeps the row's key goes to ``before/`` of that folder
   (:func:`before_images_file`). A re-run of a failed merge reuses them (its targets may already hold part
   of the window); the folder is deleted once every table of the window is merged.

Tables are merged parents first: :func:`synthesise` gives the window's plan
(:mod:`~airflow_provider_binlog.jobs.merge.plan`) the order and the extra files, and reads each table's
staged schema and truncate marker from it. A cycle of keys through several tables is refused. Parent
changes and the child rows they touch are held on the driver: memory grows with the parent deletes and key
updates of one window and the child rows they reach.

The module is longer than the others of the merge (about 550 lines) because it is one algorithm, the
replay above, whose steps share its row and order-key representation; split, each part would be read only
with the others.
"""

from __future__ import annotations

import heapq
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

from airflow_provider_binlog.contract.columns import (
    BUCKET_COLUMN,
    CHANGE_COLUMN_NAMES,
    CHANGE_FIELDS,
    DELETED_COLUMN,
    EVENT_COLUMNS,
    KEY_CHANGE_OPS,
    OP_COLUMN,
    OP_DELETE,
    OP_UPDATE,
    SEQ_COLUMN,
    WINDOW_COLUMN,
    OrderKey,
    is_key_change,
    key_change_update_order,
    order_key,
)
from airflow_provider_binlog.contract.delta import already_merged, delta_arrow_schema, open_table
from airflow_provider_binlog.contract.delta_log import live_dataset
from airflow_provider_binlog.contract.foreign_keys import (
    ACTING_RULES,
    CASCADE,
    MANIFEST_KEY,
    ForeignKey,
    ForeignKeyCycleError,
    parents_first,
)
from airflow_provider_binlog.contract.history import CHANGELOG
from airflow_provider_binlog.contract.names import table_folder
from airflow_provider_binlog.contract.types import recorded_arrow_type, storage_type
from airflow_provider_binlog.contract.uris import (
    StorageOptions,
    filesystem_for,
    join_uri,
    read_json,
    table_uri,
    write_json,
)
from airflow_provider_binlog.jobs.application import MergeJobError
from airflow_provider_binlog.jobs.merge.truncate import table_truncation
from airflow_provider_binlog.jobs.merge.window import StagedWindow

if TYPE_CHECKING:
    from deltalake import DeltaTable

    from airflow_provider_binlog.jobs.merge.plan import TablePlan

log = logging.getLogger(__name__)

CASCADES_DIR = "_binlog_cascades"
"""Folder under the target root holding the synthesised child changes of windows being merged."""
DONE_NAME = "_done.json"
"""Written last in a window's cascade folder: ``{"db.table": [file, rows]}``."""
BEFORE_DIR = "before"
"""Folder of a window's cascade folder holding the before images of synthesised updates (:func:`before_images_file`)."""

Row = dict[str, Any]


@dataclass(frozen=True)
class ParentChange:
    """A delete or an update of a parent row, at its place in the window's order.

    :param order: its order key ``(_binlog_window, _binlog_seq)``.
    :param old: the row's image before the change.
    :param new: its image after an update; ``None`` for a delete.
    """

    order: OrderKey
    old: Row
    new: Row | None

    def key(self, columns: Sequence[str], image: Row | None) -> tuple[Any, ...] | None:
        """Return the values of ``columns`` in ``image``, or None when the image is absent or one is NULL."""
        if image is None:
            return None
        values = tuple(image.get(c) for c in columns)
        return None if any(v is None for v in values) else values


@dataclass
class Synthesised:
    """The outcome of replaying one child table: its new rows, and the changes they are for its children.

    :param rows: synthesised change rows (source columns and change metadata), in order.
    :param changes: the same changes as parent changes of the table's own children.
    :param befores: the before image of each synthesised update that keeps its row's key, at the update's order
        key (for change logs, :func:`before_images_file`).
    """

    rows: list[Row] = field(default_factory=list)
    changes: list[ParentChange] = field(default_factory=list)
    befores: list[Row] = field(default_factory=list)


def before_images_file(cascade_file: str) -> str:
    """Return where the before images of a child's synthesised updates are, beside its cascade file.

    ``<cascade folder>/before/<table folder>.parquet``: a folder name without a dot, which no table folder is. The
    file exists only for a child whose manifest entry keeps a change log and that had such updates.
    """
    folder, _, name = cascade_file.rpartition("/")
    return join_uri(folder, BEFORE_DIR, name)


def cascade_folder(target: str, pipeline: str, seq: int) -> str:
    """Return ``<target>/_binlog_cascades/<pipeline>/window=<seq>``."""
    return join_uri(target, CASCADES_DIR, pipeline, f"window={seq}")


def window_foreign_keys(window: StagedWindow) -> list[ForeignKey]:
    """Return the foreign keys the window's manifest asks the merge to apply (empty for older manifests).

    :raises MergeJobError: when the manifest's ``foreign_keys`` entry is malformed.
    """
    entries = window.manifest.foreign_keys
    try:
        return [ForeignKey.from_manifest(entry) for entry in entries]
    except (KeyError, TypeError, ValueError) as err:
        raise MergeJobError(
            f"manifest of {window.uri} has a malformed {MANIFEST_KEY} entry: {err!r}"
        ) from err


def synthesise(
    window: StagedWindow,
    tables: Mapping[str, TablePlan],
    target: str,
    *,
    key_overrides: Mapping[str, Sequence[str]] | None = None,
    storage_options: StorageOptions | None = None,
) -> tuple[list[str], dict[str, tuple[str, int]]]:
    """Return the window's tables parents first and the change file synthesised for each child that has one.

    The changes are computed once per window (see the module docstring) and reused by a re-run.

    :param window: the staged window.
    :param tables: the plan of each table of the window, as the manifest stages it.
    :param target: target root.
    :param key_overrides: user-named keys of tables without a primary key.
    :param storage_options: storage options of the staging and target stores.
    :returns: the table names in merge order, and ``{child: (file location, rows)}``.
    :raises MergeJobError: on a cycle of keys through several tables, a child without a key or a
        malformed manifest.
    """
    names = [t.name for t in window.tables]
    keys = window_foreign_keys(window)
    if not keys:
        return names, {}
    keys = [k for k in keys if k.child in tables and k.parent in tables]
    try:
        order = parents_first(names, keys)
    except ForeignKeyCycleError as err:
        raise MergeJobError(f"window {window.seq} of {window.pipeline}: {err}") from err
    folder = cascade_folder(target, window.pipeline, window.seq)
    extra = _read_done(folder, storage_options)
    if extra is None:
        # each child's Delta table is read once: to tell a re-run after success, then to replay its rows
        children = {
            name: open_table(table_uri(target, name), storage_options)
            for name in sorted({k.child for k in keys})
        }
        if all(
            dt is not None and already_merged(dt, window.pipeline, window.seq) for dt in children.values()
        ):
            extra = {}  # a re-run after success: every child already holds the window
        else:
            extra = _compute(
                window, tables, children, target, keys, order, key_overrides or {}, storage_options
            )
            _write_done(folder, extra, storage_options)
    return list(order), extra


def drop_cascades(
    target: str, pipeline: str, seq: int, storage_options: StorageOptions | None = None
) -> None:
    """Delete a window's synthesised changes once every table of the window is merged (cleanup only).

    :param target: target root.
    :param pipeline: the pipeline merging the window.
    :param seq: the window's sequence number.
    :param storage_options: storage options of the target store.
    """
    import pyarrow.fs as pafs

    fs, path = filesystem_for(cascade_folder(target, pipeline, seq), storage_options)
    try:
        if fs.get_file_info(path).type != pafs.FileType.NotFound:
            fs.delete_dir(path)
    except OSError as err:
        log.warning("could not delete the cascade folder %s: %s", path, err)


def _read_done(folder: str, storage_options: StorageOptions | None) -> dict[str, tuple[str, int]] | None:
    done = read_json(join_uri(folder, DONE_NAME), storage_options)
    if done is None:
        return None
    return {name: (join_uri(folder, file), int(rows)) for name, (file, rows) in done.items()}


def _write_done(
    folder: str, extra: Mapping[str, tuple[str, int]], storage_options: StorageOptions | None
) -> None:
    body = {name: [file.rsplit("/", 1)[-1], rows] for name, (file, rows) in extra.items()}
    # whole or absent: a half-written list would stop every re-run
    write_json(join_uri(folder, DONE_NAME), body, storage_options)


def _compute(
    window: StagedWindow,
    tables: Mapping[str, TablePlan],
    children: Mapping[str, DeltaTable | None],
    target: str,
    keys: Sequence[ForeignKey],
    order: Sequence[str],
    key_overrides: Mapping[str, Sequence[str]],
    storage_options: StorageOptions | None,
) -> dict[str, tuple[str, int]]:
    """Replay every child table, parents first; write each one's rows; return ``{table: (file, rows)}``.

    ``children`` holds each child's Delta table (None when it has none yet), read once by :func:`synthesise`.
    """
    manifest_tables = window.manifest.tables
    # A parent without a count of its deletes (not in the manifest, no ops) is read; one without deletes is not.
    parents = {
        k.parent
        for k in keys
        if k.parent not in manifest_tables
        or not manifest_tables[k.parent].ops
        or manifest_tables[k.parent].ops.get(OP_DELETE)
    }
    changes: dict[str, list[ParentChange]] = {}
    extra: dict[str, tuple[str, int]] = {}
    folder = cascade_folder(target, window.pipeline, window.seq)
    for name in order:
        table = tables[name]
        # a table without a 'd' row has no parent change
        own = staged_parent_changes(table, storage_options) if name in parents else []
        child_keys = [k for k in keys if k.child == name]
        if not child_keys:
            changes[name] = own
            continue
        pk = list(key_overrides.get(name) or table.staged.primary_key)
        if not pk:
            raise MergeJobError(
                f"{name} has cascading foreign keys but no key to tell its rows apart; name one with --key"
            )
        incoming = {k.name: (own if k.parent == name else changes.get(k.parent, [])) for k in child_keys}
        dt = children[name]
        result = ChildRows(table, dt, pk, window.pipeline, storage_options).replay(name, child_keys, incoming)
        changes[name] = sorted([*own, *result.changes], key=lambda c: c.order)
        if result.rows:
            file = join_uri(folder, f"{table_folder(name)}.parquet")
            schema = _file_schema(table, dt)
            if result.befores and name in manifest_tables and CHANGELOG in manifest_tables[name].history:
                write_rows(before_images_file(file), result.befores, schema, storage_options)
            write_rows(file, result.rows, schema, storage_options)
            extra[name] = (file, len(result.rows))
            log.info("%s: %d child changes synthesised for window %d", name, len(result.rows), window.seq)
    return extra


def _stored(schema: pa.Schema) -> pa.Schema:
    """Return ``schema`` with the storage types the target keeps (:func:`storage_type`)."""
    return pa.schema([pa.field(f.name, storage_type(f.type, f.name)) for f in schema])


def _staged_dataset(table: TablePlan, storage_options: StorageOptions | None) -> tuple[Any, pa.Schema]:
    """Return a pyarrow dataset over a table's staged files (their unified schema) and its storage schema."""
    import pyarrow.dataset as ds

    schema = table.staged_schema()
    fs, _ = filesystem_for(table.staged.files[0], storage_options)
    paths = [filesystem_for(uri, storage_options)[1] for uri in table.staged.files]
    return ds.dataset(paths, schema=schema, format="parquet", filesystem=fs), _stored(schema)


def _prefilter(columns: Sequence[str], values: Iterable[tuple[Any, ...]]) -> Any:
    """Return a pyarrow filter on the first of ``columns`` (exact tuple matches are checked in Python)."""
    import pyarrow.compute as pc

    firsts = sorted({v[0] for v in values}, key=repr)
    return pc.field(columns[0]).isin(pa.array(firsts))


def _scan(dataset: Any, condition: Any) -> pa.Table:
    """Return the rows of ``dataset`` matching ``condition``, filtered batch by batch after reading.

    Not ``to_table(filter=...)``: on the dataset of a Delta table (deltalake 1.6) that pushdown dropped
    matching rows of a string column (measured: 1 row of 4).
    """
    batches = [batch.filter(condition) for batch in dataset.to_batches()]
    return pa.Table.from_batches(batches, schema=dataset.schema)


def staged_parent_changes(
    table: TablePlan, storage_options: StorageOptions | None = None
) -> list[ParentChange]:
    """Return the deletes and key changes (:func:`~airflow_provider_binlog.contract.columns.is_key_change`) of a table.

    Read on the driver with pyarrow: the ``d`` rows of the window, then the ``u`` rows at the order keys a key
    change would give their after images.

    :param table: the parent's plan (its staged files and schema).
    :param storage_options: storage options of the staging store.
    :raises MergeJobError: if the parent's staged files cannot be merged (:meth:`TablePlan.staged_schema`).
    """
    import pyarrow.compute as pc

    if not table.staged.files:
        return []
    dataset, stored = _staged_dataset(table, storage_options)
    before, after = KEY_CHANGE_OPS
    deletes = _scan(dataset, pc.field(OP_COLUMN) == before).cast(stored).to_pylist()
    if not deletes:
        return []
    updates_at = {key_change_update_order(order_key(r)) for r in deletes}
    seqs = pa.array(sorted({seq for _, seq in updates_at}), pa.int64())
    updates = _scan(dataset, (pc.field(OP_COLUMN) == after) & pc.field(SEQ_COLUMN).isin(seqs))
    following = {order_key(r): r for r in updates.cast(stored).to_pylist()}
    result = []
    for delete in sorted(deletes, key=order_key):
        update = following.get(key_change_update_order(order_key(delete)))
        result.append(
            ParentChange(
                order=order_key(delete), old=delete, new=update if is_key_change(delete, update) else None
            )
        )
    return result


class ChildRows:
    """The versions of a child table's rows (target row, staged changes), read on the driver by parent key.

    :param table: the child's plan (its staged files and schema, the window's truncate marker of it).
    :param dt: its Delta table, if it exists.
    :param pk: its key columns.
    :param pipeline: the pipeline merging the window (the truncate floor's app transactions).
    :param storage_options: storage options of the staging store.

    Versions ordered before the child's truncate floor or the window's truncate marker of it
    (:func:`~airflow_provider_binlog.jobs.merge.truncate.table_truncation`) are left out: a ``TRUNCATE`` of the child
    removed those rows, so no later parent change acts on them.
    """

    def __init__(
        self,
        table: TablePlan,
        dt: DeltaTable | None,
        pk: Sequence[str],
        pipeline: str,
        storage_options: StorageOptions | None = None,
    ) -> None:
        self.cut = table_truncation(dt, table.truncation, pipeline, table.name).cut
        self.pk = list(pk)
        self.sources: list[tuple[Any, pa.Schema | None]] = []
        if dt is not None:
            self.sources.append((live_dataset(dt), None))
        if table.staged.files:
            self.sources.append(_staged_dataset(table, storage_options))
        self.versions: dict[tuple[Any, ...], list[Row]] = {}
        self.asked: dict[str, set[tuple[Any, ...]]] = {}

    def _rows(self, columns: Sequence[str], values: set[tuple[Any, ...]]) -> list[Row]:
        """Return the rows of every source whose ``columns`` hold one of ``values``."""
        rows = []
        for dataset, stored in self.sources:
            table = _scan(dataset, _prefilter(columns, values))
            if BUCKET_COLUMN in table.column_names:
                table = table.drop_columns([BUCKET_COLUMN])
            for row in (table if stored is None else table.cast(stored)).to_pylist():
                if tuple(row.get(c) for c in columns) in values and (
                    self.cut is None or order_key(row) >= self.cut
                ):
                    rows.append(row)
        return rows

    def load(self, keys: Sequence[ForeignKey], changes: Mapping[str, Iterable[ParentChange]]) -> bool:
        """Load every version of the rows that held an old parent key of ``changes`` not asked for yet.

        :returns: whether a new parent key was asked for.
        """
        holders: set[tuple[Any, ...]] = set()
        asked = False
        for key in keys:
            olds = {o for c in changes.get(key.name, ()) if (o := c.key(key.referenced, c.old)) is not None}
            new = olds - self.asked.setdefault(key.name, set())
            if not new:
                continue
            asked = True
            self.asked[key.name] |= new
            holders |= {tuple(r.get(c) for c in self.pk) for r in self._rows(key.columns, new)}
        unknown = holders - self.versions.keys()
        if unknown:
            for row in self._rows(self.pk, unknown):
                self.versions.setdefault(tuple(row.get(c) for c in self.pk), []).append(row)
        return asked

    def replay(
        self, table: str, keys: Sequence[ForeignKey], incoming: Mapping[str, Sequence[ParentChange]]
    ) -> Synthesised:
        """Replay the child's versions against ``incoming`` (see :func:`replay`).

        A self-referencing key reaches rows through the table's own synthesised changes: the replay runs
        again with the rows they reach until no new parent key turns up (one tree level per round).
        """
        probes: dict[str, Sequence[ParentChange]] = dict(incoming)
        result = Synthesised()
        while self.load(keys, probes):
            versions = [row for rows in self.versions.values() for row in rows]
            result = replay(table, self.pk, keys, incoming, versions)
            probes = {k.name: result.changes for k in keys if k.parent == table}
        return result


def replay(
    table: str,
    pk: Sequence[str],
    keys: Sequence[ForeignKey],
    incoming: Mapping[str, Sequence[ParentChange]],
    versions: Iterable[Row],
) -> Synthesised:
    """Replay a child table's versions and its parents' changes in order; return the synthesised changes.

    Pure Python: the core of the cascade semantics, see the module docstring. When several keys act on
    one child row for the same parent change (two keys on one parent), the row's last image is kept.

    :param table: the child ``db.table``, for messages.
    :param pk: its key columns.
    :param keys: its acting foreign keys.
    :param incoming: each key's parent changes (by key name), any order.
    :param versions: versions of the child rows concerned (target rows and staged changes).
    """
    state: dict[tuple[Any, ...], Row] = {}
    holders: list[dict[tuple[Any, ...], set[tuple[Any, ...]]]] = [{} for _ in keys]
    result = Synthesised()

    def put(row: Row) -> None:
        ident = tuple(row.get(c) for c in pk)
        before = state.get(ident)
        for position, key in enumerate(keys):
            if before is not None and (old := _held(before, key)) is not None:
                holders[position].get(old, set()).discard(ident)
            if (new := _held(row, key)) is not None:
                holders[position].setdefault(new, set()).add(ident)
        state[ident] = row

    emitted: dict[tuple[OrderKey, tuple[Any, ...]], Row] = {}  # one row per child row and order key
    befores: dict[tuple[OrderKey, tuple[Any, ...]], Row] = {}  # the image before the first action of an order

    def emit(row: Row, before: Row | None = None) -> None:
        put(row)
        at = (order_key(row), tuple(row.get(c) for c in pk))
        emitted[at] = row
        if before is not None:
            befores.setdefault(at, before)

    queue: list[tuple[OrderKey, int, int, ParentChange]] = []
    counter = 0
    for position, key in enumerate(keys):
        for change in incoming[key.name]:
            queue.append((change.order, counter, position, change))
            counter += 1
    heapq.heapify(queue)
    timeline = sorted(versions, key=order_key)
    next_version = 0
    while queue:
        order, _, position, change = heapq.heappop(queue)
        while next_version < len(timeline) and order_key(timeline[next_version]) < order:
            put(timeline[next_version])
            next_version += 1
        key = keys[position]
        old, new = change.key(key.referenced, change.old), change.key(key.referenced, change.new)
        action = key.on_delete if change.new is None else key.on_update
        if old is None or old == new or action not in ACTING_RULES:
            continue
        for ident in sorted(holders[position].get(old, set()), key=repr):
            before = state[ident]
            after = _acted(before, key, action, new, change)
            if after[OP_COLUMN] != OP_DELETE and tuple(after.get(c) for c in pk) != ident:  # the row moved
                gone = {**before, OP_COLUMN: OP_DELETE, WINDOW_COLUMN: order[0], SEQ_COLUMN: order[1]}
                gone.update({name: after[name] for name in EVENT_COLUMNS})
                gone.pop(DELETED_COLUMN, None)
                emit(gone)
            kept = after[OP_COLUMN] == OP_UPDATE and tuple(after.get(c) for c in pk) == ident
            emit(after, {**before, **{c: after[c] for c in (OP_COLUMN, WINDOW_COLUMN, SEQ_COLUMN, *EVENT_COLUMNS)}}
                 if kept else None)  # fmt: skip
            caused = ParentChange(
                order=order, old=before, new=None if after[OP_COLUMN] == OP_DELETE else after
            )
            result.changes.append(caused)
            for again, other in enumerate(keys):  # a self-referencing key acts on the same table again
                if other.parent == table:
                    heapq.heappush(queue, (order, counter, again, caused))
                    counter += 1
    result.rows = list(emitted.values())
    result.befores = [row for at, row in befores.items() if emitted[at][OP_COLUMN] == OP_UPDATE]
    return result


def _acted(
    before: Row, key: ForeignKey, action: str, new: tuple[Any, ...] | None, change: ParentChange
) -> Row:
    """Return the child row's image after ``action`` for ``change`` (a tombstone for a cascaded delete).

    ``new`` is the parent's new key (None when it became NULL or the parent row was deleted).
    """
    after = {name: value for name, value in before.items() if name not in (DELETED_COLUMN, BUCKET_COLUMN)}
    deleted = action == CASCADE and change.new is None
    if not deleted:
        values = new if action == CASCADE and new is not None else (None,) * len(key.columns)
        after.update(zip(key.columns, values, strict=True))
    cause = change.new if change.new is not None else change.old
    after.update({name: cause.get(name) for name in EVENT_COLUMNS})
    after[OP_COLUMN] = OP_DELETE if deleted else OP_UPDATE
    after[WINDOW_COLUMN], after[SEQ_COLUMN] = change.order
    return after


def _held(row: Row, key: ForeignKey) -> tuple[Any, ...] | None:
    """Return the parent key a live child row holds in ``key``'s columns (None if deleted or NULL)."""
    if row.get(DELETED_COLUMN) or row.get(OP_COLUMN) == OP_DELETE:
        return None
    values = tuple(row.get(c) for c in key.columns)
    return None if any(v is None for v in values) else values


def _file_schema(table: TablePlan, dt: DeltaTable | None) -> pa.Schema:
    """Return the schema of a child's extra change file: its staged schema, else the one its target records."""
    if table.staged.files:
        return table.staged_schema()
    assert dt is not None  # a child with versions but no staged files has a target table
    fields = []
    for f in delta_arrow_schema(dt):
        if f.name in CHANGE_COLUMN_NAMES or f.name in (DELETED_COLUMN, BUCKET_COLUMN):
            continue
        fields.append(pa.field(f.name, recorded_arrow_type(f)))
    return pa.schema([*fields, *(pa.field(f.name, f.type) for f in CHANGE_FIELDS)])


def write_rows(
    uri: str, rows: Sequence[Row], schema: pa.Schema, storage_options: StorageOptions | None = None
) -> None:
    """Write change rows (storage-typed Python values) as one Parquet file with the staged ``schema``.

    :param uri: the file's location.
    :param rows: change rows.
    :param schema: the child's staged schema (values are cast to it from their storage types).
    :param storage_options: storage options of the target store.
    """
    stored = pa.schema([pa.field(f.name, storage_type(f.type, f.name)) for f in schema])
    table = pa.Table.from_pylist([{f.name: row.get(f.name) for f in schema} for row in rows], schema=stored)
    fs, path = filesystem_for(uri, storage_options)
    fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
    pq.write_table(table.cast(schema), path, filesystem=fs)
