"""Binlog coordinates: a (file, position) pair plus the GTID set executed up to it.

Coordinates are only meaningful on the server that wrote them (MySQL manual, "The Binary Log";
MariaDB KB, "Binary Log"). Files are named ``<basename>.<6+ digit index>`` and an index grows by one
per rotation, so on one server ``(file index, position)`` orders events.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

_INDEX = re.compile(r"\.(\d+)$")


def file_index(binlog_file: str) -> int:
    """Return the numeric suffix of a binlog file name (``mysql-bin.000042`` -> 42).

    :raises ValueError: when the name has no numeric suffix.
    """
    match = _INDEX.search(binlog_file)
    if match is None:
        raise ValueError(f"not a binlog file name: {binlog_file!r} (expected <basename>.<number>)")
    return int(match.group(1))


@dataclass(frozen=True, order=False)
class BinlogPosition:
    """A transaction boundary in the binlog of one server.

    :param file: binlog file name, e.g. ``mariadb-bin.000003``.
    :param pos: byte offset in that file of the first event after the boundary.
    :param gtid_set: text of the GTID set executed up to the boundary (MySQL ``Executed_Gtid_Set``
        or MariaDB ``BINLOG_GTID_POS(file, pos)``); empty when GTIDs are off.
    """

    file: str
    pos: int
    gtid_set: str = ""

    @property
    def key(self) -> tuple[int, int]:
        """Return ``(file index, pos)``, which orders positions of one server."""
        return (file_index(self.file), self.pos)

    def __lt__(self, other: BinlogPosition) -> bool:
        return self.key < other.key

    def __le__(self, other: BinlogPosition) -> bool:
        return self.key <= other.key

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON form used in state Variables and manifests."""
        return {"file": self.file, "pos": self.pos, "gtid_set": self.gtid_set}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BinlogPosition:
        """Build a position from :meth:`to_dict` output.

        :raises ValueError: when a field is missing or of the wrong type.
        """
        try:
            position = cls(
                file=str(data["file"]), pos=int(data["pos"]), gtid_set=str(data.get("gtid_set", ""))
            )
        except (KeyError, TypeError) as err:
            raise ValueError(f"malformed binlog position {data!r}: {err}") from err
        file_index(position.file)
        return position

    def __str__(self) -> str:
        gtid = f" gtid={self.gtid_set}" if self.gtid_set else ""
        return f"{self.file}:{self.pos}{gtid}"
