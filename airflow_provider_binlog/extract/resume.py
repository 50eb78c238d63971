"""Where a GTID position lies in a server's binlog: the coordinates a pipeline resumes at on another server.

Binlog coordinates are only valid on the server that wrote them; the GTID set executed up to a transaction
boundary is valid on every server of a replication topology (MariaDB KB, "Global Transaction ID"). A
checkpoint records both. On another server (a promoted replica, a rebuilt one) or the same server after
``RESET MASTER``, the coordinates that belong to the checkpoint's GTID set are found here.

MariaDB (:func:`locate_mariadb_gtid_position`): a dump from the GTID position (``@slave_connect_state``,
strict) makes the server find the file whose GTID_LIST precedes the position and skip every event group up to
it (``sql/sql_repl.cc``); the first GTID event it sends starts the first transaction after the position,
and its offset is the boundary. ``BINLOG_GTID_POS(file, pos)`` of that boundary must give the position back,
which is checked (:meth:`~airflow_provider_binlog.source.flavor.MariaDbFlavor.gtid_at`). A position the server's binlog does not contain is refused before any dump, naming the
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
from airflow_provider_binlog.source.connect import FATAL_READING_BINLOG, LoginTimeoutConnection
from airflow_provider_binlog.source.flavor import MariaDbFlavor
from airflow_provider_binlog.source.gtid import GtidSet

log = logging.getLogger(__name__)

LOCATE_ATTEMPTS = 5
"""Dumps tried when the position is the binlog's head and writes move the head meanwhile."""
_MARIADB = MariaDbFlavor()


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
                first = _first_transaction_after(settings, position)
                if first is not None:
                    at = _MARIADB.gtid_at(cur, first.file, first.pos)
                    if GtidSet.parse(at, "mariadb") != position:
                        raise SourceUnreachableError(
                            f"the GTID position {text} was located at {first.file}:{first.pos}, but BINLOG_GTID_POS "
                            f"there is {at}: not exact. Retry; if it persists, report it."
                        )
                    found = first
                else:  # the binlog ended at the position: its head (gtid_set read there), unless a write came since
                    head = _MARIADB.read_head(cur)
                    if head is None or GtidSet.parse(head.gtid_set, "mariadb") != position:
                        continue
                    found = head
                log.info("GTID position %s lies at %s:%s on this server", text, found.file, found.pos)
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
        if err.args and err.args[0] == FATAL_READING_BINLOG:
            raise BinlogPurgedError(
                f"the source cannot serve the binlog from the GTID position {position.to_position()}: "
                f"{err.args[1]}"
            ) from err
        raise
    return None
