"""Deletion vectors as the Delta protocol defines them: Z85, RoaringBitmapArray, DV files, descriptors."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pyroaring import BitMap64

from airflow_provider_binlog.contract.deletion_vectors import (
    BITMAP_MAGIC,
    DeletionVector,
    DeletionVectorError,
    deserialize_positions,
    inline_vector,
    read_vector,
    serialize_positions,
    write_vectors,
    z85_decode,
    z85_encode,
)


def test_z85_follows_the_zeromq_specification() -> None:
    # ZeroMQ RFC 32's test vector
    assert z85_encode(bytes([0x86, 0x4F, 0xD2, 0x6F, 0xB5, 0x59, 0xF7, 0x5B])) == "HelloWorld"
    assert z85_decode("HelloWorld") == bytes([0x86, 0x4F, 0xD2, 0x6F, 0xB5, 0x59, 0xF7, 0x5B])
    with pytest.raises(ValueError, match="4-byte"):
        z85_encode(b"abc")
    with pytest.raises(DeletionVectorError, match="multiple of 5"):
        z85_decode("abcd")
    with pytest.raises(DeletionVectorError, match="not a Z85 character"):
        z85_decode("abc d")


@given(st.binary(max_size=64).map(lambda b: b[: len(b) - len(b) % 4]))
def test_z85_round_trips(data: bytes) -> None:
    assert z85_decode(z85_encode(data)) == data


def test_the_protocols_relative_path_example_names_its_file() -> None:
    # PROTOCOL.md, "JSON Example 1 — On Disk with Relative Path (with Random Prefix)"
    vector = DeletionVector.from_json(
        {"storageType": "u", "pathOrInlineDv": "ab^-aqEH.-t@S}K{vb[*k^", "offset": 4, "sizeInBytes": 40,
         "cardinality": 6}
    )  # fmt: skip
    assert (
        vector.file_uri("s3://mytable")
        == "s3://mytable/ab/deletion_vector_d2c639aa-8816-431a-aaf6-d3fe2512ff61.bin"
    )
    assert vector.unique_id == "uab^-aqEH.-t@S}K{vb[*k^@4"
    assert DeletionVector.from_json(vector.to_json()) == vector


def test_an_inline_vector_keeps_its_positions_and_has_no_file() -> None:
    vector = inline_vector(BitMap64([3, 4, 7, 11, 18, 29]))
    assert (vector.storage_type, vector.cardinality, vector.offset) == ("i", 6, None)
    assert "offset" not in vector.to_json()
    assert list(read_vector("/nowhere", vector)) == [3, 4, 7, 11, 18, 29]
    with pytest.raises(DeletionVectorError, match="has no file"):
        vector.file_uri("/t")


@given(st.sets(st.integers(min_value=0, max_value=2**40), max_size=200))
def test_positions_round_trip_through_the_roaring_bitmap_array(positions: set[int]) -> None:
    data = serialize_positions(BitMap64(positions))
    assert struct.unpack_from("<i", data)[0] == BITMAP_MAGIC
    assert set(deserialize_positions(data)) == positions


def test_a_bitmap_with_another_magic_number_is_refused() -> None:
    data = serialize_positions(BitMap64([1]))
    with pytest.raises(DeletionVectorError, match="magic number"):
        deserialize_positions(struct.pack("<i", BITMAP_MAGIC - 1) + data[4:])  # Delta's "native" format
    with pytest.raises(DeletionVectorError, match="cannot be read"):
        deserialize_positions(data[:-3])


def test_one_file_holds_several_vectors_each_with_its_checksum(tmp_path: Path) -> None:
    sets = [BitMap64([0, 5]), BitMap64(range(1000, 50_000, 3)), BitMap64()]
    vectors = write_vectors(str(tmp_path), sets)
    (dv_file,) = tmp_path.glob("deletion_vector_*.bin")
    assert dv_file.read_bytes()[0] == 1  # format version
    assert vectors[0].offset == 1
    assert len({v.file_uri(str(tmp_path)) for v in vectors}) == 1
    assert [read_vector(str(tmp_path), v) for v in vectors] == sets
    assert [v.cardinality for v in vectors] == [2, len(sets[1]), 0]


def test_a_corrupt_or_cut_dv_file_is_refused_with_its_location(tmp_path: Path) -> None:
    (vector,) = write_vectors(str(tmp_path), [BitMap64([1, 2, 3])])
    (dv_file,) = tmp_path.glob("deletion_vector_*.bin")
    data = bytearray(dv_file.read_bytes())
    data[10] ^= 0xFF
    dv_file.write_bytes(bytes(data))
    with pytest.raises(DeletionVectorError, match="does not match its descriptor"):
        read_vector(str(tmp_path), vector)
    dv_file.write_bytes(bytes(data[:-2]))
    with pytest.raises(DeletionVectorError, match="ends before"):
        read_vector(str(tmp_path), vector)
    os.unlink(dv_file)
    with pytest.raises(DeletionVectorError, match="cannot be read"):
        read_vector(str(tmp_path), vector)


def test_a_descriptor_whose_cardinality_disagrees_is_refused(tmp_path: Path) -> None:
    (vector,) = write_vectors(str(tmp_path), [BitMap64([1, 2, 3])])
    wrong = DeletionVector(
        vector.storage_type, vector.path_or_inline_dv, vector.size_in_bytes, 4, vector.offset
    )
    with pytest.raises(DeletionVectorError, match="holds 3 rows, its descriptor says 4"):
        read_vector(str(tmp_path), wrong)
