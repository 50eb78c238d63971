"""A table with history: the batch builder keeps each row's before image beside it, through every path of a batch."""

from __future__ import annotations

import pyarrow as pa
import pytest

from airflow_provider_binlog.contract.history import BEFORE_COLUMN
from airflow_provider_binlog.extract.batches import ChangeBatchBuilder, hold_batches
from airflow_provider_binlog.extract.columns import ColumnSpec, ValueConversionError

SPECS = [ColumnSpec("id", "int", pa.int32()), ColumnSpec("name", "varchar(10)", pa.string())]
T0 = 1_767_225_600_000_000


def builder() -> ChangeBatchBuilder:
    return ChangeBatchBuilder(
        SPECS, window=7, labels=["db.t.id (int)", "db.t.name (varchar(10))"], before_images=True
    )


def fill(b: ChangeBatchBuilder) -> None:
    """An insert, an update in place, a key move (delete + update of one event) and a delete, in one transaction."""
    b.add_images("c", [[1, "a"]], 1, "bin.000001", 100)
    b.add_images("u", [[1, "b"]], 2, "bin.000001", 200, befores=[[1, "a"]])
    b.add_images(["d", "u"], [[1, "b"], [2, "b"]], 3, "bin.000001", 300, befores=[[1, "b"], [1, "b"]])
    b.add_images("d", [[2, "b"]], 5, "bin.000001", 400)


def test_each_row_carries_the_before_image_of_its_update_and_null_otherwise() -> None:
    b = builder()
    fill(b)
    b.commit("0-1-9", T0)
    batch = b.take_committed()
    assert batch.schema.field(BEFORE_COLUMN).type == pa.struct(
        [pa.field("id", pa.int32()), pa.field("name", pa.string())]
    )
    assert batch.schema.names[-1] == BEFORE_COLUMN
    assert batch.column(BEFORE_COLUMN).to_pylist() == [
        None, {"id": 1, "name": "a"}, {"id": 1, "name": "b"}, {"id": 1, "name": "b"}, None,
    ]  # fmt: skip
    assert batch.column("_binlog_seq").to_pylist() == [1, 2, 3, 4, 5]
    assert len(b) == 0
    assert b.befores == []


def test_a_builder_without_history_stages_no_before_images() -> None:
    b = ChangeBatchBuilder(SPECS, window=7)
    b.add_images("u", [[1, "b"]], 1, "bin.000001", 200, befores=[[1, "a"]])
    b.commit(None, T0)
    assert BEFORE_COLUMN not in b.take_committed().schema.names


def test_rollback_to_a_savepoint_drops_the_before_images_with_their_rows() -> None:
    b = builder()
    b.add_images("c", [[1, "a"]], 1, "bin.000001", 100)
    b.commit("0-1-1", T0)
    fill(b)  # the open transaction: 5 rows
    b.rollback(keep=2)
    b.add_images("u", [[1, "z"]], 9, "bin.000001", 900, befores=[[1, "y"]])
    b.commit("0-1-2", T0 + 1)
    batch = b.take_committed()
    assert batch.column(BEFORE_COLUMN).to_pylist() == [
        None,
        None,
        {"id": 1, "name": "a"},
        {"id": 1, "name": "y"},
    ]
    assert batch.column("_binlog_seq").to_pylist() == [1, 1, 2, 9]


def test_spilled_and_held_rows_keep_their_before_images() -> None:
    b = builder()
    fill(b)
    spilled = b.take_open()  # a large transaction spills its open rows
    assert spilled.column(BEFORE_COLUMN).null_count == 2
    b.commit("0-1-9", T0)  # (the reader commits the spill file's rows itself)
    other = builder()
    hold_batches(other, [spilled])  # a reader going on where another stopped holds them again
    assert (
        other.take_committed().column(BEFORE_COLUMN).to_pylist() == spilled.column(BEFORE_COLUMN).to_pylist()
    )


def test_a_before_value_that_does_not_fit_names_its_column_and_event() -> None:
    b = builder()
    b.add_images("u", [[1, "b"]], 1, "bin.000001", 100, befores=[[2**40, "a"]])
    b.commit("0-1-3", T0)
    with pytest.raises(ValueConversionError) as raised:
        b.take_committed()
    assert (raised.value.column, raised.value.pos, raised.value.gtid) == ("db.t.id (int)", 100, "0-1-3")
