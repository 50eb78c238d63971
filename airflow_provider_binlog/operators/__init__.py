"""Operators of the binlog CDC pipeline: extract a window, merge it with Spark, commit the checkpoint."""

from __future__ import annotations

from airflow_provider_binlog.operators.commit import BinlogCommitOperator
from airflow_provider_binlog.operators.extract import BinlogExtractOperator
from airflow_provider_binlog.operators.merge import BinlogMergeOperator

__all__ = ["BinlogCommitOperator", "BinlogExtractOperator", "BinlogMergeOperator"]
