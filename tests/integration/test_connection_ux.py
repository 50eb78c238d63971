from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest

from airflow_provider_binlog.exceptions import BinlogConfigError
from airflow_provider_binlog.extract.connections import pipeline_dump
from airflow_provider_binlog.hooks.binlog import BinlogHook
from airflow_provider_binlog.source.flavor import ReplicaHost
from airflow_provider_binlog.source.server import derive_server_id
from airflow_provider_binlog.testing.mariadb import LocalMariaDB

pytestmark = pytest.mark.integration

PIPELINE = "ux-collision"
OTHER_HOST, OTHER_PORT = "other-replica.example", 3307


def registered_ids(mariadb: LocalMariaDB) -> list[int]:
    return [int(row[0]) for row in mariadb.execute("SHOW SLAVE HOSTS")]


def source_server_id(mariadb: LocalMariaDB) -> int:
    return int(mariadb.execute("SELECT @@GLOBAL.server_id")[0][0])


def lines_of(message: str) -> list[str]:
    return message.split(";\n")


@pytest.fixture
def other_replica(mariadb: LocalMariaDB) -> Iterator[int]:
    """A reader registered (COM_REGISTER_SLAVE) under the server_id that PIPELINE derives, like a replica."""
    from pymysqlreplication import BinLogStreamReader

    server_id = derive_server_id(PIPELINE)
    settings = {k: v for k, v in mariadb.connection_kwargs().items() if k != "autocommit"}
    stream = BinLogStreamReader(
        connection_settings=settings,
        server_id=server_id,
        report_slave=(OTHER_HOST, "", "", OTHER_PORT),
        blocking=True,
        slave_heartbeat=0.5,
        enable_logging=False,
    )
    try:
        stream.fetchone()
        assert server_id in registered_ids(mariadb)
        yield server_id
    finally:
        stream.close()
        # The dump thread notices the closed socket at its next heartbeat, then unregisters.
        deadline = time.monotonic() + 30
        while server_id in registered_ids(mariadb) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert server_id not in registered_ids(mariadb)


@pytest.fixture
def unprivileged_user(mariadb: LocalMariaDB) -> Iterator[tuple[str, str]]:
    """A replication user without REPLICATION MASTER ADMIN, so it may not list replicas."""
    user, password = "ux_repl", "ux-repl-secret-1"
    mariadb.execute(
        f"CREATE USER '{user}'@'127.0.0.1' IDENTIFIED BY '{password}'",
        f"GRANT REPLICATION SLAVE, REPLICATION CLIENT, SELECT ON *.* TO '{user}'@'127.0.0.1'",
    )
    try:
        yield user, password
    finally:
        mariadb.execute(f"DROP USER '{user}'@'127.0.0.1'")


@pytest.fixture
def row_image_minimal_and_compression_on(mariadb: LocalMariaDB) -> Iterator[None]:
    saved = mariadb.execute("SELECT @@GLOBAL.binlog_row_image, @@GLOBAL.log_bin_compress")[0]
    mariadb.execute("SET GLOBAL binlog_row_image = 'MINIMAL'", "SET GLOBAL log_bin_compress = ON")
    try:
        yield
    finally:
        mariadb.execute(
            f"SET GLOBAL binlog_row_image = '{saved[0]}'", f"SET GLOBAL log_bin_compress = {saved[1]}"
        )


def test_a_registered_replica_with_our_server_id_is_a_collision(
    connections: LocalMariaDB, other_replica: int
) -> None:
    with pytest.raises(BinlogConfigError) as caught:
        BinlogHook(pipeline=PIPELINE).check_server_id()
    message = str(caught.value)
    assert f"server_id {other_replica} (derived from pipeline name '{PIPELINE}')" in message
    assert f"already used by the replica {OTHER_HOST}:{OTHER_PORT} (server_id {other_replica})" in message
    assert "Set the extra server_id of connection 'binlog_default' to a value in 1..4294967295" in message
    assert f"in use: {source_server_id(connections)}, {other_replica}" in message


def test_the_stream_is_not_opened_on_a_collision(connections: LocalMariaDB, other_replica: int) -> None:
    hook = BinlogHook(pipeline=PIPELINE)
    head = hook.server_state().head
    assert head is not None
    with pytest.raises(BinlogConfigError, match="already used by the replica"):
        pipeline_dump(hook, head, flavor="mariadb")
    assert registered_ids(connections) == [other_replica]


