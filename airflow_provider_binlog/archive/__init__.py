"""The binlog archive: a source's binlog files copied byte for byte to a store the staging supports (issue 34).

:mod:`~airflow_provider_binlog.archive.copy` copies them over the replication protocol. No Airflow here: the
caller gives the connection settings and the archive's location.
"""
