"""Guarantee 6 of issue 3: long and large transactions, with the example DAG, a real MariaDB and real Spark.

1. A transaction of 1,000,000 row changes that is open while a window is cut (and while another
   transaction commits) is not in that window; after its commit it arrives whole in exactly one window,
   between the transactions that committed before and after it.
2. The extract of that window runs in bounded memory: its peak RSS, measured in a child process, stays
   within a fixed bound over a small window's extract, a bound smaller than the transaction's rows.
3. A transaction open for a long time while others commit and windows are cut: those windows hold the
   others and nothing of it; the window after its commit holds it whole, stamped with its commit time.
4. (Issue 32) After case 1, one window holding another 1M-row insert and a transaction updating every row of
   the table, those new rows included: 3M change rows, extracted in the same bounded memory and merged on
   Spark (which spills rather than running out of memory), target == source.

Windows are cut at commit boundaries by construction: MariaDB (like MySQL) keeps an open transaction's
row events in the session's binlog cache and writes them to the binlog as one group at COMMIT, so the
head a window ends at never falls inside a transaction. The tests check the consequences on what was
staged, merged and checkpointed, and end with a row-by-row compare of every table with the source.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pymysql
import pytest
from conftest import DagRunner, stored_state
from conftest import Pipeline as BasePipeline

from airflow_provider_binlog.contract.names import qualified_name, table_folder
from airflow_provider_binlog.testing.mariadb import LocalMariaDB

pytestmark = [pytest.mark.system, pytest.mark.slow]

HERE = Path(__file__).resolve().parent
BIG_ROWS = 1_000_000
PAD_CHARS = 300
"""Width of the big table's text column: 1M rows of it are ~330 MiB as Python strings alone."""
EXTRACT_GROWTH_BOUND_MIB = 256
"""How much more the extract of the 1M-row window may reach at its peak than a small window's extract.

Fixed: it does not grow with the transaction. The reader keeps at most ``SPILL_ROWS`` (50k) rows of an
open transaction in memory and the Parquet writer about one row group (64k rows); allocator pools add the
rest. Measured on 2 cores: +140 MiB for 1M rows, +146 MiB for 2M rows, and +1036 MiB for 1M rows with
spilling turned off. Holding the whole transaction would need more than the bound (asserted below)."""
LONG_OPEN_SECONDS = 30
"""How long case 3 keeps its transaction open. The issue says minutes; the binlog holds nothing of a
transaction before its commit, so what matters is that windows are cut and merged while it is open (two
are), not the wall-clock time; 30 s keeps the file's runtime reasonable."""


class Pipeline(BasePipeline):
    """The shared pipeline harness plus a measured run and table views of staging."""

    def run_window_measured(self, workdir: Path) -> tuple[dict[str, Any], dict[str, Any]]:
        """Run the DAG once in a child process (``measure_dag_run.py``); return its window and the report.

        The child gets this session's environment: the same Airflow home, metadata DB and connections.
        """
        head = self.head()
        workdir.mkdir(parents=True)
        report, log = workdir / "report.json", workdir / "run.log"
        logical, run_after = DagRunner.next_dates()
        command = [
            sys.executable,
            str(HERE / "measure_dag_run.py"),
            json.dumps(self.conf),
            logical.isoformat(),
            run_after.isoformat(),
            str(report),
        ]
        with log.open("wb") as out:
            result = subprocess.run(
                command, env=os.environ.copy(), stdout=out, stderr=subprocess.STDOUT, timeout=1200
            )
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-60:])
        assert result.returncode == 0, tail
        measured = json.loads(report.read_text())
        assert measured["state"] == "success", (measured["tasks"], tail)
        assert {"rss_at_start_kib", "hwm_after_reset_kib", "extract_peak_kib"} <= set(measured), (
            measured,
            tail,
        )
        return self.merged_window(head), measured

    def staged_rows(self, window: dict[str, Any], table: str) -> int:
        """Return the change records the window's manifest lists for ``table``."""
        return int(self.manifest(window)["tables"][f"{self.db}.{table}"]["rows"])

    def staged(self, window: dict[str, Any], table: str, columns: list[str] | None = None) -> pa.Table:
        """Return the table's staged change records of the window (chosen columns), in window order."""
        folder = self.window_dir(window) / table_folder(qualified_name(self.db, table))
        if not folder.exists():
            return pa.table({"_binlog_seq": pa.array([], pa.int64())})
        return pq.read_table(folder, columns=columns).sort_by("_binlog_seq")

    def changes(self, window: dict[str, Any], table: str) -> list[tuple[str, int, str]]:
        """Return ``(op, id, v)`` of the table's staged change records in window order."""
        return [(r["_binlog_op"], r["id"], r["v"]) for r in self.staged(window, table).to_pylist()]

    def check_ledger(self, windows: int) -> list[dict[str, Any]]:
        """Check the last ``windows`` windows tile the binlog, are merged and end at the checkpoint."""
        state = stored_state(self.name)
        assert state is not None
        ledger = state["windows"][-windows:]
        assert [w["status"] for w in ledger] == ["merged"] * windows
        assert [w["seq"] for w in ledger] == list(range(ledger[0]["seq"], ledger[0]["seq"] + windows))
        assert all(a["end"] == b["start"] for a, b in zip(ledger, ledger[1:], strict=False))
        assert state["checkpoint"]["window"] == ledger[-1]["seq"]
        assert state["checkpoint"]["position"] == ledger[-1]["end"]
        return list(ledger)


