"""Staging storage: window folders of Parquet change files plus a manifest, local or in object stores.

Paths go through Airflow's :class:`~airflow.sdk.ObjectStoragePath` (fsspec underneath), so a
staging URI may be a local path, ``file://``, ``s3://conn_id@bucket/prefix``, ``gs://`` ... Layout:
``<staging>/<pipeline>/window=<seq>/<db>.<table>/part-<n>.parquet`` and
``<staging>/<pipeline>/window=<seq>/manifest.json``, the manifest written last (a window without
one is incomplete and is written again from scratch). A run that adopts a window of a run that ended
stages it, when it must be read again, under ``window=<seq>.handover-<n>`` instead
(:attr:`~airflow_provider_binlog.pipeline.ledger.Window.staging_name`).
"""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Any

from airflow.sdk import ObjectStoragePath

from airflow_provider_binlog.contract.manifest import MANIFEST_NAME, Manifest, ManifestError
from airflow_provider_binlog.contract.positions import BinlogPosition
from airflow_provider_binlog.exceptions import StagingError

if TYPE_CHECKING:
    from airflow_provider_binlog.pipeline.ledger import PipelineState, Window


LOCAL_SCHEMES = frozenset({"", "file", "local"})

FILESYSTEM_EXTRAS = {"s3fs": "s3", "gcsfs": "gcs", "adlfs": "azure"}
"""The provider's pip extra that installs each fsspec filesystem package (see ``pyproject.toml``)."""

FILESYSTEM_PROVIDERS = {
    "s3fs": "apache-airflow-providers-amazon",
    "gcsfs": "apache-airflow-providers-google",
    "adlfs": "apache-airflow-providers-microsoft-azure",
}
"""The Airflow provider that registers each package's schemes with ObjectStoragePath (its ``filesystems``
entry in ``provider.yaml``: ``airflow.providers.amazon.aws.fs.s3``, ``...google.cloud.fs.gcs``,
``...microsoft.azure.fs.adls``)."""


def require_filesystem(uri: str) -> None:
    """Check that this worker can open ``uri`` through ObjectStoragePath, before anything is read or written.

    Two things must be installed for an object-store scheme: the fsspec implementation package (fsspec's
    ``known_implementations`` names its class and the error fsspec raises without it, e.g. ``s3fs`` for
    ``s3``), and an Airflow provider that registers the scheme with ObjectStoragePath
    (``airflow.sdk.io.fs.has_fs``; the Amazon provider for ``s3``). Without the package the first write
    raised a bare ``ImportError``, which Airflow retries; this check fails at once instead.

    :raises BinlogConfigError: naming the scheme, the missing package or provider and the pip extra that
        installs them.
    """
    import importlib.util

    from fsspec.registry import known_implementations

    from airflow_provider_binlog.exceptions import BinlogConfigError

    scheme = uri.split("://", 1)[0].lower() if "://" in uri else ""
    if scheme in LOCAL_SCHEMES:
        return
    known = known_implementations.get(scheme)
    package = str(known["class"]).split(".", 1)[0] if known else None
    if package and importlib.util.find_spec(package) is None:
        extra = FILESYSTEM_EXTRAS.get(package)
        install = (
            f"pip install 'airflow-provider-binlog[{extra}]' (installs {package} and "
            f"{FILESYSTEM_PROVIDERS[package]})"
            if extra
            else f"pip install {package}"
        )
        raise BinlogConfigError(
            f"the location {uri} uses the scheme {scheme}://, which needs the Python package {package} "
            f"(fsspec: {known.get('err', 'not installed') if known else ''}), not installed on this worker. "
            f"Install it where the tasks run: {install}."
        )
    from airflow.sdk.io.fs import has_fs

    try:
        registered = has_fs(scheme)
    except ImportError as err:  # a provider's filesystem module whose own package is missing
        raise BinlogConfigError(
            f"the location {uri} uses the scheme {scheme}://, but loading Airflow's filesystems failed: {err}"
        ) from err
    if not registered:
        provider = FILESYSTEM_PROVIDERS.get(package or "")
        hint = (
            f"install {provider} (pip install 'airflow-provider-binlog[{FILESYSTEM_EXTRAS[package or '']}]')"
            if provider
            else "install the Airflow provider that registers it, or use a local path"
        )
        raise BinlogConfigError(
            f"the location {uri} uses the scheme {scheme}://, which no installed Airflow provider registers "
            f"with ObjectStoragePath: {hint}."
        )


