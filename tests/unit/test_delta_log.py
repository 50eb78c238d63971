"""Our own Delta log commits: deletion vectors that delta-rs, Polars and our readers honour, put-if-absent."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from deltalake.exceptions import CommitFailedError
from pyroaring import BitMap64

from airflow_provider_binlog.contract import ContractError
from airflow_provider_binlog.contract.deletion_vectors import inline_vector, read_vector, write_vectors
from airflow_provider_binlog.contract.delta_log import (
    DELETION_VECTORS,
    ENABLE_DELETION_VECTORS,
    LogFile,
    commit,
    enable_deletion_vectors,
    file_vectors,
    supports_deletion_vectors,
)
from airflow_provider_binlog.testing.readers import duckdb_delta


def _table(path: Path, rows: int = 10) -> DeltaTable:
    data = pa.table({"id": pa.array(range(rows), pa.int64()), "v": [f"r{i}" for i in range(rows)]})
    DeltaTable.create(
        str(path), data.schema, configuration={"binlog.owner": "p"}, raise_if_key_not_exists=False
    )
    write_deltalake(str(path), data, mode="append")
    return DeltaTable(str(path))


def _file(dt: DeltaTable) -> LogFile:
    (action,) = pa.table(dt.get_add_actions(flatten=True)).to_pylist()
    return LogFile(
        action["path"],
        int(action["size_bytes"]),
        int(action["num_records"]),
        json.dumps({"numRecords": int(action["num_records"])}),
    )


def _live(path: Path) -> list[int]:
    return sorted(pa.table(DeltaTable(str(path)).scan()).column("id").to_pylist())


def _duckdb_ids(path: Path) -> list[int]:
    """Return the ids DuckDB's ``delta`` extension reads from the table (deletion vectors applied)."""
    con = duckdb_delta()
    assert con is not None, "the test extra installs duckdb and duckdb-extension-delta"
    return sorted(r[0] for r in con.execute("SELECT id FROM delta_scan(?)", [str(path)]).fetchall())


def _replace_vector(dt: DeltaTable, old: LogFile, new: LogFile) -> None:
    commit(dt, [old.remove(1), new.add(1)], operation="DELETE", custom_metadata={"binlog.window": 7},
           app_transactions={"app": 7})  # fmt: skip


def test_enabling_deletion_vectors_upgrades_the_protocol_and_keeps_the_table(tmp_path: Path) -> None:
    dt = _table(tmp_path)
    assert not supports_deletion_vectors(dt)
    assert enable_deletion_vectors(dt)
    dt = DeltaTable(str(tmp_path))
    protocol = dt.protocol()
    assert (protocol.min_reader_version, protocol.min_writer_version) == (3, 7)
    assert protocol.reader_features == [DELETION_VECTORS]  # nothing a reader must know besides DVs
    assert set(protocol.writer_features or []) == {DELETION_VECTORS, "appendOnly", "invariants"}
    assert dt.metadata().configuration == {"binlog.owner": "p", ENABLE_DELETION_VECTORS: "true"}
    assert _live(tmp_path) == list(range(10))
    assert not enable_deletion_vectors(dt)  # nothing to do twice
    assert DeltaTable(str(tmp_path)).version() == dt.version()


@pytest.mark.parametrize("stored", ["file", "inline"])
def test_a_deletion_vector_written_by_us_hides_its_rows_from_every_reader(
    tmp_path: Path, stored: str
) -> None:
    dt = _table(tmp_path)
    enable_deletion_vectors(dt)
    dt = DeltaTable(str(tmp_path))
    plain = _file(dt)
    first = BitMap64([1, 5, 9])
    vector = inline_vector(first) if stored == "inline" else write_vectors(str(tmp_path), [first])[0]
    with_dv = LogFile(plain.path, plain.size, plain.rows, plain.stats, vector=vector)
    _replace_vector(dt, plain, with_dv)
    expected = [0, 2, 3, 4, 6, 7, 8]
    assert _live(tmp_path) == expected
    assert sorted(pl.read_delta(str(tmp_path))["id"].to_list()) == expected
    assert _duckdb_ids(tmp_path) == expected
    dt = DeltaTable(str(tmp_path))
    assert dt.transaction_version("app") == 7
    assert dt.history(1)[0]["binlog.window"] == 7
    assert file_vectors(dt) == {plain.path: vector}

    # A second DV for the same file replaces the first: the remove names the old pair (path, DV).
    second = write_vectors(str(tmp_path), [first | BitMap64([0])])[0]
    _replace_vector(dt, with_dv, LogFile(plain.path, plain.size, plain.rows, plain.stats, vector=second))
    dt = DeltaTable(str(tmp_path))
    assert _live(tmp_path) == expected[1:]
    assert _duckdb_ids(tmp_path) == expected[1:]
    assert pa.table(dt.get_add_actions()).num_rows == 1  # one logical file, not two
    assert list(read_vector(str(tmp_path), file_vectors(dt)[plain.path])) == [0, 1, 5, 9]


def test_a_commit_on_a_version_another_writer_took_fails_and_leaves_that_version(tmp_path: Path) -> None:
    dt = _table(tmp_path)
    stale = DeltaTable(str(tmp_path))
    enable_deletion_vectors(dt)
    taken = tmp_path / "_delta_log" / f"{stale.version() + 1:020d}.json"
    winner = taken.read_text()
    assert '"protocol"' in winner
    with pytest.raises(CommitFailedError, match="committed by another writer first"):
        commit(stale, [], operation="WRITE")
    assert taken.read_text() == winner
    assert [p.name for p in (tmp_path / "_delta_log").iterdir() if p.name.endswith(".tmp")] == []


def test_a_table_on_an_object_store_is_refused_with_the_remedy() -> None:
    class Remote:
        table_uri = "gs://bucket/t"

        def version(self) -> int:
            return 3

    with pytest.raises(ContractError, match="write_mode='copy_on_write'"):
        commit(Remote(), [], operation="WRITE")  # type: ignore[arg-type]


def test_delta_rs_overwrites_of_a_table_with_deletion_vectors_drop_them_with_their_files(
    tmp_path: Path,
) -> None:
    """The whole-table rewrites keep going through delta-rs: its overwrite removes each (path, DV) pair."""
    dt = _table(tmp_path)
    enable_deletion_vectors(dt)
    dt = DeltaTable(str(tmp_path))
    plain = _file(dt)
    vector = write_vectors(str(tmp_path), [BitMap64([0])])[0]
    _replace_vector(dt, plain, LogFile(plain.path, plain.size, plain.rows, plain.stats, vector=vector))
    write_deltalake(str(tmp_path), pa.table({"id": pa.array([42], pa.int64()), "v": ["x"]}), mode="overwrite")
    assert _live(tmp_path) == [42]
    assert file_vectors(DeltaTable(str(tmp_path))) == {}
