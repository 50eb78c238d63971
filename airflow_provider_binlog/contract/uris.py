"""Locations of staged windows and target tables, and the one way to open them with storage options.

Storage options are the currency for credentials and endpoints of object stores, end to end: the
deltalake (``object_store``) keys such as ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``,
``AWS_SESSION_TOKEN``, ``AWS_REGION``, ``AWS_ENDPOINT_URL`` and ``AWS_ALLOW_HTTP`` (case-insensitive,
as deltalake reads them). deltalake takes them as they are; :func:`filesystem_for` turns them into a
pyarrow filesystem for the files the provider reads and writes itself (manifests, Parquet footers,
bucket files, JSON records). Without options the store's ambient credentials apply (environment,
instance profile), as for pyarrow and deltalake alone.
"""

from __future__ import annotations

import contextlib
import json
import os
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow.fs as pafs

from airflow_provider_binlog.contract import ContractError
from airflow_provider_binlog.contract.names import table_path

StorageOptions = Mapping[str, str]
"""deltalake-style storage options (see the module docstring)."""
STORAGE_OPTIONS_ENV = "BINLOG_STORAGE_OPTIONS"
"""Environment variable through which the operators hand storage options (JSON object) to a Spark job, so
that credentials appear on no command line (:func:`storage_options_from_env`)."""

_S3_SCHEMES = frozenset({"s3", "s3a"})
_TRUE = frozenset({"1", "true", "yes", "on"})


def join_uri(base: str, *parts: str) -> str:
    """Join a local path or URI with relative parts using ``/``.

    :param base: local path (made absolute) or URI such as ``s3://bucket/prefix``.
    :param parts: relative path parts.
    """
    root = base if "://" in base else os.path.abspath(base)
    return "/".join([root.rstrip("/"), *(part.strip("/") for part in parts)])


def table_uri(target: str, table: str) -> str:
    """Return the location of the Delta table holding source table ``db.table``: ``<target>/<db>/<table>``.

    Each name becomes one folder name (:func:`~airflow_provider_binlog.contract.names.path_segment`: the
    name itself when ordinary, escaped otherwise), so the location is always inside ``target`` and no two
    source tables share one.

    :param target: target root (local path or URI).
    :param table: qualified source table name.
    :raises TableNameError: if the name is not qualified.
    """
    return join_uri(target, table_path(table))


def storage_options_from_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Return the storage options a Spark job was handed in :data:`STORAGE_OPTIONS_ENV` (empty when unset).

    :param environ: the environment (default ``os.environ``).
    :raises ContractError: if the variable does not hold a JSON object of strings.
    """
    text = (os.environ if environ is None else environ).get(STORAGE_OPTIONS_ENV)
    if not text:
        return {}
    try:
        options = json.loads(text)
    except ValueError as err:
        raise ContractError(f"{STORAGE_OPTIONS_ENV} is not JSON: {err}") from err
    if not isinstance(options, dict) or not all(isinstance(v, str) for v in options.values()):
        raise ContractError(f"{STORAGE_OPTIONS_ENV} must hold a JSON object of strings")
    return {str(k): v for k, v in options.items()}


def _option(options: StorageOptions, *names: str) -> str | None:
    lowered = {k.lower(): v for k, v in options.items()}
    for name in names:
        if lowered.get(name.lower()):
            return lowered[name.lower()]
    return None


@dataclass(frozen=True)
class S3Settings:
    """What deltalake-style storage options say about an S3 endpoint, for clients other than deltalake.

    :param key: access key id (``AWS_ACCESS_KEY_ID``).
    :param secret: secret access key (``AWS_SECRET_ACCESS_KEY``).
    :param token: session token (``AWS_SESSION_TOKEN``).
    :param region: region (``AWS_REGION``, ``AWS_DEFAULT_REGION``).
    :param endpoint: endpoint host and port without scheme (``AWS_ENDPOINT_URL``, ``AWS_ENDPOINT``), None for AWS.
    :param scheme: ``https``, or ``http`` when the endpoint URL says so or ``AWS_ALLOW_HTTP`` is true.
    """

    key: str | None
    secret: str | None
    token: str | None
    region: str | None
    endpoint: str | None
    scheme: str

    @classmethod
    def from_options(cls, options: StorageOptions) -> S3Settings:
        """Read the settings from storage options (keys compared case-insensitively, first non-empty wins)."""
        endpoint = _option(options, "AWS_ENDPOINT_URL", "AWS_ENDPOINT", "endpoint_url", "endpoint")
        scheme = "https"
        if endpoint is not None and "://" in endpoint:
            scheme, endpoint = endpoint.split("://", 1)
        elif (_option(options, "AWS_ALLOW_HTTP", "allow_http") or "").lower() in _TRUE:
            scheme = "http"
        return cls(
            key=_option(options, "AWS_ACCESS_KEY_ID", "access_key_id"),
            secret=_option(options, "AWS_SECRET_ACCESS_KEY", "secret_access_key"),
            token=_option(options, "AWS_SESSION_TOKEN", "session_token"),
            region=_option(options, "AWS_REGION", "AWS_DEFAULT_REGION", "region"),
            endpoint=endpoint,
            scheme=scheme,
        )

    @property
    def endpoint_url(self) -> str | None:
        """Return ``<scheme>://<endpoint>``, None for AWS's own endpoints."""
        return None if self.endpoint is None else f"{self.scheme}://{self.endpoint}"


