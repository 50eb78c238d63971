"""Which columns of a snapshot file get a dictionary: those whose first values repeat."""

from __future__ import annotations

import io

import pyarrow as pa
import pyarrow.parquet as pq

from airflow_provider_binlog.snapshot.parquet import SAMPLE_ROWS, dictionary_columns


def sample(rows: int) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict(
        {
            "id": list(range(rows)),
            "status": [("new", "paid", "sent")[i % 3] for i in range(rows)],
            "half": [i // 2 for i in range(rows)],  # every value twice: exactly half distinct
            "text": [f"free text {i}" for i in range(rows)],
            "empty": pa.nulls(rows, pa.string()),
        }
    )


def test_columns_whose_values_repeat_get_a_dictionary() -> None:
    assert dictionary_columns(sample(1_000)) == ["status", "half", "empty"]


def test_only_the_first_sample_rows_decide() -> None:
    later = 3 * SAMPLE_ROWS
    table = pa.table(
        {
            "text": [f"free text {i}" for i in range(SAMPLE_ROWS)] + ["same"] * later,
            "code": ["a"] * SAMPLE_ROWS + [f"code {i}" for i in range(later)],
        }
    )
    # Over all rows "text" is a quarter distinct and "code" three quarters: the sample says the opposite.
    assert dictionary_columns(table) == ["code"]


def test_an_empty_batch_keeps_arrow_s_default_for_every_column() -> None:
    assert dictionary_columns(sample(0)) == ["id", "status", "half", "text", "empty"]


def test_the_written_file_has_dictionary_pages_only_on_the_chosen_columns() -> None:
    batch = sample(20_000)
    out = io.BytesIO()
    with pq.ParquetWriter(
        out, batch.schema, compression="zstd", use_dictionary=dictionary_columns(batch)
    ) as w:
        w.write_batch(batch)
    meta = pq.ParquetFile(io.BytesIO(out.getvalue())).metadata.row_group(0)
    dictionary = {
        meta.column(i).path_in_schema for i in range(meta.num_columns) if meta.column(i).has_dictionary_page
    }
    assert dictionary == {"status", "half", "empty"}
    assert pq.read_table(io.BytesIO(out.getvalue())).equals(pa.Table.from_batches([batch]))
