"""Foreign-key cascades the source does not log, applied by the merge: real MariaDB, real Spark.

One schema for the module (built once): a parent ``p`` and children acting on its deletes and key updates
with each referential action, a grandchild of a child whose primary key holds the cascaded column, a
self-referencing tree, and a child whose parent is not selected. Windows are extracted with the
extractor's own code (:func:`cascading_keys`, :func:`extract_window`) and merged in-process; each test
ends with target == source row by row for every table.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pymysql
import pytest

pytest.importorskip("pyspark")
pytest.importorskip("deltalake")


from airflow_provider_binlog.contract.positions import BinlogPosition  # noqa: E402
from airflow_provider_binlog.extract.plan import cascading_keys, table_targets  # noqa: E402
from airflow_provider_binlog.extract.window import extract_window  # noqa: E402
from airflow_provider_binlog.hooks.binlog import BinlogHook  # noqa: E402
from airflow_provider_binlog.jobs.merge.cascades import CASCADES_DIR  # noqa: E402
from airflow_provider_binlog.jobs.merge.job import merge_window  # noqa: E402
from airflow_provider_binlog.pipeline.ledger import Window, now_iso  # noqa: E402
from airflow_provider_binlog.pipeline.staging import window_path  # noqa: E402
from airflow_provider_binlog.testing.mariadb import LocalMariaDB  # noqa: E402
from airflow_provider_binlog.verify import compare_table  # noqa: E402

pytestmark = pytest.mark.integration

TABLES = ("p", "c_cascade", "c_null", "g", "tree")
SCHEMA = (
    "CREATE TABLE {db}.p (id INT PRIMARY KEY, code VARCHAR(12) NOT NULL UNIQUE, v INT)",
    # ON DELETE CASCADE / ON UPDATE CASCADE, the cascaded column is part of the child's primary key
    "CREATE TABLE {db}.c_cascade (p_id INT NOT NULL, n INT NOT NULL, v INT, PRIMARY KEY (p_id, n),"
    " FOREIGN KEY (p_id) REFERENCES {db}.p (id) ON DELETE CASCADE ON UPDATE CASCADE)",
    # two keys on one parent: ON DELETE/UPDATE SET NULL on its primary key, and ON UPDATE CASCADE /
    # ON DELETE SET NULL on a UNIQUE non-key column (whose old value the extract stages)
    "CREATE TABLE {db}.c_null (id INT PRIMARY KEY, p_id INT NULL, p_code VARCHAR(12) NULL, v INT,"
    " FOREIGN KEY (p_id) REFERENCES {db}.p (id) ON DELETE SET NULL ON UPDATE SET NULL,"
    " FOREIGN KEY (p_code) REFERENCES {db}.p (code) ON DELETE SET NULL ON UPDATE CASCADE)",
    # grandchild: a composite key on the child's primary key, which moves with the parent's key
    "CREATE TABLE {db}.g (id INT PRIMARY KEY, c_pid INT NOT NULL, c_n INT NOT NULL, v INT,"
    " FOREIGN KEY (c_pid, c_n) REFERENCES {db}.c_cascade (p_id, n) ON DELETE CASCADE ON UPDATE CASCADE)",
    # self-referencing: deleting a node deletes its subtree
    "CREATE TABLE {db}.tree (id INT PRIMARY KEY, parent_id INT NULL, v INT,"
    " FOREIGN KEY (parent_id) REFERENCES {db}.tree (id) ON DELETE CASCADE)",
    # a child whose parent is not selected
    "CREATE TABLE {db}.other (id INT PRIMARY KEY)",
    "CREATE TABLE {db}.orphan (id INT PRIMARY KEY, o_id INT,"
    " FOREIGN KEY (o_id) REFERENCES {db}.other (id) ON DELETE CASCADE)",
)
PARENTS = 60
USER, PASSWORD = "cdc_cascades", "cdc-cascades-pw-1"


class Pipeline:
    """Extract windows between source heads with the extractor's code and merge them in-process."""

    def __init__(self, server: LocalMariaDB, db: str, root: Path, spark: Any) -> None:
        self.server, self.db, self.spark = server, db, spark
        self.staging, self.target = root / "staging", str(root / "target")
        self.hook = BinlogHook(pipeline="fk")
        self.start: BinlogPosition | None = self.hook.server_state().head
        self.seq = 0

    def run(self, selection: tuple[str, ...] = TABLES, log: logging.Logger | None = None) -> dict[str, Any]:
        """Extract the changes since the last run as the next window and merge it; return the manifest."""
        state = self.hook.server_state()
        assert self.start is not None
        assert state.head is not None
        self.seq += 1
        window = Window(
            seq=self.seq,
            start=(self.start),
            end=(state.head),
            run_id="r",
            cut_at=now_iso(),
        )
        targets, _ = table_targets(self.hook.describe_tables([f"{self.db}.{t}" for t in selection]), {})
        for target in targets.values():
            target.captured = self.seq > 1  # the first window merges every table's first rows
        keys = cascading_keys(self.hook, state, targets, log or logging.getLogger(__name__))
        window_dir = window_path(str(self.staging), "fk", self.seq)
        manifest = extract_window(
            self.hook,
            pipeline="fk",
            window=window,
            tables=targets,
            window_dir=window_dir,
            server=state,
            foreign_keys=keys,
        )
        merge_window(self.spark, str(window_dir), self.target, pipeline="fk")
        self.start = state.head
        return manifest

    def assert_target_equals_source(self, tables: tuple[str, ...] = TABLES) -> None:
        with pymysql.connect(**self.server.connection_kwargs()) as conn:
            results = [compare_table(conn, self.target, f"{self.db}.{t}") for t in tables]
        assert [str(r) for r in results if not r.matched] == []


