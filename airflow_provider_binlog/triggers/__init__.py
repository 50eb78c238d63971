"""Async triggers behind the deferrable binlog sensors and the deferrable merge and snapshot."""

from __future__ import annotations

from airflow_provider_binlog.triggers.binlog import BinlogLagTrigger, BinlogPurgeRiskTrigger
from airflow_provider_binlog.triggers.spark_connect import SparkConnectOperationTrigger

__all__ = ["BinlogLagTrigger", "BinlogPurgeRiskTrigger", "SparkConnectOperationTrigger"]
