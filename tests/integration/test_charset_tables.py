"""The shipped character set tables are the server's: measured again on a private MariaDB and compared.

``scripts/charset_tables.py`` measured the tables once; this module runs its measurement against a
private server: every byte sequence a character of each set can have (every code point's encoding for the
Unicode sets) is converted with ``CONVERT(CONVERT(bytes USING cs) USING utf8mb4)``, the table built from the
results must equal the shipped one, and the decoder (fast path included) must give the server's text for
every probe, or refuse it where the server has no character.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import MySQLdb
import pytest

from airflow_provider_binlog.extract.charsets import UNICODE, load_table, table_names
from airflow_provider_binlog.testing.mariadb import LocalMariaDB

pytestmark = pytest.mark.integration

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "charset_tables.py"
MARIADB_UNICODE = ("ucs2", "utf16", "utf16le", "utf32", "utf8mb3", "utf8mb4")


@pytest.fixture(scope="module")
def script() -> ModuleType:
    """The generator script, ``scripts/charset_tables.py`` (not a package: loaded from its path)."""
    spec = importlib.util.spec_from_file_location("charset_tables_script", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def cursor() -> Iterator[Any]:
    """A cursor of a ``utf8mb4`` session (mysqlclient) on a private server of this module."""
    with LocalMariaDB() as server:
        conn = MySQLdb.connect(**server.connection_kwargs(charset="utf8mb4"))
        try:
            yield conn.cursor()
        finally:
            conn.close()


@pytest.fixture(scope="module")
def character_sets(script: ModuleType, cursor: Any) -> dict[str, int]:
    return dict(script.character_sets(cursor))


def test_every_character_set_the_server_offers_has_a_table_or_is_unicode(
    character_sets: dict[str, int],
) -> None:
    assert set(character_sets) == {"binary", *MARIADB_UNICODE, *table_names()}
    assert set(MARIADB_UNICODE) <= set(UNICODE)


@pytest.mark.parametrize("charset", sorted(table_names()))
def test_the_shipped_table_is_the_servers(
    charset: str, script: ModuleType, cursor: Any, character_sets: dict[str, int]
) -> None:
    found = script.check_charset(cursor, charset, character_sets[charset])
    shipped = load_table(charset)
    assert found.table is not None
    changed = sorted(set(found.table.chars.items()) ^ set(shipped.chars.items()))
    assert changed == [], (
        f"{len(changed)} entries differ; rerun scripts/charset_tables.py and review the diff"
    )
    assert found.table == shipped
    assert found.differences == []
    assert found.characters == len(shipped.chars)
    assert found.probes >= 256


@pytest.mark.parametrize("charset", MARIADB_UNICODE)
def test_unicode_sets_decode_every_code_point_as_the_server(
    charset: str, script: ModuleType, cursor: Any, character_sets: dict[str, int]
) -> None:
    found = script.check_charset(cursor, charset, character_sets[charset])
    assert found.table is None
    assert [(raw.hex(), server, ours) for raw, server, ours in found.differences[:5]] == []
    # Every scalar value of the set was converted: the BMP without surrogates, or all of Unicode's.
    assert found.characters == (0x10000 - 2048 if charset in ("ucs2", "utf8mb3") else 0x110000 - 2048)
    assert found.probes > found.characters  # and the sequences that must be refused
