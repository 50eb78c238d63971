"""Short reads of the binlog: when a file was opened, when the next transaction committed, where a moment falls.

All three read a few events over the replication protocol (``COM_BINLOG_DUMP``), because SQL shows no
event timestamps (``SHOW BINLOG EVENTS`` lists positions and types only). Every probe registers with a
``server_id`` of its own (:func:`probe_server_id`): a source drops the older of two dump connections that
share a ``server_id`` (MySQL manual, "Replication and Binary Logging Options": ``server_id``;
``kill_zombie_dump_threads`` in MariaDB's ``sql_repl.cc`` / MySQL's ``rpl_source.cc``), so a probe must
never reuse the id of the pipeline's extract stream, nor of another probe running at the same time (two
runs of one pipeline, a backfill beside the scheduled runs, probe at once). ``server_id`` 0, which the
source exempts, is no way out for probes: mysql-replication registers every stream (COM_REGISTER_SLAVE),
and MySQL keeps a replica registered under 0 until it restarts, refusing the next one.

The streams come from a :class:`ProbeStreams` (the hook: it opens them with the connection's settings and
turns the source's refusals into the provider's errors), so this module needs no Airflow.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Protocol

import pendulum

from airflow_provider_binlog.contract.positions import BinlogPosition
from airflow_provider_binlog.source.server import derive_server_id
from airflow_provider_binlog.source.sql import classify_query

if TYPE_CHECKING:
    from pymysqlreplication import BinLogStreamReader


class BinlogGoneError(LookupError):
    """The source no longer holds a binlog a probe reads (purged, or the server answered 1236 for it)."""


class ProbeStreams(Protocol):
    """Opens the short non-blocking streams the probes read (:meth:`BinlogHook.probe_stream`)."""

    def probe_stream(
        self, file: str, pos: int, events: Sequence[type]
    ) -> AbstractContextManager[BinLogStreamReader]:
        """Yield a stream of ``events`` from ``file``:``pos`` under :func:`probe_server_id`; close it after.

        Errors raised inside the block, including :class:`BinlogGoneError`, leave as the provider's errors.
        """
        ...


def probe_server_id(pipeline: str) -> int:
    """Return a fresh ``server_id`` for one probe of ``pipeline``, in the range of derived ids.

    Drawn anew for every probe (:func:`~airflow_provider_binlog.source.server.derive_server_id` of the pipeline
    name and a random UUID: ``[2^30, 2^31 - 1)``), so that probes running at the same time never end each
    other's dump (error 4052 on MariaDB); a clash with one of the 2^30 ids, e.g. another pipeline's stream,
    has a chance of about one in a billion per probe and ends as a retryable error.
    """
    return derive_server_id(f"{pipeline}#probe#{uuid.uuid4()}")


def file_opened_at(streams: ProbeStreams, file: str) -> pendulum.DateTime:
    """Return when the server opened binlog ``file``: the timestamp of its Format_description event.

    The file before it was last written at that moment (rotation writes its Rotate event, then opens
    the next file), which is the age the server's expiry compares (MySQL manual, "Binary Logging
    Options and Variables": ``binlog_expire_logs_seconds``). Resolution: seconds.

    :raises BinlogPurgedError: when the file no longer exists (these errors as the hook's streams raise them).
    :raises SourceUnreachableError: on a network error.
    """
    from pymysqlreplication.event import FormatDescriptionEvent

    with streams.probe_stream(file, 4, [FormatDescriptionEvent]) as stream:
        for event in stream:
            if isinstance(event, FormatDescriptionEvent) and event.timestamp:
                return pendulum.from_timestamp(event.timestamp, tz="UTC")
        raise BinlogGoneError(f"binlog {file} has no Format_description event (was it purged just now?)")


def next_commit_at(streams: ProbeStreams, position: BinlogPosition) -> pendulum.DateTime | None:
    """Return the commit time of the first transaction after ``position``, or None when there is none yet.

    The commit time is the timestamp of the transaction's commit event (``Xid``, or a ``COMMIT`` /
    DDL query event): the start time of the statement that committed (MySQL manual, "The Binary
    Log"), in whole seconds. Transactions are in commit order in the binlog, so this is the oldest
    commit the pipeline has not yet merged. Reads at most one transaction; row events are skipped
    unparsed.

    :raises BinlogPurgedError: when the binlog holding ``position`` is gone.
    :raises SourceUnreachableError: on a network error.
    """
    from pymysqlreplication.event import QueryEvent, XAPrepareEvent, XidEvent

    with streams.probe_stream(position.file, position.pos, [XidEvent, QueryEvent, XAPrepareEvent]) as stream:
        for event in stream:
            if isinstance(event, QueryEvent) and not classify_query(event.query).kind.ends_group:
                continue
            return pendulum.from_timestamp(event.timestamp, tz="UTC")
    return None


def scan_to(streams: ProbeStreams, file: str, moment: pendulum.DateTime) -> BinlogPosition:
    """Scan from ``file`` to the first group ending at or after ``moment``; return where that group starts.

    A group ends at an ``Xid`` or ``XA_PREPARE`` event or a query event that ends it
    (:attr:`~airflow_provider_binlog.source.sql.QueryKind.ends_group`); its timestamp is the commit time, in
    whole seconds. Without such a group at or after ``moment``, returns the end of the last complete one.

    :raises BinlogPurgedError: when ``file`` is gone.
    :raises SourceUnreachableError: on a network error.
    """
    from pymysqlreplication.event import QueryEvent, RotateEvent, XAPrepareEvent, XidEvent

    threshold = moment.int_timestamp + (1 if moment.microsecond else 0)  # commit times are whole seconds
    boundary = BinlogPosition(file, 4)
    with streams.probe_stream(file, 4, [XidEvent, QueryEvent, XAPrepareEvent, RotateEvent]) as stream:
        for event in stream:
            if isinstance(event, RotateEvent):
                if event.timestamp:  # the fake rotate sent at connect time has none
                    boundary = BinlogPosition(str(event.next_binlog), int(event.position))
                continue
            if isinstance(event, QueryEvent) and not classify_query(event.query).kind.ends_group:
                continue
            if event.timestamp >= threshold:
                return boundary
            boundary = BinlogPosition(stream.log_file, event.packet.log_pos)
    return boundary
