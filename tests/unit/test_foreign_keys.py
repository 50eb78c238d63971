"""Unit tests of the foreign-key helpers and of the cascade replay (pure Python, no server, no Spark)."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_provider_binlog.contract.foreign_keys import (
    ForeignKey,
    ForeignKeyCycleError,
    parents_first,
    referenced_columns,
    split_by_selection,
)
from airflow_provider_binlog.jobs.merge.cascades import ParentChange, replay
from airflow_provider_binlog.source.flavor import flavor_named
from airflow_provider_binlog.source.foreign_keys import referential_actions


def fk(
    child: str, parent: str, on_delete: str = "CASCADE", on_update: str = "CASCADE", **kw: Any
) -> ForeignKey:
    return ForeignKey(
        name=f"{child}_fk",
        child=child,
        columns=tuple(kw.get("columns", ("p_id",))),
        parent=parent,
        referenced=tuple(kw.get("referenced", ("id",))),
        on_delete=on_delete,
        on_update=on_update,
    )


def row(seq: int, op: str = "u", window: int = 1, **values: Any) -> dict[str, Any]:
    return {
        **values,
        "_binlog_op": op,
        "_binlog_window": window,
        "_binlog_seq": seq,
        "_binlog_gtid": f"g{seq}",
    }


@pytest.mark.parametrize(
    ("flavor", "variables", "logged"),
    [
        ("mariadb", {}, False),
        ("mysql", {}, False),  # 8.0 / 8.4 / 9.0-9.5: no innodb_native_foreign_keys, InnoDB cascades
        ("mysql", {"innodb_native_foreign_keys": "OFF"}, True),  # 9.6+ default: SQL layer logs them
        ("mysql", {"innodb_native_foreign_keys": "ON"}, False),
        ("mariadb", {"innodb_native_foreign_keys": "OFF"}, False),
    ],
)
def test_only_mysql_sql_layer_foreign_keys_log_their_cascades(
    flavor: str, variables: dict[str, str], logged: bool
) -> None:
    assert flavor_named(flavor).cascades_are_logged(variables) is logged


def test_manifest_form_round_trips_and_selection_splits() -> None:
    key = fk("d.c", "d.p", on_delete="SET NULL", columns=("a", "b"), referenced=("x", "y"))
    assert ForeignKey.from_manifest(key.to_manifest()) == key
    orphan = fk("d.o", "d.unselected")
    applied, orphaned = split_by_selection([key, orphan], ["d.c", "d.p", "d.o"])
    assert (applied, orphaned) == ([key], [orphan])
    assert referenced_columns([key, fk("d.c2", "d.p", referenced=("id",), columns=("z",))]) == {
        "d.p": ["x", "y", "id"]
    }


def test_parents_come_first_and_cycles_through_tables_are_refused() -> None:
    keys = [fk("d.g", "d.c"), fk("d.c", "d.p"), fk("d.t", "d.t")]
    assert parents_first(["d.g", "d.t", "d.c", "d.p"], keys) == ["d.t", "d.p", "d.c", "d.g"]
    with pytest.raises(ForeignKeyCycleError, match="d.a, d.b"):
        parents_first(["d.a", "d.b"], [fk("d.a", "d.b"), fk("d.b", "d.a")])


def test_replay_follows_each_action_in_order_and_later_child_changes_win() -> None:
    cascade, set_null = fk("d.c", "d.p"), fk("d.c", "d.p", "SET NULL", "SET NULL")
    target = [row(5, window=0, id=1, p_id=1), row(6, window=0, id=2, p_id=1), row(7, window=0, id=3, p_id=2)]
    staged = [row(20, id=2, p_id=9)]  # child 2 moves to parent 9 after the parent changes below
    changes = [
        ParentChange((1, 10), row(10, "d", id=1), row(11, id=5)),  # key update 1 -> 5
        ParentChange((1, 12), row(12, "d", id=5), row(13, id=6)),  # and again 5 -> 6 (a chain)
        ParentChange((1, 14), row(14, "d", id=2), None),  # delete of parent 2
        ParentChange((1, 30), row(30, "d", id=9), None),  # delete of parent 9 after child 2 moved there
    ]
    out = replay("d.c", ["id"], [cascade], {cascade.name: changes}, [*target, *staged])
    assert [(r["id"], r["p_id"], r["_binlog_op"], r["_binlog_seq"]) for r in out.rows] == [
        (1, 5, "u", 10),
        (2, 5, "u", 10),
        (1, 6, "u", 12),
        (2, 6, "u", 12),
        (3, 2, "d", 14),
        (2, 9, "d", 30),
    ]
    assert out.rows[0]["_binlog_gtid"] == "g11"  # the commit of the parent change that caused it
    nulled = replay("d.c", ["id"], [set_null], {set_null.name: changes}, target)
    assert [(r["id"], r["p_id"], r["_binlog_op"]) for r in nulled.rows] == [
        (1, None, "u"),
        (2, None, "u"),
        (3, None, "u"),
    ]


def test_replay_moves_a_row_whose_key_holds_the_foreign_key_and_recurses_on_itself() -> None:
    moving = fk("d.c", "d.p", columns=("p_id",))
    out = replay(
        "d.c",
        ["p_id", "n"],
        [moving],
        {moving.name: [ParentChange((1, 3), row(3, "d", id=1), row(4, id=7))]},
        [row(1, window=0, p_id=1, n=1, v="a")],
    )
    assert [(r["p_id"], r["n"], r["_binlog_op"]) for r in out.rows] == [(1, 1, "d"), (7, 1, "u")]
    assert [(c.old["p_id"], c.new and c.new["p_id"]) for c in out.changes] == [(1, 7)]

    tree = fk("d.t", "d.t", on_update="RESTRICT", columns=("parent_id",))
    nodes = [row(1, window=0, id=1, parent_id=None), row(2, window=0, id=2, parent_id=1)]
    nodes += [row(3, window=0, id=3, parent_id=2), row(4, window=0, id=4, parent_id=1)]
    root_deleted = ParentChange((1, 9), row(9, "d", id=1, parent_id=None), None)
    out = replay("d.t", ["id"], [tree], {tree.name: [root_deleted]}, nodes)
    assert sorted(r["id"] for r in out.rows if r["_binlog_op"] == "d") == [2, 3, 4]


def test_two_keys_acting_on_one_row_for_one_parent_change_leave_one_image() -> None:
    by_id = fk("d.c", "d.p", "SET NULL", "SET NULL")
    by_code = ForeignKey("by_code", "d.c", ("p_code",), "d.p", ("code",), "SET NULL", "CASCADE")
    deleted = ParentChange((1, 4), row(4, "d", id=1, code="a"), None)
    out = replay(
        "d.c",
        ["id"],
        [by_id, by_code],
        {by_id.name: [deleted], by_code.name: [deleted]},
        [row(1, window=0, id=7, p_id=1, p_code="a")],
    )
    assert [(r["id"], r["p_id"], r["p_code"]) for r in out.rows] == [(7, None, None)]


def test_referential_actions_are_read_from_show_create_table_whatever_the_names() -> None:
    create = (
        "CREATE TABLE `c``x` (\n  `id` int(11) NOT NULL,\n  `p.id` int(11) DEFAULT NULL,\n  `k` int(11) DEFAULT NULL,\n"
        "  PRIMARY KEY (`id`),\n"
        "  CONSTRAINT `f.1 ``odd``` FOREIGN KEY (`p.id`) REFERENCES `other db`.`p` (`id`) ON DELETE CASCADE "
        "ON UPDATE SET NULL,\n"
        "  CONSTRAINT `plain` FOREIGN KEY (`k`) REFERENCES `p` (`k`) ON UPDATE CASCADE,\n"
        "  CONSTRAINT `strict` FOREIGN KEY (`k`) REFERENCES `p` (`k`)\n"
        ") ENGINE=InnoDB DEFAULT CHARSET=utf8mb4"
    )
    assert referential_actions(create) == {
        "f.1 `odd`": ("CASCADE", "SET NULL"),
        "plain": ("RESTRICT", "CASCADE"),  # an action not named is InnoDB's RESTRICT
        "strict": ("RESTRICT", "RESTRICT"),
    }
