"""What the window reader says when its binlog stream breaks or ends before the window end.

Both are retryable (:class:`~airflow_provider_binlog.exceptions.SourceUnreachableError`): Airflow's retry
clears the window's staging folder and re-reads the same window from its start; no reader resumes mid-window
on another connection.
"""

from __future__ import annotations

from airflow_provider_binlog.contract.positions import BinlogPosition
from airflow_provider_binlog.exceptions import ReplicationConnectionLostError, SourceUnreachableError


def connection_lost(
    err: Exception,
    *,
    window: int,
    start: BinlogPosition,
    end: BinlogPosition,
    transactions: int,
    position: BinlogPosition,
    open_gtid: str | None,
) -> ReplicationConnectionLostError:
    """Return the error of a replication connection lost while reading window ``window`` in ``(start, end]``.

    :param transactions: the transactions read of the window so far.
    :param position: the last transaction boundary read.
    :param open_gtid: the GTID of the transaction being read (``?`` when it has none yet), None between
        transactions.
    """
    inside = "" if open_gtid is None else f", inside transaction {open_gtid}"
    return ReplicationConnectionLostError(
        f"lost the replication connection to the source while reading window {window} ({start}, {end}], "
        f"{transactions} transaction(s) into it (last boundary read: {position}{inside}): {err}. The source "
        "restarted, killed the connection or the network dropped it (a stream that receives nothing, not even a "
        "heartbeat, for three heartbeat periods counts as lost: the connection extra heartbeat_period, default "
        "15 s). The reader does not resume on another connection: the retry clears this window's staging folder "
        "and re-reads the same window from its start."
    )


def ended_early(position: BinlogPosition, end: BinlogPosition) -> SourceUnreachableError:
    """Return the error of a binlog that ended at ``position``, before the window end ``end`` (retryable)."""
    return SourceUnreachableError(
        f"the binlog ended at {position} before the window end {end}; the server may have been restarted or "
        "reset. Retry; if it persists, the window's binlogs are gone."
    )
