"""The change log beside a target table, end to end: a BinlogPipeline with ``history="changelog"`` (real MariaDB,
the shared Spark Connect server), run as the least-privileged user the connection Test recommends.

The source goes through an initial snapshot, a window of updates (one moving a row's key), a delete and a
re-insert of one key, a multi-row update, a transaction over two tables and a parent delete whose child rows
InnoDB deletes (cascade), then a window with an added column, a widened one (the change log is rewritten with
it; its digests still hold), a ``TRUNCATE`` and an insert, whose first merge is SIGKILLed at the first Delta commit
(a history table's or a target's, whichever comes first). The change log must hold each change once, with the
before and after images and the statement text the binlog carried, replay in order to the current target, stay
unchanged when a window is merged again, and its digest chain must name the window of a data file whose byte was
flipped or whose value was changed, and still verify once maintenance compacted it. A source table named like a
change log's folder (``orders~changes``) keeps a folder of its own, and a table with history turned off gets none.
"""

from __future__ import annotations

import datetime
import json
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

import deltalake
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import REPO, DagRunner, load_module, stored_state, task_states, xcom

from airflow_provider_binlog.contract.columns import (
    OP_COLUMN,
    OP_DELETE,
    OP_INSERT,
    OP_SNAPSHOT,
    OP_TRUNCATE,
    OP_UPDATE,
    SEQ_COLUMN,
    WINDOW_COLUMN,
)
from airflow_provider_binlog.contract.history import (
    AFTER_COLUMN,
    BEFORE_COLUMN,
    CASCADE_COLUMN,
    ENDED_BY_COLUMN,
    IS_CURRENT_COLUMN,
    MERGE_WINDOW_COLUMN,
    STATEMENT_COLUMN,
    STATEMENT_POS_COLUMN,
    VALID_TO_COLUMN,
    changelog_uri,
    scd2_uri,
)
from airflow_provider_binlog.exceptions import BinlogConfigError

pytestmark = pytest.mark.system

DAGS = Path(__file__).with_name("dags")
PIPELINE = "p_hist"
PAID = "UPDATE orders SET status = 'paid' WHERE id = 1 /* 払い済み \u00e9 */"
"""A statement whose text (logged by ``binlog_annotate_row_events``) the change log keeps, multi-byte characters
included."""


def replay(changes: list[dict[str, Any]], key: str) -> dict[Any, dict[str, Any]]:
    """Apply change-log rows in order: the table they leave (its rows by key)."""
    state: dict[Any, dict[str, Any]] = {}
    for row in sorted(changes, key=lambda r: (r[WINDOW_COLUMN], r[SEQ_COLUMN], r[OP_COLUMN] != OP_DELETE)):
        op, before, after = row[OP_COLUMN], row[BEFORE_COLUMN], row[AFTER_COLUMN]
        if op == OP_TRUNCATE:
            state.clear()
            continue
        if before is not None:
            state.pop(before[key], None)
        if after is not None:
            state[after[key]] = after
    return state