def s3_filesystem(options: StorageOptions) -> pafs.S3FileSystem:
    """Return a pyarrow S3 filesystem configured from deltalake-style storage options (:class:`S3Settings`).

    Options pyarrow has no use for (deltalake's locking or conditional-put settings) are ignored here.

    :param options: storage options.
    """
    settings = S3Settings.from_options(options)
    return pafs.S3FileSystem(
        access_key=settings.key,
        secret_key=settings.secret,
        session_token=settings.token,
        region=settings.region,
        endpoint_override=settings.endpoint,
        scheme=settings.scheme,
    )


def filesystem_for(uri: str, storage_options: StorageOptions | None = None) -> tuple[pafs.FileSystem, str]:
    """Return the pyarrow filesystem and path for a local path or URI.

    :param uri: local path or URI (``file://``, ``s3://``, ``gs://``, ``hdfs://`` ...).
    :param storage_options: deltalake-style options; honoured for ``s3://`` (:func:`s3_filesystem`).
    :raises ContractError: if options are given for a scheme they cannot be applied to.
    """
    if "://" not in uri:
        return pafs.LocalFileSystem(), os.path.abspath(uri)
    scheme, rest = uri.split("://", 1)
    if scheme.lower() in _S3_SCHEMES and storage_options:
        return s3_filesystem(storage_options), rest
    if storage_options and scheme.lower() != "file":
        raise ContractError(
            f"storage options are applied to s3:// locations only, not to {uri}; leave them out and give the "
            f"{scheme}:// credentials through the environment the tasks and Spark run in"
        )
    return pafs.FileSystem.from_uri(uri)


@contextlib.contextmanager
def atomic_output(uri: str, storage_options: StorageOptions | None = None) -> Iterator[Any]:
    """Yield an output stream for ``uri`` that is written under a temporary name and renamed on success.

    Readers never see half a file; a failure leaves only the temporary file, never ``uri``. On object
    stores the rename is a copy of a whole object, so readers still see all of it or nothing.
    """
    fs, path = filesystem_for(uri, storage_options)
    fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
    temporary = f"{path}.{uuid.uuid4().hex}.tmp"
    with fs.open_output_stream(temporary) as out:
        yield out
    fs.move(temporary, path)


def read_json(uri: str, storage_options: StorageOptions | None = None) -> dict[str, Any] | None:
    """Return the JSON object at ``uri``, or None when the file does not exist.

    :raises ValueError: if the file is not JSON.
    """
    fs, path = filesystem_for(uri, storage_options)
    try:
        with fs.open_input_stream(path) as stream:
            return dict(json.loads(stream.read()))
    except FileNotFoundError:
        return None


def write_json(uri: str, document: Mapping[str, Any], storage_options: StorageOptions | None = None) -> None:
    """Write ``document`` to ``uri`` atomically (:func:`atomic_output`), keys sorted, indented."""
    with atomic_output(uri, storage_options) as out:
        out.write(json.dumps(document, indent=2, sort_keys=True).encode())


# --- Locations confined to a root (state documents name staging and target locations; issue 30) ---


def _local_path(location: str) -> str | None:
    """Return the absolute, normalised local path of ``location`` (a path or ``file://`` URI), else None."""
    if "://" not in location:
        return os.path.normpath(os.path.abspath(location))
    scheme, rest = location.split("://", 1)
    if scheme.lower() != "file":
        return None
    return os.path.normpath(os.path.abspath("/" + rest.lstrip("/")))


def _store_parts(location: str) -> tuple[str, str, list[str]] | None:
    """Return ``(scheme, bucket, path segments)`` of an object-store URI; None when a segment is ``.`` or ``..``.

    ``s3a`` counts as ``s3`` (the same store through Hadoop's connector); empty segments (``//``) are dropped.
    """
    scheme, rest = location.split("://", 1)
    bucket, _, path = rest.partition("/")
    segments = [s for s in path.split("/") if s]
    if any(s in (".", "..") for s in segments):
        return None
    scheme = scheme.lower()
    return ("s3" if scheme in _S3_SCHEMES else scheme), bucket, segments


def within_root(root: str, uri: str) -> bool:
    """Return whether location ``uri`` is ``root`` or lies below it.

    Local paths and ``file://`` URIs are made absolute and normalised (``..`` resolved; symbolic links are not
    followed) and must share ``root``'s leading path segments. Object-store URIs (``s3://bucket/prefix`` ...)
    must have ``root``'s scheme and bucket (the whole authority, so ``conn@bucket`` differs from ``bucket``), no
    ``.`` or ``..`` segment, and ``root``'s path segments as their leading ones. A local location is never
    within an object-store root, nor the reverse.

    :param root: a local path or URI: a staging or target root as an operator was given it.
    :param uri: a location read from somewhere less trusted (a state document, a manifest).
    """
    local_root, local_uri = _local_path(root), _local_path(uri)
    if local_root is not None or local_uri is not None:
        if local_root is None or local_uri is None:
            return False
        return local_uri == local_root or local_uri.startswith(local_root.rstrip("/") + "/")
    root_parts, uri_parts = _store_parts(root), _store_parts(uri)
    if root_parts is None or uri_parts is None:
        return False
    (root_scheme, root_bucket, root_path), (scheme, bucket, path) = root_parts, uri_parts
    return (scheme, bucket) == (root_scheme, root_bucket) and path[: len(root_path)] == root_path


def require_within_root(root: str, uri: str, what: str) -> str:
    """Return ``uri`` when it lies within ``root`` (:func:`within_root`).

    :param what: what the location is, for the message (e.g. "snapshots[0].staging_uri of the state").
    :raises ContractError: naming ``what``, the location and the root.
    """
    if not within_root(root, uri):
        raise ContractError(
            f"{what} is {uri!r}, which lies outside its root {root!r}: nothing was read or written there"
        )
    return uri
