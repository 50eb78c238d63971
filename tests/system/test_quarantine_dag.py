"""Quarantine through the example DAG (issue 29): one table's refused value stops that table alone, the run
ends failed naming it, the other tables flow, and the table heals by itself once the value is fixed."""

from __future__ import annotations

import random
import threading
import time
import warnings
from typing import Any

import pytest
from conftest import REPO, DagRunner, Pipeline, load_module, stored_state, task_states, xcom

pytestmark = pytest.mark.system

TABLES = [f"t{i}" for i in range(10)]
BAD = "t7"


class Writer:
    """Random small transactions over every table from a thread of its own (ASCII text only)."""

    def __init__(self, pipeline: Pipeline, tables: list[str]) -> None:
        self.pipeline, self.tables = pipeline, tables
        self.stop = threading.Event()
        self.transactions = 0
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Writer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(timeout=60)
        assert self.error is None, self.error
        assert self.transactions > 0

    def _run(self) -> None:
        rng = random.Random(29)
        conn = self.pipeline.connect()
        try:
            while not self.stop.is_set():
                table = rng.choice(self.tables)
                with conn.cursor() as cur:
                    cur.execute("BEGIN")
                    cur.execute(  # rows 1..5 are left to the test
                        f"UPDATE {table} SET n = n + 1, v = %s WHERE id = %s",
                        (f"w{rng.randrange(999)}", rng.randrange(6, 31)),
                    )
                    new = 1000 + self.transactions
                    cur.execute(f"INSERT INTO {table} VALUES (%s, 'new', 0)", (new,))
                    if rng.random() < 0.3:
                        cur.execute(f"DELETE FROM {table} WHERE id = %s", (new,))
                    cur.execute("COMMIT")
                self.transactions += 1
                time.sleep(0.01)
        except BaseException as err:  # reported by __exit__
            self.error = err
        finally:
            conn.close()


def create_tables(pipeline: Pipeline, tables: list[str]) -> None:
    for table in tables:
        pipeline.sql(
            f"CREATE TABLE {table} (id INT PRIMARY KEY, v VARCHAR(20) CHARACTER SET cp1250, n INT)",
            f"INSERT INTO {table} SELECT seq, CONCAT('r', seq), seq FROM seq_1_to_30",
        )


def quarantine_of(pipeline: Pipeline, table: str) -> dict[str, Any] | None:
    from airflow_provider_binlog.contract.delta import open_table, quarantine_of
    from airflow_provider_binlog.target import table_uri

    dt = open_table(table_uri(pipeline.target, f"{pipeline.db}.{table}"))
    assert dt is not None
    return quarantine_of(dt)


def run_quarantined(pipeline: Pipeline) -> Any:
    """Run the DAG once; every task but the final quarantine check must succeed."""
    run = pipeline.runner.run()
    states = task_states(run)
    assert states.pop("quarantine") == "failed", states
    assert set(states.values()) == {"success"}, states
    return run


@pytest.mark.slow  # five DAG runs with Spark snapshots and merges
def test_one_refused_value_quarantines_one_table_of_ten_which_heals_once_it_is_fixed(
    connections: Any, scratch_db: str, pipeline_dirs: dict[str, str], capfd: pytest.CaptureFixture[str]
) -> None:
    from airflow_provider_binlog.exceptions import QuarantinedTableError, QuarantinedTableWarning
    from airflow_provider_binlog.target import read_table

    shop = Pipeline(connections, scratch_db, pipeline_dirs)
    create_tables(shop, TABLES)
    shop.run_window()  # the initial snapshot
    assert shop.mismatches(*TABLES) == []

    # Under concurrent writes a value the extractor refuses lands in one table (cp1250 has no 0x81).
    with Writer(shop, TABLES):
        time.sleep(1)
        shop.sql(f"UPDATE {BAD} SET v = X'4181' WHERE id = 5")
        time.sleep(1)
        run_quarantined(shop)
    log = capfd.readouterr().out
    assert "TablesQuarantinedError" in log
    report = log[log.index("1 table(s) quarantined") :]
    for part in (f"{scratch_db}.{BAD}", "0x81", "cp1250", "GTID 0-1-", "binlog_resnapshot"):
        assert part in report, part
    healthy = [t for t in TABLES if t != BAD]

    # The next (quiet) run catches the others up; its snapshot task tries the table and fails the same way.
    run_quarantined(shop)
    assert shop.mismatches(*healthy) == []
    state = stored_state(shop.name)
    assert state is not None
    [entry] = state["resnapshots_needed"]
    assert (entry["table"], entry["cause"], entry["attempts"], entry["retry_due"]) == (
        f"{scratch_db}.{BAD}",
        "quarantine",
        1,
        False,
    )
    assert entry["probe"] is not None
    record = quarantine_of(shop, BAD)
    assert record is not None
    assert record["since"] == f"{entry['since']['file']}:{entry['since']['pos']}"
    with pytest.warns(QuarantinedTableWarning, match=f"{BAD} is quarantined since"):
        read_table(shop.target, f"{scratch_db}.{BAD}")
    with pytest.raises(QuarantinedTableError):
        read_table(shop.target, f"{scratch_db}.{BAD}", allow_quarantined=False)

    # Nothing changed at the source: the snapshot task only probes the refused chunk, no snapshot is taken.
    snapshots = len(state["snapshots"])
    run_quarantined(shop)
    state = stored_state(shop.name)
    assert state is not None
    assert len(state["snapshots"]) == snapshots
    assert "stays quarantined" in capfd.readouterr().out

    # Fixed at the source: the next run re-snapshots the table alone and it leaves quarantine.
    shop.sql(f"UPDATE {BAD} SET v = 'fixed' WHERE id = 5")
    shop.run_window()
    assert shop.mismatches(*TABLES) == []
    state = stored_state(shop.name)
    assert state is not None
    assert state["resnapshots_needed"] == []
    assert (state["snapshots"][-1]["reason"], state["snapshots"][-1]["tables"]) == (
        "quarantine",
        [f"{scratch_db}.{BAD}"],
    )
    assert quarantine_of(shop, BAD) is None
    with warnings.catch_warnings():
        warnings.simplefilter("error", QuarantinedTableWarning)
        read_table(shop.target, f"{scratch_db}.{BAD}")