@pytest.mark.slow  # three DAG runs with Spark merges and a re-merge
def test_change_log_holds_every_change_once_replays_to_the_target_and_shows_tampering(
    connections: Any,
    airflow_db: object,
    least_privileged: None,
    spark: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import pymysql

    from airflow_provider_binlog.admin import main as admin
    from airflow_provider_binlog.history import read_changes, verify_history
    from airflow_provider_binlog.jobs.merge.job import merge_window
    from airflow_provider_binlog.target import read_table, read_tables
    from airflow_provider_binlog.verify import compare_table

    with connections.scratch_database("hist") as db:
        connections.execute(
            "CREATE TABLE orders (id INT PRIMARY KEY, status VARCHAR(20), amount DECIMAL(10,2))",
            "CREATE TABLE notes (id INT PRIMARY KEY, body TEXT)",
            "CREATE TABLE `orders~changes` (id INT PRIMARY KEY, v INT)",
            "INSERT INTO orders VALUES (1, 'new', 10.00), (2, 'new', 20.00), (3, 'new', 30.00)",
            "INSERT INTO notes VALUES (1, 'a')",
            "INSERT INTO `orders~changes` VALUES (1, 1)",
            "CREATE TABLE parents (id INT PRIMARY KEY)",
            "CREATE TABLE children (id INT PRIMARY KEY, parent INT,"
            " FOREIGN KEY (parent) REFERENCES parents (id) ON DELETE CASCADE ON UPDATE CASCADE)",
            "INSERT INTO parents VALUES (1), (2)",
            "INSERT INTO children VALUES (10, 1), (11, 1), (20, 2)",
            database=db,
        )
        staging, target = str(tmp_path / "staging"), str(tmp_path / "target")
        settings = {
            "pipeline": PIPELINE,
            "tables": f"{db}.*",
            "staging": staging,
            "target": target,
            "history": ["changelog", "scd2"],
            "table_history": {f"{db}.notes": "off"},
            "retries": 0,
        }
        monkeypatch.setenv("BINLOG_TWO_PIPELINES", json.dumps([settings]))
        runner = DagRunner(load_module(DAGS / "two_pipelines.py").dag, {})
        first = runner.run()  # the snapshot, then an empty first window
        assert first.state == "success", task_states(first)
        connections.execute(
            PAID,
            "UPDATE orders SET id = 20 WHERE id = 2",  # the row moves to another key
            "DELETE FROM orders WHERE id = 3",
            "INSERT INTO orders VALUES (3, 'again', 33.00)",
            "UPDATE orders SET amount = amount + 1",  # one event, three rows
            "START TRANSACTION",
            "UPDATE notes SET body = 'b' WHERE id = 1",
            "UPDATE `orders~changes` SET v = 2 WHERE id = 1",
            "COMMIT",
            "DELETE FROM parents WHERE id = 1",  # InnoDB deletes children 10 and 11 without logging it
            "UPDATE parents SET id = 3 WHERE id = 2",  # and sets child 20's parent to 3, unlogged too
            database=db,
        )
        second = runner.run()
        assert second.state == "success", task_states(second)
        as_of_second = stored_state(PIPELINE)["checkpoint"]["window"]  # type: ignore[index]
        second_done = datetime.datetime.now(datetime.timezone.utc)
        time.sleep(
            1.1
        )  # MariaDB logs commit times in whole seconds: the next changes commit after second_done
        source_then = {
            "orders": connections.execute("SELECT id, status, amount FROM orders", database=db),
            "children": connections.execute("SELECT id, parent FROM children", database=db),
        }
        connections.execute(
            "ALTER TABLE orders ADD COLUMN note VARCHAR(10)",
            "ALTER TABLE orders MODIFY amount DECIMAL(14, 3)",  # widened: the change log is rewritten with it
            "UPDATE orders SET note = 'x' WHERE id = 1",
            "TRUNCATE TABLE orders",
            "TRUNCATE TABLE `orders~changes`",  # the table's only change in the window: a truncate marker alone
            "INSERT INTO orders VALUES (5, 'late', 5.00, 'y')",
            database=db,
        )
        # SIGKILL once the first table has committed the window (the target of orders or one of the history tables
        # written beside the target merges, whichever is first): the run's retry finds what is done and merges the
        # rest (no change twice).
        killer = DagRunner(runner.dag, {"target": target, "staging": staging})
        dates = runner.next_dates()
        assert killer.run_in_child(dates, kill_at="first_commit") == -9
        killed = stored_state(PIPELINE)["windows"][-1]["seq"]  # type: ignore[index]
        app = f"airflow-provider-binlog:{PIPELINE}:window={killed}"
        held = {
            p.name: deltalake.DeltaTable(str(p)).transaction_version(app) for p in Path(target, db).iterdir()
        }
        assert killed in held.values(), held  # one table (a target or a history table) committed the window
        assert None in [held[n] for n in ("orders", "orders~changes", "orders~scd2")], (
            held
        )  # not all of orders'
        third = runner.run(dates)
        assert third.state == "success", task_states(third)

        with pymysql.connect(**connections.connection_kwargs()) as conn:
            for table in ("orders", "notes", "orders~changes", "parents", "children"):
                result = compare_table(conn, target, f"{db}.{table}")
                assert result.matched, str(result)

        orders = f"{db}.orders"
        changes = read_changes(target, orders).to_pylist()
        ops = [r[OP_COLUMN] for r in changes]
        assert ops == [OP_SNAPSHOT] * 3 + [OP_UPDATE, OP_UPDATE, OP_DELETE, OP_INSERT] + [OP_UPDATE] * 3 + [
            OP_UPDATE,
            OP_TRUNCATE,
            OP_INSERT,
        ], ops
        paid = changes[3]
        assert (paid[BEFORE_COLUMN]["status"], paid[AFTER_COLUMN]["status"]) == ("new", "paid")
        moved = changes[4]
        assert (moved["id"], moved[BEFORE_COLUMN]["id"], moved[AFTER_COLUMN]["id"]) == (20, 2, 20)
        assert changes[5][BEFORE_COLUMN]["status"] == "new"
        assert changes[5][AFTER_COLUMN] is None
        for bumped in changes[7:10]:  # the multi-row update: each row's before image is the one it replaced
            assert bumped[AFTER_COLUMN]["amount"] == bumped[BEFORE_COLUMN]["amount"] + Decimal("1.00")

        # The statement of each change: its text on every row read_changes returns, stored once per statement in
        # a table's change log; none for snapshot reads; a cascade's rows name their cause's statement.
        assert paid[STATEMENT_COLUMN] == PAID
        one_row = read_changes(
            target, orders, key={"id": 1}
        ).to_pylist()  # texts of only its statements are read
        assert PAID in [r[STATEMENT_COLUMN] for r in one_row]
        assert moved[STATEMENT_COLUMN] == "UPDATE orders SET id = 20 WHERE id = 2"
        assert [r[STATEMENT_COLUMN] for r in changes[:3]] == [None] * 3
        assert [r[STATEMENT_POS_COLUMN] for r in changes[:3]] == [None] * 3
        bulk = changes[7:10]
        assert {r[STATEMENT_COLUMN] for r in bulk} == {"UPDATE orders SET amount = amount + 1"}
        assert len({(r["_binlog_file"], r[STATEMENT_POS_COLUMN]) for r in bulk}) == 1
        assert len({r[STATEMENT_POS_COLUMN] for r in changes[3:10]}) == 5  # five statements
        stored = deltalake.DeltaTable(changelog_uri(target, orders)).to_pyarrow_table().to_pylist()
        stored_bulk = [r for r in stored if r[STATEMENT_POS_COLUMN] == bulk[0][STATEMENT_POS_COLUMN]]
        assert sorted(r[STATEMENT_COLUMN] is None for r in stored_bulk) == [False, True, True]
        assert [r[STATEMENT_COLUMN] for r in read_changes(target, f"{db}.orders~changes").to_pylist()] == [
            None,
            "UPDATE `orders~changes` SET v = 2 WHERE id = 1",
            None,  # TRUNCATE is a statement (DDL) of its own: no rows event
        ]
        assert changes[10][AFTER_COLUMN]["note"] == "x"
        assert changes[10][BEFORE_COLUMN]["note"] is None
        assert len({r[MERGE_WINDOW_COLUMN] for r in changes}) == 3  # the snapshot and two windows
        assert {str(r[AFTER_COLUMN]["amount"]) for r in changes[:3]} == {"10.000", "20.000", "30.000"}
        for name in ("orders", "parents", "children", "orders~changes"):
            logged = read_changes(target, f"{db}.{name}").to_pylist()
            seen = [(r[WINDOW_COLUMN], r[SEQ_COLUMN], r[OP_COLUMN], r["id"]) for r in logged]
            assert len(seen) == len(set(seen)), name  # no change twice

        live = {r["id"]: r for r in read_table(target, orders).to_pylist()}
        replayed = replay(changes, "id")
        assert sorted(replayed) == sorted(live) == [5]
        assert {k: (v["status"], v["amount"], v["note"]) for k, v in replayed.items()} == {
            k: (v["status"], v["amount"], v["note"]) for k, v in live.items()
        }
        twin = read_changes(target, f"{db}.orders~changes").to_pylist()
        assert [r[OP_COLUMN] for r in twin] == [OP_SNAPSHOT, OP_UPDATE, OP_TRUNCATE]
        assert not Path(changelog_uri(target, f"{db}.notes")).exists()
        cascaded = [
            r for r in read_changes(target, f"{db}.children").to_pylist() if r[OP_COLUMN] != OP_SNAPSHOT
        ]
        assert sorted(
            (r[OP_COLUMN], r["id"], r[CASCADE_COLUMN], r[BEFORE_COLUMN]["parent"]) for r in cascaded
        ) == [
            (OP_DELETE, 10, True, 1),
            (OP_DELETE, 11, True, 1),
            (OP_UPDATE, 20, True, 2),  # the cascaded update has its before image too
        ]
        (reparented,) = [r for r in cascaded if r[OP_COLUMN] == OP_UPDATE]
        assert (reparented[BEFORE_COLUMN], reparented[AFTER_COLUMN]) == (
            {"id": 20, "parent": 2},
            {"id": 20, "parent": 3},
        )
        causes = {r[OP_COLUMN]: r for r in read_changes(target, f"{db}.parents").to_pylist()}
        assert causes[OP_DELETE][STATEMENT_COLUMN] == "DELETE FROM parents WHERE id = 1"
        assert causes[OP_UPDATE][STATEMENT_COLUMN] == "UPDATE parents SET id = 3 WHERE id = 2"
        assert {r[STATEMENT_POS_COLUMN] for r in cascaded if r[OP_COLUMN] == OP_DELETE} == {
            causes[OP_DELETE][STATEMENT_POS_COLUMN]
        }
        assert reparented[STATEMENT_POS_COLUMN] == causes[OP_UPDATE][STATEMENT_POS_COLUMN]
        folders = sorted(p.name for p in (Path(target) / db).iterdir())
        assert folders == [
            "children",
            "children~changes",
            "children~scd2",
            "notes",
            "orders",
            "orders~7Echanges",
            "orders~7Echanges~changes",
            "orders~7Echanges~scd2",
            "orders~changes",
            "orders~scd2",
            "parents",
            "parents~changes",
            "parents~scd2",
        ]

        # The SCD2 table: the current versions are the target's rows, one per live key; the table as of the moment
        # after the second run is the source as it was then.
        versions = deltalake.DeltaTable(scd2_uri(target, orders)).to_pyarrow_table().to_pylist()
        current = sorted(
            (v["id"], v["status"], v["amount"], v["note"]) for v in versions if v[IS_CURRENT_COLUMN]
        )
        assert current == sorted((v["id"], v["status"], v["amount"], v["note"]) for v in live.values())
        assert all(v[VALID_TO_COLUMN] is not None for v in versions if not v[IS_CURRENT_COLUMN])
        assert {v[ENDED_BY_COLUMN] for v in versions} == {None, "u", "d", "t"}
        moved_away = [v for v in versions if v["id"] == 2]  # updated to id 20: its version ends as if deleted
        assert [v[ENDED_BY_COLUMN] for v in moved_away] == ["d"]
        then_orders = read_table(target, orders, as_of=second_done).select(["id", "status", "amount"])
        assert sorted(tuple(r.values()) for r in then_orders.to_pylist()) == sorted(source_then["orders"])
        then_children = read_table(target, f"{db}.children", as_of=second_done).to_pylist()
        assert sorted(tuple(r.values()) for r in then_children) == sorted(source_then["children"])
        with pytest.raises(BinlogConfigError, match="starts at"):
            read_table(target, orders, as_of=datetime.datetime(2000, 1, 1, tzinfo=datetime.timezone.utc))

        # Several tables as of the same committed window: the source as it was after the second run.
        then = read_tables(target, [f"{db}.orders", f"{db}.children"], window=as_of_second, pipeline=PIPELINE)
        assert sorted(
            tuple(r.values()) for r in then[f"{db}.orders"].select(["id", "status", "amount"]).to_pylist()
        ) == (sorted(source_then["orders"]))
        assert sorted(tuple(r.values()) for r in then[f"{db}.children"].to_pylist()) == sorted(
            source_then["children"]
        )

        # A window merged again changes nothing: the change log holds its app transaction.
        state = stored_state(PIPELINE)
        assert state is not None
        window = next(w for w in state["windows"] if w["rows"])
        log_dir = Path(changelog_uri(target, orders))
        logs = [
            Path(changelog_uri(target, orders), "_delta_log"),
            Path(scd2_uri(target, orders), "_delta_log"),
        ]
        commits = [sorted(p.glob("*.json")) for p in logs]
        merge_window(spark, window["manifest_uri"], target, pipeline=PIPELINE)
        assert [sorted(p.glob("*.json")) for p in logs] == commits
        assert read_changes(target, orders).to_pylist() == changes

        report = verify_history(target, orders)
        assert report.ok, str(report)
        assert (report.windows, report.rows) == (3, len(changes))
        assert admin(["verify-history", "--target", target, "--table", orders]) == 0

        # One flipped byte in a data page of a file holding the first window with changes is found (its page
        # checksum), and named by the first window the file holds; a file rewritten whole with one value of that
        # window changed (checksums right) is named by that window (its digest).
        holding = [Path(u) for u in deltalake.DeltaTable(str(log_dir)).file_uris()]
        flipped = next(
            p for p in holding if window["seq"] in pq.read_table(p)[MERGE_WINDOW_COLUMN].to_pylist()
        )
        first_held = min(pq.read_table(flipped)[MERGE_WINDOW_COLUMN].to_pylist())
        original = flipped.read_bytes()
        metadata = pq.read_metadata(flipped)
        leaves = [metadata.schema.column(i).path for i in range(metadata.num_columns)]
        chunk = metadata.row_group(0).column(leaves.index(f"{AFTER_COLUMN}.status"))
        data = bytearray(original)
        data[chunk.data_page_offset + chunk.total_compressed_size - 2] ^= 0x01
        flipped.write_bytes(bytes(data))
        report = verify_history(target, orders)
        assert report.first_bad_window == first_held, str(report)
        assert "checksum" in str(report)
        assert admin(["verify-history", "--target", target, "--table", orders]) == 1
        flipped.write_bytes(original)
        rows = pq.read_table(flipped).to_pylist()
        edited = next(r for r in rows if r[AFTER_COLUMN] and r[AFTER_COLUMN]["status"] == "paid")
        edited[AFTER_COLUMN]["status"] = "refunded"
        pq.write_table(pa.Table.from_pylist(rows, schema=pq.read_schema(flipped)), flipped)
        report = verify_history(target, orders)
        assert report.first_bad_window == window["seq"], str(report)
        assert "do not match the digest" in str(report)
        flipped.write_bytes(original)
        assert verify_history(target, orders).ok

        # Maintenance compacts the history tables with the target: the change log's files of the three windows
        # become one, its rows and digest chain stay, and no log file of it is dropped.
        # a log retention of zero: a checkpoint that cleaned up the log would drop every commit file before it
        deltalake.DeltaTable(str(log_dir)).alter.set_table_properties(
            {"delta.logRetentionDuration": "interval 0 seconds"}
        )
        commits = sorted(p.name for p in (log_dir / "_delta_log").glob("*.json"))
        for name, value in (("PIPELINE", PIPELINE), ("STAGING", staging), ("TARGET", target)):
            monkeypatch.setenv(f"BINLOG_CDC_{name}", value)
        monkeypatch.setenv("BINLOG_MAINTENANCE_TARGET_RETENTION_HOURS", "0")
        maintenance = DagRunner(load_module(REPO / "example_dags" / "binlog_maintenance.py").dag, {})
        run = maintenance.run()
        assert run.state == "success", task_states(run)
        report = xcom(run, "maintenance")
        assert report["target"]["compacted"][f"{orders} (changelog)"]["files_added"] == 1
        assert len(deltalake.DeltaTable(str(log_dir)).file_uris()) == 1
        assert read_changes(target, orders).to_pylist() == changes
        assert set(commits) <= {p.name for p in (log_dir / "_delta_log").glob("*.json")}
        report = verify_history(target, orders)
        assert report.ok, str(report)
