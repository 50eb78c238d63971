"""Spark applications shipped with the provider (run by ``spark-submit``, never imported by Airflow's parser).

Each module is self-contained: it imports only pyspark, pyarrow, deltalake and the standard library, so
it runs on Spark drivers that do not have Airflow (or this package) installed.
"""

from __future__ import annotations
