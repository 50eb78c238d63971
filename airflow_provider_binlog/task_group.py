"""A whole CDC pipeline as one task group: ``BinlogPipeline(pipeline=..., tables=..., staging=..., target=...)``.

The task group holds the tasks of ``example_dags/binlog_cdc.py`` with their dependencies and XCom plumbing:
``purge_risk`` (retention headroom, one check), ``snapshot`` (head pipelines: tables not yet loaded),
``extract`` (the run's bounded window), ``merge`` (the PySpark merge job), ``commit`` (checkpoint and ledger)
and ``quarantine`` (fails the run, after the healthy tables were committed, while a table is quarantined).
Every setting is given once, in a :class:`PipelineConfig` validated when the DAG file is parsed: wrong types,
unknown settings, table selections that are not ``db.table`` patterns, keys of tables the selection does not
take, staging and target roots inside each other, snapshot settings on a pipeline that takes no snapshots. No
connection is opened and no Variable is read at parse time. The per-operator API stays for DAGs that compose
their own tasks.

A pipeline's settings are the DAG author's (ADR 0034): none of them is templated from a run's configuration.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    ValidationError,
    field_validator,
    model_validator,
)

from airflow_provider_binlog.contract.history import HistorySettings
from airflow_provider_binlog.contract.write_modes import WriteMode
from airflow_provider_binlog.exceptions import BinlogConfigError
from airflow_provider_binlog.pipeline.state import check_pipeline_name
from airflow_provider_binlog.pipeline.tables import parse_keys, parse_tables, takes
from airflow_provider_binlog.sensors.purge_risk import DEFAULT_MIN_HEADROOM_SECONDS

if TYPE_CHECKING:
    from airflow.sdk import TaskGroup

_GROUP_ID = re.compile(r"^[A-Za-z0-9_-]+$")
_SNAPSHOT_SETTINGS = ("snapshot_chunk_rows", "snapshot_connections", "snapshot_rows_per_second")


class PipelineConfig(BaseModel):
    """The settings of one CDC pipeline, checked when constructed (at DAG parse time, offline).

    :param pipeline: the pipeline's name (1 to 200 letters, digits, ``_``, ``-``): its state Variable
        ``binlog_state__<name>`` and its staging folder.
    :param tables: the table selection: ``"db.*, !db.tmp_*"`` or a list of entries (a list for names with commas).
    :param staging: staging root (path or object-store URI); windows go to ``<staging>/<pipeline>/``.
    :param target: target root of the Delta tables; table ``db.t`` lives at ``<target>/db/t``.
    :param keys: ``{"db.table": ["col", ...]}``, the key of tables without a primary key.
    :param keyless_tables: ``skip`` (a table without a key is left out with a warning) or ``fail``.
    :param cut_by: ``head`` (each run takes everything up to the source head; snapshots new tables) or
        ``interval`` (each run takes the transactions committed in its data interval; backfills in any order).
    :param write_mode: ``auto``, ``merge_on_read`` or ``copy_on_write`` (``BinlogMergeOperator``).
    :param source_conn_id: the MySQL/MariaDB connection (``mysql`` or ``mysqlbinlog`` type).
    :param spark_conn_id: the Spark connection (``spark`` or ``spark_connect``).
    :param staging_conn_id: the connection of an object-store staging root (ObjectStoragePath), if any.
    :param storage_options: deltalake/pyarrow storage options of the staging and target stores.
    :param snapshot_chunk_rows: rows per snapshot chunk.
    :param snapshot_connections: most source connections reading snapshot chunks at once.
    :param snapshot_rows_per_second: the snapshot rate the purge-risk check assumes before one was measured.
    :param min_headroom_seconds: least binlog retention headroom the purge-risk check accepts, in seconds.
    :param deferrable: whether the snapshot and the merge defer while Spark Connect works (None: Airflow's
        ``[operators] default_deferrable``).
    :param history: the history kept beside every table (``docs/history.md``): ``"changelog"``, ``"scd2"``, both
        (a list) or None (none).
    :param table_history: ``{"db.table": kinds}`` overriding ``history`` for single tables (``"off"``: none).
    :param retries: retries of the purge-risk, snapshot, extract and merge tasks (the commit never retries
        on its own: its failures need a person).
    :param archive: the source's binlog archive (``docs/archive.md``; a local path or URI, store credentials from
        the environment), which ``BinlogArchiveOperator`` (the example DAG ``binlog_archive``) keeps: windows read
        what the source has purged from there, and the purge-risk check counts its finished files as retained.
    :raises pydantic.ValidationError: (a ``ValueError``) naming each wrong setting.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    pipeline: str
    tables: str | list[str]
    staging: str = Field(min_length=1)
    target: str = Field(min_length=1)
    keys: dict[str, list[str]] = Field(default_factory=dict)
    keyless_tables: Literal["skip", "fail"] = "skip"
    cut_by: Literal["head", "interval"] = "head"
    write_mode: WriteMode = "auto"
    source_conn_id: str = "binlog_default"
    spark_conn_id: str = "spark_default"
    staging_conn_id: str | None = None
    storage_options: dict[str, str] | None = None
    snapshot_chunk_rows: PositiveInt = 50_000
    snapshot_connections: PositiveInt = 2
    snapshot_rows_per_second: PositiveFloat | None = None
    min_headroom_seconds: NonNegativeFloat = DEFAULT_MIN_HEADROOM_SECONDS
    deferrable: bool | None = None
    history: str | list[str] | None = None
    table_history: dict[str, str | list[str] | None] = Field(default_factory=dict)
    retries: NonNegativeInt = 2
    archive: str | None = Field(default=None, min_length=1)

    @field_validator("pipeline")
    @classmethod
    def _pipeline_name(cls, value: str) -> str:
        return check_pipeline_name(value)

    @field_validator("tables")
    @classmethod
    def _selection(cls, value: str | list[str]) -> str | list[str]:
        parse_tables(value)
        return value

    @field_validator("keys", mode="before")
    @classmethod
    def _keys(cls, value: Any) -> dict[str, list[str]]:
        return parse_keys(value)

    @model_validator(mode="after")
    def _consistent(self) -> PipelineConfig:
        selection = parse_tables(self.tables)
        HistorySettings.parse(self.history, self.table_history)
        named = [*self.keys, *self.table_history]
        strays = [name for name in named if not takes(selection, name, case_sensitive=False)]
        if strays:
            raise ValueError(
                f"keys or table_history name {', '.join(strays)}, which the table selection {', '.join(selection)} "
                "does not take: add them to tables or remove their entries"
            )
        staging, target = (root.rstrip("/") + "/" for root in (self.staging, self.target))
        if staging.startswith(target) or target.startswith(staging):
            raise ValueError(
                f"staging {self.staging!r} and target {self.target!r} must be separate roots, neither inside the "
                "other: maintenance deletes staged windows and vacuums target tables"
            )
        given = [name for name in _SNAPSHOT_SETTINGS if name in self.model_fields_set]
        if self.cut_by == "interval" and given:
            raise ValueError(
                f"{', '.join(given)} set on a pipeline cutting by interval, which takes no snapshots (they need "
                "head windows): remove them, or cut by head"
            )
        return self


