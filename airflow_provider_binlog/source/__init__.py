"""The source layer: talking to a MySQL/MariaDB server with pymysql, without Airflow.

- :mod:`~airflow_provider_binlog.source.config`: the connection extras (one pydantic model, also the form);
- :mod:`~airflow_provider_binlog.source.connect`: connections whose login is bounded by ``connect_timeout``;
- :mod:`~airflow_provider_binlog.source.flavor`: the flavor strategy, every MySQL/MariaDB difference;
- :mod:`~airflow_provider_binlog.contract.positions`, :mod:`~airflow_provider_binlog.source.gtid`: binlog
  coordinates and GTID set algebra;
- :mod:`~airflow_provider_binlog.source.server`: server state, retention policy and the setting checks,
  as :mod:`~airflow_provider_binlog.source.findings`;
- :mod:`~airflow_provider_binlog.source.grants`: the privileges a pipeline needs, from ``SHOW GRANTS``;
- :mod:`~airflow_provider_binlog.source.sql`, :mod:`~airflow_provider_binlog.source.schema`: quoting,
  ``db.table`` names, query-event classification and the ``information_schema`` reads.

Nothing here imports Airflow (an import-linter contract checks it): Spark tasks and the hook share it.
Errors are the server's (pymysql) or ``ValueError``; the Airflow layer turns them into the provider's.
"""
