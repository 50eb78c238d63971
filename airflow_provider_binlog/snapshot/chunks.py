"""Reading one chunk: low watermark, one consistent ``SELECT``, a Parquet file in the snapshot folder.

:func:`read_chunk` runs inside a Spark task with connections of its own (:class:`SourceConnections`, kept
for the task's next chunks). It is idempotent: a chunk
whose stats file exists is done and is not read again, which is how an interrupted snapshot resumes
from its last finished chunks. The Parquet file is written under a temporary name and renamed, then
the stats file is written the same way, so a chunk is either complete or absent.

Imports nothing from Airflow.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from airflow_provider_binlog.contract.columns import (
    CHANGE_FIELDS,
    FILE_COLUMN,
    GTID_COLUMN,
    OP_COLUMN,
    OP_SNAPSHOT,
    POS_COLUMN,
    SEQ_COLUMN,
    TS_COLUMN,
    UTC,
    WINDOW_COLUMN,
    change_schema,
)
from airflow_provider_binlog.contract.names import split_table_name, table_folder
from airflow_provider_binlog.contract.positions import BinlogPosition
from airflow_provider_binlog.contract.uris import (
    StorageOptions,
    atomic_output,
    join_uri,
    read_json,
    write_json,
)
from airflow_provider_binlog.snapshot.parquet import dictionary_columns
from airflow_provider_binlog.snapshot.plan import Chunk, TablePlan, chunk_query
from airflow_provider_binlog.snapshot.rows import RowReader, SourceColumn, describe_columns
from airflow_provider_binlog.source.flavor import flavor_named

SOURCE_ENV = "BINLOG_SNAPSHOT_SOURCE"
"""Environment variable in which the snapshot operator hands the source's pymysql settings (JSON) to the job,
whose read tasks pass them to :func:`read_chunk`: the password is on no command line."""
FETCH_ROWS = 10_000
"""Rows fetched from the server and staged per batch."""
ROW_GROUP_ROWS = 65_536
"""Most rows of one Parquet row group of a chunk file, as the binlog path's writer (``extract/writer.py``).
One row group per 10,000-row batch wrote 50% slower (measured: zstd with the dictionary encoding tried
anew in every row group)."""


class ChunkError(Exception):
    """A chunk cannot be read as planned (the table changed shape, binlog off)."""


@dataclass(frozen=True)
class ChunkResult:
    """What reading one chunk produced (its stats file, ``<db.table>/chunk-<n>.json``).

    :param table: ``db.table``.
    :param index: chunk index.
    :param file: the Parquet file, relative to the snapshot folder.
    :param rows: rows read.
    :param zero_dates: zero dates stored as null.
    :param watermark: the binlog head read just before the chunk's ``SELECT`` (its low watermark).
    :param read_at: UTC time the chunk was read (ISO-8601).
    :param seconds: wall time of the read and write, in seconds.
    """

    table: str
    index: int
    file: str
    rows: int
    zero_dates: int
    watermark: BinlogPosition
    read_at: str
    seconds: float

    @classmethod
    def from_json(cls, stats: dict[str, Any]) -> ChunkResult:
        """Return the result a stats file holds (``asdict`` of one: the watermark in its serialised form).

        :raises ValueError: when the watermark is malformed.
        :raises TypeError: when a field is missing or unknown.
        """
        return cls(**{**stats, "watermark": BinlogPosition.from_dict(stats["watermark"])})


def chunk_file(table: str, index: int) -> str:
    """Return the Parquet file of a chunk, relative to the snapshot folder."""
    return f"{table_folder(table)}/chunk-{index:06d}.parquet"


def stats_file(table: str, index: int) -> str:
    """Return the stats file of a chunk, relative to the snapshot folder."""
    return f"{table_folder(table)}/chunk-{index:06d}.json"


def finished(
    snapshot_uri: str, table: str, index: int, storage_options: StorageOptions | None = None
) -> ChunkResult | None:
    """Return the result of a chunk already read, or None."""
    stats = read_json(join_uri(snapshot_uri, stats_file(table, index)), storage_options)
    return None if stats is None else ChunkResult.from_json(stats)


def refusal_file(table: str, index: int) -> str:
    """Return the file recording that a chunk's rows cannot be staged, relative to the snapshot folder."""
    return f"{table_folder(table)}/refused-{index:06d}.json"


