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
from airflow_provider_binlog.hooks.binlog import ACCESS_DENIED, derive_server_id
from airflow_provider_binlog.positions import BinlogPosition

if TYPE_CHECKING:
    from pymysqlreplication import BinLogStreamReader

    from airflow_provider_binlog.hooks.binlog import BinlogHook, ServerState

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
    if code in ACCESS_DENIED:
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
            if isinstance(event, QueryEvent) and _opens_transaction(event.query):
                continue
            return pendulum.from_timestamp(event.timestamp, tz="UTC")
    return None


def _opens_transaction(query: Any) -> bool:
    """Return True for query events inside a transaction group (they end no group)."""
    text = (query.decode(errors="replace") if isinstance(query, bytes) else str(query)).strip().upper()
    return text == "BEGIN" or text.startswith(("XA START", "XA BEGIN", "XA END", "SAVEPOINT", "ROLLBACK TO"))


def boundary_at(hook: BinlogHook, server: ServerState, moment: pendulum.DateTime) -> BinlogPosition:
    """Return the transaction boundary before the first transaction committed at or after ``moment``.

    This is the cut of interval windows: a window for ``[s, e)`` is ``(boundary_at(s), boundary_at(e)]``.
    "First" is in binlog (commit) order, so the result is monotone in ``moment`` and consecutive
    intervals tile the binlog even where commit timestamps (whole seconds, the commit statement's start
    time) are not. The scan starts at the last file the server opened at or before ``moment`` and reads
    only group-ending events. When no transaction at or after ``moment`` has been logged yet, the
    result is the end of the last complete transaction; callers only ask for moments in the past.

    :returns: the boundary; on MariaDB with its GTID position (``BINLOG_GTID_POS``, MariaDB KB). MySQL
        has no SQL function for the GTID state at a position, so there the GTID set is left empty.
    :raises BinlogPurgedError: when the binlogs holding ``moment`` were purged.
    """
    boundary = _scan_to(hook, _file_holding(hook, server, moment), moment)
    if server.flavor != "mariadb":
        return boundary
    with hook.cursor() as cur:
        cur.execute("SELECT BINLOG_GTID_POS(%s, %s)", (boundary.file, boundary.pos))
        gtids = str((cur.fetchone() or [""])[0] or "")
    return BinlogPosition(boundary.file, boundary.pos, gtids)


def _file_holding(hook: BinlogHook, server: ServerState, moment: pendulum.DateTime) -> str:
    """Return the last binlog file opened at or before ``moment`` (binary search over open times).

    :raises BinlogPurgedError: when the oldest file was opened after ``moment`` and older ones existed.
    """
    from airflow_provider_binlog.retention import RESNAPSHOT_REMEDY, nothing_purged

    names = [name for name, _ in server.binlog_files]
    if not names:
        raise BinlogPurgedError("the source lists no binary logs")
    oldest_opened = file_opened_at(hook, names[0])
    if oldest_opened > moment:
        if nothing_purged(hook, server):
            return names[0]
        raise BinlogPurgedError(
            f"the binlogs holding {moment.isoformat()} were purged: the oldest binlog left, {names[0]}, was "
            f"opened at {oldest_opened.isoformat()}. {RESNAPSHOT_REMEDY}"
        )
    low, high = 0, len(names) - 1  # invariant: names[low] was opened at or before moment
    while low < high:
        middle = (low + high + 1) // 2
        if file_opened_at(hook, names[middle]) <= moment:
            low = middle
        else:
            high = middle - 1
    return names[low]


def _scan_to(hook: BinlogHook, file: str, moment: pendulum.DateTime) -> BinlogPosition:
    """Scan from ``file`` to the first group ending at or after ``moment``; return where that group starts."""
    from pymysqlreplication.event import QueryEvent, RotateEvent, XAPrepareEvent, XidEvent

    threshold = moment.int_timestamp + (1 if moment.microsecond else 0)  # commit times are whole seconds
    boundary = BinlogPosition(file, 4)
    with _probe_stream(hook, file, 4, [XidEvent, QueryEvent, XAPrepareEvent, RotateEvent]) as stream:
        for event in stream:
            if isinstance(event, RotateEvent):
                if event.timestamp:  # the fake rotate sent at connect time has none
                    boundary = BinlogPosition(str(event.next_binlog), int(event.position))
                continue
            if isinstance(event, QueryEvent) and _opens_transaction(event.query):
                continue
            if event.timestamp >= threshold:
                return boundary
            boundary = BinlogPosition(stream.log_file, event.packet.log_pos)
    return boundary