@pytest.fixture(scope="module")
def pipeline(
    mariadb: LocalMariaDB, spark: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Pipeline]:
    """The schema, its first rows and a first merged window holding them (built once for the module)."""
    with pytest.MonkeyPatch.context() as patch, mariadb.scratch_database("fk") as db:
        # the grants the connection Test asks for, no more: MariaDB shows such a user no
        # REFERENTIAL_CONSTRAINTS rows, and the keys must still be found
        mariadb.execute(
            f"CREATE USER IF NOT EXISTS '{USER}'@'127.0.0.1' IDENTIFIED BY '{PASSWORD}'",
            f"GRANT REPLICATION SLAVE, BINLOG MONITOR, SELECT ON *.* TO '{USER}'@'127.0.0.1'",
        )
        patch.setenv("AIRFLOW_CONN_BINLOG_DEFAULT", f"mysql://{USER}:{PASSWORD}@127.0.0.1:{mariadb.port}")
        mariadb.execute(*(statement.format(db=db) for statement in SCHEMA))
        runner = Pipeline(mariadb, db, tmp_path_factory.mktemp("cascades"), spark)
        mariadb.execute(
            f"INSERT INTO {db}.p SELECT seq, CONCAT('c', seq), seq FROM {db}.seq_1_to_{PARENTS}",
            f"INSERT INTO {db}.c_cascade SELECT seq DIV 3 + 1, seq, seq FROM {db}.seq_0_to_{3 * PARENTS - 1}",
            f"INSERT INTO {db}.c_null SELECT seq, seq DIV 2 + 1, CONCAT('c', (seq + 1) DIV 2 + 1), seq"
            f" FROM {db}.seq_0_to_{2 * PARENTS - 3}",
            f"INSERT INTO {db}.g SELECT n, p_id, n, v FROM {db}.c_cascade WHERE n % 2 = 0",
            f"INSERT INTO {db}.tree VALUES (1, NULL, 0)",
            f"INSERT INTO {db}.tree SELECT seq, seq DIV 2, seq FROM {db}.seq_2_to_40",
        )
        runner.run()
        runner.assert_target_equals_source()
        yield runner


