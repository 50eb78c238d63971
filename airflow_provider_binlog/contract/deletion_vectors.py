"""Deletion vectors of Delta tables: which rows of a data file a table no longer holds (merge-on-read).

A deletion vector (DV) is a set of row positions (0-based, in the order the Parquet file stores its rows) of one
data file that readers must skip. Everything here follows the Delta protocol (``PROTOCOL.md`` of delta-io/delta,
"Deletion Vectors" and "Appendix: Deletion Vector Format"):

- the set is a *RoaringBitmapArray*: the magic number 1681511377 (little-endian int32) followed by a 64-bit
  Roaring bitmap in the portable format of the Roaring format specification ("Extension for 64-bit
  implementations"), which ``pyroaring.BitMap64.serialize`` writes;
- a *DV file* holds one or more of them: a version byte ``1``, then for each DV its size (big-endian int32), the
  bitmap, and the CRC-32 of the bitmap (big-endian);
- an ``add`` or ``remove`` action refers to a DV by a *descriptor* (:class:`DeletionVector`): stored in a file
  named by a UUID beside the data (``storageType`` ``u``), at an absolute path (``p``), or inline in the log as
  Z85 text (``i``). A logical file of a table is the pair (path, DV): replacing a file's DV is a ``remove`` of the
  pair with the old descriptor and an ``add`` of the pair with the new one.

Used by the merge's commits (:mod:`~airflow_provider_binlog.contract.delta_log`) and by every reader of target
files that does not go through a Delta reader (``docs/adr/0037-deletion-vectors.md``).
"""

from __future__ import annotations

import struct
import uuid
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_provider_binlog.contract import ContractError
from airflow_provider_binlog.contract.uris import StorageOptions, filesystem_for, join_uri

if TYPE_CHECKING:
    from pyroaring import BitMap64

BITMAP_MAGIC = 1681511377
"""The RoaringBitmapArray magic number (PROTOCOL.md, "Deletion Vector Format"), written little-endian."""
DV_FILE_VERSION = 1
"""The DV file format version (PROTOCOL.md, "Deletion Vector File Storage Format")."""
DV_FILE_PREFIX = "deletion_vector_"
"""DV files are named ``deletion_vector_<uuid>.bin`` (PROTOCOL.md, "Derived Fields")."""

_Z85 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"
_Z85_VALUES = {char: value for value, char in enumerate(_Z85)}
_UUID_CHARS = 20
"""A UUID's 16 bytes are 20 Z85 characters."""


class DeletionVectorError(ContractError):
    """A deletion vector cannot be read: a bad descriptor, a cut or corrupt DV file, a checksum mismatch."""


def z85_encode(data: bytes) -> str:
    """Return the Z85 text of ``data`` (ZeroMQ RFC 32), whose length must be a multiple of 4.

    :raises ValueError: when it is not.
    """
    if len(data) % 4:
        raise ValueError(f"Z85 encodes whole 4-byte words; got {len(data)} bytes")
    chars: list[str] = []
    for (word,) in struct.iter_unpack(">I", data):
        digits = []
        for _ in range(5):
            word, digit = divmod(word, 85)
            digits.append(_Z85[digit])
        chars.extend(reversed(digits))
    return "".join(chars)


def z85_decode(text: str) -> bytes:
    """Return the bytes of Z85 ``text`` (ZeroMQ RFC 32), whose length must be a multiple of 5.

    :raises DeletionVectorError: on a length or a character Z85 does not allow.
    """
    if len(text) % 5:
        raise DeletionVectorError(f"Z85 text has {len(text)} characters, not a multiple of 5: {text[:40]!r}")
    out = bytearray()
    for start in range(0, len(text), 5):
        word = 0
        for char in text[start : start + 5]:
            value = _Z85_VALUES.get(char)
            if value is None:
                raise DeletionVectorError(f"{char!r} is not a Z85 character (in {text[:40]!r})")
            word = word * 85 + value
        if word >= 1 << 32:
            raise DeletionVectorError(f"Z85 group {text[start : start + 5]!r} is above 2**32")
        out += word.to_bytes(4, "big")
    return bytes(out)


