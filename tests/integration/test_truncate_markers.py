"""Truncate markers: TRUNCATE and DROP TABLE empty the target at their place in the order (real MariaDB, Spark).

Six windows are cut while the source changes, and all are extracted at the end (as a backlog or a backfill
would be: the tables are described as they are then). ``t`` has writes before and after a ``TRUNCATE`` in
the same window, and a later window holding only a ``TRUNCATE``; ``g`` is dropped and stays dropped, so the
extract no longer sees it on the source. The staged windows are merged into separate targets in order, in
reverse order, and with re-merges; each target must end equal to the source row by row.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pymysql
import pytest

pytest.importorskip("pyspark")
pytest.importorskip("deltalake")

from airflow_provider_binlog.contract.delta_log import live_rows
from airflow_provider_binlog.contract.uris import table_uri  # noqa: E402
from airflow_provider_binlog.extract.plan import gone_targets  # noqa: E402
from airflow_provider_binlog.extract.reader import TableTarget  # noqa: E402
from airflow_provider_binlog.extract.window import extract_window  # noqa: E402
from airflow_provider_binlog.hooks.binlog import BinlogHook  # noqa: E402
from airflow_provider_binlog.jobs.merge.job import merge_window  # noqa: E402
from airflow_provider_binlog.jobs.merge.truncate import table_floor  # noqa: E402
from airflow_provider_binlog.pipeline.ledger import Window  # noqa: E402
from airflow_provider_binlog.pipeline.staging import window_path  # noqa: E402
from airflow_provider_binlog.pipeline.state import StateManager  # noqa: E402
from airflow_provider_binlog.pipeline.windows import cut_window, mark_window  # noqa: E402
from airflow_provider_binlog.target import read_table  # noqa: E402
from airflow_provider_binlog.testing.mariadb import LocalMariaDB  # noqa: E402
from airflow_provider_binlog.verify import compare_table  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PIPELINE = "trunc"

WINDOWS: tuple[tuple[str, ...], ...] = (
    (  # 0: the target's first rows of both tables (merged first into every target)
        "INSERT INTO t SELECT seq, CONCAT('r', seq) FROM seq_1_to_20",
        "INSERT INTO g SELECT seq, CONCAT('g', seq) FROM seq_1_to_10",
    ),
    (  # 1: changes of g its extract never sees (g is gone by then)
        "UPDATE t SET v = 'w1' WHERE id <= 5",
        "INSERT INTO g VALUES (11, 'g11')",
        "UPDATE g SET v = 'w1' WHERE id = 2",
    ),
    (  # 2: writes before and after the TRUNCATE, and g dropped for good
        "INSERT INTO t VALUES (21, 'before')",
        "UPDATE t SET v = 'before' WHERE id = 5",
        "TRUNCATE TABLE t",
        "INSERT INTO t VALUES (5, 'after'), (30, 'after')",
        "UPDATE t SET v = 'after+' WHERE id = 30",
        "DROP TABLE g",
    ),
    (  # 3
        "INSERT INTO t VALUES (40, 'w3')",
        "DELETE FROM t WHERE id = 30",
    ),
    ("TRUNCATE TABLE t",),  # 4: a window holding nothing but the marker
    ("INSERT INTO t VALUES (60, 'w5'), (61, 'w5')", "DELETE FROM t WHERE id = 61"),
)
ORDERS = {
    "in_order": (0, 1, 2, 3, 4, 5),
    "reversed": (0, 5, 4, 3, 2, 1),
    "re_merged": (0, 1, 2, 2, 4, 3, 5, 4, 2, 1, 5),
}

TRUNCATED_BY_WINDOW_4 = {
    "in_order": {5, 40},
    "reversed": set(range(1, 21)),  # window 0 only: windows 1 to 3, merged later, fall below the floor
    "re_merged": {5, 30},  # window 3 (40 in, 30 out) comes after window 4 and falls below the floor
}


@dataclass
class Staged:
    """The windows staged once, and the targets each merge order produced."""

    server: LocalMariaDB
    db: str
    root: Path
    manifests: list[dict[str, Any]]

    def target(self, order: str) -> str:
        return str(self.root / f"target-{order}")

    def window_uri(self, seq: int) -> str:
        return f"file://{self.root}/staging/{PIPELINE}/window={seq}"


@pytest.fixture(scope="module")
def staged(mariadb: LocalMariaDB, spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Staged]:
    with pytest.MonkeyPatch.context() as patch, mariadb.scratch_database("trunc") as db:
        patch.setenv("AIRFLOW_CONN_BINLOG_DEFAULT", mariadb.uri())
        for table in ("t", "g"):
            mariadb.execute(f"CREATE TABLE {table} (id INT PRIMARY KEY, v VARCHAR(20))", database=db)
        hook = BinlogHook(pipeline=PIPELINE)
        head = hook.server_state().head
        assert head is not None
        state = StateManager(PIPELINE).initial("test", "mariadb", head)  # window seqs: Unix time in ms
        root = tmp_path_factory.mktemp("trunc")
        windows: list[Window] = []
        manifests: list[dict[str, Any]] = []
        for number, statements in enumerate(WINDOWS):
            mariadb.execute(*statements, database=db)
            server = hook.server_state()
            assert server.head is not None
            state, window, _ = cut_window(state, run_id=f"run{number}", head=server.head)
            state = mark_window(state, window.seq, status="merged")
            windows.append(window)
            if number == 0:  # staged while g exists: the target holds g from here on
                state = state.with_target(str(root), [f"{db}.t", f"{db}.g"])
                manifests.append(_extract(hook, window, root, {f"{db}.t": False, f"{db}.g": False}))
        described = {f"{db}.t"}  # what the extract sees on the source now: g is gone
        gone = gone_targets(state, [f"{db}.*"], described)
        assert list(gone) == [f"{db}.g"]
        for window in windows[1:]:
            manifests.append(_extract(hook, window, root, {f"{db}.t": True}, gone))
        result = Staged(mariadb, db, root, manifests)
        for order, seqs in ORDERS.items():
            for seq in seqs:
                merge_window(
                    spark,
                    result.window_uri(windows[seq].seq),
                    result.target(order),
                    pipeline=PIPELINE,
                )
        yield result


def _extract(
    hook: BinlogHook,
    window: Window,
    root: Path,
    captured: dict[str, bool],
    gone: dict[str, TableTarget] | None = None,
) -> dict[str, Any]:
    targets = {name: TableTarget(name, ["id"], captured=held) for name, held in captured.items()}
    targets.update(gone or {})
    server = hook.server_state()
    return extract_window(
        hook,
        pipeline=PIPELINE,
        window=window,
        tables=targets,
        window_dir=window_path(f"{root}/staging", PIPELINE, window.seq),
        server=server,
    ).to_json()


def _mismatch(staged: Staged, order: str, table: str) -> str | None:
    with pymysql.connect(**staged.server.connection_kwargs()) as conn:
        result = compare_table(conn, staged.target(order), f"{staged.db}.{table}")
    return None if result.matched else str(result)


def test_truncate_is_staged_as_a_marker_in_the_window_order(staged: Staged) -> None:
    manifest = staged.manifests[2]
    name = f"{staged.db}.t"
    assert manifest["tables"][name]["ops"] == {"c": 3, "t": 1, "u": 2}
    (decision,) = [e for d in manifest["ddl"] for e in d["effects"] if e["table"] == name]
    assert (decision["action"], decision["empties"]) == ("follow", "truncated")
    rows = ds.dataset(
        [
            str(p)
            for p in (staged.root / "staging" / PIPELINE / f"window={manifest['window']}" / name).glob(
                "*.parquet"
            )
        ],
        schema=None,
    )
    table = rows.to_table()
    by_seq = sorted(table.to_pylist(), key=lambda r: r["_binlog_seq"])
    ops = [r["_binlog_op"] for r in by_seq]
    assert ops == ["c", "u", "t", "c", "c", "u"]  # the marker between the writes before and after it
    marker = by_seq[2]
    assert marker["_binlog_seq"] == decision["marker_seq"]
    assert marker.get("id") is None
    assert marker.get("v") is None
    assert marker["_binlog_gtid"]
    assert marker["_binlog_pos"] > 0
    assert not manifest["resnapshots"]


def test_a_window_of_only_a_truncate_stages_only_its_marker(staged: Staged) -> None:
    entry = staged.manifests[4]["tables"][f"{staged.db}.t"]
    assert entry["ops"] == {"t": 1}
    assert entry["rows"] == 1


@pytest.mark.parametrize("order", sorted(ORDERS))
def test_target_equals_the_source_in_any_merge_order(staged: Staged, order: str) -> None:
    assert _mismatch(staged, order, "t") is None
    ids = sorted(r["id"] for r in read_table(staged.target(order), f"{staged.db}.t").to_pylist())
    assert ids == [60]


@pytest.mark.parametrize("order", sorted(ORDERS))
def test_truncated_rows_are_tombstones_at_the_marker(staged: Staged, order: str) -> None:
    from deltalake import DeltaTable

    uri = table_uri(staged.target(order), f"{staged.db}.t")
    rows = live_rows(DeltaTable(uri)).to_pylist()  # tombstones included, deletion vectors applied
    marker_window = staged.manifests[4]["window"]
    assert table_floor(DeltaTable(uri), PIPELINE) == (
        marker_window,
        staged.manifests[4]["ddl"][0]["effects"][0]["marker_seq"],
    )
    truncated = {r["id"] for r in rows if r["_binlog_deleted"] and r["_binlog_window"] == marker_window}
    # what the last TRUNCATE removed: the live rows the target held when its window was merged
    assert truncated == TRUNCATED_BY_WINDOW_4[order]
    assert all(r["_binlog_op"] == "d" for r in rows if r["_binlog_deleted"])


def test_a_table_that_stays_dropped_is_emptied_and_recorded_as_dropped(staged: Staged) -> None:
    name = f"{staged.db}.g"
    (dropped,) = staged.manifests[2]["dropped"]
    assert dropped["table"] == name
    assert dropped["marker_seq"] is not None
    assert "DROP TABLE" in dropped["statement"]
    assert (
        name not in staged.manifests[1]["tables"]
    )  # g was gone when the window was extracted: nothing staged
    assert staged.manifests[2]["tables"][name]["ops"] == {"t": 1}
    for order in ORDERS:
        assert read_table(staged.target(order), name).num_rows == 0, order
