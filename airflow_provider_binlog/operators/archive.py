"""BinlogArchiveOperator: copy the source's binlog files, byte for byte, into a binlog archive (issue 34)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowFailException

from airflow_provider_binlog.archive.copy import (
    ArchiveError,
    ArchiveOwnerError,
    BinlogArchive,
    archive_binlogs,
)
from airflow_provider_binlog.hooks.binlog import BinlogHook
from airflow_provider_binlog.operators.trusted import check_trusted_arguments
from airflow_provider_binlog.source.server import derive_server_id


class BinlogArchiveOperator(BaseOperator):
    """Copy the source's binlog files that the archive lacks into the archive folder ``archive``.

    Each run lists the source's binlog files (``SHOW BINARY LOGS``) and copies each from where the archive's copy
    ends, over a replication connection of its own, as ``mysqlbinlog --read-from-remote-server --raw`` does
    (:func:`~airflow_provider_binlog.archive.copy.archive_binlogs`): a file the server has finished is assembled,
    every event checked, and recorded with its size, SHA-256, first and last event times and GTIDs; the file the
    server is writing is copied up to its current end and continued by the next run. Schedule it every few
    minutes (the example DAG ``binlog_archive``); retries and kills are safe, and two runs at once write the same
    archive. It needs the replication grants only (REPLICATION SLAVE and BINLOG MONITOR on MariaDB, REPLICATION
    SLAVE and REPLICATION CLIENT on MySQL), no SELECT.

    The folder holds one server's files: the first run records the server's identity there, and a run against
    another server fails without retry. Files the source purged before the archive had them whole are reported
    (``gaps`` in the XCom, and a warning): the archive cannot have them any more.

    :param archive: the archive folder: a local path or a URI of a store the staging supports (``s3://``,
        ``gs://``, ...). Set by the DAG's author only (never from a run's configuration,
        :func:`~airflow_provider_binlog.operators.trusted.check_trusted_arguments`).
    :param binlog_conn_id: the source's connection.
    :param server_id: the archiver's replica id on the source; default derived from ``archive`` (unique among
        the source's replicas and pipelines, which derive theirs from their names).
    :param storage_options: storage options of the archive's store (``s3://``), as the staging's.
    :returns: (XCom) ``{"archive", "server", "finished": [files], "unfinished": {file: bytes archived},
        "copied_bytes", "gaps": [files]}``.
    :raises AirflowFailException: when the folder holds another server's files, or a copy is not the server's
        file (a part that fails its checksum: delete the file's parts and run again while the source has it).
    """

    def __init__(
        self,
        *,
        archive: str,
        binlog_conn_id: str = BinlogHook.default_conn_name,
        server_id: int | None = None,
        storage_options: Mapping[str, str] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        check_trusted_arguments(self, archive=archive)
        self.archive = archive
        self.binlog_conn_id = binlog_conn_id
        self.server_id = derive_server_id(f"archive {archive}") if server_id is None else server_id
        self.storage_options = dict(storage_options or {}) or None

    def execute(self, context: Any) -> dict[str, Any]:
        """Copy what the archive lacks; return what was done."""
        hook = BinlogHook(self.binlog_conn_id)
        server = hook.server_state()
        archive = BinlogArchive(self.archive, self.storage_options)
        try:
            archive.claim(server.server_identity, server.flavor)
            run = archive_binlogs(
                archive,
                hook.dump_settings(),
                server.binlog_files,
                server_id=self.server_id,
                flavor=server.flavor,
            )
        except (ArchiveOwnerError, ArchiveError) as err:
            raise AirflowFailException(str(err)) from err
        gaps = archive.gaps(server.binlog_files)
        if gaps:
            self.log.warning(
                "the source purged %s before the archive at %s had them whole: the archive lacks them for good "
                "(run the archive DAG more often than the source's retention)",
                ", ".join(gaps), self.archive,
            )  # fmt: skip
        self.log.info(
            "archived %d bytes of %s into %s: finished %s; still being written: %s",
            run.copied_bytes, server.server_identity, self.archive, run.finished or "none",
            run.unfinished or "none",
        )  # fmt: skip
        return {
            "archive": self.archive,
            "server": server.server_identity,
            "finished": run.finished,
            "unfinished": run.unfinished,
            "copied_bytes": run.copied_bytes,
            "gaps": gaps,
        }
