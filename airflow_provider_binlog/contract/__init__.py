"""The staging contract shared by the Airflow tasks and the Spark jobs: stdlib and pyarrow only.

What both sides of a window agree on lives here, once: table names (:mod:`.names`), the ``_binlog_*``
columns and op codes (:mod:`.columns`), the manifest (:mod:`.manifest`), the staged-Arrow -> Delta type
map (:mod:`.types`) and locations with their storage options (:mod:`.uris`). Nothing in this package
imports Airflow, Spark or deltalake, so a Spark driver without Airflow can import it, and the Airflow
side never imports a Spark application to learn a name (``docs/adr/0016-layout-contract-jobs-target.md``).
"""

from __future__ import annotations


class ContractError(Exception):
    """Staged data, a name or a location does not follow the staging contract.

    A retry with the same input cannot fix it; the message names what to fix. The Spark jobs' own
    error (:class:`~airflow_provider_binlog.jobs.application.MergeJobError`) is a subclass.
    """
