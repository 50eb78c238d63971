"""Pipeline metrics through Airflow's metrics (StatsD, DogStatsD or OpenTelemetry, as configured).

Every metric carries the tag ``pipeline``; names are prefixed by Airflow's ``[metrics] statsd_prefix``
(default ``airflow``). Plain StatsD has no tags: enable ``statsd_datadog_enabled`` or
``statsd_influxdb_enabled`` (or OpenTelemetry) to keep them, as for Airflow's own tagged metrics.

=================================  =====  ==========================================================
name                               type   value
=================================  =====  ==========================================================
``binlog.lag.seconds``             gauge  age of the oldest transaction the target lacks (seconds)
``binlog.lag.bytes``               gauge  binlog bytes between checkpoint and head
``binlog.lag.transactions``        gauge  transactions between checkpoint and head (GTID sources)
``binlog.purge_risk.headroom``     gauge  seconds before the oldest needed binlog may be purged
``binlog.purge_risk.purged``       gauge  1 when needed binlogs are already purged, else 0
``binlog.window.rows_extracted``   gauge  row changes staged for the run's window
``binlog.window.rows_merged``      gauge  row changes of the window found merged in the target
``binlog.window.duration``         timer  window cut to checkpoint moved (milliseconds on StatsD)
=================================  =====  ==========================================================
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING

from airflow.sdk.observability.stats import Stats

if TYPE_CHECKING:
    from airflow_provider_binlog.monitoring.lag import LagReport
    from airflow_provider_binlog.monitoring.retention import RetentionReport


def _tags(pipeline: str) -> dict[str, str]:
    return {"pipeline": pipeline}


def emit_lag(report: LagReport) -> None:
    """Emit ``binlog.lag.*`` gauges of one lag measurement."""
    tags = _tags(report.pipeline)
    Stats.gauge("binlog.lag.seconds", report.seconds, tags=tags)
    Stats.gauge("binlog.lag.bytes", report.bytes, tags=tags)
    if report.transactions is not None:
        Stats.gauge("binlog.lag.transactions", report.transactions, tags=tags)


def emit_retention(report: RetentionReport) -> None:
    """Emit ``binlog.purge_risk.*`` gauges of one retention report (no headroom gauge when unlimited)."""
    tags = _tags(report.pipeline)
    Stats.gauge("binlog.purge_risk.purged", 1 if report.purged else 0, tags=tags)
    if report.headroom_seconds is not None and not report.purged:
        Stats.gauge("binlog.purge_risk.headroom", report.headroom_seconds, tags=tags)


def emit_window(pipeline: str, rows_extracted: int, rows_merged: int, duration_seconds: float) -> None:
    """Emit ``binlog.window.*`` metrics of one committed window."""
    tags = _tags(pipeline)
    Stats.gauge("binlog.window.rows_extracted", rows_extracted, tags=tags)
    Stats.gauge("binlog.window.rows_merged", rows_merged, tags=tags)
    Stats.timing("binlog.window.duration", dt.timedelta(seconds=duration_seconds), tags=tags)
