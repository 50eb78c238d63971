"""The connection Test's report (the Test button, the API and ``airflow connections test``).

:meth:`BinlogHook.test_connection <airflow_provider_binlog.hooks.binlog.BinlogHook.test_connection>` returns
:func:`connection_report`: one line per finding of :mod:`airflow_provider_binlog.source` (settings, retention,
``server_id``, privileges), worded for the user who saved the connection: the id they typed, not the
temporary one Airflow tests under (:func:`requested_connection_id`), and printed on success too when the CLI
would hide it (:func:`tested_by_the_cli`).
"""

from __future__ import annotations

import inspect
import os
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from airflow_provider_binlog.exceptions import BinlogConfigError, SourcePrivilegeError
from airflow_provider_binlog.source.config import SERVER_ID_BASE, SERVER_ID_SPAN
from airflow_provider_binlog.source.findings import Finding, Outcome
from airflow_provider_binlog.source.server import (
    ServerState,
    derive_server_id,
    rds_retention_hours,
    retention_finding,
    retention_policy,
    setting_findings,
)

if TYPE_CHECKING:
    from airflow_provider_binlog.hooks.binlog import BinlogHook
    from airflow_provider_binlog.source.grants import Grants, PrivilegeReport


def connection_report(hook: BinlogHook) -> tuple[bool, str]:
    """Return ``(ok, report)`` of the connection Test (:meth:`BinlogHook.test_connection` states the format)."""
    try:
        report = hook.check_privileges()
    except Exception as err:  # the errors name the connection, the address and what to do
        return False, hook.redacted(str(err))
    state: ServerState | None = None
    try:
        state = hook.server_state()
    except SourcePrivilegeError as err:
        findings = [_refusal_finding(err, report)]
    except Exception as err:
        return False, hook.redacted(f"connection {hook.connection_label()}: {err}")
    else:
        with hook.cursor() as cur:
            policy = retention_policy(state.variables, rds_retention_hours(cur))
        findings = [
            *setting_findings(state),
            retention_finding(policy),
            _server_id_finding(hook, state, report.grants),
        ]
    findings += report.findings()
    findings.append(_tls_finding(hook))
    ok = not any(f.wrong for f in findings)
    settings = hook.connection_settings()
    verdict = "usable as a CDC source" if ok else "NOT usable as a CDC source; fix the settings marked WRONG"
    header = (
        f"{report.flavor} {report.version} (connection {hook.connection_label()}) at "
        f"{settings['host']}:{settings['port']}: {verdict}"
    )
    head = state.head if state else None
    footer = f"head={head.file}:{head.pos} gtid={head.gtid_set or 'none'}" if head else "head=none"
    return ok, hook.redacted(";\n".join([header, *map(str, findings), footer]))


def _tls_finding(hook: BinlogHook) -> Finding:
    """Return the TLS of the connection: its mode and what a session of it negotiated (version and cipher).

    ``verify_ca`` / ``verify_identity`` with TLS in use are OK; a session that is encrypted without verifying
    the server, or plaintext, is a note with the mode that would do more (a mode that cannot be met fails the
    login, and the Test, before this).
    """
    from airflow_provider_binlog.source.connect import tls_state

    extras = hook.extras()
    mode = extras.tls_mode()
    with hook.cursor() as cur:
        state = tls_state(cur)
    value = f"{mode} ({state})"
    warnings = " ".join(extras.tls_warnings())
    if state == "plaintext":
        problem = "the session is not encrypted" + (
            ""
            if mode == "disabled"
            else ": the server offers no TLS (start it with --ssl-cert and --ssl-key)"
        )
        return Finding(
            "tls", value, Outcome.NOTE, problem, "set the extra tls=verify_identity and ssl_ca to require TLS"
        )
    if mode in ("verify_ca", "verify_identity"):
        checked = "its CA" if mode == "verify_ca" else "its CA and host name"
        return Finding(
            "tls", value, Outcome.OK, f"encrypted; the server's certificate was verified ({checked})"
        )
    return Finding(
        "tls",
        value,
        Outcome.NOTE,
        warnings or "encrypted, but the server's certificate is not verified",
        "set the extras ssl_ca and tls=verify_identity to verify the server",
    )


def _refusal_finding(err: SourcePrivilegeError, report: PrivilegeReport) -> Finding:
    """Return the finding for a server that refused to show its binlog state (a grants finding, not the raw error).

    With privileges marked missing the settings were simply not checked; otherwise ``SHOW GRANTS``
    looked complete but the server still refused, and the finding carries its message and the
    ``GRANT`` for the privilege it names (:func:`~airflow_provider_binlog.source.grants.fix_from_error`).
    """
    from airflow_provider_binlog.source.grants import fix_from_error

    if report.missing:
        return Finding("settings", "?", Outcome.NOT_CHECKED, "reading them needs the privileges marked WRONG")
    cause = err.__cause__
    text = str(cause.args[1]) if cause is not None and len(cause.args) > 1 else str(err)
    fix = fix_from_error(text, report.grants.account)
    return Finding(
        "settings",
        "?",
        Outcome.WRONG,
        f"not checked: the source refused to show its binlog state although SHOW GRANTS lists what the "
        f"pipeline needs ({text})",
        f"run {fix.rstrip(';')}" if fix else f"grant {report.grants.account} the privilege the message names",
    )


