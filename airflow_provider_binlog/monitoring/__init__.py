"""Monitoring a pipeline against its source.

Binlog retention and purge risk, lag, short binlog probes, metrics, and the health summary built from them (:mod:`~airflow_provider_binlog.monitoring.measure`
measures a pipeline by name for the sensors, triggers and health).
"""
