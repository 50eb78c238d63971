"""The provider's code as one zip for Spark's Python workers, for servers that do not have it installed.

The snapshot's Spark tasks run the provider's code in the server's Python workers (chunk reads and the first
load's writes, ``mapInArrow``); merges run none there. Where the provider cannot be installed on the Spark
side (a managed Spark Connect service, a shared cluster), the task ships it: over Spark Connect with
``SparkSession.addArtifacts(path, pyfile=True)``, which puts the zip on the ``sys.path`` of the session's
Python workers; over spark-submit as one of its ``--py-files`` (Spark docs, "Python Package Management" and
"Spark Connect Overview"). Python imports packages from a zip (``zipimport``), so the archive holds the
Python files of the provider and of the pure-Python drivers its executor code imports (:data:`SHIPPED_PACKAGES`),
and the package data those modules read with :mod:`importlib.resources`, which reads inside a zip too
(:data:`SHIPPED_DATA`: the character set tables of ``extract/charsets.py``). The Spark side still needs
pyarrow, which PySpark's Arrow functions need anyway.

Imports nothing from Airflow.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import tempfile
import zipfile
from pathlib import Path

import airflow_provider_binlog

#: Packages in the archive: the provider, and the pure-Python MySQL driver and replication library its
#: executor code imports (``source.flavor`` imports ``pymysqlreplication``, which imports ``pymysql``).
SHIPPED_PACKAGES = ("airflow_provider_binlog", "pymysql", "pymysqlreplication")
#: Files besides ``*.py`` in the archive (glob patterns): package data read with importlib.resources, as
#: ``[tool.setuptools.package-data]`` in pyproject.toml lists it for the wheel.
SHIPPED_DATA = ("*.json.gz",)
#: The timestamp of every entry: the same files give the same bytes (and the same name) on every worker.
ZIP_TIMESTAMP = (1980, 1, 1, 0, 0, 0)
#: Where archives are cached between tasks of one host (one file per content).
ARCHIVE_DIR = Path(tempfile.gettempdir()) / "airflow_provider_binlog-archives"


def package_files(package: str) -> list[tuple[str, Path]]:
    """Return ``(name in the archive, file)`` for every ``.py`` file and :data:`SHIPPED_DATA` file of ``package``.

    Sorted; test folders (``tests``) and byte-code caches are left out.

    :raises ModuleNotFoundError: when ``package`` is not installed.
    """
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(f"cannot ship {package!r}: it is not an installed package", name=package)
    root = Path(next(iter(spec.submodule_search_locations)))
    files = []
    for path in (p for pattern in ("*.py", *SHIPPED_DATA) for p in root.rglob(pattern)):
        inside = path.relative_to(root).parts
        if "tests" in inside or "__pycache__" in inside:
            continue
        files.append(("/".join((package, *inside)), path))
    return sorted(files)


def provider_archive(directory: Path = ARCHIVE_DIR) -> Path:
    """Return a zip of :data:`SHIPPED_PACKAGES`' files, built once per content and kept in ``directory``.

    The name is ``airflow_provider_binlog-<version>-<12 hex digits of the content's SHA-256>.zip``: a changed
    file gives a new name, so a Spark Connect session never gets two different archives under one name
    (the server refuses that), and the bytes are the same for the same files. Written under a temporary
    name and renamed, so tasks building it at once never read a half-written one.

    :param directory: where archives are kept (created when missing).
    :returns: the archive's path (about 0.8 MiB, 0.3 of it the character set tables).
    :raises ModuleNotFoundError: when a shipped package is not installed here.
    """
    files = [entry for package in SHIPPED_PACKAGES for entry in package_files(package)]
    contents = [(name, path.read_bytes()) for name, path in files]
    digest = hashlib.sha256()
    for name, data in contents:
        digest.update(name.encode() + b"\0" + hashlib.sha256(data).digest())
    archive = (
        directory
        / f"airflow_provider_binlog-{airflow_provider_binlog.__version__}-{digest.hexdigest()[:12]}.zip"
    )
    if archive.exists():
        return archive
    directory.mkdir(parents=True, exist_ok=True)
    fd, partial = tempfile.mkstemp(dir=directory, prefix=".partial-", suffix=".zip")
    try:
        with os.fdopen(fd, "wb") as out, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zipped:
            for name, data in contents:
                zipped.writestr(zipfile.ZipInfo(name, ZIP_TIMESTAMP), data, zipfile.ZIP_DEFLATED)
        os.replace(partial, archive)
    except BaseException:
        Path(partial).unlink(missing_ok=True)
        raise
    return archive
