"""Storage options travel end to end on an S3-compatible store (moto in server mode, on a private port).

One dict of deltalake-style storage options reaches every place the provider reads or writes a window
and a target table: the manifest and refusal records (:mod:`airflow_provider_binlog.contract`), the
staged Parquet footers and the merge's driver steps (create, place new files, commit), the merge
operator's verification and ``target.read_table``. Each test also shows the store refuses the same read
without the options, so it cannot pass by reaching the files some other way.

Spark itself cannot read or write ``s3://`` here: pyspark ships no S3A filesystem (``hadoop-aws`` is not
in its jars and cannot be downloaded on our machines), so the one Spark step of a merge, computing the new
sorted files, is done by pyarrow's Parquet writer in :func:`write_segment_file`; everything the driver
does around it runs as in the job.
"""

from __future__ import annotations

import datetime as dt
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from decimal import Decimal

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

pytest.importorskip("moto")
deltalake = pytest.importorskip("deltalake")

from airflow_provider_binlog.contract import ContractError  # noqa: E402
from airflow_provider_binlog.contract.columns import CHANGE_FIELDS, OP_INSERT, UTC  # noqa: E402
from airflow_provider_binlog.contract.delta import STAGING_DIR, already_merged, open_table  # noqa: E402
from airflow_provider_binlog.contract.manifest import (  # noqa: E402
    Manifest,
    TableEntry,
    read_manifest,
    write_manifest,
)
from airflow_provider_binlog.contract.refusals import record_refusal, refused_tables  # noqa: E402
from airflow_provider_binlog.contract.uris import filesystem_for, join_uri, table_uri  # noqa: E402
from airflow_provider_binlog.jobs.merge.delta import commit_window, create_table  # noqa: E402
from airflow_provider_binlog.jobs.merge.files import FileLayout, place_outputs, staged_outputs  # noqa: E402
from airflow_provider_binlog.jobs.merge.layout import SEGMENT_COLUMN  # noqa: E402
from airflow_provider_binlog.jobs.merge.window import load_window, read_staged_schema, target_schema  # noqa: E402
from airflow_provider_binlog.operators import BinlogMergeOperator  # noqa: E402
from airflow_provider_binlog.target import check_target, read_table, window_merged  # noqa: E402

pytestmark = pytest.mark.integration

BUCKET = "cdc-bucket"
PIPELINE = "s3shop"
SOURCE = pa.schema([pa.field("id", pa.int64()), pa.field("amount", pa.decimal128(10, 2))])


