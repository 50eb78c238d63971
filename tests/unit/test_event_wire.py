"""Byte formats of the event reader checked on hand-built bytes: integers, binary JSON, DECIMAL."""

from __future__ import annotations

import decimal
import struct

import pytest

from airflow_provider_binlog.extract.decimals import decode_decimal
from airflow_provider_binlog.extract.json_binary import json_text
from airflow_provider_binlog.extract.wire import (
    length_encoded,
    packed_integer,
    varlen_signed,
    varlen_unsigned,
)


@pytest.mark.parametrize(
    ("raw", "value", "width"),
    [
        (bytes([0b0000_0110]), 3, 1),  # one byte: value << 1
        (bytes([0b0000_0001, 0b0000_0100]), (0b0000_0100 << 8 | 0b1) >> 2, 2),  # one trailing 1: two bytes
        (bytes([0b0000_0011, 0x10, 0x00]), 0x1003 >> 3, 3),
        (b"\xff" + struct.pack("<Q", 2**64 - 1), 2**64 - 1, 9),  # 0xff: the value is the next 8 bytes
    ],
)
def test_varlen_unsigned(raw: bytes, value: int, width: int) -> None:
    assert varlen_unsigned(raw + b"\xaa", 0) == (value, width)


def test_varlen_signed_is_zigzag() -> None:
    assert varlen_signed(bytes([4 << 1]), 0) == (2, 1)  # 4 = 2 << 1, sign bit 0
    assert varlen_signed(bytes([3 << 1]), 0) == (-2, 1)  # 3 = (2 - 1) << 1 | 1


def test_packed_integer_widths() -> None:
    assert packed_integer(b"\xfa", 0) == (250, 1)
    assert packed_integer(b"\xfc\x01\x02", 0) == (0x0201, 3)
    assert packed_integer(b"\xfd\x01\x02\x03", 0) == (0x030201, 4)
    assert packed_integer(b"\xfe" + struct.pack("<Q", 2**40), 0) == (2**40, 9)


@pytest.mark.parametrize("value", [0, 250, 251, 2**16 - 1, 2**16, 2**24 - 1, 2**24, 2**64 - 1])
def test_length_encoded_is_the_inverse_of_packed_integer_at_each_width_boundary(value: int) -> None:
    encoded = length_encoded(value)
    assert packed_integer(encoded + b"tail", 0) == (value, len(encoded))


@pytest.mark.parametrize(
    ("raw", "precision", "scale", "value"),
    [
        # decimal2bin of 1234567890.1234 as DECIMAL(14,4): 1 (1 byte), 234567890 (4), 1234 (2); sign bit set.
        (bytes([0x81]) + (234567890).to_bytes(4, "big") + (1234).to_bytes(2, "big"), 14, 4, "1234567890.1234"),
        (bytes(b ^ 0xFF for b in bytes([0x81]) + (0).to_bytes(4, "big") + (5).to_bytes(2, "big")), 14, 4,
         "-1000000000.0005"),
        (bytes([0x80, 0x00]), 3, 0, "0"),
    ],
)  # fmt: skip
def test_decode_decimal(raw: bytes, precision: int, scale: int, value: str) -> None:
    assert decode_decimal(raw, precision, scale) == decimal.Decimal(value)
    assert str(decode_decimal(raw, precision, scale)) == value


def test_binary_json_large_containers_and_scalars() -> None:
    # A large array (4-byte count/size/offsets) of int32 (inlined in large containers), a double, a string.
    string = b"\x03abc"
    header = 8 + 3 * 5
    body = struct.pack("<II", 3, header + 8 + len(string))
    body += bytes([0x07]) + struct.pack("<i", -7)
    body += bytes([0x0B]) + struct.pack("<I", header)
    body += bytes([0x0C]) + struct.pack("<I", header + 8)
    body += struct.pack("<d", 0.5) + string
    assert json_text(b"\x03" + body) == '[-7, 0.5, "abc"]'
    assert json_text(b"\x04\x01") == "true"
    assert json_text(b"\x0a" + struct.pack("<Q", 2**64 - 1)) == str(2**64 - 1)
    assert json_text(b"") == "null"
