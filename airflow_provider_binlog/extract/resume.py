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
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pymysql

from airflow_provider_binlog.contract.positions import BinlogPosition
from airflow_provider_binlog.contract.remedies import resnapshot_remedy
from airflow_provider_binlog.exceptions import (
    BinlogPurgedError,
    LostTransactionsError,
    SourceUnreachableError,
    StateError,
)
from airflow_provider_binlog.extract.connections import open_dump
from airflow_provider_binlog.extract.events import codes
from airflow_provider_binlog.extract.events.feeds import Event
from airflow_provider_binlog.extract.events.stream import EventReader
from airflow_provider_binlog.pipeline.failover import (
    OnLostTransactions,
    SwitchPlan,
    WindowTables,
    plan_switch,
    switch_source,
    switch_summary,
)
from airflow_provider_binlog.source.connect import FATAL_READING_BINLOG, LoginTimeoutConnection
from airflow_provider_binlog.source.flavor import MariaDbFlavor
from airflow_provider_binlog.source.gtid import GtidSet

if TYPE_CHECKING:
    from airflow_provider_binlog.hooks.binlog import BinlogHook
    from airflow_provider_binlog.pipeline.ledger import PipelineState
    from airflow_provider_binlog.pipeline.state import StateManager
    from airflow_provider_binlog.source.server import ServerState

log = logging.getLogger(__name__)

LOCATE_ATTEMPTS = 5
"""Dumps tried when the position is the binlog's head and writes move the head meanwhile."""
_MARIADB = MariaDbFlavor()


