"""Planning a snapshot by hand, as tests and benchmarks do without the snapshot operator.

:class:`~airflow_provider_binlog.operators.snapshot.BinlogSnapshotOperator` plans a snapshot and writes the plan
before it submits the Spark job; tests and benchmarks that call
:func:`~airflow_provider_binlog.jobs.snapshot.run_snapshot` directly write it with :func:`write_plan`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from airflow_provider_binlog.contract.uris import write_json
from airflow_provider_binlog.snapshot.plan import CHUNK_ROWS, PLAN_NAME, plan_snapshot
from airflow_provider_binlog.source.flavor import MARIADB


def write_plan(
    connection_kwargs: Mapping[str, Any],
    snapshot_uri: str,
    *,
    pipeline: str,
    keys: Mapping[str, Sequence[str]],
    seq: int = 1,
    run_id: str = "test",
    chunk_rows: int = CHUNK_ROWS,
) -> dict[str, Any]:
    """Plan a snapshot of a MariaDB source from its current binlog head and write ``plan.json``; return the plan.

    :param connection_kwargs: pymysql ``connect()`` arguments of the source.
    :param snapshot_uri: the snapshot folder (``<staging>/<pipeline>/snapshot=<seq>``).
    :param pipeline: pipeline name.
    :param keys: ``{"db.table": key columns}`` of the tables to read.
    :param seq: the snapshot's sequence number.
    :param run_id: the run recorded in the plan.
    :param chunk_rows: rows per chunk.
    """
    import pymysql

    conn = pymysql.connect(**connection_kwargs)
    try:
        with conn.cursor() as cur:
            head = MARIADB.read_head(cur)
            if head is None:
                raise RuntimeError("binary logging is off on the source: a snapshot needs the binlog")
            plan = plan_snapshot(
                cur,
                pipeline=pipeline,
                seq=seq,
                run_id=run_id,
                flavor="mariadb",
                start=head.to_dict(),
                keys=keys,
                chunk_rows=chunk_rows,
            )
    finally:
        conn.close()
    write_json(f"{snapshot_uri.rstrip('/')}/{PLAN_NAME}", plan)
    return plan
