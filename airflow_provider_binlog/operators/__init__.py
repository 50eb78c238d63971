"""Operators of the binlog CDC pipeline: snapshot tables, extract a window, merge it with Spark, commit, check quarantine, clean up, validate, archive the binlog."""

from __future__ import annotations

from airflow_provider_binlog.operators.archive import BinlogArchiveOperator
from airflow_provider_binlog.operators.commit import BinlogCommitOperator
from airflow_provider_binlog.operators.extract import BinlogExtractOperator
from airflow_provider_binlog.operators.maintenance import BinlogMaintenanceOperator
from airflow_provider_binlog.operators.merge import BinlogMergeOperator
from airflow_provider_binlog.operators.quarantine import BinlogQuarantineCheckOperator
from airflow_provider_binlog.operators.snapshot import BinlogSnapshotOperator
from airflow_provider_binlog.operators.validate import BinlogValidateOperator

__all__ = [
    "BinlogArchiveOperator",
    "BinlogCommitOperator",
    "BinlogExtractOperator",
    "BinlogMaintenanceOperator",
    "BinlogMergeOperator",
    "BinlogQuarantineCheckOperator",
    "BinlogSnapshotOperator",
    "BinlogValidateOperator",
]
