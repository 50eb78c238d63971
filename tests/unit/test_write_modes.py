"""Which write mode a window gets, and which files merge-on-read reads: pure planning, no Spark."""

from __future__ import annotations

import pytest

from airflow_provider_binlog.contract import ContractError
from airflow_provider_binlog.contract.write_modes import check_write_mode
from airflow_provider_binlog.jobs.application import MergeJobError
from airflow_provider_binlog.jobs.merge.delta import DataFile
from airflow_provider_binlog.jobs.merge.merge_on_read import (
    AUTO_MAX_CHANGED_FRACTION,
    candidate_files,
    choose_mode,
)

FILES = [
    DataFile("a.parquet", 100, rows=1000, low=0, high=999),
    DataFile("b.parquet", 100, rows=1000, low=1000, high=1999),
    DataFile("mor.parquet", 10, rows=20, low=5, high=1500),  # a merge-on-read window's file: overlaps both
]


def test_candidates_are_the_files_whose_range_holds_a_key() -> None:
    assert [f.path for f in candidate_files(FILES, [3])] == ["a.parquet"]
    assert [f.path for f in candidate_files(FILES, [7, 1600])] == ["a.parquet", "b.parquet", "mor.parquet"]
    assert candidate_files(FILES, [5000]) == []  # keys above the table go to new files, no file grows


@pytest.mark.parametrize(
    ("mode", "uri", "whole", "rows", "expected"),
    [
        ("merge_on_read", "/t", False, 10_000, "merge_on_read"),
        ("merge_on_read", "/t", True, 1, "copy_on_write"),  # a snapshot or truncate rewrites every file
        ("copy_on_write", "/t", False, 1, "copy_on_write"),
        ("auto", "/t", False, int(AUTO_MAX_CHANGED_FRACTION * 2020), "merge_on_read"),
        ("auto", "/t", False, int(AUTO_MAX_CHANGED_FRACTION * 2020) + 1, "copy_on_write"),
        ("auto", "s3://b/t", False, 1, "merge_on_read"),  # If-None-Match: * on S3
        ("auto", "gs://b/t", False, 1, "copy_on_write"),  # no put-if-absent for our log commits there yet
    ],
)
def test_the_mode_of_a_window(mode: str, uri: str, whole: bool, rows: int, expected: str) -> None:
    got = choose_mode(check_write_mode(mode), uri=uri, whole=whole, rows_in_window=rows, candidates=FILES)
    assert got == expected


def test_auto_merges_on_read_a_window_that_only_adds_keys() -> None:
    assert choose_mode("auto", uri="/t", whole=False, rows_in_window=10**6, candidates=[]) == "merge_on_read"


def test_merge_on_read_on_an_object_store_and_an_unknown_mode_are_refused() -> None:
    with pytest.raises(MergeJobError, match="needs a local or S3 target"):
        choose_mode("merge_on_read", uri="abfss://c@a/t", whole=False, rows_in_window=1, candidates=FILES)
    with pytest.raises(ContractError, match="must be one of copy_on_write, merge_on_read, auto"):
        check_write_mode("mor")


def test_the_merge_operator_checks_the_mode_and_hands_it_to_the_job() -> None:
    from airflow_provider_binlog.operators import BinlogMergeOperator

    common = {"task_id": "merge", "pipeline": "p", "window_uri": "/s/p/window=1", "target_path": "/t"}
    args = BinlogMergeOperator(**common)._application_args()
    assert args[args.index("--write-mode") + 1] == "auto"  # the default
    args = BinlogMergeOperator(**common, write_mode="copy_on_write")._application_args()
    assert args[args.index("--write-mode") + 1] == "copy_on_write"
    with pytest.raises(ValueError, match="write_mode='mor'"):
        BinlogMergeOperator(**common, write_mode="mor")