def storage_path(uri: str, conn_id: str | None = None) -> ObjectStoragePath:
    """Return an :class:`ObjectStoragePath` for a URI or a local path (made absolute).

    :raises BinlogConfigError: when the URI's scheme needs a package or provider this worker lacks
        (:func:`require_filesystem`).
    """
    if "://" not in uri:
        uri = "file://" + os.path.abspath(uri)
    require_filesystem(uri)
    return ObjectStoragePath(uri, conn_id=conn_id) if conn_id else ObjectStoragePath(uri)


def pipeline_root(staging_uri: str, pipeline: str, conn_id: str | None = None) -> ObjectStoragePath:
    """Return the staging folder of ``pipeline``, ``<staging>/<pipeline>``, after checking the pipeline's name.

    Every task finds its pipeline's folder here, so a name such as ``../../x`` is refused before any folder is
    created (:func:`~airflow_provider_binlog.pipeline.state.check_pipeline_name`).

    :raises PipelineNameError: for an invalid pipeline name.
    :raises BinlogConfigError: when the URI's scheme needs a package or provider this worker lacks.
    """
    from airflow_provider_binlog.pipeline.state import check_pipeline_name

    return storage_path(staging_uri, conn_id) / check_pipeline_name(pipeline)


def window_path(staging_uri: str, pipeline: str, seq: int, conn_id: str | None = None) -> ObjectStoragePath:
    """Return the folder of window ``seq`` of ``pipeline`` (its name checked, see :func:`pipeline_root`)."""
    return pipeline_root(staging_uri, pipeline, conn_id) / f"window={seq}"


def check_writable(root: ObjectStoragePath) -> None:
    """Write and delete a probe file under ``root``.

    :raises StagingError: when the location cannot be written, naming it and the cause.
    """
    probe = root / f".write-probe-{uuid.uuid4().hex}"
    try:
        root.mkdir(parents=True, exist_ok=True)
        with probe.open("wb") as handle:
            handle.write(b"ok")
        probe.unlink()
    except (OSError, PermissionError, ValueError) as err:
        raise StagingError(
            f"the staging location {root} is not writable: {err}. Point BINLOG_CDC_STAGING / staging_uri at "
            f"a folder or bucket the Airflow worker can write."
        ) from err


def read_manifest(window_dir: ObjectStoragePath) -> Manifest | None:
    """Return the window's manifest, or None when the window is not (completely) staged.

    The bytes come through the folder's ObjectStoragePath (its Airflow connection); parsing and validation
    are :meth:`Manifest.from_text <airflow_provider_binlog.contract.manifest.Manifest.from_text>`.

    :raises StagingError: when a manifest exists but is not valid JSON of a supported format.
    """
    path = window_dir / MANIFEST_NAME
    if not path.exists():
        return None
    try:
        return Manifest.from_text(path.read_bytes(), where=str(path))
    except ManifestError as err:
        raise StagingError(f"the manifest is corrupt or of an unknown format: {err}") from err


def staged_manifest(window_dir: ObjectStoragePath, pipeline: str, window: Window) -> Manifest | None:
    """Return the manifest in ``window_dir`` when it stages exactly ``window`` of ``pipeline``, else None.

    The manifest is written last and atomically (:func:`write_manifest`), so one that exists means every
    file it lists was written before it; one for another pipeline, seq or bounds is not this window's. A
    folder without a manifest (an extract that died half-way) is never used.

    :raises StagingError: when a manifest exists but is not valid JSON of the expected format.
    """
    manifest = read_manifest(window_dir)
    if manifest is None or (manifest.pipeline, manifest.window) != (pipeline, window.seq):
        return None
    bounds = ((manifest.start, window.start), (manifest.end, window.end))
    return manifest if all(same_boundary(staged, ledger) for staged, ledger in bounds) else None


def same_boundary(staged: BinlogPosition | None, ledger: BinlogPosition) -> bool:
    """Return whether a manifest's bound is the ledger's: the same coordinates, or the same GTID set.

    The GTID set names a boundary on every server: a window staged on a server the pipeline has since left
    (``docs/failover.md``) keeps its bounds' GTID set text in the rebased ledger, and its staged rows are exactly
    the transactions between them.
    """
    return staged == ledger or (
        staged is not None and bool(staged.gtid_set) and staged.gtid_set == ledger.gtid_set
    )


def staged_tables(window: Window, conn_id: str | None = None) -> set[str] | None:
    """Return the tables whose changes ``window``'s manifest stages (rows > 0); None when it cannot be read.

    :param conn_id: the staging's Airflow connection, if any.
    """
    if window.manifest_uri is None:
        return None
    try:
        manifest = read_manifest(storage_path(window.manifest_uri, conn_id))
    except (StagingError, OSError):
        return None
    return None if manifest is None else {name for name, entry in manifest.tables.items() if entry.rows}


