"""Byte-level readers and writers shared by the binlog event parsers (`extract/events`) and the row decoder.

Integer formats are the MySQL client/server protocol's (MySQL internals, "Protocol Basics": fixed-length
little-endian integers, length-encoded integers and strings) and the MySQL serialization library's
variable-length integers (``libs/mysql/serialization/variable_length_integers.h``), which the tagged GTID
events of MySQL 8.4+ use.
"""

from __future__ import annotations

import uuid

from airflow_provider_binlog.extract.errors import UndecodableEventError


def packed_integer(buf: bytes, pos: int) -> tuple[int, int]:
    """Return ``(value, next position)`` of a length-encoded integer at ``pos``.

    One byte below 251; ``0xfc`` + 2 bytes, ``0xfd`` + 3 bytes, ``0xfe`` + 8 bytes, little-endian.

    :raises UndecodableEventError: for the prefixes 251 (NULL) and 255, which no binlog field holds.
    """
    first = buf[pos]
    if first < 251:
        return first, pos + 1
    width = {252: 2, 253: 3, 254: 8}.get(first)
    if width is None:
        raise UndecodableEventError(f"invalid length-encoded integer prefix {first} at byte {pos}")
    return int.from_bytes(buf[pos + 1 : pos + 1 + width], "little"), pos + 1 + width


def length_encoded(value: int) -> bytes:
    """Return ``value`` (0 to 2**64 - 1) as a length-encoded integer: the inverse of :func:`packed_integer`."""
    if value < 251:
        return bytes([value])
    if value < 1 << 16:
        return b"\xfc" + value.to_bytes(2, "little")
    if value < 1 << 24:
        return b"\xfd" + value.to_bytes(3, "little")
    return b"\xfe" + value.to_bytes(8, "little")


def packed_bytes(buf: bytes, pos: int) -> tuple[bytes, int]:
    """Return ``(bytes, next position)`` of a length-encoded string at ``pos``."""
    length, pos = packed_integer(buf, pos)
    return bytes(buf[pos : pos + length]), pos + length


def varlen_unsigned(buf: bytes, pos: int) -> tuple[int, int]:
    """Return ``(value, next position)`` of a serialization-library variable-length unsigned integer.

    The count of trailing one bits of the first byte is the count of bytes that follow it (eight when the
    first byte is ``0xff``, then those eight bytes are the value); otherwise the value is the little-endian
    number of all the bytes shifted right by that count plus one.
    """
    first = buf[pos]
    if first == 0xFF:
        return int.from_bytes(buf[pos + 1 : pos + 9], "little"), pos + 9
    extra = 0
    while first >> extra & 1:
        extra += 1
    whole = int.from_bytes(buf[pos : pos + 1 + extra], "little")
    return whole >> (extra + 1), pos + 1 + extra


def varlen_signed(buf: bytes, pos: int) -> tuple[int, int]:
    """Return ``(value, next position)`` of a variable-length signed integer (zig-zag: bit 0 is the sign)."""
    raw, pos = varlen_unsigned(buf, pos)
    return (-(raw >> 1) - 1 if raw & 1 else raw >> 1), pos


def uuid_text(raw: bytes) -> str:
    """Return the 16-byte server UUID ``raw`` as text, ``3e11fa47-71ca-11e1-9e33-c80aa9429562``."""
    return str(uuid.UUID(bytes=bytes(raw)))


def cstring(buf: bytes, pos: int) -> tuple[bytes, int]:
    """Return ``(bytes, next position)`` of a NUL-terminated string at ``pos`` (the NUL is skipped)."""
    end = buf.index(0, pos)
    return bytes(buf[pos:end]), end + 1