def test_test_connection_reports_the_collision(connections: LocalMariaDB, other_replica: int) -> None:
    ok, message = BinlogHook(pipeline=PIPELINE).test_connection()
    assert not ok
    (line,) = [line for line in lines_of(message) if line.startswith("server_id=")]
    assert line.startswith(f"server_id={other_replica}: WRONG: server_id {other_replica}")
    assert f"{OTHER_HOST}:{OTHER_PORT}" in line


def test_other_replicas_with_other_ids_are_no_collision(
    connections: LocalMariaDB, other_replica: int
) -> None:
    replicas = BinlogHook(pipeline="ux-elsewhere").check_server_id()
    assert replicas == [ReplicaHost(server_id=other_replica, host=OTHER_HOST, port=OTHER_PORT)]


def test_no_replicas_is_no_collision(connections: LocalMariaDB) -> None:
    assert BinlogHook(pipeline="ux-alone").check_server_id() == []


def test_the_sources_own_server_id_is_refused(
    connections: LocalMariaDB, monkeypatch: pytest.MonkeyPatch
) -> None:
    own = source_server_id(connections)
    monkeypatch.setenv("AIRFLOW_CONN_BINLOG_DEFAULT", f"{connections.uri()}?server_id={own}")
    hook = BinlogHook(pipeline="shop")
    with pytest.raises(BinlogConfigError) as caught:
        hook.check_server_id()
    assert (
        f"server_id {own} (set by the extra of connection 'binlog_default') is the source's own @@server_id"
        in str(caught.value)
    )
    ok, message = hook.test_connection()
    assert not ok
    assert f"server_id={own}: WRONG: server_id {own}" in message


def test_test_connection_lists_every_setting_with_its_verdict(connections: LocalMariaDB) -> None:
    ok, message = BinlogHook(pipeline="shop").test_connection()
    assert ok, message
    lines = lines_of(message)
    assert lines[0].startswith("mariadb ")
    assert lines[0].endswith(f"at 127.0.0.1:{connections.port}: usable as a CDC source")
    assert lines[1:8] == [
        "log_bin=ON: ok",
        "binlog_format=ROW: ok",
        "binlog_row_image=FULL: ok",
        "binlog_row_metadata=FULL: ok",
        "binlog_checksum=CRC32: ok",
        "log_bin_compress=OFF: ok",
        "gtid_strict_mode=ON: ok",
    ]
    assert lines[8].startswith("binlog retention=")
    assert lines[9] == (
        f"server_id={derive_server_id('shop')} (derived from pipeline name 'shop'; the source's is "
        f"{source_server_id(connections)}): ok, no registered replica uses it (registered: none)"
    )
    assert lines[10:12] == ["privilege=REPLICATION SLAVE ON *.*: ok", "privilege=BINLOG MONITOR ON *.*: ok"]
    file, pos = connections.execute("SHOW MASTER STATUS")[0][:2]
    assert lines[12].startswith("tls=preferred (plaintext): note: ")
    assert lines[13].startswith(f"head={file}:{pos} gtid=")
    assert len(lines) == 14
    assert connections.root_password not in message


def test_each_wrong_setting_gets_its_own_line(
    connections: LocalMariaDB, row_image_minimal_and_compression_on: None
) -> None:
    ok, message = BinlogHook(pipeline="shop").test_connection()
    assert not ok
    lines = lines_of(message)
    assert lines[0].endswith("NOT usable as a CDC source; fix the settings marked WRONG")
    assert "log_bin=ON: ok" in lines
    assert any(
        line.startswith("binlog_row_image=MINIMAL: WRONG: binlog_row_image is MINIMAL") for line in lines
    )
    assert any(line.startswith("log_bin_compress=ON: WRONG: log_bin_compress is ON") for line in lines)


def test_a_wrong_password_fails_without_showing_it(
    connections: LocalMariaDB, monkeypatch: pytest.MonkeyPatch
) -> None:
    wrong = "not-the-password-42"
    monkeypatch.setenv(
        "AIRFLOW_CONN_BINLOG_DEFAULT", f"mysqlbinlog://root:{wrong}@127.0.0.1:{connections.port}"
    )
    ok, message = BinlogHook().test_connection()
    assert not ok
    assert f"the source 127.0.0.1:{connections.port} refused user 'root'" in message
    assert "Check the login and password of connection 'binlog_default'" in message
    assert wrong not in message