@pytest.fixture
def pipeline(connections: LocalMariaDB, scratch_db: str, pipeline_dirs: dict[str, str]) -> Pipeline:
    return Pipeline(connections, scratch_db, pipeline_dirs)


def numbers(pipeline: Pipeline, count: int) -> str:
    """Return a FROM clause yielding ``seq`` = 1..count (MariaDB's Sequence engine, or a digits join)."""
    try:
        if pipeline.sql("SELECT * FROM seq_1_to_3") == [(1,), (2,), (3,)]:
            return f"seq_1_to_{count}"
    except pymysql.err.MySQLError:
        pass  # no Sequence engine (MySQL, or MariaDB built without it)
    places = len(str(count - 1))
    digits = "(SELECT 0 AS n UNION ALL " + " UNION ALL ".join(f"SELECT {i}" for i in range(1, 10)) + ")"
    joined = " CROSS JOIN ".join(f"{digits} AS d{p}" for p in range(places))
    seq = " + ".join(f"d{p}.n * {10**p}" for p in range(places))
    return f"(SELECT {seq} + 1 AS seq FROM {joined}) AS numbers WHERE seq <= {count}"


def mib(kib: int) -> float:
    return kib / 1024


def test_a_million_row_transaction_open_across_a_window_cut_arrives_whole_in_one_window_in_bounded_memory(
    pipeline: Pipeline, tmp_path: Path
) -> None:
    pipeline.sql(
        f"CREATE TABLE big (id INT PRIMARY KEY, grp INT NOT NULL, pad VARCHAR({PAD_CHARS}) NOT NULL)",
        "CREATE TABLE side (id INT PRIMARY KEY, v VARCHAR(60) NOT NULL)",
    )
    source = numbers(pipeline, BIG_ROWS)
    pipeline.run_window()  # a new pipeline starts at the head: empty first window
    started = time.monotonic()
    big = pipeline.connect(autocommit=False)
    with big, big.cursor() as cur:
        cur.execute(
            f"INSERT INTO big SELECT seq, seq % 97, CONCAT(LPAD(seq, 10, '0'), "
            f"REPEAT(CHAR(97 + seq % 26), {PAD_CHARS - 10})) FROM {source}"
        )
        assert cur.rowcount == BIG_ROWS
        print(f"\n1M-row INSERT (uncommitted) took {time.monotonic() - started:.1f} s")
        pipeline.transaction("INSERT INTO side VALUES (1, 'committed while the big one is open')")
        # The window cut now ends at the head: the big transaction is not in the binlog yet.
        during, small = pipeline.run_window_measured(tmp_path / "small-window")
        pipeline.transaction("INSERT INTO side VALUES (2, 'committed just before the big one')")
        big.commit()
    pipeline.transaction(
        "INSERT INTO side VALUES (3, 'committed after the big one')",
        "UPDATE side SET v = 'updated after the big one' WHERE id = 1",
    )
    after, large = pipeline.run_window_measured(tmp_path / "big-window")

    # The window cut while the big transaction was open holds the short one only.
    assert pipeline.changes(during, "side") == [("c", 1, "committed while the big one is open")]
    assert pipeline.staged_rows(during, "big") == 0
    assert not (pipeline.window_dir(during) / f"{pipeline.db}.big").exists()
    # The next window holds it whole, in commit order between its neighbours.
    manifest = pipeline.manifest(after)
    assert manifest["tables"][f"{pipeline.db}.big"]["rows"] == BIG_ROWS
    assert manifest["tables"][f"{pipeline.db}.big"]["ops"] == {"c": BIG_ROWS}
    side = pipeline.staged(after, "side")
    assert [(r["_binlog_op"], r["id"]) for r in side.to_pylist()] == [("c", 2), ("c", 3), ("u", 1)]
    staged = pipeline.staged(
        after,
        "big",
        ["id", "_binlog_op", "_binlog_seq", "_binlog_gtid", "_binlog_ts", "_binlog_file", "_binlog_pos"],
    )
    assert staged.num_rows == BIG_ROWS
    ids, seqs = staged.column("id"), staged.column("_binlog_seq")
    assert pc.count_distinct(ids).as_py() == BIG_ROWS
    assert (pc.min(ids).as_py(), pc.max(ids).as_py()) == (1, BIG_ROWS)
    assert pc.count_distinct(seqs).as_py() == BIG_ROWS
    first_seq, last_seq = pc.min(seqs).as_py(), pc.max(seqs).as_py()
    assert last_seq - first_seq + 1 == BIG_ROWS  # no other change interleaved
    side_seqs = dict(zip(side.column("id").to_pylist(), side.column("_binlog_seq").to_pylist(), strict=True))
    assert side_seqs[2] < first_seq
    assert last_seq < side_seqs[3]
    gtids = pc.unique(staged.column("_binlog_gtid")).to_pylist()
    assert len(gtids) == 1  # one transaction, its GTID on every row
    assert gtids[0] is not None
    side_gtids = side.column("_binlog_gtid").to_pylist()
    assert len({*side_gtids, gtids[0]}) == 3  # the big one and the two short ones around it
    assert len(pc.unique(staged.column("_binlog_ts"))) == 1  # its commit time, also on the spilled rows
    # Its row events lie after the window cut while it was open, and inside the window that holds it.
    # (A transaction is never split across binlog files; names have fixed-width numbers, so tuples order.)
    files = pc.unique(staged.column("_binlog_file")).to_pylist()
    assert len(files) == 1
    positions = staged.column("_binlog_pos")
    assert (during["end"]["file"], during["end"]["pos"]) < (files[0], pc.min(positions).as_py())
    assert (files[0], pc.max(positions).as_py()) < (after["end"]["file"], after["end"]["pos"])
    ledger = pipeline.check_ledger(3)
    assert [pipeline.staged_rows(w, "big") for w in ledger] == [0, 0, BIG_ROWS]

    # Bounded memory: the extract's peak over a small window's is below a fixed bound that is itself
    # smaller than the transaction's rows as the Python values the reader decodes them into.
    small_peak, large_peak = small["extract_peak_kib"], large["extract_peak_kib"]
    growth = large_peak - small_peak
    print(
        f"extract peak RSS: small window {mib(small_peak):.0f} MiB (RSS at task start "
        f"{mib(small['rss_at_start_kib']):.0f} MiB), {BIG_ROWS:,}-row window {mib(large_peak):.0f} MiB (at start "
        f"{mib(large['rss_at_start_kib']):.0f} MiB): +{mib(growth):.0f} MiB, bound +{EXTRACT_GROWTH_BOUND_MIB} MiB;"
        f" read {manifest['stats']['rows']} rows in {manifest['stats']['read_seconds']} s"
    )
    assert BIG_ROWS * sys.getsizeof("x" * PAD_CHARS) > EXTRACT_GROWTH_BOUND_MIB * 2**20
    assert growth < EXTRACT_GROWTH_BOUND_MIB * 1024
    assert pipeline.mismatches("big", "side") == []

    # One window holding another 1M-row insert and a transaction updating every row, those new ones included
    # (before and after images): 3M change rows, whose merge rewrites the 1M-row table with the new keys on
    # Spark, spilling where it must instead of running out of memory.
    pipeline.transaction(
        f"INSERT INTO big SELECT {BIG_ROWS} + seq, seq % 89, REPEAT(CHAR(65 + seq % 26), {PAD_CHARS}) FROM {source}"
    )
    pipeline.transaction("UPDATE big SET grp = grp + 1, pad = CONCAT('u', SUBSTRING(pad, 2))")
    updated, update = pipeline.run_window_measured(tmp_path / "update-window")
    assert pipeline.manifest(updated)["tables"][f"{pipeline.db}.big"]["ops"] == {
        "c": BIG_ROWS,
        "u": 2 * BIG_ROWS,
    }
    update_growth = update["extract_peak_kib"] - small_peak
    print(f"extract peak RSS of the 3M-row window: +{mib(update_growth):.0f} MiB over the small window's")
    assert update_growth < EXTRACT_GROWTH_BOUND_MIB * 1024
    assert pipeline.mismatches("big", "side") == []


