"""The SHOW GRANTS parser and the privilege model on the shapes MySQL 8 prints (no MySQL server here)."""

from __future__ import annotations

import pytest

from airflow_provider_binlog.source.grants import (
    MARIADB,
    MYSQL,
    Grant,
    Grants,
    RoleGrant,
    fix_from_error,
    like_matches,
    parse_grant,
    parse_role_list,
    privilege_model,
    table_levels,
)

MYSQL_84_LINES = [
    "GRANT SELECT, RELOAD, REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO `cdc`@`%`",
    "GRANT BACKUP_ADMIN,REPLICATION_SLAVE_ADMIN ON *.* TO `cdc`@`%`",
    "REVOKE SELECT ON `mysql`.* FROM `cdc`@`%`",
    "GRANT EXECUTE ON PROCEDURE `shop`.`refresh` TO `cdc`@`%`",
    "GRANT `reader`@`%` TO `cdc`@`%`",
]


def test_mysql_lines_parse() -> None:
    parsed = [parse_grant(line) for line in MYSQL_84_LINES]
    assert parsed[0] == Grant(
        frozenset({"SELECT", "RELOAD", "REPLICATION SLAVE", "REPLICATION CLIENT"}), None, None, "cdc@%"
    )
    assert isinstance(parsed[1], Grant)
    assert "REPLICATION_SLAVE_ADMIN" in parsed[1].privileges
    assert parsed[2] == Grant(frozenset({"SELECT"}), "mysql", None, "cdc@%", revoke=True)
    assert parsed[3] is None
    assert parsed[4] == RoleGrant(roles=("reader@%",), grantee="cdc@%")


def test_a_partial_revoke_takes_the_global_privilege_back_for_its_database() -> None:
    grants = Grants.parse("cdc@%", MYSQL_84_LINES, MYSQL)
    verdicts = grants.check(MYSQL.requirements([("shop", None), ("mysql", "user")]))
    assert [v.missing for v in verdicts] == [False, False, False, True]
    assert verdicts[3].fix == "GRANT SELECT ON `mysql`.`user` TO 'cdc'@'%';"


def test_mysql_accepts_super_for_the_binlog_status_and_names_replication_client() -> None:
    grants = Grants.parse("cdc@10.0.0.%", ["GRANT SUPER ON *.* TO `cdc`@`10.0.0.%`"], MYSQL)
    slave, client = grants.check(MYSQL.requirements())
    assert (slave.fix, client.missing) == ("GRANT REPLICATION SLAVE ON *.* TO 'cdc'@'10.0.0.%';", False)


def test_mariadb_accepts_the_old_name_of_binlog_monitor() -> None:
    grants = Grants.parse("cdc@%", ["GRANT REPLICATION CLIENT ON *.* TO `cdc`@`%`"], MARIADB)
    assert [v.missing for v in grants.check(MARIADB.requirements())] == [True, False]


def test_column_grants_and_database_grants() -> None:
    lines = [
        "GRANT SELECT (`id`, `v`) ON `shop`.`items` TO `cdc`@`%`",
        "GRANT ALL PRIVILEGES ON `sales\\_%`.* TO `cdc`@`%`",
        "GRANT SELECT ON `shop`.`orders` TO `cdc`@`%`",
    ]
    grants = Grants.parse("cdc@%", lines, MARIADB)
    levels = [("shop", "items"), ("shop", "orders"), ("sales_eu", "t"), ("salesXeu", "t"), ("shop", None)]
    verdicts = grants.check(MARIADB.requirements(levels))[2:]
    assert [v.missing for v in verdicts] == [True, False, False, True, True]
    assert verdicts[4].fix == "GRANT SELECT ON `shop`.* TO 'cdc'@'%';"
    assert verdicts[3].fix == "GRANT SELECT ON `salesXeu`.`t` TO 'cdc'@'%';"
    # ALL on a database gives no global privilege.
    assert grants.check(MARIADB.requirements())[0].missing


@pytest.mark.parametrize(
    ("pattern", "name", "matches"),
    [
        ("shop", "shop", True),
        ("sh_p", "shop", True),
        ("sh\\_p", "shop", False),
        ("s%", "sales", True),
        ("s%", "x", False),
    ],
)
def test_database_names_in_grants_are_like_patterns(pattern: str, name: str, matches: bool) -> None:
    assert like_matches(pattern, name) is matches


def test_table_selection_levels() -> None:
    levels = table_levels(["shop.orders", "shop.*", "s*.x", "shop.orders"], ["shop", "sales", "other"])
    assert levels == [("shop", "orders"), ("shop", None), ("sales", "x"), ("shop", "x")]


def test_roles_and_their_nested_roles_are_active_only_when_enabled() -> None:
    lines = [
        "GRANT `cdc_role` TO `cdc`@`%`",
        "GRANT `spare` TO `cdc`@`%`",
        "GRANT `inner` TO `cdc_role`",
        "GRANT REPLICATION SLAVE ON *.* TO `inner`",
        "SET DEFAULT ROLE `cdc_role` FOR `cdc`@`%`",
    ]
    grants = Grants.parse("cdc@%", lines, MARIADB, ["cdc_role"])
    assert grants.active_roles == {"cdc_role", "inner"}
    assert grants.inactive_roles() == ["spare"]
    assert grants.check(MARIADB.requirements())[0].granted_to == "inner"
    assert grants.default_role_fix("spare") == "SET DEFAULT ROLE `spare` FOR 'cdc'@'%';"
    assert Grants.parse("cdc@%", [], MYSQL).default_role_fix("r@%") == "SET DEFAULT ROLE `r` TO 'cdc'@'%';"


def test_current_role_values() -> None:
    assert parse_role_list("") == []
    assert parse_role_list("NONE") == []
    assert parse_role_list("cdc-role") == ["cdc-role"]
    assert parse_role_list("`r1`@`%`,`r2`@`localhost`") == ["r1@%", "r2@localhost"]


def test_flavors_by_version() -> None:
    assert privilege_model("mariadb", "10.11.19-MariaDB-0+deb12u1-log") is MARIADB
    assert privilege_model("mariadb", "10.4.34-MariaDB").binlog_monitor[0] == "REPLICATION CLIENT"
    assert privilege_model("mysql", "8.4.3") is MYSQL


def test_fixes_from_error_messages() -> None:
    account = "'cdc'@'%'"
    denied = (
        "Access denied; you need (at least one of) the SUPER, BINLOG MONITOR privilege(s) for this operation"
    )
    assert fix_from_error(denied, account) == "GRANT BINLOG MONITOR ON *.* TO 'cdc'@'%';"
    assert fix_from_error(denied, account, ["GRANT BINLOG MONITOR ON *.* TO 'cdc'@'%';"]) is None
    table = "SELECT command denied to user 'cdc'@'%' for table `shop`.`orders`"
    assert fix_from_error(table, account) == "GRANT SELECT ON `shop`.`orders` TO 'cdc'@'%';"
    assert fix_from_error("something else", account) is None


def test_unknown_shapes_are_an_error_not_a_guess() -> None:
    with pytest.raises(ValueError, match="unknown level"):
        parse_grant("GRANT SELECT ON a.b.c TO `x`@`%`")


def test_lines_of_unknown_shape_grant_nothing_and_are_named() -> None:
    grants = Grants.parse("cdc@%", ["GRANT REPLICATION SLAVE ON a.b.c TO `cdc`@`%`"], MARIADB)
    assert grants.unparsed == ["GRANT REPLICATION SLAVE ON a.b.c TO `cdc`@`%`"]
    assert all(v.missing for v in grants.check(MARIADB.requirements()))
