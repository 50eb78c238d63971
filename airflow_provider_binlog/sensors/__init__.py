"""Sensors of the binlog provider: purge risk of the binlogs a pipeline needs, and consumer lag."""

from __future__ import annotations

from airflow_provider_binlog.sensors.lag import BinlogConsumerLagSensor
from airflow_provider_binlog.sensors.purge_risk import BinlogPurgeRiskSensor

__all__ = ["BinlogConsumerLagSensor", "BinlogPurgeRiskSensor"]