@pytest.mark.slow  # four DAG runs with Spark snapshots and merges
def test_a_schema_change_whose_resnapshot_fails_once_quarantines_the_table_until_it_reads(
    connections: Any, scratch_db: str, pipeline_dirs: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    shop = Pipeline(connections, scratch_db, pipeline_dirs)
    create_tables(shop, ["s", "f"])
    shop.run_window()

    # A value the snapshot refuses, written without the binlog (so only a snapshot meets it), then a schema change
    # the binlog cannot follow: the table waits for a re-snapshot, which fails.
    shop.sql(
        "SET SESSION sql_log_bin = 0", "UPDATE s SET v = X'81' WHERE id = 2", "SET SESSION sql_log_bin = 1"
    )
    shop.sql("ALTER TABLE s ADD COLUMN c VARCHAR(5) NOT NULL DEFAULT 'x'", "UPDATE f SET n = -1 WHERE id = 1")
    shop.run_window()  # the wait is recorded; not a quarantine yet
    assert shop.mismatches("f") == []

    shop.sql("UPDATE f SET n = -2 WHERE id = 2", "UPDATE s SET n = -2 WHERE id = 3")
    run_quarantined(shop)
    assert shop.mismatches("f") == []
    state = stored_state(shop.name)
    assert state is not None
    [entry] = state["resnapshots_needed"]
    assert (entry["cause"], entry["attempts"]) == ("quarantine", 1)
    assert entry["statement"].startswith("ALTER TABLE s ADD COLUMN c")  # the wait it came from

    # Validation compares the flowing table and lists the quarantined one instead of waiting on it.
    monkeypatch.setenv("BINLOG_VALIDATE_RECHECK_TIMEOUT_SECONDS", "3")
    validate = load_module(REPO / "example_dags" / "binlog_validate.py").dag
    conf = {"pipeline": shop.name, "target": pipeline_dirs["target"], "on_mismatch": "fail"}
    run = DagRunner(validate, conf).run()
    assert run.state == "success", task_states(run)
    report = xcom(run, "validate")
    assert (list(report["tables"]), report["mismatched"]) == ([f"{scratch_db}.f"], [])
    assert (
        report["quarantined"][f"{scratch_db}.s"]["since"]
        == f"{entry['since']['file']}:{entry['since']['pos']}"
    )

    shop.sql("UPDATE s SET v = 'ok' WHERE id = 2")
    shop.run_window()
    assert shop.mismatches("s", "f") == []
    state = stored_state(shop.name)
    assert state is not None
    assert state["resnapshots_needed"] == []


@pytest.mark.slow  # four DAG runs with Spark snapshots and merges
def test_a_column_named_like_the_change_metadata_quarantines_its_table_until_it_is_renamed(
    connections: Any,
    scratch_db: str,
    pipeline_dirs: dict[str, str],
    least_privileged: None,
    capfd: pytest.CaptureFixture[str],
) -> None:
    """A table a user with CREATE can make, ``(id, _binlog_op, _BINLOG_Before)``, whose staged rows would hold two
    ``_binlog_op`` fields: the snapshot and the windows refuse it alone, as the least-privileged user, and it
    heals once the columns are renamed."""
    shop = Pipeline(connections, scratch_db, pipeline_dirs)
    create_tables(shop, ["a"])
    evil = "`evil`"
    shop.sql(
        f"CREATE TABLE {evil} (id INT PRIMARY KEY, `_binlog_op` VARCHAR(5), `_BINLOG_Before` INT)",
        f"INSERT INTO {evil} VALUES (1, 'd', 1), (2, 'c', 2)",
    )
    run_quarantined(shop)  # the snapshot loads a and refuses evil
    assert shop.mismatches("a") == []
    report = capfd.readouterr().out
    report = report[report.index("1 table(s) quarantined") :]
    for part in (f"{scratch_db}.evil", "'_binlog_op'", "reserves", "RENAME COLUMN"):
        assert part in report, part

    shop.sql(f"INSERT INTO {evil} VALUES (3, 'u', 3)", "UPDATE a SET n = -1 WHERE id = 1")
    run_quarantined(shop)  # the window stages a, and leaves evil's rows to the re-snapshot
    assert shop.mismatches("a") == []

    shop.sql(
        f"ALTER TABLE {evil} RENAME COLUMN `_binlog_op` TO op, RENAME COLUMN `_BINLOG_Before` TO before_v",
        f"UPDATE {evil} SET before_v = 20 WHERE id = 2",
        "UPDATE a SET n = -2 WHERE id = 2",
    )
    shop.run_window()  # the probe reads evil now: it is re-snapshotted alone and leaves quarantine
    assert shop.mismatches("a", "evil") == []
    assert quarantine_of(shop, "evil") is None