def test_parent_key_updates_and_deletes_reach_every_child_in_one_window(pipeline: Pipeline) -> None:
    db = pipeline.db
    pipeline.server.execute(
        # child changes before the parent changes, in the same window
        f"INSERT INTO {db}.c_cascade VALUES (5, 1000, 1)",
        f"UPDATE {db}.c_null SET v = v + 100 WHERE p_id = 6",
        f"UPDATE {db}.c_null SET v = -v WHERE p_code = 'c7'",
        # key updates (ON UPDATE CASCADE / SET NULL), one of them moved twice in the window
        f"UPDATE {db}.p SET id = id + 500 WHERE id BETWEEN 4 AND 9",
        f"UPDATE {db}.p SET id = id + 500 WHERE id = 505",
        # a referenced UNIQUE column changes (ON UPDATE CASCADE on c_null.p_code)
        f"UPDATE {db}.p SET code = CONCAT(code, 'x') WHERE id IN (10, 11, 506)",
        # deletes (ON DELETE CASCADE down to the grandchild, SET NULL)
        f"DELETE FROM {db}.p WHERE id IN (12, 13, 507)",
        # a multi-row transaction mixing both
        "BEGIN",
        f"UPDATE {db}.p SET id = 2000 + id, code = CONCAT('m', code) WHERE id IN (14, 15)",
        f"DELETE FROM {db}.p WHERE id = 16",
        "COMMIT",
        # child changes after the parent changes, on the moved and the nulled rows
        f"UPDATE {db}.c_cascade SET v = v * 10 WHERE p_id = 504",
        f"UPDATE {db}.c_null SET p_id = 20 WHERE id = 9",
        f"INSERT INTO {db}.g VALUES (10000, 504, 10, 1)",
        # the self-referencing tree loses a subtree
        f"DELETE FROM {db}.tree WHERE id = 3",
    )
    manifest = pipeline.run()
    assert sorted(k["child"].split(".")[1] for k in manifest.foreign_keys) == [
        "c_cascade",
        "c_null",
        "c_null",
        "g",
        "tree",
    ]
    pipeline.assert_target_equals_source()
    assert not (Path(pipeline.target) / CASCADES_DIR / "fk" / f"window={pipeline.seq}").exists()


def test_a_later_window_cascades_from_rows_an_earlier_window_synthesised(pipeline: Pipeline) -> None:
    db = pipeline.db
    pipeline.server.execute(
        # 504 and 1005 got their children by cascades of the window before; 2014 its code too
        f"DELETE FROM {db}.p WHERE id IN (504, 1005)",
        f"UPDATE {db}.p SET code = CONCAT('y', code), id = id + 100 WHERE id = 2014",
        f"UPDATE {db}.p SET id = id + 3000 WHERE id BETWEEN 20 AND 22",
        f"DELETE FROM {db}.tree WHERE id = 2",
    )
    pipeline.run()
    pipeline.assert_target_equals_source()
    window = pipeline.staging / "fk" / f"window={pipeline.seq}"
    merge_window(pipeline.spark, str(window), pipeline.target, pipeline="fk")  # a re-run
    pipeline.assert_target_equals_source()


def test_a_child_whose_parent_is_not_selected_is_warned_about(
    pipeline: Pipeline, caplog: pytest.LogCaptureFixture
) -> None:
    db = pipeline.db
    pipeline.server.execute(f"INSERT INTO {db}.other VALUES (1)", f"INSERT INTO {db}.orphan VALUES (1, 1)")
    with caplog.at_level(logging.WARNING):
        manifest = pipeline.run((*TABLES, "orphan"), log=logging.getLogger("test_cascades"))
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(
        f"{db}.orphan" in w and f"parent {db}.other is not in the table selection" in w for w in warnings
    )
    assert all(k["child"] != f"{db}.orphan" for k in manifest.foreign_keys)
    pipeline.assert_target_equals_source((*TABLES, "orphan"))


def test_a_truncated_child_is_not_brought_back_by_a_later_parent_change(pipeline: Pipeline) -> None:
    db = pipeline.db
    pipeline.server.execute(
        f"UPDATE {db}.c_null SET v = v + 1 WHERE p_id BETWEEN 28 AND 31",
        f"TRUNCATE TABLE {db}.c_null",  # a child: InnoDB refuses to truncate a table other keys reference
        f"INSERT INTO {db}.c_null VALUES (1, 30, 'c30', 1)",
        # SET NULL / ON UPDATE CASCADE on rows the TRUNCATE removed: none of them may come back
        f"UPDATE {db}.p SET id = id + 700, code = CONCAT(code, 'z') WHERE id BETWEEN 28 AND 31",
    )
    manifest = pipeline.run()
    assert manifest.tables[f"{db}.c_null"].ops.get("t") == 1
    pipeline.assert_target_equals_source()
    with pymysql.connect(**pipeline.server.connection_kwargs()) as conn, conn.cursor() as cur:
        cur.execute(f"SELECT id, p_id, p_code FROM {db}.c_null")
        assert cur.fetchall() == ((1, None, "c30z"),)