def window_staging(
    root: ObjectStoragePath, pipeline: str, window: Window
) -> tuple[ObjectStoragePath, Manifest | None]:
    """Return ``(folder, manifest)`` of the window's staging; the manifest is None when it must be read.

    A complete manifest of exactly this window is reused (:func:`staged_manifest`): first in the folder the
    ledger records (``manifest_uri``: also one an earlier holder staged before it ended), then in the folder of
    the current holder (:attr:`~airflow_provider_binlog.pipeline.ledger.Window.staging_name`, where a retry of an
    extract that died after its manifest finds it). Otherwise the window is read into the current holder's
    folder: after a hand-over a new one, never the half-written folder of a run that died.

    :param root: the pipeline's staging folder (``<staging>/<pipeline>``).
    :param pipeline: the pipeline's name.
    :param window: the window as the ledger records it.
    :raises StagingError: when a manifest exists but is not valid JSON of the expected format.
    """
    own = root / window.staging_name
    recorded = [] if window.manifest_uri is None else [root / PurePosixPath(window.manifest_uri).name]
    for folder in [*recorded, own]:
        manifest = staged_manifest(folder, pipeline, window)
        if manifest is not None:
            return folder, manifest
    return own, None


def schema_history(state: PipelineState, window: Window, root: ObjectStoragePath) -> dict[str, list[Any]]:
    """Return the schema history at ``window``'s start: the ``schemas`` of the window that ends there.

    That window's manifest (in its staging folder under ``root``) keeps the table-map columns of each table at
    its end (:class:`~airflow_provider_binlog.contract.manifest.Manifest`); ``{}`` when there is no such
    window in the ledger (the first window, an interval window read before the one before it) or its manifest
    is gone. The reader then knows a column's old type only from a row event of the window.

    :param state: the pipeline's state (its ledger of windows).
    :param window: the window about to be read.
    :param root: the pipeline's staging folder (``<staging>/<pipeline>``).
    :returns: ``{"db.table": [table-map column, ...]}``.
    :raises StagingError: when that manifest exists but is not valid JSON of a supported format.
    """
    start = window.start.key
    before = max(  # the newest: windows a source switch rebased all end at the checkpoint
        (w for w in state.windows if w.seq != window.seq and w.manifest_uri and w.end.key == start),
        key=lambda w: w.seq,
        default=None,
    )
    if before is None or before.manifest_uri is None:
        return {}
    manifest = read_manifest(root / PurePosixPath(before.manifest_uri).name)
    return {} if manifest is None else dict(manifest.schemas)


def write_manifest(window_dir: ObjectStoragePath, manifest: Manifest) -> ObjectStoragePath:
    """Write the manifest last and atomically (see :func:`write_atomically`).

    Its bytes are :meth:`Manifest.to_text <airflow_provider_binlog.contract.manifest.Manifest.to_text>`.

    :returns: the manifest's path.
    """
    final = window_dir / MANIFEST_NAME
    write_atomically(final, manifest.to_text())
    return final


def write_atomically(final: ObjectStoragePath, body: bytes) -> None:
    """Write ``body`` to ``final`` so that readers see the whole file or none, creating missing folders.

    Local files are written under a temporary name (a plain file: ``ObjectStoragePath.open`` would report
    the temporary name as hook-level lineage, loading Airflow's plugins on its first use) and renamed;
    object stores put whole objects.
    """
    final.parent.mkdir(parents=True, exist_ok=True)
    if final.protocol in LOCAL_SCHEMES:
        temporary = final.parent / f".{final.name}.{uuid.uuid4().hex}.tmp"
        with open(temporary.path, "wb") as handle:
            handle.write(body)
        os.replace(temporary.path, final.path)
    else:
        with final.open("wb") as handle:
            handle.write(body)


def clear_window(window_dir: ObjectStoragePath) -> None:
    """Delete a partially written window folder (no manifest) before writing it again.

    A local folder is deleted with :func:`shutil.rmtree`: ``ObjectStoragePath.fs`` first registers every
    provider's filesystem (importing botocore for the Amazon provider's), 0.14-0.36 s of CPU per task that reads
    a window again (measured with py-spy).
    """
    if window_dir.protocol in LOCAL_SCHEMES:
        if os.path.lexists(window_dir.path):
            shutil.rmtree(window_dir.path)
    elif window_dir.exists():
        window_dir.fs.rm(window_dir.path, recursive=True)
