"""Differential check over public type corpora: the binlog path and the snapshot path stage the same rows.

The corpora live in ``../shared/data`` next to the project (reference data, never copied here):
mysql-replication's type cases (``pymysqlreplication_types/cases.json``) and Debezium's MySQL/MariaDB
type and DDL scripts (``debezium_ddl/*.sql``). Each case runs in a database of its own between two
binlog heads; the window is extracted (binlog path) and every table it created is read as a snapshot.
Both must give the same Arrow types and the same rows, or both must refuse the table (a character set
or value that cannot be staged exactly). The expected values are the other path's: this is a
differential test; ``test_type_fidelity.py`` holds the hand-written expectations.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pymysql
import pytest
from test_snapshot_rows import Recorder, read_snapshot
from test_type_fidelity import exact

from airflow_provider_binlog.exceptions import UndecodableValueError
from airflow_provider_binlog.testing.mariadb import LocalMariaDB

pytestmark = [pytest.mark.integration, pytest.mark.slow]

DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"
PMR_CASES = DATA / "pymysqlreplication_types" / "cases.json"
DEBEZIUM = DATA / "debezium_ddl"
_STATEMENT_END = re.compile(r";\s*\n")
_SKIPPED_SCRIPT = re.compile(
    r"^\s*(DELIMITER|CREATE DATABASE|CREATE USER|GRANT)\b", re.IGNORECASE | re.MULTILINE
)


@dataclass
class Source:
    """One corpus case: the statements that create and fill its tables."""

    name: str
    statements: list[str]


def _sources() -> list[Source]:
    sources = []
    if PMR_CASES.exists():
        for index, case in enumerate(json.loads(PMR_CASES.read_text())):
            if case.get("mariadb_10_11") == "ok" and case.get("insert") and not case["dynamic"]:
                statements = [case["create"].strip().rstrip(";"), case["insert"].strip().rstrip(";")]
                sources.append(Source(f"pmr{index}_{case['test']}", statements))
    if DEBEZIUM.exists():
        for script in sorted(DEBEZIUM.glob("*.sql")):
            text = script.read_text()
            if _SKIPPED_SCRIPT.search(text):
                continue  # stored programs (not splittable on ';'), or users and databases outside the case's
            statements = [s.strip() for s in _STATEMENT_END.split(text + "\n") if _sql(s)]
            sources.append(Source(f"dbz_{script.stem}", statements))
    return sources


def _sql(text: str) -> bool:
    """Return True when ``text`` holds a statement, not only ``--`` comments and blank lines."""
    return any(line.strip() and not line.strip().startswith("--") for line in text.splitlines())


SOURCES = _sources()


@dataclass
class Outcome:
    """Per table of one source: both paths' Arrow types and rows, or the error each raised."""

    binlog_error: str | None
    tables: dict[str, tuple[Any, Any]]
    """table -> (binlog types and rows, None without staged changes; snapshot types and rows, or its error)."""
    skipped: list[str]
    resnapshots: dict[str, str]
    """table -> why the binlog path handed it to a re-snapshot (its later row events are not staged)."""


def _binlog_state(staged: pa.Table, names: list[str], key: list[str]) -> tuple[list[Any], list[Any]]:
    """Return (Arrow types, rows as exact forms) of a table's final state from its staged changes."""
    types = [staged.schema.field(n).type for n in names]
    rows = staged.sort_by([("_binlog_seq", "ascending")]).to_pylist()
    if key:
        final: dict[tuple[Any, ...], dict[str, Any]] = {}
        for row in rows:
            final[tuple(row[k] for k in key)] = row
        live = [r for r in final.values() if r["_binlog_op"] != "d"]
    else:
        assert {r["_binlog_op"] for r in rows} <= {"c"}, "only inserts can be compared without a key"
        live = rows
    return types, sorted(exact([r[n] for n in names]) for r in live)


