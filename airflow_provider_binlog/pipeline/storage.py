"""One source of credentials per object store: its Airflow connection (``docs/adr/0022-pipeline-package-and-one-credential-path.md``).

The staging is written through Airflow's ObjectStoragePath, which authenticates with an Airflow connection
(``staging_conn_id``, or the connection id in the URI, ``s3://<conn_id>@bucket/prefix``). The Spark jobs,
delta-rs and the pyarrow reads of the provider take deltalake-style storage options instead
(:mod:`airflow_provider_binlog.contract.uris`). :func:`storage_options_for` derives those options from the
same connection, so a DAG names its credentials once; options passed explicitly override the derived
ones key by key (e.g. a target in another account, or deltalake settings such as
``AWS_S3_LOCKING_PROVIDER``).

Derived from:

* an ``aws`` connection, through the Amazon provider's ``S3Hook`` (the credentials it resolves: login and
  password, a profile, an assumed role; its region; its S3 endpoint): ``AWS_ACCESS_KEY_ID``,
  ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN`` (temporary credentials), ``AWS_REGION``,
  ``AWS_ENDPOINT_URL`` and ``AWS_ALLOW_HTTP`` for an ``http://`` endpoint. Temporary credentials are
  frozen when the task starts: a job that outlives them fails and is retried with fresh ones.

Other connection types raise :class:`~airflow_provider_binlog.exceptions.BinlogConfigError`: the pyarrow
side maps options for ``s3://`` only (:func:`~airflow_provider_binlog.contract.uris.filesystem_for`), so
``gs://`` and ``abfs://`` credentials come from the environment the tasks and Spark run in.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Mapping

from airflow_provider_binlog.exceptions import BinlogConfigError


def split_connection(uri: str) -> tuple[str, str | None]:
    """Return ``(uri without the connection id, connection id)`` of an ObjectStoragePath URI.

    ``s3://lake@bucket/prefix`` gives ``("s3://bucket/prefix", "lake")``; a URI or local path without one
    is returned as is with ``None``. pyarrow and delta-rs would take ``lake@bucket`` for the bucket.
    """
    if "://" not in uri:
        return uri, None
    parts = urllib.parse.urlsplit(uri)
    if parts.scheme in {"", "file"} or "@" not in parts.netloc:
        return uri, None
    conn_id, host = parts.netloc.rsplit("@", 1)
    return urllib.parse.urlunsplit(parts._replace(netloc=host)), urllib.parse.unquote(conn_id) or None


def storage_options_for(
    conn_id: str | None, explicit: Mapping[str, str] | None = None
) -> dict[str, str] | None:
    """Return the storage options of the store behind ``conn_id``, overridden by ``explicit``.

    :param conn_id: the Airflow connection of the object store (the one ObjectStoragePath uses), or None.
    :param explicit: options the DAG passed (deltalake keys); they win over derived ones.
    :returns: the merged options; None when there is neither a connection nor explicit options.
    :raises BinlogConfigError: when the connection is of a type options cannot be derived from, or the
        Amazon provider is missing for an ``aws`` connection.
    """
    if conn_id is None:
        return None if explicit is None else dict(explicit)
    return {**connection_storage_options(conn_id), **(explicit or {})}


def connection_storage_options(conn_id: str) -> dict[str, str]:
    """Return the deltalake-style storage options of the object store behind Airflow connection ``conn_id``.

    :raises BinlogConfigError: see :func:`storage_options_for`.
    """
    from airflow.sdk import Connection

    conn_type = Connection.get(conn_id).conn_type
    if conn_type != "aws":
        raise BinlogConfigError(
            f"connection {conn_id!r} is of type {conn_type!r}: storage options for the Spark jobs and the "
            f"Delta tables are derived from 'aws' connections only. Give the credentials of this store "
            f"through the environment the tasks and Spark run in, or pass storage_options explicitly"
        )
    return _aws_options(conn_id)


def _aws_options(conn_id: str) -> dict[str, str]:
    try:
        from airflow.providers.amazon.aws.hooks.s3 import S3Hook
    except ImportError as err:
        raise BinlogConfigError(
            f"connection {conn_id!r} is an 'aws' connection, which needs the Amazon provider on this worker: "
            f"pip install 'airflow-provider-binlog[s3]'"
        ) from err
    hook = S3Hook(aws_conn_id=conn_id)
    options: dict[str, str] = {}
    if hook.get_session().get_credentials() is not None:  # None: no credentials anywhere (anonymous)
        frozen = hook.get_credentials()  # masks the secret and the token in task logs
        options["AWS_ACCESS_KEY_ID"] = frozen.access_key
        options["AWS_SECRET_ACCESS_KEY"] = frozen.secret_key
        if frozen.token:
            options["AWS_SESSION_TOKEN"] = frozen.token
    if region := hook.conn_region_name:
        options["AWS_REGION"] = region
    if endpoint := hook.conn_config.get_service_endpoint_url(service_name="s3"):
        options["AWS_ENDPOINT_URL"] = endpoint
        if endpoint.startswith("http://"):
            options["AWS_ALLOW_HTTP"] = "true"
    return options
