from __future__ import annotations

import datetime as dt
import subprocess
import sys

import pyarrow as pa
import pytest

from airflow_provider_binlog.contract.positions import BinlogPosition, file_index
from airflow_provider_binlog.extract.batches import ChangeBatchBuilder
from airflow_provider_binlog.extract.charsets import UnsupportedCharsetError, text_decoder
from airflow_provider_binlog.extract.columns import ColumnSpec, ValueConversionError, fix_negative_time
from airflow_provider_binlog.extract.tablemaps import collation_charset


def _time(text: str) -> dt.timedelta:
    sign = -1 if text.startswith("-") else 1
    hours, minutes, seconds = text.lstrip("-").split(":")
    return sign * dt.timedelta(hours=int(hours), minutes=int(minutes), seconds=float(seconds))


@pytest.mark.parametrize(
    ("decoded", "true"),
    [
        ("-838:59:58.000001", "-838:59:58.999999"),
        ("-00:00:01.500000", "-00:00:01.500000"),
        ("-01:00:00.900000", "-01:00:00.100000"),
        ("-12:00:00", "-12:00:00"),
        ("12:34:56.789", "12:34:56.789"),
    ],
)
def test_negative_time_fraction_is_repaired(decoded: str, true: str) -> None:
    assert fix_negative_time(_time(decoded)) == _time(true)


def test_positions_order_across_files() -> None:
    assert BinlogPosition("b.000002", 4) > BinlogPosition("b.000001", 99999)
    assert BinlogPosition("b.000001", 5) > BinlogPosition("b.000001", 4)
    assert file_index("mysql-bin.1000000") == 1000000


def test_binlog_file_name_without_index_is_rejected() -> None:
    with pytest.raises(ValueError, match="not a binlog file name"):
        file_index("mysql-bin")


def test_batch_value_that_does_not_fit_names_column_and_event() -> None:
    spec = ColumnSpec("n", "bigint", pa.int64())
    builder = ChangeBatchBuilder([spec], window=3, labels=["db.t.n (bigint)"])
    builder.add_values("c", 1, "bin.000001", 100, [5])
    builder.add_values("c", 2, "bin.000002", 200, [2**64])
    builder.commit("0-1-7", 1_767_225_600_000_000)
    with pytest.raises(ValueConversionError) as raised:
        builder.take_committed()
    err = raised.value
    assert (err.column, err.file, err.pos, err.gtid) == ("db.t.n (bigint)", "bin.000002", 200, "0-1-7")
    assert isinstance(err.cause, OverflowError | pa.ArrowException)


@pytest.mark.parametrize(
    ("collation_id", "dbms", "charset"),
    [(8, "mariadb", "latin1"), (54, "mysql", "utf16"), (255, "mysql", "utf8mb4"), (2048, "mariadb", "utf8mb3"),
     (2304, "mariadb", "utf8mb4"), (2560, "mariadb", "ucs2"), (2816 + 5, "mariadb", "utf16"),
     (3072, "mariadb", "utf32"), (3400, "mariadb", "collation 3400")],
)  # fmt: skip
def test_collation_ids_name_their_charset(collation_id: int, dbms: str, charset: str) -> None:
    assert collation_charset(collation_id, dbms) == charset


def test_unknown_charsets_are_errors() -> None:
    # Every character set MariaDB offers decodes (tests/unit/test_charsets.py); an unknown collation does not.
    with pytest.raises(UnsupportedCharsetError, match="'collation 3400'.*not a character set"):
        text_decoder("collation 3400")
    assert text_decoder("swe7")(b"}") == "å"
    assert text_decoder("utf16")(b"\xfe\xff\x00A") == "\ufeffA"  # big-endian, a leading U+FEFF is text
    assert text_decoder("latin1")(b"\x80\x81") == "€\x81"
    with pytest.raises(UnicodeDecodeError):
        text_decoder("cp932")(b"\xa0")  # the server has no character for it; cp932 gives U+F8F0


def test_library_text_of_a_charset_it_decodes_wrongly_is_refused() -> None:
    from pymysqlreplication.column import Column
    from pymysqlreplication.constants import FIELD_TYPE

    from airflow_provider_binlog.extract.columns import converter

    utf16 = Column(type=FIELD_TYPE.VARCHAR, name="v", max_length=40, character_set_name="utf16")
    convert = converter(utf16)
    assert convert(b"\x00\xe9\xd8\x3d\xde\x00", None) == "é😀"  # bytes: decoded big-endian, as the server
    with pytest.raises(ValueError, match="not the server's"):
        convert("\ue900", None)  # the library's little-endian text
    latin1 = Column(type=FIELD_TYPE.VARCHAR, name="l", max_length=40, character_set_name="cp1252")
    assert converter(latin1)("é", None) == "é"


_LEAN_ARROW = """
import sys
from airflow_provider_binlog.extract.batches import lean_arrow
import pyarrow as pa
lean_arrow()
pa.array(["x"], pa.string())
print("pandas" in sys.modules, pa.default_memory_pool().backend_name)
import pandas as pd
print(pa.array(pd.Series(pd.Categorical(["a", None]))).type, pa.array(pd.Series([1.5, None])).null_count)
"""


def test_the_extract_builds_arrays_without_pandas_and_pandas_imported_later_still_converts() -> None:
    """A fresh interpreter: no pandas import for the extract's arrays; a later pandas import gets pyarrow's
    pandas support back (a categorical Series converts as a dictionary, not as a plain sequence)."""
    out = subprocess.run(
        [sys.executable, "-c", _LEAN_ARROW], check=True, capture_output=True, text=True
    ).stdout.splitlines()
    assert out == ["False system", "dictionary<values=large_string, indices=int8, ordered=0> 1"]


@pytest.mark.parametrize(
    "files",
    [["bin.000001"] * 3, ["bin.000001", "bin.000001", "bin.000002"], ["bín.000009"] * 3],
    ids=["one file", "two files", "a non-ASCII file name"],
)
def test_batches_carry_each_rows_order_keys(files: list[str]) -> None:
    # The op, window and file columns are built from their buffers: check them value by value.
    builder = ChangeBatchBuilder([ColumnSpec("id", "int", pa.int32())], window=12)
    builder.add_values("c", 1, files[0], 100, [1])
    builder.add_images(["d", "u"], [[2], [3]], 2, files[1], 200)
    builder.commit("0-1-7", 5)
    builder.add_values("d", 4, files[2], 300, [4])
    keys = ["_binlog_op", "_binlog_window", "_binlog_seq", "_binlog_gtid", "_binlog_file", "_binlog_pos"]
    committed = builder.take_committed()
    committed.validate(full=True)
    assert [[row[k] for k in ["id", *keys]] for row in committed.to_pylist()] == [
        [1, "c", 12, 1, "0-1-7", files[0], 100],
        [2, "d", 12, 2, "0-1-7", files[1], 200],
        [3, "u", 12, 3, "0-1-7", files[1], 200],
    ]
    still_open = builder.take_open()
    still_open.validate(full=True)
    assert [[row[k] for k in ["id", *keys]] for row in still_open.to_pylist()] == [
        [4, "d", 12, 4, None, files[2], 300]
    ]
