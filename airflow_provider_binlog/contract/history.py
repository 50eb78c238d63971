"""History tables beside a target table: which a table gets, where they live, their columns and their digests.

A pipeline may keep, for each source table, history beside the current-state target table
(``docs/history.md``). The one kind so far:

* **change log** (:data:`CHANGELOG`): an append-only Delta table with one row per row change the binlog
  holds (and one per row a snapshot read), written by the same merge as the target, under the window's app
  transaction (:mod:`airflow_provider_binlog.jobs.merge.history`).

**Where.** The change log of ``db.t`` is the folder of the target table with :data:`CHANGELOG_SUFFIX`
appended: ``<target>/<db>/<t>~changes``. A table's folder name never holds ``~`` unescaped as ``~c``
(:func:`~airflow_provider_binlog.contract.names.path_segment` escapes ``~`` as ``~7E``, with upper-case hex), so
no source table can share a history table's folder.

**Columns** (:func:`changelog_schema`): the table's key columns (the after image's values; the before
image's for a delete), the change columns of the staged row (:data:`~.columns.CHANGE_FIELDS`: op, order key,
GTID, binlog coordinates, commit time), then :data:`MERGE_WINDOW_COLUMN`, :data:`RUN_ID_COLUMN`,
:data:`CASCADE_COLUMN`, the two images :data:`BEFORE_COLUMN` and :data:`AFTER_COLUMN` (structs of every
source column), then the statement that made the change where the source logs it (:data:`STATEMENT_POS_COLUMN`,
:data:`STATEMENT_COLUMN`). ``_binlog_op`` is ``c`` (insert: after image only), ``u`` (update: both images; the before
image is null for an update staged without it, see below), ``d`` (delete: before image only), ``r`` (a row a
snapshot read, or the target's row when history started on a table that already had rows: the table's history
restarts at it) or ``t`` (a truncate marker: the table was emptied, no image).

**Before images.** The binlog's update events carry both images (``binlog_row_image=FULL``); the extractor
stages the rows of a table with history as it stages any table's, each with the before image of the update it
was staged from in :data:`BEFORE_COLUMN` (a struct of the source columns; null on rows of inserts and deletes,
and on snapshot reads). An update that moves the row's key (the key-change rule of :mod:`~.columns`,
:func:`~.columns.is_key_change`) is staged as the ``d`` of the before image and the ``u`` of the after image,
both carrying it: the change log makes one ``u`` of the two by leaving out every ``d`` that carries a before
image, with no look at another row (ADR 0039).

**Digests** (tamper evidence): every change-log commit records, in its commit info, the SHA-256
:func:`rows_digest` of the rows it appends and a chain value (:func:`chain_digest`) over the previous
commit's chain value, so that the rows of one window cannot be changed, dropped or added without
recomputing every later chain value (``python -m airflow_provider_binlog.admin verify-history``). The digest is
computed from a canonical form of the rows that does not depend on the order of rows or files, nor on a
column added later (all null in older rows), nor on a lossless widening of a column's type, so compaction
and schema evolution keep it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import pyarrow as pa

from airflow_provider_binlog.contract import ContractError
from airflow_provider_binlog.contract.columns import (
    CHANGE_FIELDS,
    FILE_COLUMN,
    GTID_COLUMN,
    POS_COLUMN,
    SEQ_COLUMN,
    WINDOW_COLUMN,
)
from airflow_provider_binlog.contract.names import canonical_name
from airflow_provider_binlog.contract.uris import table_uri

CHANGELOG = "changelog"
"""History kind: an append-only change log per table."""
SCD2 = "scd2"
"""History kind: an SCD type 2 table per table, one row per version of each source row."""
HISTORY_KINDS: tuple[str, ...] = (CHANGELOG, SCD2)
"""Every history kind a table may have."""
CHANGELOG_SUFFIX = "~changes"
"""Appended to a target table's folder to name its change log's folder."""
SCD2_SUFFIX = "~scd2"
"""Appended to a target table's folder to name its SCD2 table's folder."""

MERGE_WINDOW_COLUMN = "_binlog_merge_window"
"""Change-log column: seq of the window (or snapshot) whose merge appended the row (one per commit)."""
RUN_ID_COLUMN = "_binlog_run_id"
"""Change-log column: the DAG run that staged the window (the manifest's ``run_id``)."""
CASCADE_COLUMN = "_binlog_cascade"
"""Change-log column: true for a change a foreign key's action made (``ON DELETE CASCADE`` ...), which the
source did not log; the merge synthesised it (``docs/foreign-keys.md``), with its before image."""
BEFORE_COLUMN = "_binlog_before"
"""Change-log column: the row's image before the change (a struct of the source columns), null for inserts. Also a
staged column of a table with history: the before image of the update a row was staged from (see above)."""
AFTER_COLUMN = "_binlog_after"
"""Change-log column: the row's image after the change, null for deletes and truncate markers."""
STATEMENT_POS_COLUMN = "_binlog_statement_pos"
"""Change-log column: where the statement that made the change starts in ``_binlog_file`` (the position of its
ANNOTATE_ROWS event on MariaDB, ``binlog_annotate_row_events``; of its ROWS_QUERY event on MySQL,
``binlog_rows_query_log_events``); null when the source logged no statement text for it. With ``_binlog_file`` it
names the statement in every table's change log."""
STATEMENT_COLUMN = "_binlog_statement"
"""Change-log column: the statement's text (as logged: UTF-8, bytes that are not replaced), on the first row of
each statement in a table's change log (lowest order key) and null on its other rows, so that a bulk statement's
text is stored once per table, not once per row; :func:`~airflow_provider_binlog.history.read_changes` gives it on
every row."""
STATEMENTS_FILE = "statements/part-00000.parquet"
"""A window's statements side file, in the window folder (a folder name without a dot, which no table's folder
``<db>.<table>`` can be, and not hidden from Spark by a leading ``_``): one row per rows event of a table keeping a change log
that the source logged a statement for (:data:`STATEMENTS_SCHEMA`). A table's change log joins its rows to its
entries by ``(_binlog_file, _binlog_pos)``; rows a foreign key's action synthesised take the statement of their
cause's rows event (any table's entry). A MySQL compressed transaction (``binlog_transaction_compression``) gives
all its rows events the coordinates of its TRANSACTION_PAYLOAD event: where those hold several statements, the
coordinates cannot tell them apart and the rows get no statement."""
STATEMENTS_TABLE_COLUMN = "_binlog_table"
"""Statements side file column: the table (``db.t``) whose rows the rows event changed."""
STATEMENTS_SCHEMA = pa.schema(
    [
        pa.field(STATEMENTS_TABLE_COLUMN, pa.string(), nullable=False),
        pa.field(FILE_COLUMN, pa.string(), nullable=False),
        pa.field(POS_COLUMN, pa.int64(), nullable=False),
        pa.field(SEQ_COLUMN, pa.int64(), nullable=False),
        pa.field(STATEMENT_POS_COLUMN, pa.int64(), nullable=False),
        pa.field(STATEMENT_COLUMN, pa.string()),
    ]
)
"""Columns of :data:`STATEMENTS_FILE`: a rows event's table and binlog coordinates (its end, as ``_binlog_pos`` of
its rows), the ``_binlog_seq`` of its first change in the table's change log (the update after the delete of a row
that moved), its statement's position and, on the statement's first rows event of each table only, its text (which
the change log keeps on the row of that ``_binlog_seq``)."""

VALID_FROM_COLUMN = "_binlog_valid_from"
"""SCD2 column: commit time of the change that started the version (UTC, microseconds)."""
VALID_TO_COLUMN = "_binlog_valid_to"
"""SCD2 column: commit time of the change that ended the version; null while it is current."""
END_WINDOW_COLUMN = "_binlog_end_window"
END_SEQ_COLUMN = "_binlog_end_seq"
"""SCD2 columns: order key of the change that ended the version (null while it is current)."""
ENDED_BY_COLUMN = "_binlog_ended_by"
"""SCD2 column: what ended the version: ``u`` a newer version of the key, ``d`` deleted (or moved to another key),
``t`` the table was truncated, ``r`` a re-snapshot restarted the table's history; null while it is current."""
IS_CURRENT_COLUMN = "_binlog_is_current"
"""SCD2 column: the version is the key's current one (the source holds it now)."""

DIGEST_KEY = "binlog.history.digest"
"""Commit info key: SHA-256 (hex) of the rows the commit appends (:func:`rows_digest`)."""
PREVIOUS_KEY = "binlog.history.previous"
"""Commit info key: the chain value of the change log's previous digest-bearing commit ("" for the first)."""
CHAIN_KEY = "binlog.history.chain"
"""Commit info key: :func:`chain_digest` of the previous chain value, the window and :data:`DIGEST_KEY`."""
ROWS_KEY = "binlog.history.rows"
"""Commit info key: the number of rows the commit appends."""
DIGEST_VERSION = "binlog-history-v1"
"""Names the canonical form and chain rule; part of every digest."""


class HistoryConfigError(ContractError, ValueError):
    """A history setting names an unknown kind or is not a table name."""


def history_kinds(value: str | Sequence[str] | None) -> tuple[str, ...]:
    """Return the history kinds a setting asks for, in :data:`HISTORY_KINDS` order.

    :param value: None, ``""`` or ``"off"`` for none; a kind (``"changelog"``), kinds separated by commas,
        or a sequence of kinds.
    :raises HistoryConfigError: naming an unknown kind.
    """
    if value is None:
        return ()
    items = value.split(",") if isinstance(value, str) else list(value)
    wanted = {str(item).strip() for item in items} - {"", "off"}
    unknown = sorted(wanted - set(HISTORY_KINDS))
    if unknown:
        raise HistoryConfigError(
            f"history {unknown} is not a history kind: use one of {list(HISTORY_KINDS)}, or 'off'"
        )
    return tuple(kind for kind in HISTORY_KINDS if kind in wanted)


@dataclass(frozen=True)
class HistorySettings:
    """The history a pipeline keeps: one setting for every table, overridden for some.

    :param default: kinds every selected table gets (:func:`history_kinds`).
    :param tables: kinds per ``db.table`` (canonical names) overriding ``default``; ``()`` turns history off.
    """

    default: tuple[str, ...] = ()
    tables: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    @classmethod
    def parse(
        cls,
        history: str | Sequence[str] | None = None,
        table_history: Mapping[str, str | Sequence[str] | None] | None = None,
    ) -> HistorySettings:
        """Return the settings of an operator's ``history`` and ``table_history`` arguments.

        :raises HistoryConfigError: for an unknown kind or a table name that is not ``db.table``.
        """
        tables = {}
        for name, kinds in (table_history or {}).items():
            try:
                tables[canonical_name(name)] = history_kinds(kinds)
            except ContractError as err:
                raise HistoryConfigError(f"table_history[{name!r}]: {err}") from err
        return cls(history_kinds(history), tables)

    def kinds_for(self, table: str) -> tuple[str, ...]:
        """Return the history kinds of ``db.table`` (the override, else the default)."""
        return self.tables.get(canonical_name(table), self.default)

    def __bool__(self) -> bool:
        return bool(self.default) or any(self.tables.values())


def changelog_uri(target: str, table: str) -> str:
    """Return the location of the change log of ``db.table`` under the target root (see the module docstring)."""
    return table_uri(target, table) + CHANGELOG_SUFFIX


def history_uri(kind: str, target: str, table: str) -> str:
    """Return the location of the history table of ``kind`` (:data:`HISTORY_KINDS`) of ``db.table``."""
    return changelog_uri(target, table) if kind == CHANGELOG else scd2_uri(target, table)


def scd2_uri(target: str, table: str) -> str:
    """Return the location of the SCD2 table of ``db.table`` under the target root (see the module docstring)."""
    return table_uri(target, table) + SCD2_SUFFIX


def scd2_schema(source: pa.Schema) -> pa.Schema:
    """Return the SCD2 table's Arrow schema for a table whose source columns have ``source``'s fields.

    The source columns (storage types), the order key, GTID and commit time of the change that started the
    version, the order key and time of the one that ended it, what ended it and whether it is current.
    """
    timestamp = pa.timestamp("us", tz="UTC")
    return pa.schema(
        [
            *(f.with_nullable(True) for f in source),
            pa.field(WINDOW_COLUMN, pa.int64()),
            pa.field(SEQ_COLUMN, pa.int64()),
            pa.field(GTID_COLUMN, pa.string()),
            pa.field(VALID_FROM_COLUMN, timestamp),
            pa.field(VALID_TO_COLUMN, timestamp),
            pa.field(END_WINDOW_COLUMN, pa.int64()),
            pa.field(END_SEQ_COLUMN, pa.int64()),
            pa.field(ENDED_BY_COLUMN, pa.string()),
            pa.field(IS_CURRENT_COLUMN, pa.bool_()),
        ]
    )


def changelog_schema(source: pa.Schema, keys: Sequence[str]) -> pa.Schema:
    """Return the change log's Arrow schema for a table whose source columns have ``source``'s fields.

    :param source: the source columns as the target stores them (storage types, see
        :func:`~.types.storage_type`), without change columns.
    :param keys: the table's key columns, in key order (their spelling in ``source``).
    :raises HistoryConfigError: if a key column is not in ``source``.
    """
    by_name = {f.name: f for f in source}
    missing = [k for k in keys if k not in by_name]
    if missing:
        raise HistoryConfigError(f"key columns {missing} are not among the source columns {source.names}")
    image = pa.struct([f.with_nullable(True) for f in source])
    return pa.schema(
        [
            *(by_name[k].with_nullable(True) for k in keys),
            *(f.with_nullable(True) for f in CHANGE_FIELDS),
            pa.field(MERGE_WINDOW_COLUMN, pa.int64()),
            pa.field(RUN_ID_COLUMN, pa.string()),
            pa.field(CASCADE_COLUMN, pa.bool_()),
            pa.field(BEFORE_COLUMN, image),
            pa.field(AFTER_COLUMN, image),
            pa.field(STATEMENT_POS_COLUMN, pa.int64()),
            pa.field(STATEMENT_COLUMN, pa.string()),
        ]
    )


def rows_digest(rows: pa.Table) -> str:
    """Return the SHA-256 (hex) of a canonical form of ``rows`` (change-log rows of one commit).

    The canonical form: struct columns flattened to their leaves (``_binlog_after.price``); leaves holding only
    nulls left out (a column added later reads as null in older rows); every integer and decimal as its decimal
    text without trailing fraction zeros, floats as the text of their double (an integral one as an integer), dates and times as microseconds, booleans as
    bytes, text and binary as their bytes (so a lossless widening, :func:`~.types.is_lossless_widening`, does not
    change it); the rows sorted by every leaf; then each leaf by name, its validity and its values. Two tables
    with the same rows in any order, file split or later schema give the same digest.

    :param rows: the rows (any schema; an empty table has a digest too).
    """
    leaves = _canonical_leaves(rows)
    names = sorted(leaves)
    digest = hashlib.sha256(DIGEST_VERSION.encode())
    digest.update(rows.num_rows.to_bytes(8, "little"))
    if names and rows.num_rows:
        import pyarrow.compute as pc

        table = pa.table({name: leaves[name] for name in names})
        table = table.take(pc.sort_indices(table, [(name, "ascending") for name in names]))
        for name in names:
            digest.update(_framed(name.encode()))
            for part in _leaf_bytes(table.column(name).combine_chunks()):
                digest.update(_framed(part))
    return digest.hexdigest()


def chain_digest(previous: str, window: int, digest: str) -> str:
    """Return the chain value of a change-log commit: SHA-256 of the previous chain value, its window and digest.

    :param previous: the previous commit's chain value ("" for a change log's first commit).
    :param window: the window (or snapshot) seq the commit appends.
    :param digest: the commit's :func:`rows_digest`.
    """
    return hashlib.sha256(f"{DIGEST_VERSION}|{previous}|{window}|{digest}".encode()).hexdigest()


def _framed(data: bytes) -> bytes:
    return len(data).to_bytes(8, "little") + data


def _canonical_leaves(rows: pa.Table) -> dict[str, pa.Array]:
    """Return the non-null leaves of ``rows`` by dotted name, each in its canonical type (see :func:`rows_digest`)."""
    leaves: dict[str, pa.Array] = {}
    for name, array in _flatten(rows.column_names, [c.combine_chunks() for c in rows.columns]):
        if array.null_count == len(array):
            continue
        leaves[name] = _canonical(array)
    return leaves


def _flatten(names: Iterable[str], arrays: Iterable[pa.Array]) -> Iterable[tuple[str, pa.Array]]:
    for name, array in zip(names, arrays, strict=True):
        if pa.types.is_struct(array.type):
            fields = [array.type.field(i).name for i in range(array.type.num_fields)]
            # flatten() merges the struct's validity into each child: a null image gives null leaves
            yield from _flatten([f"{name}.{f}" for f in fields], array.flatten())
        else:
            yield name, array


def _canonical(array: pa.Array) -> pa.Array:
    """Return ``array`` in the canonical type of its family (see :func:`rows_digest`)."""
    import pyarrow.compute as pc

    kind = array.type
    if pa.types.is_integer(kind):
        return pc.cast(array, pa.string())
    if pa.types.is_decimal(kind):
        text = pc.cast(array, pa.string())
        text = pc.replace_substring_regex(text, pattern=r"^(-?\d+)\.(\d*?)0*$", replacement=r"\1.\2")
        return pc.replace_substring_regex(text, pattern=r"\.$", replacement="")
    if pa.types.is_floating(
        kind
    ):  # as text, integral values as integers: an INT widened to a DOUBLE keeps it
        wide = pc.cast(array, pa.float64())
        integral = pc.and_kleene(pc.equal(pc.floor(wide), wide), pc.less(pc.abs(wide), 2.0**53))
        whole = pc.cast(pc.cast(pc.if_else(integral, wide, 0.0), pa.int64()), pa.string())
        return pc.if_else(integral, whole, pc.cast(wide, pa.string()))
    if pa.types.is_boolean(kind):
        return pc.cast(array, pa.uint8())
    if pa.types.is_date(kind) or pa.types.is_timestamp(kind):
        return pc.cast(pc.cast(array, pa.timestamp("us", tz="UTC" if _zoned(kind) else None)), pa.int64())
    if pa.types.is_time(kind) or pa.types.is_duration(kind):
        return pc.cast(pc.cast(array, _micros(kind)), pa.int64())
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return pc.cast(array, pa.large_binary())
    if pa.types.is_binary(kind) or pa.types.is_large_binary(kind) or pa.types.is_fixed_size_binary(kind):
        return pc.cast(array, pa.large_binary())
    return pc.cast(array, pa.large_binary()) if pa.types.is_null(kind) else pc.cast(array, pa.string())


def _zoned(kind: pa.DataType) -> bool:
    return pa.types.is_timestamp(kind) and kind.tz is not None


def _micros(kind: pa.DataType) -> pa.DataType:
    return pa.time64("us") if pa.types.is_time(kind) else pa.duration("us")


def _leaf_bytes(array: pa.Array) -> list[bytes]:
    """Return a canonical leaf's validity and values as bytes (null slots hold zeros or nothing)."""
    import numpy as np
    import pyarrow.compute as pc

    valid = np.asarray(pc.is_valid(array).to_numpy(zero_copy_only=False), dtype=np.uint8).tobytes()
    if pa.types.is_string(array.type):
        array = pc.cast(array, pa.large_binary())
    if pa.types.is_large_binary(array.type):
        filled = pc.fill_null(array, b"")
        offsets = np.frombuffer(filled.buffers()[1], dtype=np.int64)[
            filled.offset : filled.offset + len(filled) + 1
        ]
        data = filled.buffers()[2]
        values = b"" if data is None else data[int(offsets[0]) : int(offsets[-1])].to_pybytes()
        return [valid, (offsets - offsets[0]).astype("<i8").tobytes(), values]
    filled = pc.fill_null(array, 0)
    dtype = "<f8" if pa.types.is_floating(array.type) else "<i8"
    return [valid, np.asarray(filled.to_numpy(zero_copy_only=False)).astype(dtype).tobytes()]
