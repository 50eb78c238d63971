"""Async triggers behind the deferrable binlog sensors."""

from __future__ import annotations

from airflow_provider_binlog.triggers.binlog import BinlogLagTrigger, BinlogPurgeRiskTrigger

__all__ = ["BinlogLagTrigger", "BinlogPurgeRiskTrigger"]
