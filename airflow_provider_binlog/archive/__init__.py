"""The binlog archive: a source's binlog files copied byte for byte to a store the staging supports (issue 34).

:mod:`~airflow_provider_binlog.archive.copy` copies them over the replication protocol, with the window reader's
replication connection (:func:`~airflow_provider_binlog.extract.connections.open_dump`);
:class:`~airflow_provider_binlog.operators.archive.BinlogArchiveOperator` runs it in an Airflow task.
"""
