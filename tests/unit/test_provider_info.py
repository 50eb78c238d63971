from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import airflow
import jsonschema
import pytest

from airflow_provider_binlog import __version__
from airflow_provider_binlog.get_provider_info import get_provider_info
from airflow_provider_binlog.hooks.binlog import BinlogHook
from airflow_provider_binlog.source.server import derive_server_id

AIRFLOW_PACKAGE = Path(airflow.__file__).parent


def airflow_schema(name: str) -> dict[str, Any]:
    return json.loads((AIRFLOW_PACKAGE / name).read_text())


def binlog_connection_type() -> dict[str, Any]:
    (entry,) = get_provider_info()["connection-types"]
    return entry


def test_provider_info_names_what_the_package_ships() -> None:
    info = get_provider_info()
    assert info["package-name"] == "airflow-provider-binlog"
    assert info["versions"] == [__version__]
    entry = binlog_connection_type()
    assert entry["connection-type"] == "mysqlbinlog" == BinlogHook.conn_type
    assert entry["hook-class-name"] == "airflow_provider_binlog.hooks.binlog.BinlogHook"
    assert entry["hook-name"] == BinlogHook.hook_name
    modules = [
        m
        for kind in ("hooks", "operators", "sensors", "triggers")
        for g in info[kind]
        for m in g["python-modules"]
    ]
    for module in modules:
        __import__(module)
    import airflow_provider_binlog.operators as operators
    import airflow_provider_binlog.sensors as sensors
    import airflow_provider_binlog.triggers as triggers

    for package in (operators, sensors, triggers):
        for name in package.__all__:
            assert getattr(package, name).__module__ in modules, name


def test_the_connection_type_is_a_uri_scheme_airflow_takes_without_a_warning(
    capfd: pytest.CaptureFixture[str],
) -> None:
    # A task caches every connection it fetches by its URI (airflow.sdk.execution_time.context), and
    # Connection.get_uri warns for a type with "_"; a "-" would come back from the URI as "_".
    from airflow.models.connection import Connection

    conn = Connection(conn_id="binlog_default", conn_type=BinlogHook.conn_type, host="db", port=3307)
    uri = conn.get_uri()
    out, err = capfd.readouterr()  # Airflow logs through structlog, which pytest's caplog does not see
    assert "shall not contain" not in out + err
    assert Connection(conn_id="binlog_default", uri=uri).conn_type == BinlogHook.conn_type


def test_provider_info_validates_against_airflows_runtime_schema() -> None:
    # ProvidersManager validates every provider's info against this schema at discovery.
    jsonschema.validate(get_provider_info(), airflow_schema("provider_info.schema.json"))


def test_connection_type_validates_against_the_provider_yaml_schema() -> None:
    # The runtime schema accepts any extra keys; the provider.yaml schema spells out conn-fields and
    # ui-field-behaviour (additionalProperties: false), so a misspelt key fails here.
    schema = airflow_schema("provider.yaml.schema.json")
    connection_types = {**schema["properties"]["connection-types"], "definitions": schema["definitions"]}
    jsonschema.validate(get_provider_info()["connection-types"], connection_types)


def test_misspelt_form_keys_are_rejected_by_the_schema() -> None:
    schema = airflow_schema("provider.yaml.schema.json")
    entry = binlog_connection_type()
    entry["conn-fields"]["server_id"]["lable"] = "typo"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate([entry], schema["properties"]["connection-types"])


def test_conn_fields_declare_every_extra_the_hook_reads() -> None:
    fields = binlog_connection_type()["conn-fields"]
    assert sorted(fields) == sorted(
        [
            "server_id",
            "flavor",
            "ssl_ca",
            "ssl_cert",
            "ssl_key",
            "ssl_key_password",
            "tls",
            "charset",
            "connect_timeout",
            "read_timeout",
            "heartbeat_period",
        ]
    )
    server_id = fields["server_id"]["schema"]
    assert server_id["type"] == ["integer", "null"]
    assert (server_id["minimum"], server_id["maximum"]) == (1, 4294967295)
    assert "[1073741824, 2147483647)" in fields["server_id"]["description"]
    assert fields["flavor"]["schema"]["enum"] == [None, "mysql", "mariadb"]
    assert fields["connect_timeout"]["schema"]["default"] == 10
    assert fields["read_timeout"]["schema"]["default"] == 60
    heartbeat = fields["heartbeat_period"]["schema"]
    assert (heartbeat["default"], heartbeat["minimum"], heartbeat["maximum"]) == (15, 1, 600)
    assert fields["charset"]["schema"]["default"] == "utf8mb4"


@pytest.mark.parametrize("pipeline", ["default", "shop", "orders-eu", "x" * 200])
def test_derived_server_ids_lie_in_the_documented_range(pipeline: str) -> None:
    assert 2**30 <= derive_server_id(pipeline) < 2**31 - 1


def test_only_the_key_password_is_sensitive() -> None:
    fields = binlog_connection_type()["conn-fields"]
    sensitive = [name for name, field in fields.items() if field["schema"].get("format") == "password"]
    assert sensitive == ["ssl_key_password"]


def test_standard_fields_are_hidden_and_relabelled_the_same_way_in_both_places() -> None:
    behaviour = binlog_connection_type()["ui-field-behaviour"]
    assert behaviour["hidden-fields"] == ["schema"]
    assert behaviour["relabeling"] == {"login": "Replication user"}
    from_hook = BinlogHook.get_ui_field_behaviour()
    assert from_hook == {key.replace("-", "_"): value for key, value in behaviour.items()}
    jsonschema.validate(from_hook, airflow_schema("customized_form_field_behaviours.schema.json"))


def test_airflow_serves_the_form_to_the_ui() -> None:
    from airflow.api_fastapi.core_api.services.ui.connections import HookMetaService
    from airflow.providers_manager import ProvidersManager

    (meta,) = [m for m in HookMetaService.hook_meta_data() if m.connection_type == "mysqlbinlog"]
    served = meta.model_dump()
    assert served["hook_name"] == "MySQL/MariaDB binlog"
    assert served["standard_fields"]["url_schema"]["hidden"]
    assert served["standard_fields"]["login"]["title"] == "Replication user"
    server_id = served["extra_fields"]["server_id"]["schema"]
    assert (server_id["title"], server_id["maximum"]) == ("Replica server_id", 4294967295)
    widgets = ProvidersManager().connection_form_widgets
    assert widgets["extra__mysqlbinlog__ssl_key_password"].is_sensitive
    assert not widgets["extra__mysqlbinlog__ssl_key"].is_sensitive


def test_airflow_lists_the_provider() -> None:
    airflow_cli = Path(sys.executable).parent / "airflow"
    listing = subprocess.run(
        [str(airflow_cli), "providers", "list", "--output", "plain"],
        capture_output=True,
        text=True,
        check=True,
        env=os.environ.copy(),
    ).stdout
    assert "airflow-provider-binlog" in listing
    assert __version__ in listing
