"""Unit tests of the GTID set algebra for MySQL and MariaDB."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_provider_binlog.source.gtid import (
    MARIADB_MAX_SEQ,
    MYSQL_MAX_GNO,
    GtidSet,
    Ranges,
    parse_gtid,
    parse_gtid_with_server,
)

U1 = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
U2 = "5aa1c0ee-4e0b-11ee-8f6e-0242ac120002"
U3 = "ffffffff-0000-1111-2222-333333333333"


def mysql(text: str) -> GtidSet:
    return GtidSet.parse(text, "mysql")


def maria(text: str) -> GtidSet:
    return GtidSet.parse(text, "mariadb")


# --------------------------------------------------------------------------- MySQL examples


@pytest.mark.parametrize(
    ("text", "canonical", "count"),
    [
        ("", "", 0),
        ("   \n ", "", 0),
        (f"{U1}:1-5", f"{U1}:1-5", 5),
        (f"{U1}:7", f"{U1}:7", 1),
        (f"{U1}:1-5:7", f"{U1}:1-5:7", 6),
        (f"{U1.upper()}:1-5:7", f"{U1}:1-5:7", 6),
        (f"{U1}:7:1-3:4-5", f"{U1}:1-5:7", 6),
        (f"{U1}:1-5:3-8", f"{U1}:1-8", 8),
        (f"{U1}:3-3", f"{U1}:3", 1),
        (f"{U2}:1-3,{U1}:1-5", f"{U1}:1-5,{U2}:1-3", 8),
        (f"{U1}:1-5,\n{U2}:1-3", f"{U1}:1-5,{U2}:1-3", 8),
        (f"  {U1}:1-5 ,\n  {U2}:1-3\n", f"{U1}:1-5,{U2}:1-3", 8),
        (f"{U1}:1-2,{U1}:3-4", f"{U1}:1-4", 4),
    ],
)
def test_mysql_parse_and_format(text: str, canonical: str, count: int) -> None:
    gs = mysql(text)
    assert str(gs) == canonical
    assert gs.count() == count
    assert gs.is_empty == (count == 0)
    assert mysql(canonical) == gs


@pytest.mark.parametrize(
    ("text", "canonical", "count"),
    [
        (f"{U1}:tag_1:1-5", f"{U1}:tag_1:1-5", 5),
        (f"{U1}:TAG_1:1-5", f"{U1}:tag_1:1-5", 5),
        (f"{U1}:1-3:bb:7:aa:1-2", f"{U1}:1-3:aa:1-2:bb:7", 6),
        (f"{U1}:aa:1-2,{U1}:4", f"{U1}:4:aa:1-2", 3),
        (f"{U1}:_x:1:2:3", f"{U1}:_x:1-3", 3),
        (f"{U1}:{'a' * 32}:9", f"{U1}:{'a' * 32}:9", 1),
    ],
)
def test_mysql_tagged(text: str, canonical: str, count: int) -> None:
    gs = mysql(text)
    assert str(gs) == canonical
    assert gs.count() == count
    assert mysql(canonical) == gs


def test_mysql_tag_keys_are_distinct() -> None:
    gs = mysql(f"{U1}:1-5:aa:1-5")
    assert gs.contains_gtid(f"{U1}:3")
    assert gs.contains_gtid(f"{U1}:AA:3")
    assert not gs.contains_gtid(f"{U1}:bb:3")
    assert gs.count() == 10
    assert dict(gs.ranges) == {(U1, ""): ((1, 5),), (U1, "aa"): ((1, 5),)}


@pytest.mark.parametrize(
    "text",
    [
        "garbage",
        U1,
        f"{U1}:",
        f"{U1}:0",
        f"{U1}:0-3",
        f"{U1}:5-3",
        f"{U1}:1-",
        f"{U1}:-3",
        f"{U1}:1-3-5",
        f"{U1}:a-b",
        f"{U1}: 1-5",
        f"{U1}:1-5,",
        f",{U1}:1-5",
        f"{U1}:1-5,,{U2}:1",
        f"{U1}::1-5",
        f"{U1}:tag",
        f"{U1}:1-3:tag",
        f"{U1}:aa:bb:1",
        f"{U1}:1tag:1",
        f"{U1}:{'a' * 33}:1",
        f"{U1}:ta-g:1",
        f"{U1}:{MYSQL_MAX_GNO + 1}",
        f"{U1[:-1]}:1",
        f"{U1}x:1",
        f"{U1.replace('-', '')}:1",
        f"{U1}:\u0661",
        "0-1-100",
    ],
)
def test_mysql_malformed(text: str) -> None:
    with pytest.raises(ValueError, match="GTID"):
        mysql(text)


def test_mysql_error_names_offending_text() -> None:
    with pytest.raises(ValueError, match="5-3"):
        mysql(f"{U1}:5-3")


def test_mysql_max_gno_accepted() -> None:
    assert mysql(f"{U1}:{MYSQL_MAX_GNO}").count() == 1


def test_mysql_to_position_rejected() -> None:
    gs = mysql(f"{U1}:1-5")
    assert not gs.is_position
    with pytest.raises(ValueError, match="not a MariaDB GTID position"):
        gs.to_position()


# --------------------------------------------------------------------------- MariaDB examples


@pytest.mark.parametrize(
    ("text", "canonical", "count"),
    [
        ("", "", 0),
        ("0-1-100", "0-1-100", 100),
        ("0-1-1", "0-1-1", 1),
        ("1-2-5,0-1-100", "0-1-100,1-2-5", 105),
        ("0-1-100,\n 1-2-5 ", "0-1-100,1-2-5", 105),
        ("10-1-3,2-1-4", "2-1-4,10-1-3", 7),
        ("0-1-0", "", 0),
        ("0-1-101..150", "0-1-101..150", 50),
        ("0-1-7..7", "0-1-7..7", 1),
        ("0-1-1..5:7..9", "0-1-1..5:7..9", 8),
        ("0-1-7..9:1..5", "0-1-1..5:7..9", 8),
        ("0-1-1..5:6..9", "0-1-9", 9),
        ("0-1-1..100", "0-1-100", 100),
        ("0-1-100,1-2-6..8", "0-1-100,1-2-6..8", 103),
        (
            f"4294967295-4294967295-{MARIADB_MAX_SEQ}",
            f"4294967295-4294967295-{MARIADB_MAX_SEQ}",
            MARIADB_MAX_SEQ,
        ),
    ],
)
def test_mariadb_parse_and_format(text: str, canonical: str, count: int) -> None:
    gs = maria(text)
    assert str(gs) == canonical
    assert gs.count() == count
    assert maria(canonical) == gs


def test_mariadb_multiple_domains_position() -> None:
    gs = maria("0-1-100,1-2-5,7-3-12")
    assert gs.is_position
    assert gs.to_position() == "0-1-100,1-2-5,7-3-12"
    assert dict(gs.servers) == {0: 1, 1: 2, 7: 3}
    assert gs.contains_gtid("1-2-5")
    assert gs.contains_gtid("1-9-5")  # server id is not part of a transaction's identity
    assert not gs.contains_gtid("1-2-6")
    assert not gs.contains_gtid("2-1-1")


def test_mariadb_head_minus_checkpoint() -> None:
    window = maria("0-1-150") - maria("0-1-100")
    assert window.count() == 50
    assert str(window) == "0-1-101..150"
    assert not window.is_position
    assert not window.is_empty
    with pytest.raises(ValueError, match="not a MariaDB GTID position"):
        window.to_position()
    assert maria(str(window)) == window
    assert window.contains_gtid("0-1-101")
    assert not window.contains_gtid("0-1-100")
    assert (maria("0-1-100") | window).to_position() == "0-1-150"


def test_mariadb_window_over_several_domains() -> None:
    head = maria("0-1-150,1-2-20,2-5-9")
    checkpoint = maria("0-1-100,1-2-20")
    window = head.subtract(checkpoint)
    assert window.count() == 50 + 9
    assert str(window) == "0-1-101..150,2-5-9"
    assert checkpoint.union(window) == head
    assert str(checkpoint.union(window)) == "0-1-150,1-2-20,2-5-9"


def test_mariadb_add_records_last_server() -> None:
    gs = maria("0-1-100").add("0-2-101").add("1-7-1")
    assert gs.to_position() == "0-2-101,1-7-1"
    older = gs.add("0-9-50")  # already present, and not the newest GTID of the domain
    assert older == gs
    assert older.to_position() == "0-2-101,1-7-1"


def test_mariadb_union_keeps_server_of_newest_gtid() -> None:
    assert str(maria("0-1-100") | maria("0-2-120")) == "0-2-120"
    assert str(maria("0-2-120") | maria("0-1-100")) == "0-2-120"


@pytest.mark.parametrize(
    "text",
    [
        "garbage",
        "0-1",
        "0-1-",
        "-1-100",
        "0--1-100",
        "0-1-100-5",
        "0-1-x",
        "0-1- 100",
        "0 -1-100",
        "0-1-100,",
        "0-1-100,,1-2-3",
        "0-1-100,0-2-120",
        "0-1-5..3",
        "0-1-0..3",
        "0-1-3..",
        "0-1-..3",
        "0-1-1..3:",
        "0-1-1..3:5",
        "0-1-1...3",
        "4294967296-1-1",
        "0-4294967296-1",
        f"0-1-{MARIADB_MAX_SEQ + 1}",
        f"{U1}:1-5",
    ],
)
def test_mariadb_malformed(text: str) -> None:
    with pytest.raises(ValueError, match="GTID"):
        maria(text)


# --------------------------------------------------------------------------- single GTIDs, API


def test_parse_gtid() -> None:
    assert parse_gtid(f"{U1.upper()}:17", "mysql") == ((U1, ""), 17)
    assert parse_gtid(f"{U1}:Tag:3", "mysql") == ((U1, "tag"), 3)
    assert parse_gtid("0-1-100", "mariadb") == (0, 100)
    assert parse_gtid_with_server(" 3-2-1 ", "mariadb") == (3, 1, 2)


@pytest.mark.parametrize(
    ("text", "flavor"),
    [
        (f"{U1}:1-5", "mysql"),
        (f"{U1}:0", "mysql"),
        (f"{U1}:a:b:1", "mysql"),
        (U1, "mysql"),
        ("0-1-0", "mariadb"),
        ("0-1-1..5", "mariadb"),
        ("0-1-5,1-1-1", "mariadb"),
        ("0-1-1", "postgres"),
    ],
)
def test_parse_gtid_malformed(text: str, flavor: str) -> None:
    with pytest.raises(ValueError, match=r"GTID|flavor"):
        parse_gtid(text, flavor)


def test_mysql_add_and_contains_gtid() -> None:
    gs = GtidSet.empty("mysql").add(f"{U1}:1").add(f"{U1}:2").add(f"{U1}:tg:9")
    assert str(gs) == f"{U1}:1-2:tg:9"
    assert gs.contains_gtid(f"{U1}:2")
    assert not gs.contains_gtid(f"{U1}:3")
    with pytest.raises(ValueError, match="GTID"):
        gs.contains_gtid("0-1-1")


def test_operators_match_methods() -> None:
    a, b = mysql(f"{U1}:1-10"), mysql(f"{U1}:5-15,{U2}:1")
    assert a | b == a.union(b) == mysql(f"{U1}:1-15,{U2}:1")
    assert a - b == a.subtract(b) == mysql(f"{U1}:1-4")
    assert a & b == a.intersection(b) == mysql(f"{U1}:5-10")


def test_equality_and_hash_by_content() -> None:
    assert mysql(f"{U1.upper()}:1-3:4") == mysql(f"{U1}:1-4")
    assert hash(mysql(f"{U1.upper()}:1-3:4")) == hash(mysql(f"{U1}:1-4"))
    assert len({maria("0-1-5"), maria("0-1-1..5"), maria("0-2-5")}) == 1
    assert GtidSet.empty("mysql") != GtidSet.empty("mariadb")


def test_repr_rebuilds() -> None:
    gs = maria("0-1-101..150,1-2-3")
    assert eval(repr(gs), {"GtidSet": GtidSet}) == gs  # noqa: S307


def test_mixing_flavors_raises() -> None:
    a, b = mysql(f"{U1}:1"), maria("0-1-1")
    for op in (a.union, a.subtract, a.intersection, a.contains):
        with pytest.raises(ValueError, match="cannot combine"):
            op(b)
    with pytest.raises(ValueError, match="cannot combine"):
        _ = b | a


def test_unknown_flavor() -> None:
    with pytest.raises(ValueError, match="flavor"):
        GtidSet.parse("", "postgres")
    with pytest.raises(ValueError, match="flavor"):
        GtidSet.empty("postgres")


def test_constructor_normalizes_and_validates() -> None:
    gs = GtidSet("mysql", (((U1.upper(), "AA"), ((5, 6), (1, 4))),))
    assert str(gs) == f"{U1}:aa:1-6"
    with pytest.raises(ValueError, match="interval"):
        GtidSet("mysql", (((U1, ""), ((0, 3),)),))
    with pytest.raises(ValueError, match="key"):
        GtidSet("mysql", ((1, ((1, 3),)),))
    with pytest.raises(ValueError, match="server id"):
        GtidSet("mariadb", ((0, ((1, 3),)),))
    with pytest.raises(ValueError, match="server ids"):
        GtidSet("mysql", (((U1, ""), ((1, 3),)),), ((0, 1),))


# --------------------------------------------------------------------------- properties
# Hypothesis generation dominates the run time, so each interval is drawn as one integer and
# the laws sharing an input shape share one test.

MAX_EXAMPLES = 150
_FIRST, _LENGTH = 60, 13  # small numbers so that intervals overlap and touch often
_MYSQL_KEYS = [(uuid, tag) for uuid in (U1, U2, U3) for tag in ("", "aa", "b_1")]
_DOMAINS = [0, 1, 2, 3]


def _interval_codes(n_keys: int) -> st.SearchStrategy[list[int]]:
    return st.lists(st.integers(0, n_keys * _FIRST * _LENGTH - 1), max_size=6)


def _ranges(codes: list[int], keys: list[Any]) -> Ranges:
    """Decode each code into (key index, first seq - 1, length - 1)."""
    out = []
    for code in codes:
        rest, extra = divmod(code, _LENGTH)
        key, first = divmod(rest, _FIRST)
        out.append((keys[key], ((first + 1, first + 1 + extra),)))
    return tuple(out)


def _mariadb_set(codes: list[int], server_code: int) -> GtidSet:
    servers = tuple((domain, (server_code >> (2 * domain)) & 3) for domain in _DOMAINS)
    return GtidSet("mariadb", _ranges(codes, _DOMAINS), servers)


mysql_sets = st.builds(lambda codes: GtidSet("mysql", _ranges(codes, _MYSQL_KEYS)), _interval_codes(9))
mariadb_sets = st.builds(_mariadb_set, _interval_codes(4), st.integers(0, 255))
mariadb_positions = st.builds(
    lambda entries: maria(",".join(f"{d}-{s}-{n}" for d, s, n in entries)),
    st.lists(
        st.tuples(st.integers(0, 5), st.integers(0, 9), st.integers(0, 10**6)),
        max_size=4,
        unique_by=lambda entry: entry[0],
    ),
)
any_sets = st.one_of(mysql_sets, mariadb_sets)
same_flavor_pairs = st.one_of(st.tuples(mysql_sets, mysql_sets), st.tuples(mariadb_sets, mariadb_sets))
same_flavor_triples = st.one_of(
    st.tuples(mysql_sets, mysql_sets, mysql_sets), st.tuples(mariadb_sets, mariadb_sets, mariadb_sets)
)


def _members(gs: GtidSet) -> set[tuple[object, int]]:
    return {(key, n) for key, ivs in gs.ranges for lo, hi in ivs for n in range(lo, hi + 1)}


@settings(max_examples=MAX_EXAMPLES)
@given(same_flavor_pairs)
def test_operations_match_python_sets(pair: tuple[GtidSet, GtidSet]) -> None:
    a, b = pair
    assert _members(a | b) == _members(a) | _members(b)
    assert _members(a & b) == _members(a) & _members(b)
    assert _members(a - b) == _members(a) - _members(b)
    assert a.count() == len(_members(a))
    assert a.is_empty == (not _members(a))


@settings(max_examples=MAX_EXAMPLES)
@given(same_flavor_pairs)
def test_union_laws(pair: tuple[GtidSet, GtidSet]) -> None:
    a, b = pair
    assert a | b == b | a  # commutative
    assert a | a == a  # idempotent
    assert str(a | a) == str(a)
    assert a.union(b).contains(a)
    assert a.union(b).contains(b)
    assert a | GtidSet.empty(a.flavor) == a


@settings(max_examples=MAX_EXAMPLES)
@given(same_flavor_triples)
def test_union_associative(triple: tuple[GtidSet, GtidSet, GtidSet]) -> None:
    a, b, c = triple
    assert (a | b) | c == a | (b | c)


@settings(max_examples=MAX_EXAMPLES)
@given(same_flavor_pairs)
def test_subtract_and_intersection_laws(pair: tuple[GtidSet, GtidSet]) -> None:
    a, b = pair
    diff = a.subtract(b)
    assert diff.intersection(b).is_empty  # disjoint from b
    assert diff.union(a.intersection(b)) == a  # recomposes a
    assert a & b == b & a
    assert a.contains(a & b)
    assert (a - a).is_empty
    assert (a | b).count() == a.count() + b.count() - (a & b).count()  # inclusion-exclusion


@settings(max_examples=MAX_EXAMPLES)
@given(same_flavor_pairs)
def test_contains_consistent_with_subtract(pair: tuple[GtidSet, GtidSet]) -> None:
    a, b = pair
    assert a.contains(b) == b.subtract(a).is_empty
    assert b.contains(a) == a.subtract(b).is_empty
    assert a.contains(a)


@settings(max_examples=MAX_EXAMPLES)
@given(any_sets)
def test_round_trip(x: GtidSet) -> None:
    again = GtidSet.parse(str(x), x.flavor)
    assert again == x
    assert str(again) == str(x)
    assert again.servers == x.servers
    assert hash(again) == hash(x)
    assert GtidSet.parse(str(x).replace(",", ",\n  "), x.flavor) == x  # as MySQL prints it
    if x.flavor == "mariadb" and not x.is_position:
        with pytest.raises(ValueError, match="not a MariaDB GTID position"):
            x.to_position()


@settings(max_examples=MAX_EXAMPLES)
@given(mariadb_positions, mariadb_positions)
def test_mariadb_positions(head: GtidSet, checkpoint: GtidSet) -> None:
    assert head.is_position
    assert maria(head.to_position()) == head
    assert maria(head.to_position()).servers == head.servers
    assert (checkpoint | head).is_position
    assert (checkpoint & head).is_position
    window = head - checkpoint
    assert maria(str(window)) == window
    assert str(maria(str(window))) == str(window)
    assert window.count() == head.count() - (head & checkpoint).count()
    assert (checkpoint | window).contains(head)


@settings(max_examples=MAX_EXAMPLES)
@given(any_sets, st.integers(0, 8), st.integers(0, 3), st.integers(1, 80))
def test_add_then_contains(x: GtidSet, key: int, server: int, seq: int) -> None:
    if x.flavor == "mysql":
        uuid, tag = _MYSQL_KEYS[key]
        gtid = f"{uuid}:{tag}:{seq}" if tag else f"{uuid}:{seq}"
    else:
        gtid = f"{key % 4}-{server}-{seq}"
    added = x.add(gtid)
    assert added.contains_gtid(gtid)
    assert added.contains(x)
    assert added.count() == x.count() + (0 if x.contains_gtid(gtid) else 1)