def refusal(
    snapshot_uri: str, table: str, index: int, storage_options: StorageOptions | None = None
) -> dict[str, Any] | None:
    """Return the refusal of a chunk (``table``, ``index``, ``column``, ``reason``, ``error``), or None.

    A refused chunk is done like a read one: a retry of the snapshot does not read it again, and the snapshot
    leaves its table out (the table is quarantined, :mod:`~airflow_provider_binlog.pipeline.quarantine`).
    """
    return read_json(join_uri(snapshot_uri, refusal_file(table, index)), storage_options)


def order_seq(index: int, row: int) -> int:
    """Return the ``_binlog_seq`` of row ``row`` of chunk ``index`` (unique within the snapshot's table)."""
    return (index << 32) | row


class SourceConnections:
    """The two source connections that read chunks, opened on first use and kept for the next chunks.

    A read task reads its chunks one after another over the same connections: a pymysql connection for
    the watermark and the column check, and a :class:`~airflow_provider_binlog.snapshot.rows.RowReader` for
    the rows. Opening them per chunk cost a login each, and pymysql builds a TLS context for every
    connection it opens without ``ssl`` settings (it tries TLS when the server offers it; py-spy: about 40 ms
    of CPU per connection, reading the system's CA certificates), which was a sixth of the read tasks' time
    on the 1M-row benchmark. Both connections apply the source's ``tls_mode`` (the extra ``tls``; in a
    Spark executor too, whose machine then needs the TLS files at the same paths). Use as a context
    manager; :meth:`close` closes what was opened.

    :param source: :class:`~airflow_provider_binlog.source.connect.LoginTimeoutConnection` arguments (host,
        port, user, password, tls_mode, ssl ...).
    """

    def __init__(self, source: dict[str, Any]) -> None:
        self.source = source
        self._meta: Any = None
        self._rows: RowReader | None = None

    def meta(self) -> Any:
        """Return the pymysql connection (autocommit, utf8mb4) for watermarks and ``information_schema``."""
        if self._meta is None:
            from airflow_provider_binlog.source.connect import LoginTimeoutConnection

            self._meta = LoginTimeoutConnection(**{**self.source, "autocommit": True, "charset": "utf8mb4"})
        return self._meta

    def rows(self) -> RowReader:
        """Return the row reader (its own connection, see :class:`RowReader`)."""
        if self._rows is None:
            self._rows = RowReader(self.source)
        return self._rows

    def close(self) -> None:
        """Close the connections opened so far."""
        meta, rows = self._meta, self._rows
        self._meta = self._rows = None
        try:
            if rows is not None:
                rows.close()
        finally:
            if meta is not None:
                meta.close()

    def __enter__(self) -> SourceConnections:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_chunk(
    source: dict[str, Any] | SourceConnections,
    flavor: str,
    snapshot_uri: str,
    seq: int,
    table: TablePlan,
    chunk: Chunk,
    storage_options: StorageOptions | None = None,
) -> dict[str, Any]:
    """Read one chunk into ``<snapshot_uri>/<db.table>/chunk-<n>.parquet`` unless it is done already.

    :param source: pymysql ``connect()`` arguments (host, port, user, password, ssl ...), whose connections
        are opened and closed for this chunk, or the :class:`SourceConnections` of a read task, kept open.
    :param flavor: ``mysql`` or ``mariadb`` (how the watermark is read).
    :param snapshot_uri: the snapshot's staging folder.
    :param seq: the snapshot's sequence number (``_binlog_window`` of its rows).
    :param table: the table's plan.
    :param chunk: the chunk to read.
    :param storage_options: storage options of the staging store.
    :returns: the chunk's :class:`ChunkResult` as a dict, or its :func:`refusal` when a column or value of the
        table cannot be staged exactly (recorded in the chunk's refusal file; the chunk's rows are not staged).
    :raises ChunkError: when the table's columns differ from the plan (a DDL during the snapshot) or
        binary logging is off.
    """
    done = finished(snapshot_uri, table.name, chunk.index, storage_options)
    if done is not None:
        return asdict(done)
    refused = refusal(snapshot_uri, table.name, chunk.index, storage_options)
    if refused is not None:
        return refused
    if not isinstance(source, SourceConnections):
        with SourceConnections(source) as connections:
            return read_chunk(connections, flavor, snapshot_uri, seq, table, chunk, storage_options)
    try:
        return _read_chunk(source, flavor, snapshot_uri, seq, table, chunk, storage_options)
    except ValueError as err:  # a column or value of the table that cannot be staged exactly
        record = {
            "table": table.name,
            "index": chunk.index,
            "column": None,
            "reason": f"the snapshot cannot stage the table exactly: {err}",
            "error": f"chunk {chunk.index} of {table.name} (key range {chunk.to_json()}): {err}",
            "probe": {"key": list(table.key), "chunk": chunk.to_json()},
        }
        write_json(join_uri(snapshot_uri, refusal_file(table.name, chunk.index)), record, storage_options)
        return record


