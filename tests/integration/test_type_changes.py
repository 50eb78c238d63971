"""A MODIFY that changes a column's type: the target follows it exactly, or the table asks for a re-snapshot.

One scratch database on the session's MariaDB holds a table whose columns are widened (and two narrowed) by
one ALTER, and a table whose column becomes text. Three windows are extracted in-process (``extract_window``)
and merged with the shared ``spark`` session once for the whole module: window 1 inserts the rows, window 2
writes rows, runs the ALTERs and writes rows that need the new types, window 3 writes more. The tests read
what the module built; the target is compared with a SELECT of the source, row by row. The last test plans
schema changes without data (the rounding narrowings MySQL applies silently).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

pytest.importorskip("pyspark")
deltalake = pytest.importorskip("deltalake")

from test_merge import StagedTableSpec, stage_window  # noqa: E402

from airflow_provider_binlog.contract.delta import (  # noqa: E402
    KEY_RANGE_LAYOUT,
    LAYOUT_PROPERTY,
    OWNER_PROPERTY,
    PRIMARY_KEY_PROPERTY,
    delta_arrow_schema,
    pipeline_app_id,
    window_app_id,
)
from airflow_provider_binlog.contract.refusals import refused_tables  # noqa: E402
from airflow_provider_binlog.contract.types import MYSQL_TYPE_KEY  # noqa: E402
from airflow_provider_binlog.extract.reader import TableTarget  # noqa: E402
from airflow_provider_binlog.extract.window import extract_window  # noqa: E402
from airflow_provider_binlog.hooks.binlog import BinlogHook  # noqa: E402
from airflow_provider_binlog.jobs.merge.job import merge_window  # noqa: E402
from airflow_provider_binlog.jobs.merge.schema import UnfollowableSchemaChange, plan_schema_change  # noqa: E402
from airflow_provider_binlog.jobs.merge.window import target_schema  # noqa: E402
from airflow_provider_binlog.pipeline.ledger import Window, now_iso  # noqa: E402
from airflow_provider_binlog.pipeline.staging import window_path  # noqa: E402
from airflow_provider_binlog.target import read_table, table_uri  # noqa: E402
from airflow_provider_binlog.testing.mariadb import LocalMariaDB  # noqa: E402

pytestmark = pytest.mark.integration

PIPELINE = "widen"


ONES = "1" * 64
MAX = 9223372036854775807
TABLE = "wide"
"""The key widens to decimal(20,0): the rewrite writes every row again, sorted by it. ``n`` and
``vc`` are narrowed, with values that fit: the target keeps their wider types."""
COLUMNS = (
    "id BIGINT PRIMARY KEY, i INT, t TINYINT, s SMALLINT, u INT, b BIT(8), d INT, m DECIMAL(10,2), f FLOAT,"
    " dt DATETIME, da DATE, v VARCHAR(10), n BIGINT, vc VARCHAR(100)"
)
ALTER = (
    "ALTER TABLE wide MODIFY id BIGINT UNSIGNED, MODIFY i BIGINT, MODIFY t INT, MODIFY s MEDIUMINT,"
    " MODIFY u INT UNSIGNED, MODIFY b BIT(64), MODIFY d DOUBLE, MODIFY m DECIMAL(14,4), MODIFY f DOUBLE,"
    " MODIFY dt DATETIME(6), MODIFY da DATETIME, MODIFY v VARCHAR(40), MODIFY n INT, MODIFY vc VARCHAR(50)"
)
SELECT = "id, i, t, s, u, b + 0, d, m, f, dt, da, v, n, vc"
WIDENED = ["b", "d", "da", "f", "i", "id", "m", "s", "t", "u"]
TYPES = {
    "id": pa.decimal128(20, 0),
    "i": pa.int64(),
    "t": pa.int32(),
    "s": pa.int32(),
    "u": pa.int64(),
    "b": pa.decimal128(20, 0),
    "d": pa.float64(),
    "m": pa.decimal128(14, 4),
    "f": pa.float64(),
    "dt": pa.timestamp("us"),
    "da": pa.timestamp("us"),
    "v": pa.string(),
    "n": pa.int64(),
    "vc": pa.string(),
}
"""Arrow types ``read_table`` gives after window 3, by column."""

WINDOW_1 = [
    "INSERT INTO wide VALUES"
    " (1, -7, -128, -32768, 5, b'101', 2147483647, 12345678.91, 1.1, '2024-02-29 23:59:59', '2024-02-29', 'one', 7,"
    " 'seven'),"
    f" ({MAX}, 0, 0, 0, 0, 0, 0, -0.01, -3.75, '1000-01-01 00:00:00', '1000-01-01', 'max', -2147483648, 'min'),"
    " (3, 2147483647, 127, 32767, 2147483647, b'11111111', -2147483648, NULL, NULL, NULL, NULL, NULL, 2147483647,"
    " 'max')",
]
BEFORE_ALTER = [
    f"UPDATE wide SET i = 42, d = 12, m = 0.5, f = 0.1, v = 'two', vc = 'max!' WHERE id = {MAX}",
    "INSERT INTO wide VALUES (4, 4, 4, 4, 4, b'100', 4, 4.44, 4.5, '2004-04-04 04:04:04', '2004-04-04', 'four', 4,"
    " 'four')",
]
AFTER_ALTER = [
    f"INSERT INTO wide VALUES (18446744073709551615, {MAX}, 2147483647, 8388607, 4294967295, b'{ONES}', 1.5e300,"
    " 1234567890.1234, 2.2250738585072014e-308, '2024-05-01 12:00:00.123456', '2024-05-01 13:14:15', 'beyond',"
    " 2147483647, 'beyond')",
    f"UPDATE wide SET i = -{MAX} - 1, b = b'1{'0' * 62}1', dt = '2038-01-19 03:14:07.999999' WHERE id = 3",
    "DELETE FROM wide WHERE id = 4",
]
WINDOW_3 = [
    "UPDATE wide SET t = -2147483648, s = -8388608, m = -9999999999.9999, f = 1.7976931348623157e308,"
    f" da = '9999-12-31 23:59:59', v = '{'forty' * 8}' WHERE id = {MAX}",
    "INSERT INTO wide VALUES (6, 6, 6, 6, 6, b'110', 0.25, 6.6, 6.5, '9999-12-31 23:59:59.999999', '2006-06-06',"
    " 'six', 6, 'six')",
    f"UPDATE wide SET n = -5, vc = '{'fifty' * 10}' WHERE id = 3",
]


@dataclass
class Built:
    """What the module fixture did: the database, the target, window folders and what each merge returned."""

    db: str
    target: str
    windows: dict[int, str]
    summaries: dict[int, dict[str, Any]]
    versions: dict[str, int]
    """Delta version of each table after window 3."""
    remerged: list[dict[str, Any]] = field(default_factory=list)
    refusal: dict[str, Any] = field(default_factory=dict)
    unfollowable_rows: tuple[list[dict[str, Any]], list[dict[str, Any]]] = ([], [])
    """(target rows before the failed merge, after it) of the table whose column became text."""
    resnapshot: dict[str, Any] = field(default_factory=dict)
    """Summary of the merge of a snapshot of that table, taken after the failure."""
    seconds: dict[str, float] = field(default_factory=dict)


class Cutter:
    """Cut windows between consecutive heads of the server and extract them in-process."""

    def __init__(self, staging: Path, db: str) -> None:
        self.staging = staging
        self.db = db
        self.hook = BinlogHook(pipeline=PIPELINE)
        self.start = self.hook.server_state().head

    def cut(self, seq: int, tables: list[str], *, pipeline_dir: str = "main") -> str:
        """Extract the changes since the last cut of ``tables`` as window ``seq``; return its folder."""
        state = self.hook.server_state()
        assert self.start is not None
        assert state.head is not None
        window = Window(seq=seq, start=(self.start), end=(state.head), run_id="r", cut_at=now_iso())
        folder = self.staging / pipeline_dir
        extract_window(
            self.hook,
            pipeline=PIPELINE,
            window=window,
            tables={f"{self.db}.{t}": TableTarget(f"{self.db}.{t}", ["id"]) for t in tables},
            window_dir=window_path(str(folder), PIPELINE, seq),
            server=state,
        )
        return str(folder / PIPELINE / f"window={seq}")

    def advance(self) -> None:
        """Start the next window at the current head."""
        self.start = self.hook.server_state().head


def _timed(built: Built, what: str, action: Any) -> Any:
    import time

    started = time.monotonic()
    try:
        return action()
    finally:
        built.seconds[what] = round(time.monotonic() - started, 1)


@pytest.fixture(scope="module")
def built(mariadb: LocalMariaDB, spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Built]:
    """Build the three windows, merge them, re-merge window 2, and try the unfollowable change."""
    root = Path(tmp_path_factory.mktemp("type_changes"))
    tables = [TABLE]
    with pytest.MonkeyPatch.context() as patch, mariadb.scratch_database("widen") as db:
        patch.setenv("AIRFLOW_CONN_BINLOG_DEFAULT", mariadb.uri())
        mariadb.execute(
            f"CREATE TABLE {TABLE} ({COLUMNS}) DEFAULT CHARSET=utf8mb4",
            "CREATE TABLE texted (id INT PRIMARY KEY, c INT)",
            database=db,
        )
        built = Built(db=db, target=str(root / "target"), windows={}, summaries={}, versions={})
        cutter = Cutter(root / "staging", db)
        mariadb.execute(*WINDOW_1, "INSERT INTO texted VALUES (1, 1), (2, 22)", database=db)
        built.windows[1] = cutter.cut(1, [*tables, "texted"])
        cutter.advance()
        mariadb.execute(
            *BEFORE_ALTER,
            ALTER,
            *AFTER_ALTER,
            "UPDATE texted SET c = 3 WHERE id = 1",
            "ALTER TABLE texted MODIFY c VARCHAR(20)",
            "INSERT INTO texted VALUES (3, 'three')",
            database=db,
        )
        built.windows[2] = cutter.cut(2, tables)
        texted_window = cutter.cut(2, ["texted"], pipeline_dir="texted")
        cutter.advance()
        mariadb.execute(*WINDOW_3, database=db)
        built.windows[3] = cutter.cut(3, tables)

        def run(seq: int) -> dict[str, Any]:
            return merge_window(spark, built.windows[seq], built.target, pipeline=PIPELINE)

        for seq in (1, 2, 3):
            built.summaries[seq] = _timed(built, f"merge window {seq}", lambda seq=seq: run(seq))
        built.versions = {t: _delta(built, t).version() for t in tables}
        built.remerged = [run(2), run(1)]

        texted = f"{db}.texted"
        before = read_table(built.target, texted).to_pylist()
        merge_window(spark, texted_window, built.target, pipeline=PIPELINE)  # refuses the table
        built.refusal = refused_tables(texted_window).get(texted, {})
        built.unfollowable_rows = (before, read_table(built.target, texted).to_pylist())
        rows = mariadb.execute("SELECT id, c FROM texted", database=db)
        snapshot = StagedTableSpec(
            pa.schema([("id", pa.int32()), ("c", pa.string())]),
            [("r", {"id": i, "c": c}) for i, c in rows],
            mysql_types={"id": "int", "c": "varchar(80)"},
        )
        snapshot_window = stage_window(root / "snapshot", 4, {texted: snapshot}, PIPELINE, "snapshot")
        built.resnapshot = _timed(
            built,
            "merge the re-snapshot",
            lambda: merge_window(spark, snapshot_window, built.target, pipeline=PIPELINE),
        )
        yield built


def _delta(built: Built, table: str) -> Any:
    return deltalake.DeltaTable(table_uri(built.target, f"{built.db}.{table}"))


def _rewrites(built: Built, table: str) -> list[dict[str, Any]]:
    return [c for c in _delta(built, table).history() if "binlog.widened" in c]


def _by_id(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(rows, key=lambda r: r["id"])


def test_the_target_equals_the_source_row_by_row(built: Built, mariadb: LocalMariaDB) -> None:
    rows = mariadb.execute(f"SELECT {SELECT} FROM {TABLE}", database=built.db)
    source = [dict(zip(TYPES, row, strict=True)) for row in rows]
    target = read_table(built.target, f"{built.db}.{TABLE}")

    assert {f.name: f.type for f in target.schema} == TYPES
    assert _by_id(target.to_pylist()) == _by_id(source)
    assert [r["id"] for r in _by_id(source)] == [1, 3, 6, MAX, 2**64 - 1]


def test_the_widenings_rewrite_the_table_once_in_the_window_that_needs_them(built: Built) -> None:
    name = f"{built.db}.{TABLE}"

    assert [
        (c["binlog.window"], sorted(json.loads(c["binlog.widened"]))) for c in _rewrites(built, TABLE)
    ] == [(2, WIDENED)]
    assert built.summaries[2]["tables"][name]["widened"] == WIDENED
    assert built.summaries[3]["tables"][name]["widened"] == []


def test_owner_layout_key_and_merged_windows_survive_the_rewrite(built: Built) -> None:
    dt_ = _delta(built, TABLE)
    configuration = dt_.metadata().configuration

    assert configuration[OWNER_PROPERTY] == PIPELINE
    assert configuration[LAYOUT_PROPERTY] == KEY_RANGE_LAYOUT
    assert json.loads(configuration[PRIMARY_KEY_PROPERTY]) == ["id"]
    assert dt_.metadata().partition_columns == []
    assert [dt_.transaction_version(window_app_id(PIPELINE, seq)) for seq in (1, 2, 3)] == [1, 2, 3]
    assert dt_.transaction_version(pipeline_app_id(PIPELINE)) == 3


def test_a_re_merge_after_the_rewrite_changes_nothing(built: Built) -> None:
    for summary in built.remerged:
        assert all(t["skipped"] for t in summary["tables"].values()), summary
    assert _delta(built, TABLE).version() == built.versions[TABLE]


def test_column_metadata_records_the_new_source_types(built: Built) -> None:
    schema = delta_arrow_schema(_delta(built, TABLE))
    mysql_types = {f.name: f.metadata[MYSQL_TYPE_KEY.encode()].decode() for f in schema if f.name in TYPES}

    # The narrowed n and vc keep their stored (and read-back) types and record the source's new types.
    assert mysql_types == {
        "id": "bigint unsigned",
        "i": "bigint",
        "t": "int",
        "s": "mediumint",
        "u": "int unsigned",
        "b": "bit(64)",
        "d": "double",
        "m": "decimal(14,4)",
        "f": "double",
        "dt": "datetime(6)",
        "da": "datetime",
        "v": "varchar(160)",
        "n": "int",
        "vc": "varchar(200)",
    }


def test_a_change_that_is_not_a_widening_asks_for_a_re_snapshot_of_its_table(built: Built) -> None:
    refusal = built.refusal
    table = f"{built.db}.texted"

    assert (refusal["table"], refusal["column"]) == (table, "c")
    assert "int32" in refusal["detail"]
    assert "string" in refusal["detail"]
    assert f"pipeline {PIPELINE!r}" in refusal["message"]
    assert "re-snapshots" in refusal["message"]
    before, after = built.unfollowable_rows
    assert _by_id(after) == _by_id(before) == [{"id": 1, "c": 1}, {"id": 2, "c": 22}]


@pytest.mark.parametrize(
    ("old", "new", "reason"),
    [
        ("decimal(12,4)", "decimal(10,2)", "narrowed by rounding"),
        ("double", "float", "narrowed by rounding"),
        ("datetime(6)", "datetime", "lost fraction digits"),
        ("datetime", "date", "narrowed by rounding"),
        ("time", "bigint", "neither a widening nor a narrowing"),
    ],
)
def test_a_change_that_rounds_stored_values_is_not_followed(old: str, new: str, reason: str) -> None:
    arrow = {
        "decimal(12,4)": pa.decimal128(12, 4),
        "decimal(10,2)": pa.decimal128(10, 2),
        "double": pa.float64(),
        "float": pa.float32(),
        "datetime(6)": pa.timestamp("us"),
        "datetime": pa.timestamp("us"),
        "date": pa.date32(),
        "time": pa.duration("us"),
        "bigint": pa.int64(),
    }

    def schema(mysql: str) -> pa.Schema:
        staged = pa.schema([("id", pa.int32()), ("c", arrow[mysql])])
        return target_schema(staged, [{"name": "c", "mysql_type": mysql, "arrow_type": str(arrow[mysql])}])

    with pytest.raises(UnfollowableSchemaChange, match=reason) as caught:
        plan_schema_change(schema(old), schema(new), "db.t", pipeline=PIPELINE)
    assert caught.value.column == "c"
    # An older window staged before a widening is only cast up; it never carries a MODIFY.
    if reason != "neither a widening nor a narrowing":
        older = plan_schema_change(schema(old), schema(new), "db.t", pipeline=PIPELINE, newest=False)
        assert (older.widened, older.new_fields) == ({}, [])


def test_a_re_snapshot_gives_the_column_its_new_type_in_its_own_commit(
    built: Built, mariadb: LocalMariaDB
) -> None:
    source = [{"id": i, "c": c} for i, c in mariadb.execute("SELECT id, c FROM texted", database=built.db)]
    target = read_table(built.target, f"{built.db}.texted")
    configuration = _delta(built, "texted").metadata().configuration

    assert target.schema == pa.schema([("id", pa.int32()), ("c", pa.string())])
    assert (
        _by_id(target.to_pylist())
        == _by_id(source)
        == [
            {"id": 1, "c": "3"},
            {"id": 2, "c": "22"},
            {"id": 3, "c": "three"},
        ]
    )
    assert _rewrites(built, "texted") == []  # the snapshot's own commit replaced the schema
    assert _delta(built, "texted").schema().to_arrow().field("c").type == pa.string()
    assert configuration[OWNER_PROPERTY] == PIPELINE
