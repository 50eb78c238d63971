"""Missing privileges are found by the Test button and validation, and at run time fail at once."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from airflow.sdk.exceptions import AirflowFailException

from airflow_provider_binlog.exceptions import SourcePrivilegeError
from airflow_provider_binlog.extract.reader import TableTarget
from airflow_provider_binlog.extract.window import extract_window
from airflow_provider_binlog.hooks.binlog import BinlogHook
from airflow_provider_binlog.pipeline.ledger import Window, now_iso
from airflow_provider_binlog.pipeline.staging import window_path
from airflow_provider_binlog.source.probes import file_opened_at
from airflow_provider_binlog.testing.mariadb import LocalMariaDB

pytestmark = pytest.mark.integration

HOST = "127.0.0.1"
PASSWORD = "grants-test-secret-1"
SLAVE_FIX = f"GRANT REPLICATION SLAVE ON *.* TO 'cdc_user'@'{HOST}';"
MONITOR_FIX = f"GRANT BINLOG MONITOR ON *.* TO 'cdc_user'@'{HOST}';"

User = Callable[..., BinlogHook]


@pytest.fixture
def shop(mariadb: LocalMariaDB) -> Iterator[str]:
    with mariadb.scratch_database("grants") as db:
        mariadb.execute(
            f"CREATE TABLE `{db}`.orders (id INT PRIMARY KEY, v INT)",
            f"CREATE TABLE `{db}`.items (id INT PRIMARY KEY, v INT)",
        )
        yield db


@pytest.fixture
def user(mariadb: LocalMariaDB, monkeypatch: pytest.MonkeyPatch) -> Iterator[User]:
    """Create ``cdc_user`` with the given grants (and roles) and point ``binlog_default`` at it."""
    created_roles: list[str] = []

    def create(*grants: str, roles: tuple[str, ...] = ()) -> BinlogHook:
        for role in roles:
            mariadb.execute(f"CREATE ROLE {role}")
            created_roles.append(role)
        mariadb.execute(f"CREATE USER 'cdc_user'@'{HOST}' IDENTIFIED BY '{PASSWORD}'")
        mariadb.execute(*(g.format(user=f"'cdc_user'@'{HOST}'") for g in grants))
        monkeypatch.setenv(
            "AIRFLOW_CONN_BINLOG_DEFAULT", f"mysql://cdc_user:{PASSWORD}@{HOST}:{mariadb.port}"
        )
        return BinlogHook(pipeline="grants")

    yield create
    mariadb.execute(f"DROP USER IF EXISTS 'cdc_user'@'{HOST}'")
    for role in created_roles:
        mariadb.execute(f"DROP ROLE {role}")


def privilege_lines(message: str) -> dict[str, str]:
    lines = [line.split(": ", 1) for line in message.split(";\n") if line.startswith("privilege=")]
    return {name.removeprefix("privilege="): verdict for name, verdict in lines}


def test_a_user_with_only_select_fails_the_test_and_validation(
    user: User, shop: str, mariadb: LocalMariaDB
) -> None:
    hook = user("GRANT SELECT ON *.* TO {user}")
    ok, message = hook.test_connection()
    print(message)
    assert not ok
    assert "NOT usable as a CDC source" in message.split(";\n")[0]
    verdicts = privilege_lines(message)
    assert (
        verdicts["REPLICATION SLAVE ON *.*"]
        == f"WRONG: missing: the pipeline streams the binlog (extract windows, sensor probes); run {SLAVE_FIX[:-1]}"
    )
    assert verdicts["BINLOG MONITOR ON *.*"].startswith("WRONG: missing: the pipeline reads the binlog head")
    assert verdicts["BINLOG MONITOR ON *.*"].endswith(f"run {MONITOR_FIX[:-1]}")
    assert (
        "settings=?: not checked: reading them needs the privileges marked WRONG" in message
    )  # SHOW BINARY LOGS is denied without BINLOG MONITOR
    assert "(1227" not in message  # a grants finding, not the server's bare error tuple
    assert PASSWORD not in message
    started = time.monotonic()
    with pytest.raises(SourcePrivilegeError) as caught:
        hook.validate_source(tables=[f"{shop}.*"])
    assert time.monotonic() - started < 2
    print(caught.value)
    assert isinstance(caught.value, AirflowFailException)
    assert SLAVE_FIX in str(caught.value)
    assert MONITOR_FIX in str(caught.value)
    assert f"SELECT ON `{shop}`" not in str(caught.value)
    # The printed statements are the fix: run them and the same user passes.
    mariadb.execute(SLAVE_FIX, MONITOR_FIX)
    assert BinlogHook(pipeline="grants").validate_source(tables=[f"{shop}.*"]).head is not None
    ok, message = BinlogHook(pipeline="grants").test_connection()
    assert ok, message


@pytest.mark.parametrize(
    ("granted", "missing", "fix"),
    [
        ("BINLOG MONITOR", "REPLICATION SLAVE", SLAVE_FIX),
        ("REPLICATION SLAVE", "BINLOG MONITOR", MONITOR_FIX),
    ],
)
def test_a_user_without_one_replication_privilege(
    user: User, shop: str, granted: str, missing: str, fix: str
) -> None:
    hook = user(f"GRANT {granted} ON *.* TO {{user}}", f"GRANT SELECT ON `{shop}`.* TO {{user}}")
    ok, message = hook.test_connection()
    assert not ok
    verdicts = privilege_lines(message)
    assert verdicts[f"{missing} ON *.*"].startswith("WRONG: missing: the pipeline ")
    assert verdicts[f"{missing} ON *.*"].endswith(f"run {fix[:-1]}")
    assert verdicts[f"{granted} ON *.*"] == "ok"
    # Without BINLOG MONITOR the server does not show the settings; with it they are checked.
    assert ("binlog_format=ROW: ok" in message.split(";\n")) is (granted == "BINLOG MONITOR")
    with pytest.raises(SourcePrivilegeError) as caught:
        hook.validate_source(tables=[f"{shop}.orders"])
    assert fix in str(caught.value)
    assert f"GRANT {granted}" not in str(caught.value)


def test_grants_through_the_default_role_count(user: User, shop: str) -> None:
    hook = user(
        "GRANT REPLICATION SLAVE ON *.* TO cdc_inner",
        "GRANT cdc_inner TO cdc_role",
        "GRANT BINLOG MONITOR ON *.* TO cdc_role",
        f"GRANT SELECT ON `{shop}`.* TO cdc_role",
        "GRANT cdc_role TO {user}",
        "SET DEFAULT ROLE cdc_role FOR {user}",
        roles=("cdc_inner", "cdc_role"),
    )
    ok, message = hook.test_connection()
    assert ok, message
    verdicts = privilege_lines(message)
    assert verdicts == {
        "REPLICATION SLAVE ON *.*": "ok (through role cdc_inner)",
        "BINLOG MONITOR ON *.*": "ok (through role cdc_role)",
    }
    assert hook.validate_source(tables=[f"{shop}.*", f"{shop}.orders"]).head is not None


def test_a_role_that_is_not_enabled_by_default_does_not_count(
    user: User, shop: str, mariadb: LocalMariaDB
) -> None:
    hook = user(
        "GRANT REPLICATION SLAVE, BINLOG MONITOR, SELECT ON *.* TO cdc_role",
        "GRANT cdc_role TO {user}",
        roles=("cdc_role",),
    )
    ok, message = hook.test_connection()
    assert not ok
    fix = f"SET DEFAULT ROLE `cdc_role` FOR 'cdc_user'@'{HOST}';"
    assert (
        f"role=cdc_role: note: granted but not enabled in new sessions, so its privileges do not count; run {fix[:-1]} to use them"
        in message
    )
    with pytest.raises(SourcePrivilegeError) as caught:
        hook.validate_source(tables=[f"{shop}.orders"])
    assert SLAVE_FIX in str(caught.value)
    assert fix in str(caught.value)
    mariadb.execute(fix)
    assert BinlogHook(pipeline="grants").validate_source(tables=[f"{shop}.orders"]).head is not None


def test_a_user_with_all_privileges_passes(user: User, shop: str) -> None:
    hook = user("GRANT ALL PRIVILEGES ON *.* TO {user}")
    ok, message = hook.test_connection()
    assert ok, message
    assert privilege_lines(message) == {"REPLICATION SLAVE ON *.*": "ok", "BINLOG MONITOR ON *.*": "ok"}
    assert hook.validate_source(tables=[f"{shop}.*"]).head is not None


def test_select_is_checked_per_selected_table(user: User, shop: str, mariadb: LocalMariaDB) -> None:
    hook = user(
        "GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO {user}",
        f"GRANT SELECT ON `{shop}`.orders TO {{user}}",
    )
    assert hook.validate_source(tables=[f"{shop}.orders"]).head is not None
    with pytest.raises(SourcePrivilegeError) as caught:
        hook.validate_source(tables=[f"{shop}.orders", f"{shop}.items"])
    table_fix = f"GRANT SELECT ON `{shop}`.`items` TO 'cdc_user'@'{HOST}';"
    assert table_fix in str(caught.value)
    assert "orders" not in str(caught.value)
    # A pattern needs SELECT on the database: information_schema would hide the tables it may not read.
    assert sorted(hook.describe_tables([f"{shop}.*"])) == [f"{shop}.orders"]
    with pytest.raises(SourcePrivilegeError) as caught:
        hook.validate_source(tables=[f"{shop}.*"])
    database_fix = f"GRANT SELECT ON `{shop.replace('_', chr(92) + '_')}`.* TO 'cdc_user'@'{HOST}';"
    assert database_fix in str(caught.value)
    mariadb.execute(database_fix)
    assert BinlogHook(pipeline="grants").validate_source(tables=[f"{shop}.*"]).head is not None
    assert sorted(BinlogHook(pipeline="grants").describe_tables([f"{shop}.*"])) == [
        f"{shop}.items",
        f"{shop}.orders",
    ]


def test_a_grant_revoked_after_validation_fails_the_state_read_at_once(
    user: User, shop: str, mariadb: LocalMariaDB
) -> None:
    hook = user(
        "GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO {user}", f"GRANT SELECT ON `{shop}`.* TO {{user}}"
    )
    hook.validate_source(tables=[f"{shop}.*"])
    mariadb.execute(f"REVOKE BINLOG MONITOR ON *.* FROM 'cdc_user'@'{HOST}'")
    started = time.monotonic()
    with pytest.raises(SourcePrivilegeError) as caught:
        hook.server_state()
    assert time.monotonic() - started < 2
    print(caught.value)
    assert isinstance(caught.value, AirflowFailException)
    message = str(caught.value)
    assert f"refused to let 'cdc_user'@'{HOST}' run SHOW GLOBAL VARIABLES WHERE" in message
    assert (
        "(1227, 'Access denied; you need (at least one of) the SUPER, BINLOG MONITOR privilege(s)" in message
    )
    assert f"  {MONITOR_FIX}\nA retry cannot succeed" in message  # the one statement to run
    assert "fails without retrying" in message


def test_a_grant_revoked_after_validation_fails_the_stream_at_once(
    user: User, shop: str, mariadb: LocalMariaDB, tmp_path: Path
) -> None:
    hook = user(
        "GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO {user}", f"GRANT SELECT ON `{shop}`.* TO {{user}}"
    )
    start = hook.validate_source(tables=[f"{shop}.*"]).head
    assert start is not None
    mariadb.execute(f"INSERT INTO `{shop}`.orders VALUES (1, 1)")
    server = hook.server_state()
    assert server.head is not None
    window = Window(seq=1, start=(start), end=(server.head), run_id="r", cut_at=now_iso())
    mariadb.execute(f"REVOKE REPLICATION SLAVE ON *.* FROM 'cdc_user'@'{HOST}'")
    started = time.monotonic()
    with pytest.raises(SourcePrivilegeError) as caught:
        extract_window(
            hook,
            pipeline="grants",
            window=window,
            tables={f"{shop}.orders": TableTarget(f"{shop}.orders", ["id"])},
            window_dir=window_path(str(tmp_path), "grants", 1),
            server=server,
        )
    assert time.monotonic() - started < 2
    print(caught.value)
    message = str(caught.value)
    assert f"refused to let 'cdc_user'@'{HOST}' stream the binlog of window 1 from {start}" in message
    assert f"  {SLAVE_FIX}" in message
    with pytest.raises(SourcePrivilegeError, match="GRANT REPLICATION SLAVE ON"):
        file_opened_at(hook, start.file)  # the sensors' probes


def test_a_sensor_fails_without_retry_in_poke_and_deferred_mode(
    user: User, shop: str, mariadb: LocalMariaDB
) -> None:
    import asyncio

    from airflow_provider_binlog.sensors import BinlogConsumerLagSensor

    user("GRANT REPLICATION SLAVE ON *.* TO {user}")
    sensor = BinlogConsumerLagSensor(task_id="lag", pipeline="grants", max_lag_seconds=60)
    with pytest.raises(SourcePrivilegeError, match=MONITOR_FIX.replace("*", "\\*").replace(".", "\\.")):
        sensor.poke({})

    async def first_event() -> dict[str, object]:
        async for event in sensor.trigger().run():
            return dict(event.payload)
        raise AssertionError("the trigger ended without an event")

    payload = asyncio.run(first_event())
    assert payload["error_class"] == "SourcePrivilegeError"
    with pytest.raises(SourcePrivilegeError) as caught:
        sensor.execute_complete({}, payload)
    assert isinstance(caught.value, AirflowFailException)
    assert MONITOR_FIX in str(caught.value)
