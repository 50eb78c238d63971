"""An object-store staging URI whose filesystem package is missing fails at once, naming what to install."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import re
import time
from pathlib import Path

import pytest
from airflow.sdk import ObjectStoragePath
from airflow.sdk.exceptions import AirflowFailException

from airflow_provider_binlog.exceptions import BinlogConfigError
from airflow_provider_binlog.operators import BinlogExtractOperator
from airflow_provider_binlog.pipeline.staging import (
    FILESYSTEM_EXTRAS,
    FILESYSTEM_PROVIDERS,
    clear_window,
    storage_path,
    window_path,
)
from airflow_provider_binlog.testing.mariadb import LocalMariaDB

pytestmark = pytest.mark.integration


def test_the_extract_task_fails_at_once_without_s3fs(
    connections: LocalMariaDB, source_db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The test environment installs s3fs (the object-store tests use it): hide it as a worker without it.
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "s3fs" else find_spec(name, *a)
    )
    connections.execute(f"CREATE TABLE `{source_db}`.orders (id INT PRIMARY KEY)")
    operator = BinlogExtractOperator(
        task_id="extract",
        pipeline="fs-check",
        tables=f"{source_db}.*",
        staging_uri="s3://aws_default@cdc-bucket/staging",
    )
    started = time.monotonic()
    with pytest.raises(BinlogConfigError) as caught:
        operator.execute({"run_id": "manual__1"})
    assert time.monotonic() - started < 5
    print(caught.value)
    assert isinstance(caught.value, AirflowFailException)  # no retries
    assert str(caught.value) == (
        "the location s3://aws_default@cdc-bucket/staging uses the scheme s3://, which needs the Python "
        "package s3fs (fsspec: Install s3fs to access S3), not installed on this worker. Install it where the "
        "tasks run: pip install 'airflow-provider-binlog[s3]' (installs s3fs and apache-airflow-providers-amazon)."
    )


@pytest.mark.parametrize(
    ("uri", "package", "extra"),
    [("gs://bucket/staging", "gcsfs", "gcs"), ("abfs://container/staging", "adlfs", "azure")],
)
def test_other_object_stores_name_their_package(uri: str, package: str, extra: str) -> None:
    if importlib.util.find_spec(package) is not None:
        pytest.skip(f"{package} is installed in this environment")
    with pytest.raises(BinlogConfigError, match=f"needs the Python package {package} .*\\[{extra}\\]"):
        storage_path(uri)


def test_a_scheme_no_provider_registers_is_named() -> None:
    with pytest.raises(BinlogConfigError, match="memory://, which no installed Airflow provider registers"):
        storage_path("memory://bucket/staging")


def test_local_paths_need_nothing(tmp_path: Path) -> None:
    assert storage_path(str(tmp_path)).protocol == "file"
    assert storage_path(f"file://{tmp_path}").protocol == "file"


def test_the_extras_install_the_package_and_the_provider() -> None:
    requirements = importlib.metadata.requires("airflow-provider-binlog") or []
    for package, extra in FILESYSTEM_EXTRAS.items():
        names = [
            re.split(r"[<>=\[;\s]", requirement, maxsplit=1)[0]
            for requirement in requirements
            if requirement.replace("'", '"').endswith(f'extra == "{extra}"')
        ]
        assert names == [package, FILESYSTEM_PROVIDERS[package]]


def test_a_local_window_folder_is_cleared_without_the_object_store_filesystem(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    window = window_path(str(tmp_path), "shop", 3)
    (window / "shop.orders").mkdir(parents=True)
    (window / "shop.orders" / "part-00000.parquet").write_bytes(b"left by a failed attempt")

    def registering(path: ObjectStoragePath) -> None:
        raise AssertionError(
            "ObjectStoragePath.fs registers every provider's filesystem: 0.14-0.36 s per retry"
        )

    monkeypatch.setattr(ObjectStoragePath, "fs", property(registering))
    clear_window(window)
    assert not Path(window.path).exists()
    clear_window(window)  # nothing there: nothing to do
