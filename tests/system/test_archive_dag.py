"""A pipeline with a binlog archive does not notice that the source purged binlogs it had not read (issue 34).

The example DAGs ``binlog_cdc`` (``BINLOG_CDC_ARCHIVE`` set) and ``binlog_archive`` on the shared MariaDB, as the
least-privileged user the connection Test recommends, real Spark: the pipeline snapshots its tables, the archive
DAG copies the binlog while writes go on and files rotate, then the source purges every file but its active one,
holding changes the pipeline has not read. The next window reads them from the archive (the purge-risk check counts
the archived files as retained) and the target equals the source row by row; without the archive the same run
fails as purged.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import REPO, DagRunner, Pipeline, load_example_dag, load_module, task_states

pytestmark = pytest.mark.system


def test_a_pipeline_with_an_archive_reads_what_the_source_purged_from_it(
    least_privileged: None, connections: Any, scratch_db: str, pipeline_dirs: dict[str, str], tmp_path: Path
) -> None:
    archive = str(tmp_path / "archive")
    pipeline = Pipeline(connections, scratch_db, pipeline_dirs)
    pipeline.conf["archive"] = archive
    pipeline.dag = load_example_dag({"BINLOG_CDC_ARCHIVE": archive})
    pipeline.runner = DagRunner(pipeline.dag, pipeline.conf)
    archiver = load_module(REPO / "example_dags" / "binlog_archive.py", {"BINLOG_CDC_ARCHIVE": archive}).dag
    pipeline.sql(
        "CREATE TABLE orders (id INT PRIMARY KEY, status VARCHAR(20) NOT NULL, note TEXT)",
        "INSERT INTO orders VALUES (1, 'new', 'first'), (2, 'new', NULL)",
    )
    pipeline.run_window()  # the snapshot
    read_up_to = pipeline.head()
    for round_ in range(3):  # writes the pipeline does not read yet, over several binlog files
        pipeline.transaction(
            *(f"INSERT INTO orders VALUES ({10 * round_ + i + 3}, 'new', 'r{round_}')" for i in range(5)),
            f"UPDATE orders SET status = 'paid', note = CONCAT(note, ' é') WHERE id = {10 * round_ + 3}",
        )
        pipeline.transaction(
            f"DELETE FROM orders WHERE id = {10 * round_ + 4}",
            "UPDATE orders SET id = id + 1000 WHERE id = 2",
        )
        pipeline.sql("FLUSH BINARY LOGS")
        assert archiver.test().state == "success"

    oldest = connections.purge_binlogs_to(str(pipeline.sql("SHOW MASTER STATUS")[0][0]))
    pipeline.transaction("INSERT INTO orders VALUES (500, 'after the purge', NULL)")

    assert oldest > read_up_to["file"]
    without = DagRunner(load_example_dag(), {k: v for k, v in pipeline.conf.items() if k != "archive"}).run()
    assert task_states(without)["purge_risk"] == "failed"  # no archive: the binlog it needs is gone
    window = pipeline.run_window()
    assert window["start"]["file"] < oldest <= window["end"]["file"]
    assert pipeline.mismatches("orders") == []