@pytest.fixture(scope="module")
def s3_options() -> Iterator[dict[str, str]]:
    """Start a moto S3 server process on a free local port with one bucket; yield the storage options for it.

    A process of its own, not moto's in-process thread: deltalake holds the GIL during some calls
    (``DeltaTable.is_deltatable``), which would starve a server thread of this process.
    """
    import boto3

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        options = {
            "AWS_ACCESS_KEY_ID": "test-key",
            "AWS_SECRET_ACCESS_KEY": "test-secret",
            "AWS_REGION": "us-east-1",
            "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}",
            "AWS_ALLOW_HTTP": "true",
        }
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise RuntimeError(f"moto server did not start on port {port}") from None
                time.sleep(0.1)
        boto3.client(
            "s3",
            endpoint_url=options["AWS_ENDPOINT_URL"],
            aws_access_key_id=options["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=options["AWS_SECRET_ACCESS_KEY"],
            region_name=options["AWS_REGION"],
        ).create_bucket(Bucket=BUCKET)
        yield options
    finally:
        server.terminate()
        server.wait(timeout=30)


@pytest.fixture
def no_ambient_aws(monkeypatch: pytest.MonkeyPatch) -> None:
    """Leave the options as the only way to the store: no AWS credentials or endpoint from the environment."""
    for name in (
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_ENDPOINT_URL",
        "AWS_PROFILE",
        "AWS_REGION",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


def stage_window(
    window_uri: str, seq: int, rows: list[dict[str, object]], options: dict[str, str]
) -> Manifest:
    """Stage ``rows`` as inserts of ``shop.orders`` in one Parquet file and the manifest, on the store."""
    schema = pa.schema([*SOURCE, *CHANGE_FIELDS])
    ts = dt.datetime(2026, 1, 1, tzinfo=UTC)
    change_rows = [
        {
            **row,
            "_binlog_op": OP_INSERT,
            "_binlog_window": seq,
            "_binlog_seq": i + 1,
            "_binlog_gtid": None,
            "_binlog_file": "b.000001",
            "_binlog_pos": 100 + i,
            "_binlog_ts": ts,
        }
        for i, row in enumerate(rows)
    ]
    fs, path = filesystem_for(join_uri(window_uri, "shop.orders", "part-00000.parquet"), options)
    pq.write_table(pa.Table.from_pylist(change_rows, schema=schema), path, filesystem=fs)
    manifest = Manifest(
        pipeline=PIPELINE,
        window=seq,
        tables={
            "shop.orders": TableEntry(
                files=("shop.orders/part-00000.parquet",),
                rows=len(rows),
                ops={OP_INSERT: len(rows)},
                primary_key=("id",),
                columns=(
                    {"name": "id", "mysql_type": "bigint", "arrow_type": "int64"},
                    {"name": "amount", "mysql_type": "decimal(10,2)", "arrow_type": "decimal128(10, 2)"},
                ),
            )
        },
        stats={"rows": len(rows)},
    )
    write_manifest(window_uri, manifest, options)
    return manifest


def write_segment_file(table_location: str, seq: int, data: pa.Table, options: dict[str, str]) -> None:
    """Write the window's new segment 0 where the job's Spark writer would (see the module docstring)."""
    stage = join_uri(table_location, STAGING_DIR, f"w{seq}-test", f"{SEGMENT_COLUMN}=0", "part-00000.parquet")
    fs, path = filesystem_for(stage, options)
    pq.write_table(data, path, filesystem=fs)


def test_manifest_and_refusals_round_trip_on_s3_with_the_options_only(
    s3_options: dict[str, str], no_ambient_aws: None
) -> None:
    window = f"s3://{BUCKET}/staging/{PIPELINE}/window=7"
    written = stage_window(window, 7, [{"id": 1, "amount": Decimal("1.50")}], s3_options)
    record_refusal(
        window,
        table="shop.other",
        column="qty",
        detail="changed type",
        window=7,
        message="m",
        storage_options=s3_options,
    )

    assert read_manifest(window, s3_options) == written
    assert list(refused_tables(window, s3_options)) == ["shop.other"]
    assert read_manifest(f"s3://{BUCKET}/staging/{PIPELINE}/window=8", s3_options) is None
    with pytest.raises(OSError):  # no endpoint, no credentials: the store is not reached without the options
        read_manifest(window)


def test_a_window_merged_into_an_s3_target_is_verified_and_read_back_with_the_same_options(
    s3_options: dict[str, str], no_ambient_aws: None
) -> None:
    window_uri = f"s3://{BUCKET}/staging/{PIPELINE}/window=1"
    target = f"s3://{BUCKET}/target"
    stage_window(window_uri, 1, [{"id": 1, "amount": Decimal("1.50")}, {"id": 2, "amount": None}], s3_options)

    # The merge job's driver steps, with the options it is handed (jobs/merge/table.py).
    window = load_window(window_uri, s3_options)
    (staged,) = window.tables
    staged_schema = read_staged_schema(staged, pipeline=PIPELINE, storage_options=s3_options)
    wanted = target_schema(staged_schema, staged.columns)
    uri = table_uri(target, staged.name)
    dt_ = create_table(
        uri, wanted, table=staged.name, keys=["id"], pipeline=PIPELINE, storage_options=s3_options
    )
    data_schema = wanted
    staged_rows = pq.read_table(
        filesystem_for(staged.files[0], s3_options)[1],
        filesystem=filesystem_for(staged.files[0], s3_options)[0],
    )
    rows = [{**row, "_binlog_deleted": False} for row in staged_rows.to_pylist()]
    write_segment_file(uri, 1, pa.Table.from_pylist(rows, schema=data_schema), s3_options)
    fs, table_path = filesystem_for(uri, s3_options)
    outputs = staged_outputs(fs, filesystem_for(join_uri(uri, STAGING_DIR), s3_options)[1])
    layout = FileLayout(keys=["id"], stats_columns=["id"], partition={}, rows_per_file=1000)
    placed = place_outputs(fs, table_path, outputs, data_schema, 1, layout)
    commit_window(dt_, [], placed, pipeline=PIPELINE, seq=1, custom_metadata={"binlog.pipeline": PIPELINE})

    # The Airflow side reads it back through the same options.
    assert window_merged(target, "shop.orders", PIPELINE, 1, s3_options)
    check_target(PIPELINE, None, target, ["shop.orders"], storage_options=s3_options)
    operator = BinlogMergeOperator(
        task_id="merge",
        pipeline=PIPELINE,
        window_uri=window_uri,
        target_path=target,
        storage_options=s3_options,
    )
    summary = operator.verify(operator._load_manifest())
    assert summary["tables"]["shop.orders"]["rows_in_window"] == 2
    assert summary["tables"]["shop.orders"]["delta_version"] == 1
    assert sorted(read_table(target, "shop.orders", storage_options=s3_options).to_pylist(), key=str) == [
        {"id": 1, "amount": Decimal("1.50")},
        {"id": 2, "amount": None},
    ]
    reopened = open_table(uri, s3_options)
    assert reopened is not None
    assert already_merged(reopened, PIPELINE, 1)

    with pytest.raises(OSError):  # no endpoint, no credentials: the store is not reached without the options
        read_table(target, "shop.orders")


def test_options_for_a_store_they_cannot_reach_are_refused() -> None:
    with pytest.raises(ContractError, match="applied to s3:// locations only"):
        filesystem_for("gs://bucket/staging", {"AWS_ACCESS_KEY_ID": "k"})


@pytest.fixture
def lake_connection(s3_options: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> str:
    """Define an Airflow ``aws`` connection to the moto store (the way a deployment defines one); return its id."""
    import json

    monkeypatch.setenv(
        "AIRFLOW_CONN_BINLOG_LAKE",
        json.dumps(
            {
                "conn_type": "aws",
                "login": s3_options["AWS_ACCESS_KEY_ID"],
                "password": s3_options["AWS_SECRET_ACCESS_KEY"],
                "extra": {
                    "region_name": s3_options["AWS_REGION"],
                    "endpoint_url": s3_options["AWS_ENDPOINT_URL"],
                },
            }
        ),
    )
    return "binlog_lake"


def test_one_connection_serves_the_staging_through_objectstoragepath_and_delta_through_derived_options(
    s3_options: dict[str, str], lake_connection: str, no_ambient_aws: None
) -> None:
    pytest.importorskip("s3fs")
    pytest.importorskip("airflow.providers.amazon")
    from airflow_provider_binlog.pipeline import staging
    from airflow_provider_binlog.pipeline.storage import split_connection, storage_options_for

    options = storage_options_for(lake_connection)
    assert options == s3_options
    # The extractor's path: ObjectStoragePath authenticated by the connection, its URI naming it.
    window_dir = staging.window_path(f"s3://{BUCKET}/staging-conn", PIPELINE, 5, lake_connection)
    written = Manifest(
        pipeline=PIPELINE, window=5, tables={"shop.orders": TableEntry(rows=0)}, stats={"rows": 0}
    )
    staging.write_manifest(window_dir, written)
    plain, named = split_connection(str(window_dir))
    assert (plain, named) == (f"s3://{BUCKET}/staging-conn/{PIPELINE}/window=5", lake_connection)
    # The jobs' and delta-rs' path: pyarrow and deltalake with the options derived from the same connection.
    assert read_manifest(plain, options) == written
    target = f"s3://{BUCKET}/lake-conn"
    deltalake.write_deltalake(
        table_uri(target, "shop.orders"), pa.table({"id": [1, 2]}), storage_options=options
    )
    table = open_table(table_uri(target, "shop.orders"), options)
    assert sorted(table.to_pyarrow_table().column("id").to_pylist()) == [1, 2]
    with pytest.raises(OSError):  # nothing else in the environment reaches the store
        read_manifest(plain)


def test_explicit_options_override_the_connection_and_other_connection_types_are_refused(
    s3_options: dict[str, str], lake_connection: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("airflow.providers.amazon")
    from airflow_provider_binlog.exceptions import BinlogConfigError
    from airflow_provider_binlog.pipeline.storage import storage_options_for

    overridden = storage_options_for(
        lake_connection, {"AWS_REGION": "eu-west-1", "AWS_S3_LOCKING_PROVIDER": "dynamodb"}
    )
    assert overridden == {**s3_options, "AWS_REGION": "eu-west-1", "AWS_S3_LOCKING_PROVIDER": "dynamodb"}
    assert storage_options_for(None, {"AWS_REGION": "eu-west-1"}) == {"AWS_REGION": "eu-west-1"}
    assert storage_options_for(None) is None
    monkeypatch.setenv("AIRFLOW_CONN_BINLOG_GCS", '{"conn_type": "google_cloud_platform"}')
    with pytest.raises(BinlogConfigError, match="derived from 'aws' connections only"):
        storage_options_for("binlog_gcs")


def test_deletion_vectors_are_committed_on_s3_put_if_absent_and_read_back_with_the_options(
    s3_options: dict[str, str], no_ambient_aws: None
) -> None:
    """Merge-on-read's driver steps on S3: the protocol upgrade, a DV file and a commit of ours (If-None-Match)."""
    from deltalake.exceptions import CommitFailedError

    from airflow_provider_binlog.contract.delta_log import commit, file_vectors, live_rows
    from airflow_provider_binlog.jobs.merge.delta import current_files
    from airflow_provider_binlog.jobs.merge.merge_on_read import (
        commit_merge_on_read,
        deleted_rows,
        grown_vectors,
    )
    from airflow_provider_binlog.maintenance import vacuum_table

    uri = table_uri(f"s3://{BUCKET}/mor", "shop.orders")
    deltalake.write_deltalake(
        uri, pa.table({"id": pa.array(range(10), pa.int64())}), storage_options=s3_options
    )
    stale = open_table(uri, s3_options)
    dt_ = open_table(uri, s3_options)
    assert stale is not None
    assert dt_ is not None
    (path,) = pa.table(dt_.get_add_actions()).column("path").to_pylist()
    grown = grown_vectors(dt_, {path: [1, 5]}, s3_options)
    commit_merge_on_read(
        dt_, grown, [], app_transactions={"app": 2}, custom_metadata={}, storage_options=s3_options
    )

    table = open_table(uri, s3_options)
    assert table is not None
    assert sorted(live_rows(table).column("id").to_pylist()) == [0, 2, 3, 4, 6, 7, 8, 9]
    assert table.transaction_version("app") == 2
    assert [v.cardinality for v in file_vectors(table, s3_options).values()] == [2]
    with pytest.raises(CommitFailedError, match="committed by another writer first"):
        commit(stale, [], operation="WRITE", storage_options=s3_options)  # its next version is taken
    vacuum_table(uri, retention_hours=0, storage_options=s3_options)  # keeps the DV file in use
    reopened = open_table(uri, s3_options)
    assert reopened is not None
    assert sorted(live_rows(reopened).column("id").to_pylist()) == [0, 2, 3, 4, 6, 7, 8, 9]

    # A copy-on-write rewrite of that file reads its DV and commits its removal (path and DV) on S3 too.
    (file,) = current_files(reopened, ["id"])
    assert deleted_rows(reopened, [file], s3_options) == {path: [1, 5]}
    commit_window(
        reopened, [file], [], pipeline=PIPELINE, seq=3, custom_metadata={}, storage_options=s3_options
    )
    emptied = open_table(uri, s3_options)
    assert emptied is not None
    assert live_rows(emptied).num_rows == 0
    assert file_vectors(emptied, s3_options) == {}