def BinlogPipeline(  # noqa: N802 (a factory that reads like the task group it returns, as TaskGroup itself)
    config: PipelineConfig | None = None,
    *,
    group_id: str | None = None,
    prefix_group_id: bool = True,
    **settings: Any,
) -> TaskGroup:
    """Create a pipeline's tasks in a task group of the DAG being defined; return the group.

    ``BinlogPipeline(pipeline="shop", tables="shop.*", staging="s3://lake/staging", target="s3://lake/cdc")``
    inside ``with DAG(...)``: the settings are those of :class:`PipelineConfig`, given as keywords or as one
    ``config``. Several pipelines can share a DAG (their groups are named after them). The group's tasks are
    ``purge_risk >> snapshot >> extract >> merge >> commit >> quarantine`` (no ``snapshot`` when cutting by
    interval); other tasks can depend on the group as on a task.

    :param config: the settings, instead of keywords.
    :param group_id: the task group's id; default the pipeline's name.
    :param prefix_group_id: prefix the tasks' ids with the group id (``shop.extract``); False keeps them as in
        the example DAG (``extract``), for one pipeline per DAG.
    :raises BinlogConfigError: for wrong or conflicting settings (every problem listed), a group id Airflow
        refuses, or settings given both ways.
    """
    config = _config(config, settings)
    group_id = group_id or config.pipeline
    if not _GROUP_ID.match(group_id):
        raise BinlogConfigError(
            f"pipeline {config.pipeline!r}: {group_id!r} cannot be a task group id (ASCII letters, digits, '_' "
            "and '-'): pass group_id"
        )
    from airflow.sdk import TaskGroup

    with TaskGroup(group_id=group_id, prefix_group_id=prefix_group_id) as group:
        _tasks(config)
    return group


