"""A state document is validated on load: bounded, shallow, and naming only locations within the task's roots.

Issue 30, items 6 (a) and (c), and 8: a hand-edited state Variable must fail with a message naming the Variable,
the field and the repair, never with a raw ``RecursionError`` or a later ``OverflowError``, and never lead a
task to read, write or delete outside the staging and target roots it was given.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_binlog.contract import ContractError
from airflow_provider_binlog.contract.positions import BinlogPosition
from airflow_provider_binlog.contract.uris import require_within_root, within_root
from airflow_provider_binlog.exceptions import BinlogConfigError, PipelineNameError, StateError
from airflow_provider_binlog.pipeline.ledger import SEQ_MAX, Snapshot, Window
from airflow_provider_binlog.pipeline.state import StateManager, StateRoots, check_pipeline_name
from airflow_provider_binlog.testing.stores import DictStore

HEAD = BinlogPosition("mariadb-bin.000001", 800, "0-1-10")
KEY = "binlog_state__shop"


def document(staging: str = "/data/staging/shop", target: str = "/data/target") -> dict[str, Any]:
    """Return a valid state document with one merged window and one merged snapshot under the given roots."""
    state = StateManager("shop", DictStore()).initial("mariadb:1@h:3306", "mariadb", HEAD)
    seq = state.next_seq
    window = Window(
        seq=seq,
        start=HEAD,
        end=HEAD,
        status="merged",
        cut_at="2026-01-01T00:00:00+00:00",
        run_id="r1",
        manifest_uri=f"{staging}/window={seq}",
    )
    snapshot = Snapshot(
        seq=seq + 1,
        tables=["shop.orders"],
        start=HEAD,
        run_id="r1",
        status="merged",
        started_at="2026-01-01T00:00:00+00:00",
        staging_uri=f"{staging}/snapshot={seq + 1}",
    )
    state = state.model_copy(update={"windows": [window], "snapshots": [snapshot]})
    state = state.model_copy(update={"checkpoint": state.checkpoint.model_copy(update={"window": seq})})
    return json.loads(state.with_target(target, ["shop.orders"]).model_dump_json())


def load(doc: Any, roots: StateRoots | None = None) -> Any:
    return StateManager("shop", DictStore({KEY: json.dumps(doc)}), roots=roots).load()


def test_the_valid_document_loads_within_its_roots() -> None:
    state = load(document(), StateRoots(staging="/data/staging/shop", target="/data/target"))
    assert state.snapshots[0].staging_uri == f"/data/staging/shop/snapshot={state.snapshots[0].seq}"


def test_deep_nesting_is_refused_with_the_variable_named_not_a_recursion_error() -> None:
    deep = "[" * 100_000 + "]" * 100_000
    with pytest.raises(StateError) as caught:
        StateManager("shop", DictStore({KEY: deep})).load()
    message = str(caught.value)
    assert KEY in message
    assert "too deeply" in message
    assert "admin history --pipeline shop" in message
    nested = document()
    probe: Any = {}
    nested["resnapshots_needed"] = [
        {"table": "shop.orders", "since": HEAD.to_dict(), "reason": "r", "statement": "s", "window": 1,
         "detected_at": "2026-01-01T00:00:00+00:00", "probe": probe}
    ]  # fmt: skip
    for _ in range(30):  # shallow enough for json, too deep for a state document
        probe["k"] = {}
        probe = probe["k"]
    with pytest.raises(StateError, match="deeper than 16 levels"):
        load(nested)


@pytest.mark.parametrize(
    ("path", "value", "field"),
    [
        (("windows", 0, "seq"), 2**63 - 1, "windows.0.seq"),
        (("checkpoint", "window"), 2**63, "checkpoint.window"),
        (("snapshots", 0, "rows"), -1, "snapshots.0.rows"),
        (("revision",), SEQ_MAX + 1, "revision"),
        (("seq_floor",), 10**30, "seq_floor"),
        (("windows", 0, "end", "pos"), 2**64, "windows.0.end.pos"),
    ],
)
def test_numbers_out_of_bounds_are_refused_naming_the_field(
    path: tuple[Any, ...], value: int, field: str
) -> None:
    doc = document()
    holder = doc
    for part in path[:-1]:
        holder = holder[part]
    holder[path[-1]] = value
    with pytest.raises(StateError) as caught:
        load(doc)
    message = str(caught.value)
    assert KEY in message
    assert field in message
    assert str(value) in message
    assert "docs/operating.md" in message


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("snapshots.staging_uri", "/data/staging/shop/../../elsewhere/snapshot=9"),
        ("snapshots.staging_uri", "/data/staging/other/snapshot=9"),
        ("snapshots.staging_uri", "s3://victim/staging/shop/snapshot=9"),
        ("windows.manifest_uri", "/etc/window=1"),
        ("target_tables", "victim"),
    ],
)
def test_a_location_outside_the_tasks_roots_is_refused_before_it_is_used(field: str, value: str) -> None:
    doc = document()
    if field == "target_tables":
        doc["target_tables"] = ["shop.orders", value]
    else:
        name, key = field.split(".")
        doc[name][0][key] = value
    with pytest.raises(StateError) as caught:
        load(doc, StateRoots(staging="/data/staging/shop", target="/data/target"))
    message = str(caught.value)
    where = (
        "target_tables[1]" if field == "target_tables" else f"{field.split('.')[0]}[0].{field.split('.')[1]}"
    )
    assert KEY in message
    assert where in message
    assert "left untouched" in message
    assert "admin history" in message
    assert load(doc) is not None  # a reader given no roots (a sensor, the admin command) still reads it


@pytest.mark.parametrize(
    "table", ["shop/../../../victim.t", "../../victim.t", "shop./..", "..\\..\\x.t", "/etc.passwd"]
)
def test_a_target_table_name_never_reaches_outside_the_target_root(table: str) -> None:
    """Whatever a hand edit puts in ``target_tables``: refused on load, or mapped inside the root."""
    from airflow_provider_binlog.contract.uris import table_uri

    doc = document()
    doc["target_tables"] = ["shop.orders", table]
    refusal = ""
    try:
        load(doc, StateRoots(staging="/data/staging/shop", target="/data/target"))
    except StateError as err:
        refusal = str(err)
    if refusal:
        assert "target_tables[1]" in refusal
    else:
        assert within_root("/data/target", table_uri("/data/target", table))


def test_object_store_roots_compare_scheme_bucket_connection_and_prefix() -> None:
    root = "s3://lake@bucket/staging/shop"
    doc = document(staging=root)
    doc["snapshots"][0]["staging_uri"] = f"s3://bucket/staging/shop/snapshot={doc['snapshots'][0]['seq']}"
    assert (
        load(doc, StateRoots(staging=root)) is not None
    )  # snapshots record their folder without the conn id
    doc["windows"][0]["manifest_uri"] = "s3://other@bucket/staging/shop/window=1"
    with pytest.raises(StateError, match=r"windows\[0\]\.manifest_uri"):
        load(doc, StateRoots(staging=root))


@pytest.mark.parametrize(
    ("root", "uri", "inside"),
    [
        ("/data/staging", "/data/staging", True),
        ("/data/staging", "/data/staging/p/window=1", True),
        ("/data/staging", "file:///data/staging/p", True),
        ("/data/staging", "/data/staging/../x", False),
        ("/data/staging", "/data/staging2/p", False),
        ("/data/staging/", "/data/staging/p", True),
        ("s3://bucket/prefix", "s3://bucket/prefix/p", True),
        ("s3://bucket/prefix", "s3a://bucket/prefix/p", True),
        ("s3://bucket/prefix", "s3://bucket/prefix2/p", False),
        ("s3://bucket/prefix", "s3://bucket/prefix/../other", False),
        ("s3://bucket/prefix", "s3://bucket/prefix/./p", False),
        ("s3://bucket/prefix", "s3://conn@bucket/prefix/p", False),
        ("s3://bucket/prefix", "gs://bucket/prefix/p", False),
        ("s3://bucket/prefix", "/bucket/prefix/p", False),
        ("/data", "s3://data/p", False),
    ],
)
def test_within_root(root: str, uri: str, inside: bool) -> None:
    assert within_root(root, uri) is inside
    if not inside:
        with pytest.raises(ContractError, match="outside its root"):
            require_within_root(root, uri, "a location")


@pytest.mark.parametrize("name", ["", "../../x", "a/b", "a.b", "p q", "x" * 201, "..", "p\n"])
def test_bad_pipeline_names_are_refused(name: str) -> None:
    with pytest.raises(PipelineNameError, match="must be non-empty letters") as caught:
        check_pipeline_name(name)
    assert isinstance(caught.value, BinlogConfigError)
    assert isinstance(caught.value, ValueError)


def test_a_window_path_of_a_bad_pipeline_name_creates_nothing(tmp_path: Path) -> None:
    from airflow_provider_binlog.pipeline.staging import check_writable, pipeline_root, window_path

    staging = tmp_path / "a" / "b" / "staging"
    with pytest.raises(PipelineNameError):
        check_writable(window_path(str(staging), "../../x", 1))
    with pytest.raises(PipelineNameError):
        check_writable(pipeline_root(str(staging), "../../x"))
    assert not (tmp_path / "a" / "x").exists()
    assert not staging.exists()
    assert window_path(str(staging), "shop_1-b", 7).path.endswith("staging/shop_1-b/window=7")
