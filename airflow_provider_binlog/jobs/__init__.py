"""The provider's Spark applications: the window merge (:mod:`.merge`) and the snapshot (:mod:`.snapshot`).

They run under ``spark-submit`` (the module file is the application, see ``operators/spark.py``) or in
the Airflow task as Spark Connect clients (``application(argv).job(session)``). They import pyspark,
pyarrow, deltalake, the standard library and :mod:`airflow_provider_binlog.contract`, never Airflow, and
the Airflow side never imports them as a library: what both sides need is in the contract.
"""

from __future__ import annotations
