from __future__ import annotations

from collections.abc import Iterator

import pytest

from airflow_provider_binlog.exceptions import BinlogConfigError, SourceUnreachableError
from airflow_provider_binlog.hooks.binlog import BinlogHook
from airflow_provider_binlog.source.server import derive_server_id
from airflow_provider_binlog.testing.mariadb import CDC_SETTINGS, LocalMariaDB, free_port

pytestmark = pytest.mark.integration


@pytest.fixture
def hook(connections: LocalMariaDB) -> BinlogHook:
    return BinlogHook(pipeline="shop")


@pytest.fixture
def global_setting(mariadb: LocalMariaDB) -> Iterator[object]:
    """Change GLOBAL server variables for one test and restore them afterwards."""
    saved: dict[str, object] = {}

    def change(name: str, value: str) -> None:
        saved.setdefault(name, mariadb.execute(f"SELECT @@GLOBAL.{name}")[0][0])
        mariadb.execute(f"SET GLOBAL {name} = '{value}'")

    yield change
    for name, value in saved.items():
        mariadb.execute(
            f"SET GLOBAL {name} = {value}" if isinstance(value, int) else f"SET GLOBAL {name} = '{value}'"
        )


def test_server_state_of_a_good_source(hook: BinlogHook, mariadb: LocalMariaDB) -> None:
    state = hook.validate_source()
    file, pos = mariadb.execute("SHOW MASTER STATUS")[0][:2]
    assert state.flavor == "mariadb"
    assert state.head is not None
    assert (state.head.file, state.head.pos) == (file, pos)
    assert state.head.gtid_set == mariadb.execute(f"SELECT BINLOG_GTID_POS('{file}', {pos})")[0][0]
    assert state.binlog_files[-1][0] == file
    assert state.server_identity == f"mariadb:1@{state.variables['hostname']}:{mariadb.port}"


def test_every_wrong_setting_is_listed_in_one_error(hook: BinlogHook, global_setting) -> None:
    global_setting("binlog_format", "STATEMENT")
    global_setting("binlog_row_image", "MINIMAL")
    global_setting("binlog_row_metadata", "MINIMAL")
    with pytest.raises(BinlogConfigError) as caught:
        hook.validate_source()
    message = str(caught.value)
    assert "binlog_format is STATEMENT" in message
    assert "binlog_row_image is MINIMAL" in message
    assert "binlog_row_metadata is MINIMAL" in message
    assert "allow_minimal_row_metadata=True" in message


def test_mixed_format_is_refused(hook: BinlogHook, global_setting) -> None:
    global_setting("binlog_format", "MIXED")
    with pytest.raises(BinlogConfigError, match="binlog_format is MIXED: row changes are only in ROW format"):
        hook.validate_source()


def test_minimal_metadata_can_be_accepted_explicitly(hook: BinlogHook, global_setting) -> None:
    global_setting("binlog_row_metadata", "MINIMAL")
    assert hook.validate_source(allow_minimal_row_metadata=True).variables["binlog_row_metadata"] == "MINIMAL"


def test_binlog_off_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    options = {k: v for k, v in CDC_SETTINGS.items() if k != "log-bin"}
    with LocalMariaDB(options=options) as server:
        monkeypatch.setenv("AIRFLOW_CONN_BINLOG_DEFAULT", server.uri())
        with pytest.raises(BinlogConfigError, match="log_bin is OFF: start the server with --log-bin"):
            BinlogHook().validate_source()
        ok, message = BinlogHook().test_connection()
        assert not ok
        assert "log_bin is OFF" in message


def test_wrong_password_names_the_connection(mariadb: LocalMariaDB, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_BINLOG_DEFAULT", f"mysql://root:wrong@127.0.0.1:{mariadb.port}")
    with pytest.raises(
        BinlogConfigError, match="refused user 'root'.*Check the login and password of connection"
    ):
        BinlogHook().server_state()


def test_unreachable_host_is_retryable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_BINLOG_DEFAULT", f"mysql://root:x@127.0.0.1:{free_port()}")
    with pytest.raises(SourceUnreachableError, match="cannot reach the source 127.0.0.1"):
        BinlogHook().server_state()


def test_test_connection_reports_the_checked_settings(hook: BinlogHook) -> None:
    ok, message = hook.test_connection()
    assert ok, message
    assert "binlog_format=ROW" in message
    assert "binlog_row_metadata=FULL" in message


def test_table_selection_resolves_patterns(hook: BinlogHook, mariadb: LocalMariaDB, source_db: str) -> None:
    mariadb.execute(
        f"CREATE TABLE `{source_db}`.a (id INT PRIMARY KEY)",
        f"CREATE TABLE `{source_db}`.b (x INT, y INT, PRIMARY KEY (y, x))",
        f"CREATE TABLE `{source_db}`.c (v INT)",
    )
    tables = hook.describe_tables([f"{source_db}.*"])
    assert sorted(tables) == [f"{source_db}.a", f"{source_db}.b", f"{source_db}.c"]
    assert tables[f"{source_db}.b"].primary_key == ["y", "x"]
    assert tables[f"{source_db}.c"].primary_key == []


def test_missing_table_is_a_clear_error(hook: BinlogHook, source_db: str) -> None:
    with pytest.raises(BinlogConfigError, match=f"'{source_db}.nope' matches no table on the source"):
        hook.describe_tables([f"{source_db}.nope"])


def test_server_id_comes_from_extras_or_pipeline(
    mariadb: LocalMariaDB, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_BINLOG_DEFAULT", mariadb.uri())
    assert BinlogHook(pipeline="a").server_id == derive_server_id("a") != derive_server_id("b")
    monkeypatch.setenv("AIRFLOW_CONN_BINLOG_DEFAULT", mariadb.uri() + "?server_id=77")
    assert BinlogHook(pipeline="a").server_id == 77
    monkeypatch.setenv("AIRFLOW_CONN_BINLOG_DEFAULT", mariadb.uri() + "?server_id=abc")
    with pytest.raises(BinlogConfigError, match="server_id='abc' is not an integer"):
        _ = BinlogHook().server_id


def test_compressed_binlog_is_refused(hook: BinlogHook, global_setting) -> None:
    global_setting("log_bin_compress", "ON")
    with pytest.raises(BinlogConfigError, match="log_bin_compress is ON: MariaDB's compressed binlog events"):
        hook.validate_source()
