"""The re-snapshot remedy that error messages of every layer name: a trigger configuration to paste."""

from __future__ import annotations

import json
import re

from airflow_provider_binlog.contract.remedies import resnapshot_remedy


def _conf(message: str) -> dict[str, str]:
    found = re.search(r"DAG with (\{.*?\}) \(", message)
    assert found is not None, message
    return json.loads(found.group(1))


def test_the_remedy_names_the_pipeline_and_a_configuration_the_resnapshot_dag_takes() -> None:
    message = resnapshot_remedy("shop_cdc", "shop.orders")
    assert message.startswith("trigger pipeline 'shop_cdc''s binlog_resnapshot DAG with ")
    assert _conf(message) == {"tables": "shop.orders", "mode": "requested"}  # no "pipeline": fixed at parse
    assert 'BinlogSnapshotOperator(mode="requested")' in message


def test_several_tables_are_listed_and_hostile_names_stay_valid_json() -> None:
    assert _conf(resnapshot_remedy("p", ["a.t1", "b.t2"], "purged")) == {
        "tables": "a.t1,b.t2",
        "mode": "purged",
    }
    hostile = 'shop.sp"ecial\\`[s]'
    assert _conf(resnapshot_remedy("p", hostile)) == {"tables": hostile, "mode": "requested"}
