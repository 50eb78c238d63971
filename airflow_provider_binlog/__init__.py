"""Apache Airflow provider: MySQL/MariaDB binlog windows merged into Delta Lake tables by Spark."""

from __future__ import annotations

__version__ = "0.1.0"
