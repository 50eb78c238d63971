"""The pipeline: what a pipeline owns between its source and its target, kept in Airflow.

- :mod:`~airflow_provider_binlog.pipeline.ledger`: the state document: checkpoint, windows, snapshots,
  pending re-snapshots, and the checks over them;
- :mod:`~airflow_provider_binlog.pipeline.state`: reading and writing that document in one Variable, with
  a compare-and-set under the state lock;
- :mod:`~airflow_provider_binlog.pipeline.lock`: the state lock, a named lock on the source (ADR 0012);
- :mod:`~airflow_provider_binlog.pipeline.history`: copies of the last state revisions beside the staging;
- :mod:`~airflow_provider_binlog.pipeline.windows`: cutting windows and adopting abandoned ones;
- :mod:`~airflow_provider_binlog.pipeline.runs`: asking Airflow about the run that holds a window;
- :mod:`~airflow_provider_binlog.pipeline.tables`: table selection and the key of each table;
- :mod:`~airflow_provider_binlog.pipeline.staging`: a window's staging folder through ObjectStoragePath;
- :mod:`~airflow_provider_binlog.pipeline.storage`: the storage options of the Spark jobs and delta-rs,
  derived from the object store's Airflow connection.

Data flows one way (``docs/adr/0022-pipeline-package-and-one-credential-path.md``): this package uses
``source`` and ``contract``; ``extract``, ``snapshot``, the operators and ``monitoring`` use it, never the
reverse (an import-linter contract checks it).
"""
