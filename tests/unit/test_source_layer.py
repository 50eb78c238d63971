"""The source layer without a server: findings with flavor-correct advice, the query-event classifier,
the connection extras model and the form built from it."""

from __future__ import annotations

import pytest

from airflow_provider_binlog.contract.names import split_table_name
from airflow_provider_binlog.source.config import conn_fields, parse_extras
from airflow_provider_binlog.source.findings import Outcome
from airflow_provider_binlog.source.flavor import MARIADB, MYSQL, flavor_of_version
from airflow_provider_binlog.source.server import ServerState, setting_findings
from airflow_provider_binlog.source.sql import QueryKind, classify_query, quote_table

GOOD = {
    "log_bin": "ON",
    "binlog_format": "ROW",
    "binlog_row_image": "FULL",
    "binlog_row_metadata": "FULL",
    "binlog_checksum": "CRC32",
}


def state(flavor: str, **variables: str) -> ServerState:
    return ServerState(flavor=flavor, version="8.4.3", server_identity="x", variables={**GOOD, **variables})


def lines(server: ServerState) -> list[str]:
    return [str(f) for f in setting_findings(server)]


def test_mysql_is_told_to_set_persist() -> None:
    # binlog_transaction_compression=ON is fine: the reader decodes compressed transactions (ADR 0018).
    server = state("mysql", binlog_format="MIXED", binlog_transaction_compression="ON", gtid_mode="ON")
    assert lines(server) == [
        "log_bin=ON: ok",
        "binlog_format=MIXED: WRONG: binlog_format is MIXED: row changes are only in ROW format; run SET PERSIST "
        "binlog_format = ROW (MySQL 5.7: SET GLOBAL, and binlog_format=ROW in my.cnf)",
        "binlog_row_image=FULL: ok",
        "binlog_row_metadata=FULL: ok",
        "binlog_checksum=CRC32: ok",
        "gtid_mode=ON: ok",
    ]


def test_mariadb_is_never_told_to_set_persist() -> None:
    server = state("mariadb", binlog_row_image="MINIMAL", gtid_strict_mode="OFF", log_bin_compress="OFF")
    text = "\n".join(lines(server))
    assert "SET PERSIST" not in text.replace("has no SET PERSIST", "")
    assert (
        "binlog_row_image=MINIMAL: WRONG: binlog_row_image is MINIMAL: before/after images must hold every column; "
        "run SET GLOBAL binlog_row_image = FULL and add binlog_row_image=FULL under [mariadb] in the server's "
        "option file (MariaDB has no SET PERSIST)"
    ) in text
    assert "gtid_strict_mode=OFF: note: MariaDB may log out-of-order GTIDs" in text


def test_a_replica_without_log_replica_updates_is_wrong_and_a_primary_gets_a_note() -> None:
    replica = ServerState(
        flavor="mariadb", version="10.11", server_identity="x", variables={**GOOD, "log_slave_updates": "OFF"},
        replicating=True,
    )  # fmt: skip
    (wrong,) = [f for f in setting_findings(replica) if f.wrong]
    assert wrong.subject == "log_slave_updates"
    assert "a server that replicates" in wrong.problem
    assert "not dynamic" in wrong.fix
    promoted = state("mariadb", log_slave_updates="OFF", gtid_slave_pos="0-1-42")  # replicated once
    assert [f.verdict for f in setting_findings(promoted) if f.subject == "log_slave_updates"] == [
        Outcome.NOTE
    ]
    primary = ServerState(
        flavor="mariadb", version="10.11", server_identity="x",
        variables={**GOOD, "log_slave_updates": "OFF", "gtid_slave_pos": ""}, replicating=False,
    )  # fmt: skip
    assert [f for f in setting_findings(primary) if f.subject == "log_slave_updates"] == []
    (note,) = [
        f for f in setting_findings(state("mysql", log_replica_updates="OFF")) if "updates" in f.subject
    ]
    assert note.verdict == Outcome.NOTE
    assert "failover target" in note.problem
    mysql = setting_findings(state("mysql", log_replica_updates="ON", log_slave_updates="ON"))
    assert [str(f) for f in mysql if "updates" in f.subject] == ["log_replica_updates=ON: ok"]
    assert "a failover to another server needs a re-snapshot" in str(
        next(f for f in setting_findings(state("mysql", gtid_mode="OFF")) if f.subject == "gtid_mode")
    )


