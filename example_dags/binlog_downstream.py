"""Example downstream DAG: runs whenever the CDC pipeline commits changes of one target table.

Instead of polling the target, it is scheduled on the table's Airflow Asset, which ``binlog_cdc``'s commit
task (and a snapshot task that loads the table) updates with one event per window that changed it. The
event's ``extra`` says which window, how many row changes and which binlog range (docs/assets.md).

Settings (environment variables read when the file is parsed):

* ``BINLOG_DOWNSTREAM_TABLE`` the source table ``db.table`` whose target table it follows, default
  ``shop.orders``
* ``BINLOG_CDC_TARGET`` the target root of the pipeline, default ``/tmp/binlog_cdc/target`` (as ``binlog_cdc``)

For time-based freshness ("the target holds everything committed before T") use
``BinlogConsumerLagSensor(fresh_until=...)`` instead: an Asset event says a table changed, not how far
behind the source it is.
"""

from __future__ import annotations

import os
from typing import Any

import pendulum
from airflow.sdk import DAG, Asset, task

from airflow_provider_binlog.assets import table_asset_uri

_TABLE = os.environ.get("BINLOG_DOWNSTREAM_TABLE", "shop.orders")
_TARGET = os.environ.get("BINLOG_CDC_TARGET", "/tmp/binlog_cdc/target")

# [START howto_binlog_downstream_asset]
orders_table = Asset(table_asset_uri(_TARGET, _TABLE))

with DAG(
    dag_id="binlog_downstream",
    description="Runs after each commit that changed one target table",
    schedule=[orders_table],
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["cdc", "binlog", "asset"],
) as dag:

    @task(inlets=[orders_table])
    def report_changes(**context: Any) -> dict[str, Any]:
        """Log what the commits that triggered this run changed, and the table's live rows now."""
        from airflow_provider_binlog.target import read_table

        events = context["inlet_events"][orders_table]  # the table's Asset events, oldest first
        latest = dict(events[-1].extra) if len(events) else {}
        live = read_table(_TARGET, _TABLE)
        print(
            f"{_TABLE}: {live.num_rows} live rows; last change: {latest.get('kind')} {latest.get('seq')} of "
            f"{latest.get('pipeline')}, {latest.get('rows')} row changes up to {latest.get('end')}"
        )
        return {"live_rows": live.num_rows, "latest": latest}

    report_changes()
# [END howto_binlog_downstream_asset]
