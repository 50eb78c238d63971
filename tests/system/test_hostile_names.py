"""Table names an attacker with CREATE on a captured schema can choose (issue 30, findings 1-3).

The example DAG runs as the least-privileged user the connection Test recommends (REPLICATION SLAVE,
BINLOG MONITOR, SELECT) over a database holding tables named like paths (``../../../../escaped``,
``../<db>/orders``), a case twin (``ORDERS`` beside ``orders``, dropped mid-run), glob characters
(``secret[s]``, excluded by ``!<db>.secret[s]``), a space and a non-ASCII name, next to a database whose
name extends the captured one with a dot (``<db>.b``), and the tables ``manifest.json`` and ``plan.json`` (database
``manifest``, table ``json``), whose staging folders would be a window's manifest and a snapshot's plan. The target must equal the source table by table,
and nothing may be written outside the staging and target roots, in both write modes (merge-on-read writes
deletion vector files beside each table's data).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import Pipeline

from airflow_provider_binlog.contract.names import qualified_name, quote_part

pytestmark = pytest.mark.system

TABLES = ["orders", "ORDERS", "../../../../escaped", "with space", "заказы", "secret[s]"]


@pytest.fixture
def dotted_db(connections: Any, scratch_db: str) -> Iterator[str]:
    """A database named ``<scratch db>.b``: the selection ``<scratch db>.*`` must not take its tables."""
    name = f"{scratch_db}.b"
    connections.execute(f"CREATE DATABASE {quote_part(name)}")
    try:
        yield name
    finally:
        connections.execute(f"DROP DATABASE IF EXISTS {quote_part(name)}")


@pytest.fixture
def file_named_tables(connections: Any) -> Iterator[list[str]]:
    """Tables ``manifest.json`` and ``plan.json``: named like the files of a window or snapshot folder."""
    names = ["manifest.json", "plan.json"]
    for name in names:
        db = name.split(".")[0]
        connections.execute(f"DROP DATABASE IF EXISTS {db}", f"CREATE DATABASE {db}")
        connections.execute("CREATE TABLE json (id INT PRIMARY KEY, v VARCHAR(40))", database=db)
        connections.execute(f"INSERT INTO json VALUES (1, '{name}')", database=db)
    try:
        yield names
    finally:
        for name in names:
            connections.execute(f"DROP DATABASE IF EXISTS {name.split('.')[0]}")


@pytest.mark.slow  # runs the DAG twice with Spark merges, about 60 s
@pytest.mark.parametrize("write_mode", ["copy_on_write", "merge_on_read"])
def test_hostile_names_stay_inside_their_roots_and_the_target_equals_the_source(
    connections: Any,
    scratch_db: str,
    dotted_db: str,
    pipeline_dirs: dict[str, str],
    least_privileged: None,
    file_named_tables: list[str],
    write_mode: str,
) -> None:
    db = scratch_db
    shop = Pipeline(connections, db, pipeline_dirs)
    shop.conf["tables"] = f"{db}.*, !{db}.secret[s], {', '.join(file_named_tables)}"
    shop.conf["write_mode"] = write_mode  # merge-on-read: deletion vector files beside each table's data
    evil = f"../{db}/orders"  # its folder would be <target>/<db>/orders: the table orders' own
    names = [*TABLES, evil]
    for n, table in enumerate(names):
        shop.sql(
            f"CREATE TABLE {quote_part(table)} (id INT PRIMARY KEY, v VARCHAR(40))",
            f"INSERT INTO {quote_part(table)} VALUES (1, '{n}-a'), (2, '{n}-b')",
        )
    connections.execute("CREATE TABLE c (id INT PRIMARY KEY, v VARCHAR(40))", database=dotted_db)
    connections.execute("INSERT INTO c VALUES (1, 'other database')", database=dotted_db)
    sandbox = Path(pipeline_dirs["target"]).parent  # tmp_path: staging and target are its folders

    shop.run_window()  # the snapshot of every selected table, then the first window
    for n, table in enumerate(names):
        shop.sql(
            f"UPDATE {quote_part(table)} SET v = '{n}-updated' WHERE id = 1",
            f"INSERT INTO {quote_part(table)} VALUES (3, '{n}-c')",
        )
    connections.execute("INSERT INTO c VALUES (2, 'still other')", database=dotted_db)
    for name in file_named_tables:
        connections.execute("UPDATE json SET v = 'updated' WHERE id = 1", database=name.split(".")[0])
    shop.sql(f"DROP TABLE {db}.ORDERS")  # lower_case_table_names=0: orders is another table and stays
    window = shop.run_window()

    import deltalake

    from airflow_provider_binlog.contract.delta_log import file_vectors
    from airflow_provider_binlog.target import read_table, table_uri

    captured = [t for t in names if t not in ("ORDERS", "secret[s]")]
    assert shop.mismatches(*(quote_part(t) for t in captured)) == []
    assert compare(shop, file_named_tables) == []
    assert set(file_named_tables) <= set(shop.manifest(window)["tables"])
    orders = read_table(shop.target, qualified_name(db, "orders")).to_pylist()
    assert sorted(r["v"] for r in orders) == ["0-b", "0-c", "0-updated"]
    assert read_table(shop.target, qualified_name(db, "ORDERS")).num_rows == 0  # dropped: emptied
    staged = set(shop.manifest(window)["tables"])
    assert qualified_name(db, "secret[s]") not in staged
    assert not any(name.startswith(quote_part(dotted_db)) for name in staged)
    assert {p.name for p in Path(shop.target).iterdir()} == {db, "manifest", "plan"}  # none of <db>.b
    assert {p.name for p in sandbox.iterdir()} == {"staging", "target"}
    assert not list(sandbox.parent.parent.rglob("escaped"))  # the name's ../../../../ led up to here
    for table in captured:
        uri = table_uri(shop.target, qualified_name(db, table))
        vectors = file_vectors(deltalake.DeltaTable(uri))
        assert bool(vectors) == (write_mode == "merge_on_read"), table  # the update of id 1 is marked
        assert all(Path(v.file_uri(uri)).parent == Path(uri) for v in vectors.values() if v.relative_path())


def compare(shop: Pipeline, tables: list[str]) -> list[str]:
    """Compare tables of any database with their target tables row by row; return those that differ."""
    import pymysql

    from airflow_provider_binlog.verify import compare_table

    with pymysql.connect(**shop.server.connection_kwargs()) as conn:
        results = [compare_table(conn, shop.target, name) for name in tables]
    return [str(r) for r in results if not r.matched]
