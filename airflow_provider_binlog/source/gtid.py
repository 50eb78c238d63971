"""Compute with GTID sets of MySQL and MariaDB as sets of transaction sequence numbers.

Both flavors are modelled uniformly: a :class:`GtidSet` maps a *key* to a set of closed integer
intervals of transaction sequence numbers.

* **MySQL** (MySQL 8.4 Reference Manual, "Replication with Global Transaction Identifiers",
  section "GTID Format and Storage"): a GTID is ``source_uuid:transaction_id`` or, since 8.4,
  ``source_uuid:tag:transaction_id``.  The key is the pair ``(uuid, tag)`` with ``tag == ""``
  for untagged GTIDs.  A GTID set is written
  ``uuid:1-5:7:tag_a:1-3,uuid2:1-3``: intervals after a tag belong to that tag.  Canonical
  output lowercases uuids and tags, sorts keys (untagged first per uuid), merges intervals and
  writes a single-transaction interval as ``n``.
* **MariaDB** (MariaDB Knowledge Base, "GTID"): a GTID is ``domain_id-server_id-seq_no``.  A
  GTID *position* such as ``@@gtid_binlog_pos`` = ``0-1-100,1-2-5`` lists the last GTID of each
  replication domain and means "every transaction of that domain up to and including seq_no".
  The key is the domain id; each domain also remembers the server id of its last GTID, which is
  needed to write a position back.  The model treats ``(domain, seq_no)`` as the identity of a
  transaction, which holds under ``gtid_strict_mode`` (seq_no increases monotonically within a
  domain); server ids are formatting metadata and take no part in ``==`` or ``hash``.

MariaDB sets that are not a prefix of their domains (for example ``head - checkpoint``) use a
*range form* defined by this module: ``domain-server-lo..hi[:lo..hi...]``, for instance
``0-1-101..150`` or ``0-1-1..5:7..9``.  An entry whose tail is a plain number is a position entry
``domain-server-seq`` meaning ``1..seq``; ``seq == 0`` denotes no transaction of that domain.
Domains in prefix form are always written as position entries, so every position formats
exactly as MariaDB prints it.

One module of about 700 lines on purpose: parsing, formatting and the set algebra of both flavors share
the interval representation, and splitting them would split one data type.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Literal, TypeAlias

Flavor: TypeAlias = Literal["mysql", "mariadb"]
"""GTID dialect of a server."""

Interval: TypeAlias = tuple[int, int]
"""Closed interval ``(first, last)`` of transaction sequence numbers."""

GtidKey: TypeAlias = tuple[str, str] | int
"""Key of a GTID: ``(uuid, tag)`` for MySQL, the domain id for MariaDB."""

Ranges: TypeAlias = tuple[tuple[GtidKey, tuple[Interval, ...]], ...]
"""Canonical content of a :class:`GtidSet`: keys sorted, intervals sorted and merged."""

MYSQL_MAX_GNO = 2**63 - 1
"""Largest MySQL transaction number (a signed 64-bit integer, manual "GTID Format and Storage")."""

MARIADB_MAX_ID = 2**32 - 1
"""Largest MariaDB domain id and server id (32-bit unsigned, MariaDB KB "GTID")."""

MARIADB_MAX_SEQ = 2**64 - 1
"""Largest MariaDB sequence number (64-bit unsigned, MariaDB KB "GTID")."""

_UUID_RE = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", re.IGNORECASE)
_TAG_RE = re.compile(r"[a-z_][a-z0-9_]{0,31}", re.IGNORECASE)
_MYSQL_INTERVAL_RE = re.compile(r"([0-9]+)(?:-([0-9]+))?")
_MARIADB_ENTRY_RE = re.compile(r"([0-9]+)-([0-9]+)-(.+)")
_MARIADB_RANGE_RE = re.compile(r"([0-9]+)\.\.([0-9]+)")
_DIGITS_RE = re.compile(r"[0-9]+")


def _check_flavor(flavor: str) -> Flavor:
    """Return ``flavor`` as a :data:`Flavor`.

    :param flavor: ``"mysql"`` or ``"mariadb"``.
    :raises ValueError: for any other value.
    """
    if flavor == "mysql":
        return "mysql"
    if flavor == "mariadb":
        return "mariadb"
    raise ValueError(f"unknown GTID flavor {flavor!r}; expected 'mysql' or 'mariadb'")


def _max_seq(flavor: Flavor) -> int:
    """Return the largest valid transaction sequence number of ``flavor``.

    :param flavor: GTID dialect.
    """
    return MYSQL_MAX_GNO if flavor == "mysql" else MARIADB_MAX_SEQ


def _sort_key(key: GtidKey) -> tuple[int, str, str]:
    """Return a sort key ordering MySQL keys by (uuid, tag) and MariaDB keys by domain.

    :param key: a MySQL or MariaDB key.
    """
    if isinstance(key, int):
        return (key, "", "")
    return (0, key[0], key[1])


# --------------------------------------------------------------------------- interval algebra


def _normalize(intervals: Iterable[Interval]) -> tuple[Interval, ...]:
    """Sort ``intervals`` and merge overlapping or adjacent ones.

    :param intervals: closed intervals in any order.
    """
    merged: list[Interval] = []
    for lo, hi in sorted(intervals):
        if merged and lo <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(hi, merged[-1][1]))
        else:
            merged.append((lo, hi))
    return tuple(merged)


def _union(a: tuple[Interval, ...], b: tuple[Interval, ...]) -> tuple[Interval, ...]:
    """Return the union of two canonical interval tuples.

    :param a: canonical intervals.
    :param b: canonical intervals.
    """
    return _normalize(a + b)


def _intersect(a: tuple[Interval, ...], b: tuple[Interval, ...]) -> tuple[Interval, ...]:
    """Return the intersection of two canonical interval tuples.

    :param a: canonical intervals.
    :param b: canonical intervals.
    """
    out: list[Interval] = []
    i = j = 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if lo <= hi:
            out.append((lo, hi))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return tuple(out)


def _subtract(a: tuple[Interval, ...], b: tuple[Interval, ...]) -> tuple[Interval, ...]:
    """Return the numbers of ``a`` that are not in ``b``.

    :param a: canonical intervals.
    :param b: canonical intervals.
    """
    out: list[Interval] = []
    for lo, hi in a:
        cur = lo
        for blo, bhi in b:
            if bhi < cur:
                continue
            if blo > hi:
                break
            if blo > cur:
                out.append((cur, blo - 1))
            cur = bhi + 1
            if cur > hi:
                break
        if cur <= hi:
            out.append((cur, hi))
    return tuple(out)


# --------------------------------------------------------------------------- parsing helpers


def _parse_int(text: str, low: int, high: int, what: str, source: str) -> int:
    """Parse an ASCII decimal number and check it lies in ``[low, high]``.

    :param text: the digits.
    :param low: smallest accepted value.
    :param high: largest accepted value.
    :param what: name of the number, for the error message.
    :param source: the whole input text, for the error message.
    :raises ValueError: if ``text`` is not decimal digits or out of range.
    """
    if not _DIGITS_RE.fullmatch(text):
        raise ValueError(f"malformed GTID text {source!r}: {what} {text!r} is not a number")
    value = int(text)
    if not low <= value <= high:
        raise ValueError(f"malformed GTID text {source!r}: {what} {value} outside [{low}, {high}]")
    return value


def _parse_uuid(text: str, source: str) -> str:
    """Return the lowercase form of a hyphenated source uuid.

    :param text: the uuid text.
    :param source: the whole input text, for the error message.
    :raises ValueError: if ``text`` is not a uuid (manual "GTID Format and Storage").
    """
    if not _UUID_RE.fullmatch(text):
        raise ValueError(f"malformed MySQL GTID text {source!r}: {text!r} is not a source uuid")
    return text.lower()


def _mysql_interval(text: str, source: str) -> Interval | None:
    """Parse a MySQL interval ``a-b`` or ``a``, or return ``None`` if ``text`` is not one.

    :param text: one colon-separated component of a MySQL GTID set entry.
    :param source: the whole input text, for the error message.
    :raises ValueError: if the numbers are 0, too large or ``b < a`` (manual "GTID Sets").
    """
    match = _MYSQL_INTERVAL_RE.fullmatch(text)
    if match is None:
        return None
    lo = _parse_int(match.group(1), 1, MYSQL_MAX_GNO, "transaction number", source)
    hi_text = match.group(2)
    hi = lo if hi_text is None else _parse_int(hi_text, 1, MYSQL_MAX_GNO, "transaction number", source)
    if hi < lo:
        raise ValueError(f"malformed MySQL GTID set {source!r}: interval {text!r} ends before it starts")
    return (lo, hi)


def _parse_mysql_entry(entry: str, source: str, out: dict[GtidKey, list[Interval]]) -> None:
    """Add the intervals of one ``uuid[:tag]:interval[:...]`` entry to ``out``.

    :param entry: one comma-separated entry, stripped.
    :param source: the whole input text, for the error message.
    :param out: accumulator, key to intervals.
    :raises ValueError: if the entry is malformed or a uuid/tag has no interval.
    """
    uuid_text, *components = entry.split(":")
    uuid = _parse_uuid(uuid_text, source)
    tag, seen_interval = "", False
    for component in components:
        interval = _mysql_interval(component, source)
        if interval is not None:
            out.setdefault((uuid, tag), []).append(interval)
            seen_interval = True
            continue
        if not _TAG_RE.fullmatch(component) or (tag and not seen_interval):
            raise ValueError(f"malformed MySQL GTID set {source!r}: bad component {component!r}")
        tag, seen_interval = component.lower(), False
    if not seen_interval:
        raise ValueError(f"malformed MySQL GTID set {source!r}: entry {entry!r} has no interval")


def _parse_mariadb_tail(tail: str, source: str) -> tuple[Interval, ...]:
    """Parse the part after ``domain-server-``: a seq_no or ``lo..hi[:lo..hi...]``.

    :param tail: the text after the second hyphen.
    :param source: the whole input text, for the error message.
    :raises ValueError: if a number is out of range or an interval is reversed.
    """
    if _DIGITS_RE.fullmatch(tail):
        seq = _parse_int(tail, 0, MARIADB_MAX_SEQ, "seq_no", source)
        return ((1, seq),) if seq else ()
    intervals: list[Interval] = []
    for part in tail.split(":"):
        match = _MARIADB_RANGE_RE.fullmatch(part)
        if match is None:
            raise ValueError(f"malformed MariaDB GTID text {source!r}: bad seq_no or range {part!r}")
        lo = _parse_int(match.group(1), 1, MARIADB_MAX_SEQ, "seq_no", source)
        hi = _parse_int(match.group(2), 1, MARIADB_MAX_SEQ, "seq_no", source)
        if hi < lo:
            raise ValueError(f"malformed MariaDB GTID text {source!r}: range {part!r} ends before it starts")
        intervals.append((lo, hi))
    return tuple(intervals)


def _parse_mariadb_entry(entry: str, source: str) -> tuple[int, int, tuple[Interval, ...]]:
    """Parse one ``domain-server-seq`` or range-form entry into (domain, server, intervals).

    :param entry: one comma-separated entry, stripped.
    :param source: the whole input text, for the error message.
    :raises ValueError: if the entry is malformed (MariaDB KB "GTID").
    """
    match = _MARIADB_ENTRY_RE.fullmatch(entry)
    if match is None:
        raise ValueError(f"malformed MariaDB GTID text {source!r}: bad entry {entry!r}")
    domain = _parse_int(match.group(1), 0, MARIADB_MAX_ID, "domain_id", source)
    server = _parse_int(match.group(2), 0, MARIADB_MAX_ID, "server_id", source)
    return domain, server, _parse_mariadb_tail(match.group(3), source)


def _split_entries(text: str) -> list[str]:
    """Split a GTID set text at commas, allowing whitespace and newlines around them.

    :param text: the whole text; blank text yields no entry.
    :raises ValueError: on an empty entry (``a,,b`` or a trailing comma).
    """
    if not text.strip():
        return []
    entries = [entry.strip() for entry in text.split(",")]
    if not all(entries):
        raise ValueError(f"malformed GTID text {text!r}: empty entry between commas")
    return entries


def parse_gtid(text: str, flavor: str) -> tuple[GtidKey, int]:
    """Parse a single GTID into its key and transaction sequence number.

    MySQL: ``uuid:n`` or ``uuid:tag:n`` (manual "GTID Format and Storage"), key ``(uuid, tag)``.
    MariaDB: ``domain-server-seq`` (MariaDB KB "GTID"), key ``domain``; the server id is dropped,
    see :func:`parse_gtid_with_server`.

    :param text: the GTID text.
    :param flavor: ``"mysql"`` or ``"mariadb"``.
    :raises ValueError: if the flavor is unknown or the text is not one GTID.
    """
    key, seq, _server = parse_gtid_with_server(text, flavor)
    return key, seq


def parse_gtid_with_server(text: str, flavor: str) -> tuple[GtidKey, int, int | None]:
    """Parse a single GTID into key, sequence number and MariaDB server id (``None`` for MySQL).

    :param text: the GTID text, surrounding whitespace allowed.
    :param flavor: ``"mysql"`` or ``"mariadb"``.
    :raises ValueError: if the flavor is unknown or the text is not one GTID.
    """
    checked, stripped = _check_flavor(flavor), text.strip()
    if checked == "mysql":
        return _parse_mysql_gtid(stripped, text)
    match = _MARIADB_ENTRY_RE.fullmatch(stripped)
    if match is None or not _DIGITS_RE.fullmatch(match.group(3)):
        raise ValueError(f"malformed MariaDB GTID {text!r}; expected domain-server-seq")
    domain = _parse_int(match.group(1), 0, MARIADB_MAX_ID, "domain_id", text)
    server = _parse_int(match.group(2), 0, MARIADB_MAX_ID, "server_id", text)
    return domain, _parse_int(match.group(3), 1, MARIADB_MAX_SEQ, "seq_no", text), server


def _parse_mysql_gtid(stripped: str, source: str) -> tuple[GtidKey, int, None]:
    """Parse ``uuid:n`` or ``uuid:tag:n``.

    :param stripped: the GTID text without surrounding whitespace.
    :param source: the original text, for the error message.
    :raises ValueError: if the text is not one MySQL GTID.
    """
    parts = stripped.split(":")
    if len(parts) not in (2, 3) or (len(parts) == 3 and not _TAG_RE.fullmatch(parts[1])):
        raise ValueError(f"malformed MySQL GTID {source!r}; expected uuid:n or uuid:tag:n")
    tag = parts[1].lower() if len(parts) == 3 else ""
    seq = _parse_int(parts[-1], 1, MYSQL_MAX_GNO, "transaction number", source)
    return (_parse_uuid(parts[0], source), tag), seq, None


# --------------------------------------------------------------------------- formatting helpers


def _format_mysql_intervals(intervals: tuple[Interval, ...]) -> str:
    """Format intervals as ``a-b:c:e-f``.

    :param intervals: canonical intervals.
    """
    return ":".join(str(lo) if lo == hi else f"{lo}-{hi}" for lo, hi in intervals)


def _format_mysql(ranges: Ranges) -> str:
    """Format MySQL ranges as ``uuid:ivs:tag:ivs,uuid2:ivs`` grouped by uuid.

    :param ranges: canonical MySQL ranges.
    """
    entries: dict[str, list[str]] = {}
    for key, intervals in ranges:
        if isinstance(key, int):
            continue
        uuid, tag = key
        parts = entries.setdefault(uuid, [uuid])
        parts.extend([tag] if tag else [])
        parts.append(_format_mysql_intervals(intervals))
    return ",".join(":".join(parts) for parts in entries.values())


def _format_mariadb_entry(domain: int, server: int, intervals: tuple[Interval, ...]) -> str:
    """Format one domain as ``d-s-seq`` if it is a prefix, else ``d-s-lo..hi[:lo..hi]``.

    :param domain: the domain id.
    :param server: the server id of the domain's last GTID.
    :param intervals: canonical, non-empty intervals.
    """
    if len(intervals) == 1 and intervals[0][0] == 1:
        return f"{domain}-{server}-{intervals[0][1]}"
    return f"{domain}-{server}-" + ":".join(f"{lo}..{hi}" for lo, hi in intervals)


# --------------------------------------------------------------------------- the set


@dataclass(frozen=True, repr=False)
class GtidSet:
    """Immutable set of GTIDs of one flavor; ``==`` and ``hash`` compare transactions only.

    Build one with :meth:`parse`, :meth:`empty` or the constructor, which normalizes its
    arguments (merges and sorts intervals, lowercases uuids and tags, drops empty keys).

    :param flavor: ``"mysql"`` or ``"mariadb"``.
    :param ranges: pairs ``(key, intervals)``; keys may repeat, intervals may overlap.
    :param servers: MariaDB only: pairs ``(domain, server_id of the domain's last GTID)``;
        every domain of ``ranges`` needs one.  Must be empty for MySQL.
    :raises ValueError: on an unknown flavor, a key or number invalid for the flavor, or a
        MariaDB domain without a server id.
    """

    flavor: Flavor
    ranges: Ranges = ()
    servers: tuple[tuple[int, int], ...] = field(default=(), compare=False)

    def __post_init__(self) -> None:
        flavor = _check_flavor(self.flavor)
        merged: dict[GtidKey, list[Interval]] = {}
        for key, intervals in self.ranges:
            merged.setdefault(_check_key(flavor, key), []).extend(_check_intervals(flavor, intervals))
        canonical = tuple(
            (key, _normalize(merged[key])) for key in sorted(merged, key=_sort_key) if merged[key]
        )
        object.__setattr__(self, "ranges", canonical)
        object.__setattr__(self, "servers", _check_servers(flavor, canonical, self.servers))

    # ---------------------------------------------------------------- construction

    @classmethod
    def empty(cls, flavor: str) -> GtidSet:
        """Return the empty set of ``flavor``.

        :param flavor: ``"mysql"`` or ``"mariadb"``.
        :raises ValueError: if the flavor is unknown.
        """
        return cls(_check_flavor(flavor))

    @classmethod
    def parse(cls, text: str, flavor: str) -> GtidSet:
        """Parse a GTID set (MySQL) or position / range form (MariaDB); blank text is empty.

        Commas may be surrounded by whitespace and newlines, as MySQL prints ``gtid_executed``.
        MySQL duplicates and overlaps are merged (manual "GTID Sets"); a MariaDB domain may
        appear only once (MariaDB KB "GTID", duplicate domain ids are rejected by the server).

        :param text: the GTID set text.
        :param flavor: ``"mysql"`` or ``"mariadb"``.
        :raises ValueError: naming the offending text if it is malformed or the flavor unknown.
        """
        checked = _check_flavor(flavor)
        if checked == "mysql":
            return cls._parse_mysql(text)
        return cls._parse_mariadb(text)

    @classmethod
    def _parse_mysql(cls, text: str) -> GtidSet:
        """Parse MySQL ``uuid[:tag]:intervals`` entries.

        :param text: the GTID set text.
        :raises ValueError: if it is malformed.
        """
        out: dict[GtidKey, list[Interval]] = {}
        for entry in _split_entries(text):
            _parse_mysql_entry(entry, text, out)
        return cls("mysql", tuple((key, tuple(ivs)) for key, ivs in out.items()))

    @classmethod
    def _parse_mariadb(cls, text: str) -> GtidSet:
        """Parse MariaDB position or range-form entries.

        :param text: the GTID position text.
        :raises ValueError: if it is malformed or repeats a domain.
        """
        ranges: dict[GtidKey, tuple[Interval, ...]] = {}
        servers: dict[int, int] = {}
        for entry in _split_entries(text):
            domain, server, intervals = _parse_mariadb_entry(entry, text)
            if domain in servers:
                raise ValueError(f"malformed MariaDB GTID text {text!r}: domain {domain} appears twice")
            ranges[domain], servers[domain] = intervals, server
        return cls("mariadb", tuple(ranges.items()), tuple(servers.items()))

    # ---------------------------------------------------------------- formatting

    def __str__(self) -> str:
        """Return the canonical text: MySQL set, MariaDB position or range form."""
        if self.flavor == "mysql":
            return _format_mysql(self.ranges)
        servers = dict(self.servers)
        return ",".join(
            _format_mariadb_entry(key, servers[key], intervals)
            for key, intervals in self.ranges
            if isinstance(key, int)
        )

    def __repr__(self) -> str:
        """Return an expression that rebuilds the set."""
        return f"GtidSet.parse({str(self)!r}, {self.flavor!r})"

    @property
    def is_position(self) -> bool:
        """Return True for a MariaDB set whose every domain is one interval starting at 1.

        Always False for MySQL, which has no position form.
        """
        return self.flavor == "mariadb" and all(
            len(intervals) == 1 and intervals[0][0] == 1 for _key, intervals in self.ranges
        )

    def to_position(self) -> str:
        """Return the MariaDB GTID position text ``domain-server-seq,...`` (MariaDB KB "GTID").

        :raises ValueError: for MySQL sets, and for MariaDB sets that are not a prefix of every
            domain (e.g. the result of :meth:`subtract`).
        """
        if not self.is_position:
            raise ValueError(f"GTID set {str(self)!r} ({self.flavor}) is not a MariaDB GTID position")
        return str(self)

    def last_gtids(self) -> dict[int, tuple[int, int]]:
        """Return ``{domain: (server_id, seq_no)}`` of a MariaDB set's last GTID in each domain ({} for MySQL).

        Unlike ``==``, which compares transactions only, this tells apart two servers that wrote the same
        sequence number of a domain (a diverged replica, MariaDB KB "GTID").
        """
        servers = dict(self.servers)
        return {
            key: (servers[key], intervals[-1][1]) for key, intervals in self.ranges if isinstance(key, int)
        }

    # ---------------------------------------------------------------- queries

    @property
    def is_empty(self) -> bool:
        """Return True when the set holds no transaction."""
        return not self.ranges

    def count(self) -> int:
        """Return the number of transactions in the set."""
        return sum(hi - lo + 1 for _key, intervals in self.ranges for lo, hi in intervals)

    def contains(self, other: GtidSet) -> bool:
        """Return True when every transaction of ``other`` is in this set.

        :param other: a set of the same flavor.
        :raises ValueError: if the flavors differ.
        """
        return self._combine(other, _subtract, swap=True).is_empty

    def contains_gtid(self, gtid: str) -> bool:
        """Return True when the single GTID ``gtid`` is in this set.

        For MariaDB only ``(domain, seq_no)`` is compared; the server id is ignored.

        :param gtid: ``uuid:n``, ``uuid:tag:n`` or ``domain-server-seq``.
        :raises ValueError: if ``gtid`` is malformed for this set's flavor.
        """
        key, seq = parse_gtid(gtid, self.flavor)
        return any(lo <= seq <= hi for lo, hi in dict(self.ranges).get(key, ()))

    # ---------------------------------------------------------------- algebra

    def add(self, gtid: str) -> GtidSet:
        """Return a new set with the single GTID ``gtid`` added.

        MariaDB: the GTID's server id becomes the domain's last server unless the domain already
        holds a higher seq_no (under ``gtid_strict_mode`` seq_no only grows, MariaDB KB "GTID").

        :param gtid: ``uuid:n``, ``uuid:tag:n`` or ``domain-server-seq``.
        :raises ValueError: if ``gtid`` is malformed for this set's flavor.
        """
        key, seq, server = parse_gtid_with_server(gtid, self.flavor)
        servers = dict(self.servers)
        last = dict(self.ranges).get(key, ((0, 0),))[-1][1]
        if server is not None and isinstance(key, int) and seq >= last:
            servers[key] = server
        return GtidSet(self.flavor, (*self.ranges, (key, ((seq, seq),))), tuple(servers.items()))

    def union(self, other: GtidSet) -> GtidSet:
        """Return the transactions in this set or in ``other``.

        :param other: a set of the same flavor.
        :raises ValueError: if the flavors differ.
        """
        return self._combine(other, _union)

    def subtract(self, other: GtidSet) -> GtidSet:
        """Return the transactions in this set but not in ``other``.

        :param other: a set of the same flavor.
        :raises ValueError: if the flavors differ.
        """
        return self._combine(other, _subtract)

    def intersection(self, other: GtidSet) -> GtidSet:
        """Return the transactions in both this set and ``other``.

        :param other: a set of the same flavor.
        :raises ValueError: if the flavors differ.
        """
        return self._combine(other, _intersect)

    def __or__(self, other: GtidSet) -> GtidSet:
        """Return :meth:`union`."""
        return self.union(other)

    def __sub__(self, other: GtidSet) -> GtidSet:
        """Return :meth:`subtract`."""
        return self.subtract(other)

    def __and__(self, other: GtidSet) -> GtidSet:
        """Return :meth:`intersection`."""
        return self.intersection(other)

    def _combine(
        self,
        other: GtidSet,
        op: Callable[[tuple[Interval, ...], tuple[Interval, ...]], tuple[Interval, ...]],
        swap: bool = False,
    ) -> GtidSet:
        """Apply ``op`` key by key and pick each MariaDB domain's server with :func:`_pick_server`.

        :param other: a set of the same flavor.
        :param op: interval operation.
        :param swap: compute ``op(other, self)`` instead of ``op(self, other)``.
        :raises ValueError: if the flavors differ.
        """
        if not isinstance(other, GtidSet) or other.flavor != self.flavor:
            raise ValueError(f"cannot combine a {self.flavor} GTID set with {other!r}")
        left, right = (other, self) if swap else (self, other)
        a, b = dict(left.ranges), dict(right.ranges)
        ranges = {key: op(a.get(key, ()), b.get(key, ())) for key in a.keys() | b.keys()}
        servers = {
            key: _pick_server(key, ivs[-1][1], left, right)
            for key, ivs in ranges.items()
            if ivs and isinstance(key, int)
        }
        return GtidSet(self.flavor, tuple(ranges.items()), tuple(servers.items()))


def _pick_server(domain: int, last_seq: int, left: GtidSet, right: GtidSet) -> int:
    """Return the server id of the operand whose last seq_no in ``domain`` is ``last_seq``.

    Falls back to ``left`` (then ``right``) when neither operand ends there, so the result of an
    operation keeps the best-known last server of each domain.

    :param domain: MariaDB domain id.
    :param last_seq: largest seq_no of the result in that domain.
    :param left: first operand.
    :param right: second operand.
    """
    candidates = [(gs, dict(gs.ranges).get(domain)) for gs in (left, right)]
    for gs, ivs in candidates:
        if ivs and ivs[-1][1] == last_seq:
            return dict(gs.servers)[domain]
    return next(dict(gs.servers)[domain] for gs, ivs in candidates if ivs)


def _check_key(flavor: Flavor, key: object) -> GtidKey:
    """Return ``key`` normalized for ``flavor`` (lowercase uuid and tag).

    :param flavor: GTID dialect.
    :param key: ``(uuid, tag)`` for MySQL, a domain id for MariaDB.
    :raises ValueError: if the key is invalid for the flavor.
    """
    if flavor == "mariadb":
        if isinstance(key, int) and not isinstance(key, bool) and 0 <= key <= MARIADB_MAX_ID:
            return key
    elif isinstance(key, tuple) and len(key) == 2 and all(isinstance(part, str) for part in key):
        uuid, tag = key
        if _UUID_RE.fullmatch(uuid) and (tag == "" or _TAG_RE.fullmatch(tag)):
            return (uuid.lower(), tag.lower())
    raise ValueError(f"invalid {flavor} GTID key {key!r}")


def _check_intervals(flavor: Flavor, intervals: Iterable[Interval]) -> list[Interval]:
    """Return ``intervals`` as a list after checking ``1 <= lo <= hi <= max``.

    :param flavor: GTID dialect, which sets the largest sequence number.
    :param intervals: closed intervals.
    :raises ValueError: on an empty, reversed or out-of-range interval.
    """
    checked = list(intervals)
    for lo, hi in checked:
        if not 1 <= lo <= hi <= _max_seq(flavor):
            raise ValueError(f"invalid {flavor} GTID interval {(lo, hi)!r}")
    return checked


def _check_servers(
    flavor: Flavor, ranges: Ranges, servers: Iterable[tuple[int, int]]
) -> tuple[tuple[int, int], ...]:
    """Return the server ids of the domains in ``ranges``, sorted by domain.

    :param flavor: GTID dialect; MySQL sets carry no server id.
    :param ranges: canonical ranges.
    :param servers: pairs ``(domain, server_id)``.
    :raises ValueError: if a MariaDB domain lacks a server id, an id is out of range, or
        server ids are given for MySQL.
    """
    known = dict(servers)
    if flavor == "mysql":
        if known:
            raise ValueError("MySQL GTID sets carry no server ids")
        return ()
    out: list[tuple[int, int]] = []
    for key, _intervals in ranges:
        server = known.get(key) if isinstance(key, int) else None
        if not isinstance(key, int) or server is None or not 0 <= server <= MARIADB_MAX_ID:
            raise ValueError(f"MariaDB domain {key!r} needs a server id in [0, {MARIADB_MAX_ID}]")
        out.append((key, server))
    return tuple(out)