def test_findings_are_data_not_prose() -> None:
    (wrong,) = [f for f in setting_findings(state("mysql", binlog_row_metadata="MINIMAL")) if f.wrong]
    assert (wrong.subject, wrong.value, wrong.verdict) == ("binlog_row_metadata", "MINIMAL", Outcome.WRONG)
    assert wrong.fix.startswith("run SET PERSIST binlog_row_metadata = FULL")
    allowed = setting_findings(state("mysql", binlog_row_metadata="MINIMAL"), allow_minimal_row_metadata=True)
    assert not any(f.wrong for f in allowed)


def test_flavor_from_version_and_purged_gtids_from_variables() -> None:
    assert flavor_of_version("10.11.6-MariaDB-log") is MARIADB
    assert flavor_of_version("8.4.3") is MYSQL
    purged = MYSQL.purged_gtids({"gtid_mode": "ON", "gtid_purged": "u:1-5"}, "bin.000001")
    assert purged is not None
    assert (purged.gtids, purged.origin) == ("u:1-5", "@@gtid_purged")
    assert MYSQL.purged_gtids({"gtid_mode": "OFF"}, "bin.000001") is None
    assert MARIADB.purged_gtids({}, "bin.000001") is None  # it needs a cursor to read the oldest file
    assert MYSQL.identity({"server_uuid": "abc"}) == "abc"
    assert MARIADB.identity({"server_id": "1", "hostname": "h", "port": "3306"}) == "mariadb:1@h:3306"


@pytest.mark.parametrize(
    ("query", "kind", "ends_group"),
    [
        ("BEGIN", QueryKind.BEGIN, False),
        (b"COMMIT", QueryKind.COMMIT, True),
        ("ROLLBACK", QueryKind.ROLLBACK, True),
        ("SAVEPOINT `sp1`", QueryKind.SAVEPOINT, False),
        ("ROLLBACK TO `sp1`", QueryKind.ROLLBACK_TO, False),
        ("ROLLBACK WORK TO SAVEPOINT sp1", QueryKind.ROLLBACK_TO, False),
        ("XA START X'31',X'',1", QueryKind.XA_START, False),
        ("XA BEGIN 'x'", QueryKind.XA_START, False),
        ("XA END X'31',X'',1", QueryKind.XA_END, False),
        ("XA COMMIT X'31',X'',1", QueryKind.XA_COMMIT, True),
        ("XA ROLLBACK X'31',X'',1", QueryKind.XA_ROLLBACK, True),
        ("INSERT INTO t VALUES (1)", QueryKind.DML, False),
        ("  delete from t", QueryKind.DML, False),
        ("ALTER TABLE t ADD c INT", QueryKind.DDL, True),
    ],
)
def test_one_classifier_for_reader_and_probes(query: str | bytes, kind: QueryKind, ends_group: bool) -> None:
    classified = classify_query(query)
    assert classified.kind is kind
    assert classified.kind.ends_group is ends_group


def test_savepoint_names_are_unquoted_and_case_folded() -> None:
    assert classify_query("SAVEPOINT `A``b`").savepoint == "a`b"
    assert classify_query("ROLLBACK TO SP1").savepoint == "sp1"


def test_table_names_split_at_the_first_dot_and_quote() -> None:
    assert split_table_name("shop.order.items") == ("shop", "order.items")
    assert quote_table("sh`op.t") == "`sh``op`.`t`"
    with pytest.raises(ValueError, match="not qualified as 'db.table'"):
        split_table_name("orders")


def test_one_model_validates_the_extras_and_yields_the_form() -> None:
    extras = parse_extras({"server_id": "", "heartbeat_period": "20", "ssl_ca": "/ca.pem", "cursor": "dict"})
    assert (extras.server_id, extras.heartbeat_period, extras.ssl_options()) == (None, 20, {"ca": "/ca.pem"})
    fields = conn_fields()
    heartbeat = fields["heartbeat_period"]["schema"]
    assert heartbeat == {"type": ["integer", "null"], "minimum": 1, "maximum": 600, "default": 20 - 5}
    with pytest.raises(ValueError, match="extra heartbeat_period=601 must be in 1..600"):
        parse_extras({"heartbeat_period": heartbeat["maximum"] + 1})
    with pytest.raises(ValueError, match=r"extra flavor='postgres' must be one of 'mysql' or 'mariadb'"):
        parse_extras({"flavor": "postgres"})
    assert "ssl" not in fields  # accepted from plain mysql connections, not shown in the form
