"""verify.read_source on the private MariaDB: quoted identifiers and reads of single keys."""

from __future__ import annotations

import pymysql
import pytest

from airflow_provider_binlog.testing.mariadb import LocalMariaDB
from airflow_provider_binlog.verify import read_source

pytestmark = pytest.mark.integration


def test_read_source_quotes_names_and_reads_single_keys(mariadb: LocalMariaDB, source_db: str) -> None:
    with pymysql.connect(**mariadb.connection_kwargs(database=source_db)) as conn:
        with conn.cursor() as cur:
            cur.execute(
                "CREATE TABLE `we``ird` (`k``ey` INT, `b` INT, v VARCHAR(5), PRIMARY KEY (`k``ey`, `b`))"
            )
            cur.execute("INSERT INTO `we``ird` VALUES (1, 1, 'a'), (1, 2, 'b'), (3, 1, 'c')")
        table = f"{source_db}.we`ird"
        whole = read_source(conn, table)
        assert whole.key == ["k`ey", "b"]
        assert whole.rows == {(1, 1): (1, 1, "a"), (1, 2): (1, 2, "b"), (3, 1): (3, 1, "c")}
        assert read_source(conn, table, keys=[(1, 2), (3, 1), (7, 7)]).rows == {
            (1, 2): (1, 2, "b"),
            (3, 1): (3, 1, "c"),
        }
