"""Short reads of the binlog for monitoring: when a file was opened, when the next transaction committed.

Both read a few events over the replication protocol (``COM_BINLOG_DUMP``), because SQL shows no
event timestamps (``SHOW BINLOG EVENTS`` lists positions and types only). Probes register with their
own ``server_id`` (:func:`probe_server_id`): a source drops the older of two dump connections that
share a ``server_id`` (MySQL manual, "Replication and Binary Logging Options": ``server_id``), so a
probe must never reuse the id of the pipeline's extract stream.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import pendulum

from airflow_provider_binlog.exceptions import BinlogPurgedError, SourceUnreachableError
from airflow_provider_binlog.source.grants import ACCESS_DENIED_ERRORS
from airflow_provider_binlog.source.positions import BinlogPosition
from airflow_provider_binlog.source.server import derive_server_id
from airflow_provider_binlog.source.sql import classify_query

if TYPE_CHECKING:
    from pymysqlreplication import BinLogStreamReader

    from airflow_provider_binlog.hooks.binlog import BinlogHook

# ER_MASTER_FATAL_ERROR_READING_BINLOG (MySQL manual, "Server Error Message Reference"): the source
# could not open the requested file/position, e.g. because it was purged meanwhile.
_FATAL_READING_BINLOG = 1236


def probe_server_id(pipeline: str) -> int:
    """Return the ``server_id`` a pipeline's probes register with (distinct from its extract stream)."""
    return derive_server_id(f"{pipeline}#probe")


@contextmanager
def _probe_stream(hook: BinlogHook, file: str, pos: int, events: list[type]) -> Iterator[BinLogStreamReader]:
    import pymysql

    stream = hook.open_stream(
        BinlogPosition(file=file, pos=pos), server_id=probe_server_id(hook.pipeline), only_events=events
    )
    try:
        yield stream
    except pymysql.err.OperationalError as err:
        raise _translate(err, hook, file, pos) from err
    finally:
        stream.close()


def _translate(err: Any, hook: BinlogHook, file: str, pos: int) -> Exception:
    code = err.args[0] if err.args else None
    if code in ACCESS_DENIED_ERRORS:
        return hook.privilege_error(err, f"read binlog {file} from position {pos}")
    if code == _FATAL_READING_BINLOG:
        return BinlogPurgedError(f"the source cannot serve binlog {file} from position {pos}: {err.args[1]}")
    return SourceUnreachableError(f"binlog probe of {file}:{pos} via {hook.binlog_conn_id!r} failed: {err}")


def file_opened_at(hook: BinlogHook, file: str) -> pendulum.DateTime:
    """Return when the server opened binlog ``file``: the timestamp of its Format_description event.

    The file before it was last written at that moment (rotation writes its Rotate event, then opens
    the next file), which is the age the server's expiry compares (MySQL manual, "Binary Logging
    Options and Variables": ``binlog_expire_logs_seconds``). Resolution: seconds.

    :raises BinlogPurgedError: when the file no longer exists.
    :raises SourceUnreachableError: on a network error.
    """
    from pymysqlreplication.event import FormatDescriptionEvent

    with _probe_stream(hook, file, 4, [FormatDescriptionEvent]) as stream:
        for event in stream:
            if isinstance(event, FormatDescriptionEvent) and event.timestamp:
                return pendulum.from_timestamp(event.timestamp, tz="UTC")
    raise BinlogPurgedError(f"binlog {file} has no Format_description event (was it purged just now?)")


def next_commit_at(hook: BinlogHook, position: BinlogPosition) -> pendulum.DateTime | None:
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

    with _probe_stream(hook, position.file, position.pos, [XidEvent, QueryEvent, XAPrepareEvent]) as stream:
        for event in stream:
            if isinstance(event, QueryEvent) and not classify_query(event.query).kind.ends_group:
                continue
            return pendulum.from_timestamp(event.timestamp, tz="UTC")
    return None


def scan_to(hook: BinlogHook, file: str, moment: pendulum.DateTime) -> BinlogPosition:
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
    with _probe_stream(hook, file, 4, [XidEvent, QueryEvent, XAPrepareEvent, RotateEvent]) as stream:
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