def test_a_user_that_may_not_list_replicas_still_passes(
    connections: LocalMariaDB, unprivileged_user: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    user, password = unprivileged_user
    monkeypatch.setenv(
        "AIRFLOW_CONN_BINLOG_DEFAULT", f"mysqlbinlog://{user}:{password}@127.0.0.1:{connections.port}"
    )
    hook = BinlogHook(pipeline="shop")
    assert hook.check_server_id() is None
    ok, message = hook.test_connection()
    assert ok, message
    assert f"at 127.0.0.1:{connections.port}: usable as a CDC source" in lines_of(message)[0]
    (line,) = [line for line in lines_of(message) if line.startswith("server_id=")]
    assert "not checked against replicas: the user may not list them; grant REPLICATION MASTER ADMIN" in line
    assert line.endswith(f"to check: GRANT REPLICATION MASTER ADMIN ON *.* TO '{user}'@'127.0.0.1'")
    assert password not in message


def test_form_fields_become_pymysql_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    extra = {
        "server_id": 77,
        "flavor": "mariadb",
        "ssl_ca": "/etc/ca.pem",
        "ssl_cert": "/etc/client.pem",
        "ssl_key": "/etc/client.key",
        "ssl_key_password": "key-secret-123",
        "charset": "latin1",
        "connect_timeout": 3,
    }
    connection = {"conn_type": "mysqlbinlog", "host": "db", "port": 3307, "login": "repl", "extra": extra}
    monkeypatch.setenv("AIRFLOW_CONN_BINLOG_DEFAULT", json.dumps(connection))
    hook = BinlogHook()
    settings = hook.connection_settings()
    assert settings["ssl"] == {
        "ca": "/etc/ca.pem",
        "cert": "/etc/client.pem",
        "key": "/etc/client.key",
        "password": "key-secret-123",
    }
    assert (settings["charset"], settings["connect_timeout"], hook.server_id) == ("latin1", 3, 77)


def test_a_connection_saved_with_the_earlier_type_still_works(monkeypatch: pytest.MonkeyPatch) -> None:
    # Before ADR 0023 the type was ``mysql_binlog``; the hook reads the fields of any connection type.
    connection = {"conn_type": "mysql_binlog", "host": "db", "port": 3307, "extra": {"server_id": 78}}
    monkeypatch.setenv("AIRFLOW_CONN_BINLOG_DEFAULT", json.dumps(connection))
    hook = BinlogHook()
    settings = hook.connection_settings()
    assert (settings["host"], settings["port"], hook.server_id) == ("db", 3307, 78)


def test_empty_form_fields_mean_the_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    extra = {"server_id": None, "flavor": None, "ssl_ca": "", "charset": None, "connect_timeout": None}
    monkeypatch.setenv(
        "AIRFLOW_CONN_BINLOG_DEFAULT", json.dumps({"conn_type": "mysqlbinlog", "extra": extra})
    )
    hook = BinlogHook(pipeline="shop")
    settings = hook.connection_settings()
    assert "ssl" not in settings
    assert (settings["charset"], settings["connect_timeout"]) == ("utf8mb4", 10)
    assert hook.server_id == derive_server_id("shop")


def test_the_ssl_object_still_works_and_may_not_contradict_the_fields(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    legacy = {"conn_type": "mysqlbinlog", "extra": {"ssl": {"ca": "/etc/ca.pem", "check_hostname": False}}}
    monkeypatch.setenv("AIRFLOW_CONN_BINLOG_DEFAULT", json.dumps(legacy))
    settings = BinlogHook().connection_settings()
    assert (settings["ssl"], settings["tls_mode"]) == ({"ca": "/etc/ca.pem"}, "verify_ca")
    both = {
        "conn_type": "mysqlbinlog",
        "extra": {"ssl": {"password": "old-secret-1"}, "ssl_key_password": "new-secret-2"},
    }
    monkeypatch.setenv("AIRFLOW_CONN_BINLOG_DEFAULT", json.dumps(both))
    with pytest.raises(
        BinlogConfigError, match="extras ssl_key_password and ssl.password differ; set only one"
    ) as caught:
        BinlogHook().connection_settings()
    assert "secret" not in str(caught.value)


@pytest.mark.parametrize(
    ("extra", "error"),
    [
        ({"server_id": 0}, "extra server_id=0 must be in 1..4294967295"),
        ({"server_id": 2**32}, "extra server_id=4294967296 must be in 1..4294967295"),
        ({"connect_timeout": "soon"}, "extra connect_timeout='soon' is not an integer"),
        ({"ssl": "yes"}, "extra 'ssl' must be an object"),
    ],
)
def test_malformed_extras_are_named(
    monkeypatch: pytest.MonkeyPatch, extra: dict[str, object], error: str
) -> None:
    monkeypatch.setenv(
        "AIRFLOW_CONN_BINLOG_DEFAULT", json.dumps({"conn_type": "mysqlbinlog", "extra": extra})
    )
    with pytest.raises(BinlogConfigError, match=error):
        _ = BinlogHook().server_id