def serialize_positions(positions: BitMap64) -> bytes:
    """Return the RoaringBitmapArray bytes of a set of row positions (magic number, then the portable bitmap)."""
    return struct.pack("<i", BITMAP_MAGIC) + positions.serialize()


def deserialize_positions(data: bytes) -> BitMap64:
    """Return the row positions of RoaringBitmapArray bytes.

    :raises DeletionVectorError: on another magic number (the Delta "native" format is not written by any
        writer we know of) or bytes the Roaring library cannot read.
    """
    from pyroaring import BitMap64

    if len(data) < 4 or struct.unpack_from("<i", data)[0] != BITMAP_MAGIC:
        head = data[:4].hex()
        raise DeletionVectorError(
            f"deletion vector starts with {head}, not the RoaringBitmapArray magic number"
        )
    try:
        return BitMap64.deserialize(data[4:])
    except ValueError as err:
        raise DeletionVectorError(f"deletion vector bitmap cannot be read: {err}") from err


@dataclass(frozen=True)
class DeletionVector:
    """A deletion vector descriptor, as the ``deletionVector`` field of an ``add`` or ``remove`` action.

    :param storage_type: ``u`` (file beside the data, named by a UUID), ``p`` (file at an absolute path) or
        ``i`` (inline, Z85).
    :param path_or_inline_dv: ``<random prefix><Z85 UUID>``, the absolute path, or the Z85 bitmap.
    :param size_in_bytes: the bitmap's size in bytes (before Z85 when inline).
    :param cardinality: the number of rows it deletes.
    :param offset: where in the DV file the DV starts (its size field); None when inline.
    """

    storage_type: str
    path_or_inline_dv: str
    size_in_bytes: int
    cardinality: int
    offset: int | None = None

    @property
    def unique_id(self) -> str:
        """Return the DV's id within its file's logical identity (PROTOCOL.md, "Derived Fields")."""
        base = f"{self.storage_type}{self.path_or_inline_dv}"
        return base if self.offset is None else f"{base}@{self.offset}"

    def relative_path(self) -> str | None:
        """Return the DV file's path relative to its table (``[<prefix>/]deletion_vector_<uuid>.bin``).

        None for a DV inline or at an absolute path (``p``).

        :raises DeletionVectorError: for an unknown storage type.
        """
        if self.storage_type in ("i", "p"):
            return None
        if self.storage_type != "u":
            raise DeletionVectorError(f"deletion vector storage type {self.storage_type!r} is not u, p or i")
        prefix, encoded = self.path_or_inline_dv[:-_UUID_CHARS], self.path_or_inline_dv[-_UUID_CHARS:]
        name = f"{DV_FILE_PREFIX}{uuid.UUID(bytes=z85_decode(encoded))}.bin"
        return f"{prefix}/{name}" if prefix else name

    def file_uri(self, table: str) -> str:
        """Return the location of the DV file of a table at ``table``.

        :raises DeletionVectorError: for an inline DV (it has no file) or an unknown storage type.
        """
        if self.storage_type == "p":
            return self.path_or_inline_dv
        relative = self.relative_path()
        if relative is None:
            raise DeletionVectorError(f"a deletion vector of storage type {self.storage_type!r} has no file")
        return join_uri(table, relative)

    def to_json(self) -> dict[str, Any]:
        """Return the descriptor as the log writes it (``offset`` left out when None)."""
        record: dict[str, Any] = {
            "storageType": self.storage_type,
            "pathOrInlineDv": self.path_or_inline_dv,
            "sizeInBytes": self.size_in_bytes,
            "cardinality": self.cardinality,
        }
        if self.offset is not None:
            record["offset"] = self.offset
        return record

    @classmethod
    def from_json(cls, record: Mapping[str, Any]) -> DeletionVector:
        """Return the descriptor of a log's (or checkpoint's) ``deletionVector`` record.

        :raises DeletionVectorError: when a field is missing.
        """
        try:
            return cls(
                storage_type=str(record["storageType"]),
                path_or_inline_dv=str(record["pathOrInlineDv"]),
                size_in_bytes=int(record["sizeInBytes"]),
                cardinality=int(record["cardinality"]),
                offset=None if record.get("offset") is None else int(record["offset"]),
            )
        except KeyError as err:
            raise DeletionVectorError(f"deletion vector descriptor {dict(record)} lacks {err}") from err