def probe_chunk(source: SourceConnections, table: str, probe: Mapping[str, Any]) -> str | None:
    """Read a refused chunk again without staging it; return why it is still refused, or None when it reads.

    Cheap (one chunk's ``SELECT``, at most the plan's chunk rows) and exact: the rows are converted as a
    snapshot converts them, so a quarantined table is re-snapshotted only once the rows that were refused read
    (:mod:`~airflow_provider_binlog.pipeline.quarantine`).

    :param table: ``db.table``.
    :param probe: the refusal's ``probe``: ``{"key": [columns], "chunk": Chunk.to_json()}``.
    """
    try:
        with source.meta().cursor() as cur:
            columns = describe_columns(cur, *split_table_name(table))
        sql, params = chunk_query(
            table, [c.select_expr for c in columns], probe["key"], Chunk.from_json(probe["chunk"])
        )
        for _ in source.rows().batches(sql, params, columns, FETCH_ROWS):
            pass
    except ValueError as err:
        return str(err)
    return None


def _read_chunk(
    source: SourceConnections,
    flavor: str,
    snapshot_uri: str,
    seq: int,
    table: TablePlan,
    chunk: Chunk,
    storage_options: StorageOptions | None,
) -> dict[str, Any]:
    """Read one chunk not read yet (:func:`read_chunk`) on ``source``'s connections.

    :raises ValueError: when a column or value cannot be staged exactly.
    """
    started = time.monotonic()
    with source.meta().cursor() as cur:
        watermark = flavor_named(flavor).read_head(cur)
        if watermark is None:
            raise ChunkError("binary logging is off on the source: a snapshot needs the binlog")
        db, name = split_table_name(table.name)
        columns = describe_columns(cur, db, name)
    described = tuple(c.spec.to_manifest() for c in columns)
    if described != table.columns:
        raise ChunkError(
            f"the columns of {table.name} changed since the snapshot was planned (a DDL ran): planned "
            f"{[c['name'] for c in table.columns]}, now {[c['name'] for c in described]}. Start the snapshot again "
            f"in a new run (a retry of this one keeps the old plan)."
        )
    sql, params = chunk_query(table.name, [c.select_expr for c in columns], table.key, chunk)
    read_at = dt.datetime.now(UTC)
    rows, zero_dates = _write_rows(
        source.rows(),
        sql,
        params,
        columns,
        snapshot_uri,
        table.name,
        chunk.index,
        seq,
        watermark,
        read_at,
        storage_options,
    )
    result = ChunkResult(
        table=table.name,
        index=chunk.index,
        file=chunk_file(table.name, chunk.index),
        rows=rows,
        zero_dates=zero_dates,
        watermark=watermark,
        read_at=read_at.isoformat(),
        seconds=round(time.monotonic() - started, 3),
    )
    write_json(join_uri(snapshot_uri, stats_file(table.name, chunk.index)), asdict(result), storage_options)
    return asdict(result)


