"""Two pipelines in one DAG, each one ``BinlogPipeline`` task group (``tests/system/test_task_group_dag.py``).

``BINLOG_TWO_PIPELINES`` holds the pipelines' settings as a JSON list of ``PipelineConfig`` keywords, read when
the file is parsed (ADR 0034: never from a run's configuration).
"""

from __future__ import annotations

import json
import os

import pendulum
from airflow.sdk import DAG

from airflow_provider_binlog.task_group import BinlogPipeline

_DEFAULT = [
    {
        "pipeline": name,
        "tables": f"{name}.*",
        "staging": f"/tmp/two/{name}/staging",
        "target": f"/tmp/two/{name}/target",
    }
    for name in ("shop", "crm")
]
PIPELINES = json.loads(os.environ.get("BINLOG_TWO_PIPELINES") or "null") or _DEFAULT

with DAG("two_pipelines", schedule=None, start_date=pendulum.datetime(2026, 1, 1), max_active_runs=1) as dag:
    for settings in PIPELINES:
        BinlogPipeline(**settings)
