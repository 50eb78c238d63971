"""The seam of deferrable jobs: run a long Spark action here, or hand it to the Spark Connect server and leave.

By default (spark-submit, a Connect client that does not defer) every action runs in place, as before. Inside
:func:`detaching` on a Spark Connect session, :func:`save_output` and :func:`start_detached` submit the action
as a detached operation (:mod:`~airflow_provider_binlog.jobs.connect_operations`) and raise
:class:`~airflow_provider_binlog.jobs.connect_operations.OperationDetached`; the operator defers, and when the
trigger reports the operation done it runs the same job again. The job re-plans the same work (same window,
same Delta version read, same files replaced), so :func:`output_name` gives the same output folder, and
:func:`save_output` finds the operation's complete output there (Spark's ``_SUCCESS`` marker, written when the
write job commits) instead of writing again (``docs/adr/0024-deferrable-spark-work.md``).
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import logging
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pyarrow.fs as pafs

from airflow_provider_binlog.jobs.connect_operations import (
    OperationDetached,
    submit_command,
    submit_plan,
    writer_command,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.readwriter import DataFrameWriter

log = logging.getLogger(__name__)

#: The file Spark's output committer writes into a folder once every task's output is in it.
SUCCESS_MARKER = "_SUCCESS"

#: Inside :func:`detaching`: whether long actions are submitted (True) or run in place (False).
_DETACHING: contextvars.ContextVar[bool | None] = contextvars.ContextVar("binlog_detaching", default=None)


@contextlib.contextmanager
def detaching(*, submit: bool = True) -> Iterator[None]:
    """Within the block, a job's outputs have names the next run finds again, and long actions may detach.

    :param submit: True: long actions on a Spark Connect session become detached operations (see module
        doc). False: they run in place, but a finished detached output is still taken and a partial one
        deleted (a task that resumes after its operation failed or was lost).
    """
    token = _DETACHING.set(submit)
    try:
        yield
    finally:
        _DETACHING.reset(token)


def is_detaching(spark: Any) -> bool:
    """Return whether actions on ``spark`` become detached operations now (Connect sessions inside :func:`detaching`)."""
    return bool(_DETACHING.get()) and type(spark).__module__.startswith("pyspark.sql.connect")


def output_name(*key: Any) -> str:
    """Return the name of a new output folder: random in place, derived from ``key`` when detaching.

    A detached write's folder must be found again by the resumed job, which knows only what it re-planned:
    ``key`` names everything the output depends on (table, window, Delta version read, files replaced, schema).

    :param key: values whose ``repr`` determines the output.
    """
    if _DETACHING.get() is None:
        return uuid.uuid4().hex
    return hashlib.sha256(repr(key).encode()).hexdigest()[:32]


def save_output(
    writer: DataFrameWriter, uri: str, fs: pafs.FileSystem, path: str, *, description: str
) -> None:
    """Save ``writer``'s output to ``uri``; inside :func:`detaching`, take a finished detached write or start one.

    Inside :func:`detaching`, when the folder holds the ``_SUCCESS`` marker, the marker is deleted (the output is claimed:
    a crash after this re-runs the write instead of taking a folder whose files were moved away) and the
    caller goes on with the files. Otherwise a partial folder is deleted and the write submitted (or run in
    place, ``submit=False``).

    :param writer: the DataFrameWriter with format, mode, options and partitioning set.
    :param uri: the output location, as Spark writes it.
    :param fs: the filesystem of ``path``.
    :param path: ``uri`` on ``fs``.
    :param description: what is written, for logs.
    :raises OperationDetached: when the write was submitted as a detached operation.
    """
    spark = writer._spark  # type: ignore[attr-defined]
    if _DETACHING.get() is None:
        writer.save(uri)
        return
    marker = f"{path.rstrip('/')}/{SUCCESS_MARKER}"
    if fs.get_file_info(marker).type == pafs.FileType.File:
        fs.delete_file(marker)
        log.info("%s: using the output of its detached write in %s", description, uri)
        return
    with contextlib.suppress(FileNotFoundError):
        fs.delete_dir(path)  # what a failed or abandoned operation left
    if not is_detaching(spark):
        writer.save(uri)
        return
    raise OperationDetached(submit_command(spark, writer_command(writer, uri), description))


def start_detached(frame: DataFrame, *, description: str) -> None:
    """Hand the computation of ``frame`` to the server and raise, when detaching; else return (run it yourself).

    For actions whose effects the job finds again by itself when it runs next (the snapshot's chunk files).

    :param frame: the DataFrame whose collection does the work.
    :param description: what it does, for logs.
    :raises OperationDetached: when the computation was submitted as a detached operation.
    """
    spark = frame.sparkSession
    if is_detaching(spark):
        raise OperationDetached(submit_plan(spark, frame, description))