def _server_id_finding(hook: BinlogHook, state: ServerState, grants: Grants) -> Finding:
    """Return the verdict on the ``server_id`` of the pipelines using this connection.

    With the extra ``server_id``, or a hook made for a pipeline, that id is checked
    (:meth:`BinlogHook.check_server_id`). Otherwise (the connection Test, which knows no pipeline) each pipeline
    derives its own id from its name, and the finding explains that and checks the derived range
    against the ids in use.
    """
    source_id = state.variables.get("server_id", "?")
    if hook.extras().server_id is None and not hook.pipeline_given:
        return _derived_server_id_finding(hook, source_id, grants)
    try:
        replicas = hook.check_server_id()
    except BinlogConfigError as err:
        return Finding("server_id", str(hook.server_id), Outcome.WRONG, str(err))
    value = f"{hook.server_id} ({hook.server_id_origin()}; the source's is {source_id})"
    if replicas is None:
        return _unlisted_replicas_finding(value, grants)
    ids = ", ".join(str(r.server_id) for r in replicas) or "none"
    return Finding("server_id", value, Outcome.OK, f"no registered replica uses it (registered: {ids})")


def _derived_server_id_finding(hook: BinlogHook, source_id: str, grants: Grants) -> Finding:
    """Return the finding for a connection without the extra ``server_id`` tested outside any pipeline."""
    example = "binlog_cdc"
    value = (
        f"derived per pipeline: {SERVER_ID_BASE} + crc32(pipeline name) % {SERVER_ID_SPAN}, e.g. "
        f"{derive_server_id(example)} for pipeline {example!r} (the example DAG's default); the source's is "
        f"{source_id}"
    )
    _, replicas = hook.taken_server_ids()
    if replicas is None:
        return _unlisted_replicas_finding(value, grants)
    inside = [r for r in replicas if SERVER_ID_BASE <= r.server_id < SERVER_ID_BASE + SERVER_ID_SPAN]
    if inside:
        names = ", ".join(map(str, inside))
        return Finding(
            "server_id",
            value,
            Outcome.NOTE,
            f"the registered replica(s) {names} use ids in the derived range, so a pipeline whose name "
            "derives the same id would clash (each extract checks its id and fails naming the clash)",
            "set the extra server_id to an unused id if that happens",
        )
    ids = ", ".join(str(r.server_id) for r in replicas) or "none"
    return Finding(
        "server_id",
        value,
        Outcome.OK,
        f"no registered replica uses an id in the derived range (registered: {ids}); each extract task "
        "checks its pipeline's id again before it streams",
    )


def _unlisted_replicas_finding(value: str, grants: Grants) -> Finding:
    privilege = grants.privileges.list_replicas
    return Finding(
        "server_id",
        value,
        Outcome.NOTE,
        "not checked against replicas: the user may not list them",
        f"grant {privilege} to check: {grants.list_replicas_fix().rstrip(';')}",
    )


def requested_connection_id(hook: BinlogHook) -> str | None:
    """Return the id an API connection test was requested for; None outside one, "" when unknown.

    Airflow 3's ``POST /api/v2/connections/test`` (``routes/public/connections.py``,
    ``test_connection``) holds the request body ``test_body`` (whose ``connection_id`` is the id the
    user typed) and the ``transient_conn_id`` it tests under, and calls ``Connection.test_connection``
    and so this hook in the same thread: the caller's frame is found by those two local names. Only
    looked for while :meth:`BinlogHook.test_connection` runs.
    """
    if not hook.testing_connection:
        return None
    caller = _caller_locals(
        lambda names: names.get("transient_conn_id") == hook.binlog_conn_id and "test_body" in names
    )
    if caller is not None:
        return str(getattr(caller["test_body"], "connection_id", "") or "")
    temporary = re.fullmatch(r"[A-Za-z0-9]{8}", hook.binlog_conn_id)
    if temporary and f"AIRFLOW_CONN_{hook.binlog_conn_id.upper()}" in os.environ:
        return ""  # the shape and the environment variable of a transient id, without the caller's frame
    return None


def tested_by_the_cli(hook: BinlogHook) -> bool:
    """Return True when ``airflow connections test`` runs this test.

    That command (``cli/commands/connection_command.py``, ``connections_test``, whose ``args.conn_id``
    is this connection) prints the message only on failure and silences logging unless ``--verbose``.
    """
    caller = _caller_locals(
        lambda names: "args" in names and getattr(names["args"], "conn_id", None) == hook.binlog_conn_id
    )
    return caller is not None and not getattr(caller["args"], "verbose", False)


def _caller_locals(match: Callable[[dict[str, Any]], bool]) -> dict[str, Any] | None:
    """Return the local names of the nearest calling frame for which ``match`` is true (None: no such frame)."""
    frame = inspect.currentframe()
    while frame is not None:
        if match(frame.f_locals):
            return frame.f_locals
        frame = frame.f_back
    return None
