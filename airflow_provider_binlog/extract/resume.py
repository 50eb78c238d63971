"""Where a GTID position lies in a server's binlog: the coordinates a pipeline resumes at on another server.

Binlog coordinates are only valid on the server that wrote them; the GTID set executed up to a transaction
boundary is valid on every server of a replication topology (MariaDB KB, "Global Transaction ID"). A
checkpoint records both. On another server (a promoted replica, a rebuilt one) or the same server after
``RESET MASTER``, the coordinates that belong to the checkpoint's GTID set are found here.

MariaDB (:func:`locate_mariadb_gtid_position`): a dump from the GTID position (``@slave_connect_state``,
strict) makes the server find the file whose GTID_LIST precedes the position and skip every event group up to
it (``sql/sql_repl.cc``); the first GTID event it sends starts the first transaction after the position,
and its offset is the boundary. ``BINLOG_GTID_POS(file, pos)`` of that boundary must give the position back,
which is checked. A position the server's binlog does not contain is refused before any dump, naming the
missing GTIDs (:class:`~airflow_provider_binlog.exceptions.LostTransactionsError`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import pymysql

from airflow_provider_binlog.contract.positions import BinlogPosition
from airflow_provider_binlog.exceptions import (
    BinlogPurgedError,
    LostTransactionsError,
    SourceUnreachableError,
)
from airflow_provider_binlog.extract.connections import open_dump
from airflow_provider_binlog.extract.events import codes
from airflow_provider_binlog.source.connect import LoginTimeoutConnection
from airflow_provider_binlog.source.gtid import GtidSet

log = logging.getLogger(__name__)

LOCATE_ATTEMPTS = 5
"""Dumps tried when the position is the binlog's head and writes move the head meanwhile."""
_FATAL_READING_BINLOG = 1236
"""ER_MASTER_FATAL_ERROR_READING_BINLOG: the server cannot serve the position (purged, not in its binlog)."""


def locate_mariadb_gtid_position(settings: Mapping[str, Any], position: GtidSet) -> BinlogPosition:
    """Return the transaction boundary of a MariaDB server's binlog up to which exactly ``position`` executed.

    :param settings: ``pymysql.connect()`` keyword arguments of a user with REPLICATION SLAVE and
        BINLOG MONITOR (REPLICATION CLIENT).
    :param position: a MariaDB GTID position (one sequence number per domain: a checkpoint's ``gtid_set``).
    :returns: the boundary's coordinates on this server, with ``gtid_set`` the position's text.
    :raises LostTransactionsError: when this server's binlog lacks transactions of ``position``
        (``@@gtid_binlog_pos`` does not contain it): they were lost in a failover, or the server is another
        topology's.
    :raises BinlogPurgedError: when the binlog file the position lies in was purged from this server.
    :raises SourceUnreachableError: when the position is not found after :data:`LOCATE_ATTEMPTS` dumps, or the
        boundary found does not give the position back (``BINLOG_GTID_POS``).
    :raises ValueError: when ``position`` is not a MariaDB GTID position.
    """
    text = position.to_position()
    connection = LoginTimeoutConnection(**settings)
    try:
        with connection.cursor() as cur:
            _check_contained(cur, position)
            for _ in range(LOCATE_ATTEMPTS):
                found = _first_transaction_after(settings, position) or _head_at(cur, position)
                if found is not None:
                    _check_boundary(cur, found, position)
                    log.info("GTID position %s lies at %s on this server", text, found)
                    return BinlogPosition(found.file, found.pos, text)
    finally:
        connection.close()
    raise SourceUnreachableError(
        f"the GTID position {text} could not be located: the binlog head moved in each of {LOCATE_ATTEMPTS} "
        f"attempts. Retry."
    )


def _check_contained(cur: Any, position: GtidSet) -> None:
    """Refuse a position that this server's binlog does not hold all of.

    :raises LostTransactionsError: naming the GTIDs the binlog lacks.
    """
    cur.execute("SELECT @@GLOBAL.gtid_binlog_pos")
    executed = GtidSet.parse(str(cur.fetchone()[0] or ""), "mariadb")
    missing = position - executed
    if not missing.is_empty:
        raise LostTransactionsError(
            f"this server's binlog ({str(executed) or 'empty'}) lacks the transactions {missing} of the GTID position "
            f"{position.to_position()}: they were committed on another server and never reached this one (a "
            f"failover lost them), or the connection reaches another replication topology",
            missing=str(missing),
        )


def _first_transaction_after(settings: Mapping[str, Any], position: GtidSet) -> BinlogPosition | None:
    """Return where the first transaction after ``position`` starts, None when the binlog ends before one.

    :raises BinlogPurgedError: when the server no longer holds the binlog the position lies in.
    """
    try:
        with open_dump(settings, server_id=0, start=position, flavor="mariadb") as raw:
            for event in raw:
                if event.type_code == codes.MARIADB_GTID:
                    return BinlogPosition(event.file, event.start)
    except pymysql.err.OperationalError as err:
        if err.args and err.args[0] == _FATAL_READING_BINLOG:
            raise BinlogPurgedError(
                f"the source cannot serve the binlog from the GTID position {position.to_position()}: "
                f"{err.args[1]}"
            ) from err
        raise
    return None


def _head_at(cur: Any, position: GtidSet) -> BinlogPosition | None:
    """Return the binlog head when the server's binlog ends exactly at ``position`` (None when it moved on)."""
    cur.execute("SHOW MASTER STATUS")
    row = cur.fetchone()
    cur.execute("SELECT @@GLOBAL.gtid_binlog_pos")
    executed = GtidSet.parse(str(cur.fetchone()[0] or ""), "mariadb")
    if row is None or executed != position:
        return None
    return BinlogPosition(str(row[0]), int(row[1]))


def _check_boundary(cur: Any, found: BinlogPosition, position: GtidSet) -> None:
    """Check that ``BINLOG_GTID_POS`` of ``found`` is ``position`` (MariaDB KB, "BINLOG_GTID_POS").

    :raises SourceUnreachableError: when it is not (the located boundary would not be exact).
    """
    cur.execute("SELECT BINLOG_GTID_POS(%s, %s)", (found.file, found.pos))
    at = GtidSet.parse(str(cur.fetchone()[0] or ""), "mariadb")
    if at != position:
        raise SourceUnreachableError(
            f"the GTID position {position.to_position()} was located at {found.file}:{found.pos}, but "
            f"BINLOG_GTID_POS there is {at.to_position() if at.is_position else at}: not exact. Retry; if it "
            f"persists, report it."
        )