def _config(config: PipelineConfig | None, settings: Mapping[str, Any]) -> PipelineConfig:
    if config is not None and settings:
        raise BinlogConfigError(
            f"BinlogPipeline takes a config or settings, not both (got config and {', '.join(settings)})"
        )
    if config is not None:
        return config
    try:
        return PipelineConfig(**settings)
    except ValidationError as err:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'settings'}: {e['msg'].removeprefix('Value error, ')}"
            for e in err.errors()
        )
        name = settings.get("pipeline", "<unnamed>")
        raise BinlogConfigError(f"pipeline {name!r}: {problems}") from None


def _tasks(config: PipelineConfig) -> None:
    """Create the pipeline's tasks, in dependency order, in the task group being defined."""
    from airflow_provider_binlog.operators import (
        BinlogCommitOperator,
        BinlogExtractOperator,
        BinlogMergeOperator,
        BinlogQuarantineCheckOperator,
        BinlogSnapshotOperator,
    )
    from airflow_provider_binlog.sensors import BinlogPurgeRiskSensor

    head = config.cut_by == "head"
    common: dict[str, Any] = {"pipeline": config.pipeline}
    stores: dict[str, Any] = {
        "staging_conn_id": config.staging_conn_id,
        "storage_options": config.storage_options,
    }
    selection: dict[str, Any] = {  # the extract's and the snapshot's: the same tables, keys and staging
        "tables": config.tables,
        "staging_uri": config.staging,
        "keys": config.keys,
        "keyless_tables": config.keyless_tables,
        "binlog_conn_id": config.source_conn_id,
        "history": config.history,
        "table_history": config.table_history,
    }
    deferrable: dict[str, Any] = {} if config.deferrable is None else {"deferrable": config.deferrable}
    purge_risk = BinlogPurgeRiskSensor(
        task_id="purge_risk",
        **common,
        tables=config.tables if head else None,  # only head pipelines take snapshots, whose time counts
        min_headroom_seconds=config.min_headroom_seconds,
        snapshot_rows_per_second=config.snapshot_rows_per_second,
        binlog_conn_id=config.source_conn_id,
        archive=config.archive,
        mode="poke",  # one measurement decides (retained, low or purged): it never waits
        deferrable=False,
        timeout=60,
        retries=config.retries,
    )
    extract = BinlogExtractOperator(
        task_id="extract",
        **common,
        **selection,
        staging_conn_id=config.staging_conn_id,
        cut_by=config.cut_by,
        archive=config.archive,
        retries=config.retries,
    )
    merge = BinlogMergeOperator(
        task_id="merge",
        **common,
        window_uri=f"{{{{ ti.xcom_pull(task_ids='{extract.task_id}')['window_uri'] }}}}",
        target_path=config.target,
        keys=config.keys,
        write_mode=config.write_mode,
        conn_id=config.spark_conn_id,
        retries=config.retries,
        **stores,
        **deferrable,
    )
    commit = BinlogCommitOperator(
        task_id="commit",
        **common,
        target_path=config.target,
        binlog_conn_id=config.source_conn_id,
        **stores,
    )
    quarantine = BinlogQuarantineCheckOperator(task_id="quarantine", **common)
    extract >> merge >> commit >> quarantine
    if not head:
        purge_risk >> extract
        return
    snapshot = BinlogSnapshotOperator(
        task_id="snapshot",
        **common,
        **selection,
        target_path=config.target,
        conn_id=config.spark_conn_id,
        chunk_rows=config.snapshot_chunk_rows,
        max_connections=config.snapshot_connections,
        retries=config.retries,
        **stores,
        **deferrable,
    )
    purge_risk >> snapshot >> extract


__all__ = ["BinlogPipeline", "PipelineConfig"]