def locate_mariadb_gtid_position(settings: Mapping[str, Any], position: GtidSet) -> BinlogPosition:
    """Return where a MariaDB server's binlog must be read from to hold every transaction after ``position``.

    That is the transaction boundary up to which exactly ``position`` executed, or an earlier one when the server
    logged transactions the position's server never had (errant ones, written on a replica directly) before it:
    the strict dump sends every event group the position does not cover, so its first GTID event starts the
    first transaction a reader of ``position`` lacks. From an earlier boundary the transactions of ``position``
    after it are read again; replaying them in binlog order converges to the same rows, so the read is exact.

    :param settings: ``pymysql.connect()`` keyword arguments of a user with REPLICATION SLAVE and
        BINLOG MONITOR (REPLICATION CLIENT).
    :param position: a MariaDB GTID position (one sequence number per domain: a checkpoint's ``gtid_set``).
    :returns: the boundary's coordinates on this server, with ``gtid_set`` the GTID state there: the position's
        text when it is the position's own boundary.
    :raises LostTransactionsError: when this server's binlog lacks transactions of ``position``
        (``@@gtid_binlog_pos`` does not contain it, or holds other transactions under their sequence numbers):
        they were lost in a failover, or the server is another topology's.
    :raises BinlogPurgedError: when the binlog file the position lies in was purged from this server.
    :raises SourceUnreachableError: when the position is not found after :data:`LOCATE_ATTEMPTS` dumps (the head
        moved each time), or the boundary found is beyond the position (``BINLOG_GTID_POS``).
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
                    if not _before(at, text):
                        raise SourceUnreachableError(
                            f"the GTID position {text} was located at {first.file}:{first.pos}, but BINLOG_GTID_POS "
                            f"there is {at}, beyond it. Retry; if it persists, report it."
                        )
                    found = BinlogPosition(first.file, first.pos, text if _names(at, text) else at)
                else:  # the binlog ended at the position: its head (gtid_set read there), unless a write came since
                    head = _MARIADB.read_head(cur)
                    if head is None or not _names(head.gtid_set, text):
                        continue
                    found = BinlogPosition(head.file, head.pos, text)
                log.info("GTID position %s is read from %s on this server", text, found)
                return found
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
            raise _refusal(position, str(err.args[1])) from err
        raise
    return None


_GTID_NAMED = re.compile(r"GTID (\d+-\d+-\d+)")


def _refusal(position: GtidSet, message: str) -> BinlogPurgedError | LostTransactionsError:
    """Return the error of a dump the server refused (error 1236) from ``position``.

    MariaDB refuses a GTID its binlog never held as ``ER_GTID_POSITION_NOT_FOUND_IN_BINLOG`` (2: "the slave has
    diverged", a GTID of the same domain with a higher sequence number exists: another server wrote that
    number) or ``ER_GTID_START_FROM_BINLOG_HOLE``, and a purged one as ``ER_MASTER_HAS_PURGED_REQUIRED_GTIDS``-like
    text "... have been purged" (``sql/share/errmsg-utf8.txt``, ``sql/sql_repl.cc``).
    """
    text = position.to_position()
    if "purged" in message:
        return BinlogPurgedError(
            f"the source cannot serve the binlog from the GTID position {text}: {message}"
        )
    named = _GTID_NAMED.search(message)
    return LostTransactionsError(
        f"this server's binlog does not hold the GTID position {text}: {message}. The transactions were committed "
        f"on another server and never reached this one (a failover lost them, and this server has since written "
        f"other transactions under their sequence numbers)",
        missing=named.group(1) if named else text,
    )


def _names(found: str, position: str) -> bool:
    """Return whether the GTID state ``found`` (``BINLOG_GTID_POS``) names ``position``'s last GTID in each domain.

    Server ids count here (a diverged server may have written another transaction under a sequence number);
    domains ``found`` has beyond the position's are transactions the position's server never had (errant ones),
    which lie before the boundary.
    """
    have = GtidSet.parse(found, "mariadb").last_gtids()
    return all(
        have.get(domain) == last for domain, last in GtidSet.parse(position, "mariadb").last_gtids().items()
    )


def _before(found: str, position: str) -> bool:
    """Return whether the GTID state ``found`` lies at or before ``position``.

    Every transaction it executed, the position holds: per domain a lower sequence number, or the same GTID.
    """
    executed, limit = GtidSet.parse(found, "mariadb"), GtidSet.parse(position, "mariadb")
    limits = limit.last_gtids()
    return limit.contains(executed) and all(
        limits[domain] == (server, seq)
        for domain, (server, seq) in executed.last_gtids().items()
        if limits[domain][1] == seq
    )


EventsOf = Callable[[str], Iterable[Event]]
"""The decoded events of one binlog file, from its first event (:func:`server_events`, or a file reader)."""
_MYSQL_GTIDS = frozenset({codes.GTID, codes.ANONYMOUS_GTID, codes.GTID_TAGGED})


def locate_mysql_gtid_position(
    files: Sequence[str], events_of: EventsOf, position: GtidSet
) -> BinlogPosition:
    """Return where a MySQL binlog must be read from to hold every transaction after the GTID set ``position``.

    The file is the newest whose PREVIOUS_GTIDS (the GTIDs executed before it, MySQL manual, "GTID Sets";
    ``Previous_gtids_log_event`` in ``libbinlogevents/include/control_events.h``) ``position`` contains; from it,
    the boundary is the first GTID event whose transaction ``position`` lacks (:func:`_boundary_in`), or the
    binlog's end. Tagged GTIDs (8.4) count as any other. The same search runs on recorded files and over a
    server's dumps.

    :param files: the binlog file names, oldest first (``SHOW BINARY LOGS``).
    :param events_of: the decoded events of a file from its start; read only until the answer is known.
    :returns: the boundary's coordinates, ``gtid_set`` the position's text.
    :raises BinlogPurgedError: when no file's PREVIOUS_GTIDS is contained: the transactions before the position's
        first file were purged (or the position is another topology's).
    :raises LostTransactionsError: when the binlog ends before it executed all of ``position``.
    :raises StateError: when an anonymous transaction lies before the boundary.
    """
    text = str(position)
    for name in reversed(files):
        events = iter(events_of(name))
        previous = _previous_gtids(events, position.flavor)
        if position.contains(previous):
            return _boundary_in(name, events, previous, position)
    raise BinlogPurgedError(
        f"no binlog file of the source starts within the GTID set {text}: the binlogs holding its last "
        f"transactions were purged, or the set is another replication topology's"
    )


def _previous_gtids(events: Iterator[Event], flavor: str) -> GtidSet:
    """Return the PREVIOUS_GTIDS of a file whose events ``events`` yields from the start (empty without one)."""
    for event in events:
        if event.type_code == codes.PREVIOUS_GTIDS:
            return GtidSet.parse(event.data.gtid_set, flavor)
        if event.type_code in _MYSQL_GTIDS:
            break
    return GtidSet.empty(flavor)


def _boundary_in(name: str, events: Iterator[Event], executed: GtidSet, position: GtidSet) -> BinlogPosition:
    """Return where to read ``position``'s successors from, among ``events`` (after the PREVIOUS_GTIDS of ``name``).

    That is the first GTID event whose transaction ``position`` lacks: the position's own boundary, or an earlier
    one when the server logged transactions the position's server never had (errant ones) before it; the
    transactions of ``position`` after it are then read again, which converges to the same rows. A dump reads on
    into the files after ``name``: each event names its own file.
    """
    end = BinlogPosition(name, 4)
    for event in events:
        if event.in_payload or event.type_code == codes.ROTATE:
            continue
        if event.type_code in _MYSQL_GTIDS:
            gtid = event.data.gtid
            if gtid is None:
                raise StateError(
                    f"an anonymous transaction (gtid_mode was not ON) lies at {event.file}:{event.start}, before the "
                    f"binlog executed the GTID set {position}: no GTID tells whether the target holds it. The "
                    f"pipeline cannot resume there exactly: re-snapshot into a new pipeline (docs/failover.md)."
                )
            if not position.contains_gtid(gtid):
                return BinlogPosition(
                    event.file, event.start, str(position if executed == position else executed)
                )
            executed = executed.add(gtid)
        end = BinlogPosition(event.file, event.end_pos)
    if executed == position:
        return BinlogPosition(end.file, end.pos, str(position))
    missing = position - executed
    raise LostTransactionsError(
        f"this server's binlog ends at {end.file}:{end.pos} having executed {executed}, without the transactions "
        f"{missing} of the GTID set {position}: they were lost in a failover, or the connection reaches another "
        f"replication topology",
        missing=str(missing),
    )


def source_locator(server: ServerState, settings: Mapping[str, Any]) -> Callable[[GtidSet], BinlogPosition]:
    """Return where a GTID set lies on ``server``: the :data:`~airflow_provider_binlog.pipeline.failover.Locate` of its flavor.

    MariaDB: :func:`locate_mariadb_gtid_position`; MySQL: :func:`locate_mysql_gtid_position` over dumps of its
    files, after checking that ``@@gtid_executed`` holds the set.

    :param settings: ``pymysql.connect()`` keyword arguments of the pipeline's user (REPLICATION SLAVE).
    """
    if server.flavor == "mariadb":
        return lambda gtids: locate_mariadb_gtid_position(settings, gtids)
    files = [name for name, _ in server.binlog_files]
    events_of = server_events(settings, server.flavor)
    executed = GtidSet.parse(server.gtid_executed, server.flavor)

    def locate(gtids: GtidSet) -> BinlogPosition:
        missing = gtids - executed
        if not missing.is_empty:
            raise LostTransactionsError(
                f"this server's @@gtid_executed ({executed}) lacks the transactions {missing} of the GTID set "
                f"{gtids}: they were committed on another server and never reached this one",
                missing=str(missing),
            )
        return locate_mysql_gtid_position(files, events_of, gtids)

    return locate


def server_events(settings: Mapping[str, Any], flavor: str) -> EventsOf:
    """Return :data:`EventsOf` over a server: a non-blocking dump (server_id 0) of each file from its start."""

    def events_of(name: str) -> Iterator[Event]:
        with open_dump(settings, server_id=0, start=BinlogPosition(name, 4), flavor=flavor) as raw:
            yield from EventReader().events(raw)

    return events_of


def follow_source(
    manager: StateManager,
    hook: BinlogHook,
    server: ServerState,
    *,
    run_id: str | None,
    on_lost: OnLostTransactions,
    window_tables: WindowTables,
    logger: logging.Logger | Any = log,
) -> PipelineState | None:
    """Return the pipeline's state, rebased onto ``server`` when it was written for another one.

    The switch (:mod:`~airflow_provider_binlog.pipeline.failover`) is planned and written holding the state
    lock; a run that finds it already followed reads the state as is. One WARNING line says what happened.

    :param manager: the pipeline's state manager (with its lock).
    :param server: the source as read now (its identity, flavor and head).
    :param run_id: the DAG run following the switch (recorded).
    :param on_lost: what to do when the new server lacks transactions the target may hold.
    :param window_tables: the tables a staged window changed (its manifest), for lost transactions.
    :returns: the state (None: the pipeline has none yet).
    :raises StateError: when the switch cannot be followed by GTID (GTIDs off, a MySQL source, another flavor).
    :raises LostTransactionsError: when transactions were lost and ``on_lost`` is ``fail``, or the pipeline cuts
        windows by interval (snapshots cannot repair it).
    :raises BinlogPurgedError: when the new server no longer holds the binlog the checkpoint lies in.
    """
    state = manager.load()
    if state is None:
        return state
    at_checkpoint = gtids_at_checkpoint(hook, state, server)
    if not must_follow(state, server, at_checkpoint):
        return state
    check_followable(state, server)
    settings = hook.dump_settings()

    def change(current: PipelineState | None) -> PipelineState | None:
        if current is None or not must_follow(current, server, at_checkpoint):
            return current
        plan = plan_switch(
            current,
            locate=source_locator(server, settings),
            window_tables=window_tables,
            head=server.head,  # type: ignore[arg-type]  # check_followable: binary logging is on
        )
        check_lost(current, plan, on_lost)
        return switch_source(current, plan, identity=server.server_identity, run_id=run_id)

    written = manager.transact(change)  # type: ignore[arg-type]  # None only when there is no state
    if written.switches and written.switches[-1].run_id == run_id and written.revision != state.revision:
        logger.warning("pipeline %s: %s", manager.pipeline, switch_summary(written.switches[-1]))
    return written


def follow_pipeline(
    hook: BinlogHook,
    server: ServerState,
    root: Any,
    *,
    pipeline: str,
    staging_conn_id: str | None,
    run_id: str,
    on_lost: OnLostTransactions,
    logger: logging.Logger | Any = log,
    target_path: str | None = None,
) -> tuple[StateManager, PipelineState | None]:
    """Return the state manager of a task that writes ``pipeline``'s state, and the state followed to ``server``.

    The manager copies each revision it writes into the pipeline's staging folder ``root`` and holds the state
    lock on the source; the state is :func:`follow_source`'s, with the tables of a staged window read from its
    manifest (through ``staging_conn_id``).

    :param root: the pipeline's staging folder ``<staging>/<pipeline>`` (an ObjectStoragePath).
    :param target_path: the target root of the task, if it has one: with ``root``, what every location the state
        names must lie within (:class:`~airflow_provider_binlog.pipeline.state.StateRoots`).
    :raises StateError, LostTransactionsError, BinlogPurgedError: see :func:`follow_source`.
    """
    from airflow_provider_binlog.pipeline.history import StagedStateHistory
    from airflow_provider_binlog.pipeline.lock import SourceStateLock
    from airflow_provider_binlog.pipeline.staging import staged_tables
    from airflow_provider_binlog.pipeline.state import StateManager, StateRoots

    roots = StateRoots(staging=str(root), target=target_path)
    manager = StateManager(
        pipeline, history=StagedStateHistory(root), lock=SourceStateLock(hook), roots=roots
    )
    state = follow_source(
        manager,
        hook,
        server,
        run_id=run_id,
        on_lost=on_lost,
        window_tables=lambda window: staged_tables(window, staging_conn_id),
        logger=logger,
    )
    return manager, state


def must_follow(state: PipelineState, server: ServerState, at_checkpoint: str | None = None) -> bool:
    """Return whether ``state``'s coordinates are not ``server``'s: another server, or its binlog rewritten.

    Another server: the state names another source identity. The same server with its binlog rewritten
    (``RESET MASTER`` with the GTID state restored, ``RESET MASTER TO n``, a new ``log_bin`` basename): its
    binlog moved under the checkpoint (:func:`_moved`) while its GTID set still holds the checkpoint's. A purge
    (older files of the same name gone, the head after the checkpoint) is not a rewrite.

    :param at_checkpoint: MariaDB's ``BINLOG_GTID_POS`` at the checkpoint's coordinates
        (:func:`gtids_at_checkpoint`: "" when they are no event boundary, None when unknown).
    :raises StateError: when the same server's binlog moved and no longer holds the checkpoint's GTIDs (a
        ``RESET MASTER`` that reset the GTID state too: its new transactions reuse the old GTIDs, so no GTID
        set names a boundary of the old binlog any more).
    """
    if state.source_identity != server.server_identity:
        return True
    checkpoint, head = state.checkpoint.position, server.head
    if head is None or not checkpoint.gtid_set or not head.gtid_set or not _moved(state, head, at_checkpoint):
        return False
    if GtidSet.parse(head.gtid_set, state.flavor).contains(GtidSet.parse(checkpoint.gtid_set, state.flavor)):
        return True
    raise StateError(
        f"the binlog of {server.server_identity} was reset under pipeline {state.pipeline!r}: its checkpoint "
        f"{checkpoint} is no longer a transaction boundary there, and the server's GTID state ({head.gtid_set}) "
        f"no longer holds the checkpoint's (RESET MASTER reset it too, so new transactions reuse old GTIDs). "
        f"Nothing was read. Re-snapshot every table of the pipeline: "
        f"{resnapshot_remedy(state.pipeline, '<its tables>', 'purged')} (docs/failover.md)."
    )


def _moved(state: PipelineState, head: BinlogPosition, at_checkpoint: str | None) -> bool:
    """Return whether the server's binlog moved under the checkpoint.

    The GTID state at the checkpoint's coordinates is another than the checkpoint's, or they are no event
    boundary, or the head lies before the checkpoint or in files of another name.
    """
    checkpoint = state.checkpoint.position
    if at_checkpoint is not None and not _names(at_checkpoint, checkpoint.gtid_set):
        return True
    renamed = checkpoint.file.rsplit(".", 1)[0] != head.file.rsplit(".", 1)[0]
    return renamed or head.key < checkpoint.key


def gtids_at_checkpoint(hook: BinlogHook, state: PipelineState, server: ServerState) -> str | None:
    """Return the source's GTID state at the checkpoint's coordinates (MariaDB ``BINLOG_GTID_POS``).

    "" when the coordinates lie in a file the source has but are no transaction boundary there; None when it
    cannot be told: MySQL (no such function), a state written for another server or without GTIDs, a file the
    source no longer lists (purged), or an offset beyond the file's end (the head is behind: see
    :func:`must_follow`).
    """
    checkpoint = state.checkpoint.position
    sizes = dict(server.binlog_files)
    if (
        server.flavor != "mariadb"
        or state.source_identity != server.server_identity
        or not checkpoint.gtid_set
        or checkpoint.pos > sizes.get(checkpoint.file, -1)
    ):
        return None
    with hook.cursor() as cur:
        return _MARIADB.gtid_at(cur, checkpoint.file, checkpoint.pos)


def check_followable(state: PipelineState, server: ServerState) -> None:
    """Refuse a switch of ``state``'s source to ``server`` that the pipeline cannot follow by GTID.

    :raises StateError: naming both servers and the remedy.
    """
    refusal = None
    if server.head is None:
        refusal = "it has binary logging off"
    elif server.flavor != state.flavor:
        refusal = f"it is {server.flavor}, the state was written by {state.flavor}"
    if refusal is not None:
        raise StateError(
            f"the state of pipeline {state.pipeline!r} was written for source {state.source_identity!r} but the "
            f"connection now reaches {server.server_identity!r}, and the pipeline cannot follow it there: {refusal}. "
            f"Point the connection back at the original server, or re-snapshot into a new pipeline name "
            f"(docs/failover.md)."
        )


def check_lost(state: PipelineState, plan: SwitchPlan, on_lost: OnLostTransactions) -> None:
    """Refuse lost transactions the run may not repair by re-snapshots.

    :raises LostTransactionsError: naming the GTIDs, the tables and what to do.
    """
    if not plan.lost_tables:
        return
    tables = ", ".join(sorted(plan.lost_tables))
    interval = any(w.cut_by == "interval" for w in state.windows)
    if on_lost == "resnapshot" and not interval:
        return
    why = (
        "a pipeline that cuts windows by interval cannot re-snapshot"
        if interval
        else "on_lost_transactions='fail'"
    )
    raise LostTransactionsError(
        f"pipeline {state.pipeline!r}: the new source lacks the transactions {plan.lost}, which the target may hold "
        f"(checkpoint {state.checkpoint.position}); they may have changed {tables}, and {why}. Nothing was changed. "
        f"Re-snapshot those tables: run with on_lost_transactions='resnapshot' (the default) on a head pipeline, or "
        f"{resnapshot_remedy(state.pipeline, tables)}, or load them into a new pipeline (docs/failover.md).",
        missing=plan.lost,
    )
