"""MySQL's binary DECIMAL format (``decimal2bin``, MySQL source ``strings/decimal.cc``; MySQL internals, "Decimal").

Big-endian groups of 9 digits in 4 bytes, partial groups in fewer bytes, integer part first; the sign bit
of the first byte is flipped, and a negative value has all its bytes inverted. The row decoder
(:mod:`~airflow_provider_binlog.extract.decoder`) generates inline code from :func:`decimal_groups`; binary
JSON (:mod:`~airflow_provider_binlog.extract.json_binary`) decodes its opaque DECIMAL values with
:func:`decode_decimal`.
"""

from __future__ import annotations

import decimal

DIG2BYTES = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)
"""Bytes of a partial group of n decimal digits (``strings/decimal.cc``, ``dig2bytes``)."""


def decimal_groups(precision: int, scale: int) -> list[tuple[int, int]]:
    """Return the (bytes, digits) groups of DECIMAL(p,s) in storage order (``decimal2bin``)."""
    integral = precision - scale
    groups = []
    if integral % 9:
        groups.append((DIG2BYTES[integral % 9], integral % 9))
    groups += [(4, 9)] * (integral // 9 + scale // 9)
    if scale % 9:
        groups.append((DIG2BYTES[scale % 9], scale % 9))
    return groups


def decode_decimal(raw: bytes, precision: int, scale: int) -> decimal.Decimal:
    """Return the DECIMAL(``precision``, ``scale``) stored in ``raw``.

    The format is ``decimal2bin``'s (:mod:`airflow_provider_binlog.extract.decoder` emits the same format inline); used for the DECIMAL values inside
    MySQL's binary JSON.

    :raises ValueError: when ``raw`` is shorter than the format's width.
    """
    groups = decimal_groups(precision, scale)
    width = sum(size for size, _ in groups)
    if len(raw) < width:
        raise ValueError(f"DECIMAL({precision},{scale}) needs {width} bytes, got {len(raw)}")
    data = bytearray(raw[:width])
    negative = not data[0] & 0x80
    data[0] ^= 0x80
    if negative:
        data = bytearray(b ^ 0xFF for b in data)
    digits, pos = [], 0
    for size, count in groups:
        digits.append(str(int.from_bytes(data[pos : pos + size], "big")).zfill(count))
        pos += size
    integral = precision - scale
    text = "".join(digits)
    whole, fraction = text[:integral].lstrip("0") or "0", text[integral:]
    return decimal.Decimal(("-" if negative else "") + whole + ("." + fraction if fraction else ""))