def test_a_transaction_open_across_windows_arrives_whole_after_its_commit(pipeline: Pipeline) -> None:
    pipeline.sql("CREATE TABLE accounts (id INT PRIMARY KEY, v VARCHAR(60) NOT NULL)")
    pipeline.run_window()  # a new pipeline starts at the head: empty first window
    pipeline.transaction(
        "INSERT INTO accounts VALUES " + ", ".join(f"({i}, 'initial')" for i in range(1, 11))
    )
    long = pipeline.connect(autocommit=False)
    with long, long.cursor() as cur:
        opened_at = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)
        opened = time.monotonic()
        cur.execute("UPDATE accounts SET v = 'long: first change' WHERE id = 1")
        cur.execute("INSERT INTO accounts VALUES (100, 'long: inserted')")
        cur.execute("DELETE FROM accounts WHERE id = 2")
        pipeline.transaction(
            "INSERT INTO accounts VALUES (11, 'other: while open')",
            "UPDATE accounts SET v = 'other: updated while open' WHERE id = 3",
        )
        first = pipeline.run_window()
        pipeline.transaction(
            "INSERT INTO accounts VALUES (12, 'other: later')", "DELETE FROM accounts WHERE id = 4"
        )
        second = pipeline.run_window()
        pipeline.transaction("INSERT INTO accounts VALUES (13, 'other: just before the commit')")
        time.sleep(max(0.0, LONG_OPEN_SECONDS - (time.monotonic() - opened)))
        cur.execute("UPDATE accounts SET v = 'long: last change' WHERE id = 100")
        long.commit()
        open_seconds = time.monotonic() - opened
    pipeline.transaction("INSERT INTO accounts VALUES (14, 'other: after the commit')")
    third = pipeline.run_window()
    print(f"\ntransaction open {open_seconds:.0f} s across windows {first['seq']} and {second['seq']}")

    initial = [("c", i, "initial") for i in range(1, 11)]
    assert pipeline.changes(first, "accounts") == [
        *initial,
        ("c", 11, "other: while open"),
        ("u", 3, "other: updated while open"),
    ]
    assert pipeline.changes(second, "accounts") == [("c", 12, "other: later"), ("d", 4, "initial")]
    assert pipeline.changes(third, "accounts") == [
        ("c", 13, "other: just before the commit"),
        ("u", 1, "long: first change"),
        ("c", 100, "long: inserted"),
        ("d", 2, "initial"),
        ("u", 100, "long: last change"),
        ("c", 14, "other: after the commit"),
    ]
    records = pipeline.staged(third, "accounts").to_pylist()
    long_rows = records[1:5]
    assert len({r["_binlog_gtid"] for r in long_rows}) == 1  # one transaction
    assert len({r["_binlog_gtid"] for r in records}) == 3  # and the two around it
    # Stamped with its commit time, not the time of its first statement.
    assert {r["_binlog_ts"] for r in long_rows} == {long_rows[0]["_binlog_ts"]}
    assert long_rows[0]["_binlog_ts"] >= opened_at + dt.timedelta(seconds=LONG_OPEN_SECONDS)
    pipeline.check_ledger(3)
    assert pipeline.mismatches("accounts") == []