def _run(server: LocalMariaDB, source: Source, staging: Path) -> Outcome:
    with server.scratch_database("corpus") as db:
        recorder = Recorder(staging)
        recorder.mark()
        skipped = []
        conn = pymysql.connect(**server.connection_kwargs(database=db))
        try:
            with conn.cursor() as cur:
                cur.execute("SET SESSION sql_mode = ''")
                cur.execute("SET SESSION time_zone = '+00:00'")
                for statement in source.statements:
                    try:
                        cur.execute(statement)
                    except pymysql.MySQLError as err:  # MySQL-only syntax (CAST AS JSON, VECTOR before 11.7)
                        skipped.append(f"{statement[:60]!r}: {err}")
        finally:
            conn.close()
        keys: dict[str, list[str]] = {}
        for table, column in server.execute(
            "SELECT t.TABLE_NAME, k.COLUMN_NAME FROM information_schema.TABLES t LEFT JOIN"
            " information_schema.KEY_COLUMN_USAGE k ON k.TABLE_SCHEMA = t.TABLE_SCHEMA AND"
            " k.TABLE_NAME = t.TABLE_NAME AND k.CONSTRAINT_NAME = 'PRIMARY'"
            f" WHERE t.TABLE_SCHEMA = '{db}' AND t.TABLE_TYPE = 'BASE TABLE' ORDER BY k.ORDINAL_POSITION"
        ):
            keys.setdefault(str(table), []).extend([str(column)] if column else [])
        binlog_error = None
        staged: dict[str, pa.Table] = {}
        resnapshots: dict[str, str] = {}
        try:
            manifest, staged = recorder.extract({f"{db}.{t}": key for t, key in keys.items()})
            resnapshots = {r["table"].split(".", 1)[1]: r["reason"] for r in manifest["resnapshots"]}
        except UndecodableValueError as err:
            binlog_error = str(err)
        tables = {}
        for table, key in keys.items():
            try:
                specs, snapshot, _ = read_snapshot(server, db, table, order="")
            except ValueError as err:
                tables[table] = (None, str(err))
                continue
            names = [s["name"] for s in specs]
            rows = sorted(exact(list(r.values())) for r in snapshot.to_pylist())
            found = staged.get(f"{db}.{table}")
            binlog = _binlog_state(found, names, key) if found is not None else None
            tables[table] = (binlog, ([snapshot.schema.field(n).type for n in names], rows))
        return Outcome(binlog_error, tables, skipped, resnapshots)


@pytest.fixture(scope="module")
def mariadb() -> Iterator[LocalMariaDB]:
    """A private server for this module: a statement of a corpus that crashed the server would not take the
    session's server down with it (MariaDB 10.11 segfaulted once in this module's first runs)."""
    with LocalMariaDB() as server:
        yield server


@pytest.fixture(scope="module")
def outcomes(mariadb: LocalMariaDB, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Outcome]]:
    """Run every source once (module scope: one window per source on the session's server)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("AIRFLOW_CONN_BINLOG_DEFAULT", mariadb.uri())
        base = tmp_path_factory.mktemp("corpora")
        yield {s.name: _run(mariadb, s, base / s.name) for s in SOURCES}


def _params() -> list[Any]:
    if not SOURCES:
        reason = f"{DATA} is absent (shared reference data, not part of the repository)"
        return [pytest.param(None, marks=pytest.mark.skip(reason=reason), id="corpora-absent")]
    return [pytest.param(s.name, id=s.name) for s in SOURCES]


@pytest.mark.parametrize("source", _params())
def test_binlog_and_snapshot_stage_the_same_rows(source: str, outcomes: dict[str, Outcome]) -> None:
    outcome = outcomes[source]
    if not outcome.tables:
        pytest.skip(f"the case leaves no table on MariaDB 10.11 (statements refused: {outcome.skipped})")
    if outcome.binlog_error is not None:  # the binlog path refused a table: the snapshot must refuse it too
        refused = [t for t, (_, snapshot) in outcome.tables.items() if isinstance(snapshot, str)]
        assert any(f".{t}." in outcome.binlog_error for t in refused), (outcome.binlog_error, refused)
        return
    for table, (binlog, snapshot) in outcome.tables.items():
        if table in outcome.resnapshots:
            # A DDL the binlog cannot follow exactly (a MODIFY under the corpora's non-strict sql_mode): the
            # pipeline re-snapshots the table instead, so the snapshot path alone must stage it.
            assert not isinstance(snapshot, str), (
                f"{table}: {outcome.resnapshots[table]}; snapshot: {snapshot}"
            )
            continue
        if binlog is None:  # no row change of this table was staged: the table is empty
            assert isinstance(snapshot, str) or snapshot[1] == [], table
            continue
        assert not isinstance(snapshot, str), f"{table}: only the snapshot refused it: {snapshot}"
        assert binlog[0] == snapshot[0], table
        mismatch = Counter(map(repr, binlog[1])) - Counter(map(repr, snapshot[1]))
        assert binlog[1] == snapshot[1], (table, mismatch)
