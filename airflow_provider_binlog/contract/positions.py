"""Binlog positions: one value type from the event reader to the ledger, serialised one way.

A :class:`BinlogPosition` is a transaction boundary: binlog coordinates ``(file, pos)`` plus the GTID set
executed up to it. Coordinates are only meaningful on the server that wrote them (MySQL manual, "The Binary
Log"; MariaDB KB, "Binary Log"); the GTID set is the identity of the position across servers. Files are
named ``<basename>.<6+ digit index>`` and an index grows by one per rotation, so on one server
``(file index, pos)`` orders positions.

Its one serialised form is ``{"file", "pos", "gtid_set"}`` (:meth:`BinlogPosition.to_dict`), the same in the
state Variable, manifests, snapshot watermarks and XComs. The pipeline's pydantic models hold it as a field
(pydantic validates a standard dataclass by its fields and ``__post_init__``, and serialises it to that
form), so no other type stands for a position. Standard library only: the contract imports nothing else.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, ClassVar

_INDEX = re.compile(r"\.(\d+)$")
FIRST_EVENT_POS = 4
"""The offset of the first event of every binlog file (after the 4 magic bytes): the smallest position."""


def file_index(binlog_file: str) -> int:
    """Return the numeric suffix of a binlog file name (``mysql-bin.000042`` -> 42).

    :raises ValueError: when the name has no numeric suffix.
    """
    match = _INDEX.search(binlog_file)
    if match is None:
        raise ValueError(f"not a binlog file name: {binlog_file!r} (expected <basename>.<number>)")
    return int(match.group(1))


@dataclass(frozen=True)
class BinlogPosition:
    """A transaction boundary in the binlog of one server.

    Positions of one server order by :attr:`key` (``<``, ``<=``); equality also compares the GTID set.

    :param file: binlog file name, e.g. ``mariadb-bin.000003``.
    :param pos: byte offset in that file of the first event after the boundary (4 or more).
    :param gtid_set: text of the GTID set executed up to the boundary (MySQL ``Executed_Gtid_Set``
        or MariaDB ``BINLOG_GTID_POS(file, pos)``); empty when GTIDs are off.
    :raises ValueError: when ``file`` is no binlog file name or ``pos`` is below 4.
    """

    __pydantic_config__: ClassVar[dict[str, Any]] = {"extra": "forbid"}

    file: str
    pos: int
    gtid_set: str = ""

    def __post_init__(self) -> None:
        file_index(self.file)
        if self.pos < FIRST_EVENT_POS:
            raise ValueError(f"binlog position {self.file}:{self.pos} lies before the first event (4)")

    @property
    def key(self) -> tuple[int, int]:
        """Return ``(file index, pos)``, which orders positions of one server."""
        return (file_index(self.file), self.pos)

    def __lt__(self, other: BinlogPosition) -> bool:
        return self.key < other.key

    def __le__(self, other: BinlogPosition) -> bool:
        return self.key <= other.key

    def to_dict(self) -> dict[str, Any]:
        """Return the one serialised form: ``{"file", "pos", "gtid_set"}``."""
        return {"file": self.file, "pos": self.pos, "gtid_set": self.gtid_set}

    @classmethod
    def from_dict(cls, data: Any) -> BinlogPosition:
        """Build a position from :meth:`to_dict` output.

        :raises ValueError: when a field is missing, of the wrong type or out of range.
        """
        try:
            return cls(file=str(data["file"]), pos=int(data["pos"]), gtid_set=str(data.get("gtid_set", "")))
        except (KeyError, TypeError, AttributeError) as err:
            raise ValueError(f"malformed binlog position {data!r}: {err}") from err

    def __str__(self) -> str:
        gtid = f" gtid={self.gtid_set}" if self.gtid_set else ""
        return f"{self.file}:{self.pos}{gtid}"