def read_task(
    source: dict[str, Any],
    flavor: str,
    snapshot_uri: str,
    seq: int,
    storage_options: StorageOptions | None,
    tables: list[TablePlan],
    pending: list[tuple[int, Chunk]],
    tasks: int,
) -> Any:
    """Return the ``mapInArrow`` function that reads the chunks of its read tasks, one after another.

    It lives here, not in the Spark application (``jobs/snapshot.py``), so that a Spark Python worker
    unpickling it imports only the chunk reader, not the merge job.

    The job runs over ``spark.range(tasks)`` in ``tasks`` partitions: one input row per Spark task, its
    ``id`` the read task's number ``t``. Task ``t`` reads ``pending[t::tasks]`` (``(index into tables,
    chunk)`` pairs; chunks hold equal row counts, so the tasks get equal shares). This needs no shuffle
    stage, where spreading a DataFrame of the chunks over the tasks did (``repartition``). Each output
    row reports a finished chunk. The function runs in the Spark Python workers (over spark-submit and
    over Spark Connect alike).
    """

    def read_partition(batches: Any) -> Any:
        with SourceConnections(source) as connections:
            for batch in batches:
                for task in batch.column("id").to_pylist():
                    for table_index, chunk in pending[task::tasks]:
                        table = tables[table_index]
                        done = read_chunk(
                            connections, flavor, snapshot_uri, seq, table, chunk, storage_options
                        )
                        yield pa.RecordBatch.from_pydict(
                            {
                                "table_name": [done["table"]],
                                "chunk_index": [done["index"]],
                                "rows": [done.get("rows", -1)],  # -1: refused
                            }
                        )

    return read_partition


def _write_rows(
    reader: RowReader,
    sql: str,
    params: list[Any],
    columns: list[SourceColumn],
    snapshot_uri: str,
    table: str,
    index: int,
    seq: int,
    watermark: BinlogPosition,
    read_at: dt.datetime,
    storage_options: StorageOptions | None,
) -> tuple[int, int]:
    """Stream the chunk's rows into its Parquet file (temporary name, then rename); return (rows, zero dates).

    Batches are written in row groups of up to :data:`ROW_GROUP_ROWS` rows, so at most that many rows
    are held at once. The first batch decides which columns get a dictionary
    (:func:`~airflow_provider_binlog.snapshot.parquet.dictionary_columns`).
    """
    schema = change_schema([pa.field(c.spec.name, c.spec.arrow_type) for c in columns])
    rows = zero_dates = 0
    group: list[pa.RecordBatch] = []
    writer: pq.ParquetWriter | None = None
    with atomic_output(join_uri(snapshot_uri, chunk_file(table, index)), storage_options) as out:
        for values, zeros in reader.batches(sql, params, columns, FETCH_ROWS):
            meta = _snapshot_meta(values.num_rows, seq, index, rows, watermark, read_at)
            batch = pa.RecordBatch.from_arrays([*values.columns, *meta], schema=schema)
            if writer is None:
                writer = pq.ParquetWriter(
                    out, schema, compression="zstd", use_dictionary=dictionary_columns(batch)
                )
            group.append(batch)
            rows += values.num_rows
            zero_dates += zeros
            if sum(batch.num_rows for batch in group) + FETCH_ROWS > ROW_GROUP_ROWS:
                writer.write_table(pa.Table.from_batches(group, schema=schema))
                group = []
        if writer is None:
            writer = pq.ParquetWriter(out, schema, compression="zstd")
        if group:
            writer.write_table(pa.Table.from_batches(group, schema=schema))
        writer.close()
    return rows, zero_dates


def _snapshot_meta(
    count: int, seq: int, index: int, first: int, watermark: BinlogPosition, read_at: dt.datetime
) -> list[pa.Array]:
    """Return the ``_binlog_*`` columns of ``count`` snapshot rows (op ``r``, the chunk's watermark)."""
    values: dict[str, Any] = {
        OP_COLUMN: pa.repeat(pa.scalar(OP_SNAPSHOT, pa.string()), count),
        WINDOW_COLUMN: pa.repeat(pa.scalar(seq, pa.int64()), count),
        SEQ_COLUMN: pa.array(range(order_seq(index, first), order_seq(index, first + count)), pa.int64()),
        GTID_COLUMN: pa.nulls(count, pa.string()),
        FILE_COLUMN: pa.repeat(pa.scalar(watermark.file, pa.string()), count),
        POS_COLUMN: pa.repeat(pa.scalar(watermark.pos, pa.int64()), count),
        TS_COLUMN: pa.repeat(pa.scalar(read_at, pa.timestamp("us", tz="UTC")), count),
    }
    return [values[f.name] for f in CHANGE_FIELDS]
