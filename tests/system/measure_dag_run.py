"""Run one ``binlog_cdc`` DAG run with ``dag.test()`` in this process and report the extract's peak RSS.

Started by ``test_guarantees_large.py`` as a child process, with the parent test session's environment
(``AIRFLOW_HOME``, the sqlite metadata DB, the ``AIRFLOW_CONN_*`` connections), so the run lands in the
same Airflow database and pipeline state as the parent's own runs. The extract task runs in this process
(``dag.test()`` runs tasks in-process; Spark runs in its own JVM), so the kernel's high-water mark of
this process's resident set is the extract's peak: it is reset when the task starts
(``/proc/self/clear_refs`` = 5) and read from ``/proc/self/status`` (``VmHWM``) when it ends.

Usage: ``python measure_dag_run.py '<run conf json>' <logical date ISO> <run after ISO> <report.json>``
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pendulum


def status_kib(field: str) -> int:
    """Return a ``/proc/self/status`` memory field (``VmRSS``, ``VmHWM``) in KiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise KeyError(field)


def main(conf_json: str, logical_date: str, run_after: str, report_path: str) -> None:
    from conftest import apply_settings, load_example_dag

    conf = json.loads(conf_json)
    dag = load_example_dag()
    apply_settings(dag, conf)
    extract = dag.get_task("extract")
    report: dict[str, Any] = {}

    def extract_starts(context: Any) -> None:
        report["rss_at_start_kib"] = status_kib("VmRSS")
        Path("/proc/self/clear_refs").write_text("5")  # high-water mark := current RSS
        report["hwm_after_reset_kib"] = status_kib("VmHWM")

    def extract_ends(context: Any) -> None:
        report["extract_peak_kib"] = status_kib("VmHWM")
        report["rss_at_end_kib"] = status_kib("VmRSS")

    extract.on_execute_callback = [extract_starts]
    extract.on_success_callback = [extract_ends]
    extract.on_failure_callback = [extract_ends]
    run = dag.test(
        logical_date=pendulum.parse(logical_date),
        run_after=pendulum.parse(run_after),
        run_conf={k: v for k, v in conf.items() if k in dag.params},
    )
    report["state"] = str(run.state)
    report["run_id"] = run.run_id
    report["tasks"] = {ti.task_id: str(ti.state) for ti in run.get_task_instances()}
    Path(report_path).write_text(json.dumps(report))


if __name__ == "__main__":
    main(*sys.argv[1:5])