def inline_vector(positions: BitMap64) -> DeletionVector:
    """Return an inline descriptor holding ``positions`` (for small sets: no DV file to write or vacuum)."""
    data = serialize_positions(positions)
    padded = data + bytes(-len(data) % 4)
    return DeletionVector("i", z85_encode(padded), len(data), len(positions))


def write_vectors(
    table: str, vectors: Sequence[BitMap64], storage_options: StorageOptions | None = None
) -> list[DeletionVector]:
    """Write ``vectors`` into one new DV file of the table at ``table``; return their descriptors, in order.

    The file is ``<table>/deletion_vector_<uuid>.bin``, new for each call, so a retried or concurrent merge
    never overwrites a DV another version refers to; a DV file no version refers to is removed by the
    maintenance vacuum.

    :param table: table location.
    :param vectors: one set of row positions per data file.
    :param storage_options: storage options of the target store.
    """
    file_id = uuid.uuid4()
    body = bytearray([DV_FILE_VERSION])
    descriptors = []
    for positions in vectors:
        data = serialize_positions(positions)
        offset = len(body)
        body += struct.pack(">i", len(data)) + data + struct.pack(">I", zlib.crc32(data))
        descriptors.append(DeletionVector("u", z85_encode(file_id.bytes), len(data), len(positions), offset))
    fs, path = filesystem_for(join_uri(table, f"{DV_FILE_PREFIX}{file_id}.bin"), storage_options)
    with fs.open_output_stream(path) as out:
        out.write(bytes(body))
    return descriptors


def read_vector(
    table: str, vector: DeletionVector, storage_options: StorageOptions | None = None
) -> BitMap64:
    """Return the row positions a descriptor of the table at ``table`` deletes.

    :raises DeletionVectorError: when the DV file is missing or cut, its size field or checksum does not match,
        or the positions do not number ``cardinality``.
    """
    if vector.storage_type == "i":
        data = z85_decode(vector.path_or_inline_dv)[: vector.size_in_bytes]
    else:
        data = _read_from_file(table, vector, storage_options)
    positions = deserialize_positions(data)
    if len(positions) != vector.cardinality:
        raise DeletionVectorError(
            f"deletion vector {vector.unique_id} of {table} holds {len(positions)} rows, its descriptor says "
            f"{vector.cardinality}"
        )
    return positions


def _read_from_file(table: str, vector: DeletionVector, storage_options: StorageOptions | None) -> bytes:
    uri = vector.file_uri(table)
    fs, path = filesystem_for(uri, storage_options)
    start = vector.offset or 0
    try:
        with fs.open_input_file(path) as source:
            source.seek(start)
            raw = source.read(4 + vector.size_in_bytes + 4)
    except (FileNotFoundError, OSError) as err:
        raise DeletionVectorError(f"deletion vector file {uri} cannot be read: {err}") from err
    if len(raw) != 8 + vector.size_in_bytes:
        raise DeletionVectorError(f"deletion vector file {uri} ends before the DV at byte {start}")
    (size,) = struct.unpack_from(">i", raw)
    data = raw[4 : 4 + vector.size_in_bytes]
    (checksum,) = struct.unpack_from(">I", raw, 4 + vector.size_in_bytes)
    if size != vector.size_in_bytes or checksum != zlib.crc32(data):
        raise DeletionVectorError(
            f"deletion vector at byte {start} of {uri} does not match its descriptor (size {size}, descriptor "
            f"{vector.size_in_bytes}; checksum {checksum:#010x}, data {zlib.crc32(data):#010x})"
        )
    return data
