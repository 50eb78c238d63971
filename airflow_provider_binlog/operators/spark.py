"""The base of operators that submit the provider's bundled PySpark applications."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

from airflow_provider_binlog.exceptions import BinlogConfigError, MergeError


class SparkJobOperator(SparkSubmitOperator):
    """A :class:`SparkSubmitOperator` that runs from an unactivated virtualenv and names its failures.

    When no Spark home is configured (``SPARK_HOME`` unset in the environment and in ``env_vars``), the
    submit process gets ``SPARK_HOME`` and ``PATH`` pointing at the ``pyspark`` package this interpreter
    has, and for a local master the job's Python is this interpreter (:func:`launcher_environment`).
    """

    @classmethod
    def check_arguments(cls, kwargs: Mapping[str, Any], **positive: int) -> None:
        """Refuse arguments the operator sets itself, and non-positive counts.

        :param kwargs: the extra arguments given to the subclass (``application`` and
            ``application_args`` are refused).
        :param positive: ``name=value`` arguments that must be positive integers.
        :raises ValueError: naming the argument.
        """
        for owned in ("application", "application_args"):
            if owned in kwargs:
                raise ValueError(f"{cls.__name__} sets {owned} itself; do not pass it")
        for name, value in positive.items():
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")

    def submit(
        self, context: Any, args: list[str], *, failure: str, env: Mapping[str, str] | None = None
    ) -> None:
        """Run ``spark-submit`` with ``args`` and the launcher environment plus ``env`` (not logged).

        The Spark SQL settings the bundled jobs rely on (UTC session time zone, microsecond Parquet
        timestamps) are added to the operator's ``conf``; a setting the user passed wins.

        :param context: the task context.
        :param args: the application's arguments.
        :param failure: what failed, for the :class:`MergeError` message.
        :param env: extra environment variables for the submit process only (secrets go here).
        :raises MergeError: when the Spark application fails.
        :raises BinlogConfigError: when the Spark connection does not exist.
        """
        from airflow.exceptions import AirflowException

        from airflow_provider_binlog.spark_jobs.merge import SPARK_SQL_CONF

        self.conf = {**SPARK_SQL_CONF, **(self.conf or {})}
        self.application_args = args
        master, deploy_mode = self._spark_master()
        launcher = launcher_environment(master, deploy_mode, env_vars=self.env_vars)
        if launcher:
            self.log.info("Environment for spark-submit: %s", launcher)
        with _patched_environ({**launcher, **(env or {})}):
            try:
                super().execute(context)
            except AirflowException as err:
                raise MergeError(f"{failure}: {err}") from err

    def _spark_master(self) -> tuple[str, str | None]:
        """Return the master URL and deploy mode of the Spark connection (as the Spark hook reads them)."""
        from airflow.exceptions import AirflowNotFoundException
        from airflow.sdk import BaseHook

        try:
            conn = BaseHook.get_connection(self._conn_id)
        except AirflowNotFoundException as err:
            raise BinlogConfigError(
                f"Spark connection {self._conn_id!r} does not exist; create it (e.g. AIRFLOW_CONN_"
                f'{self._conn_id.upper()}=\'{{"conn_type": "spark", "host": "local[2]"}}\')'
            ) from err
        host = conn.host or ""
        if conn.conn_type == "spark" and host and ("://" in host or not conn.port):
            master = host
        else:
            master = f"{conn.conn_type}://{host}"
        if conn.port:
            master = f"{master}:{conn.port}"
        deploy_mode = self._deploy_mode or conn.extra_dejson.get("deploy-mode")
        return master, deploy_mode


def pyspark_home() -> str | None:
    """Return the directory of the installed ``pyspark`` package (a usable ``SPARK_HOME``), if any."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        return None
    home = Path(next(iter(spec.submodule_search_locations)))
    return str(home) if (home / "bin" / "spark-class").exists() else None


def launcher_environment(
    master: str,
    deploy_mode: str | None,
    *,
    env_vars: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
    spark_binary: str = "spark-submit",
) -> dict[str, str]:
    """Return the environment variables ``spark-submit`` needs that are not set yet.

    ``spark-submit`` from a virtualenv fails ("bin/spark-class: No such file") unless ``SPARK_HOME``
    points at the ``pyspark`` package or the venv is activated. If neither ``environ`` nor ``env_vars``
    sets ``SPARK_HOME``, it is set to the ``pyspark`` package and its ``bin`` put first on ``PATH``.
    A local master runs the job's Python with this interpreter; so does a client-mode driver.

    :param master: Spark master URL (``local[2]``, ``yarn``, ``spark://...``, ``k8s://...``).
    :param deploy_mode: ``client``, ``cluster`` or ``None`` (client).
    :param env_vars: the operator's ``env_vars``.
    :param environ: the current environment (default ``os.environ``).
    :param spark_binary: the submit command looked up on ``PATH``.
    """
    current = dict(os.environ if environ is None else environ)
    given = {**current, **{k: str(v) for k, v in (env_vars or {}).items()}}
    env: dict[str, str] = {}
    spark_home = given.get("SPARK_HOME")
    if not spark_home:
        spark_home = pyspark_home()
        if spark_home:
            env["SPARK_HOME"] = spark_home
    path = given.get("PATH", os.defpath)
    if spark_home and ("SPARK_HOME" in env or shutil.which(spark_binary, path=path) is None):
        env["PATH"] = os.pathsep.join([str(Path(spark_home) / "bin"), path])
    if master.startswith("local") and not given.get("PYSPARK_PYTHON"):
        env["PYSPARK_PYTHON"] = sys.executable
    if deploy_mode != "cluster" and not given.get("PYSPARK_DRIVER_PYTHON"):
        env["PYSPARK_DRIVER_PYTHON"] = sys.executable
    return env


@contextlib.contextmanager
def _patched_environ(env: Mapping[str, str]) -> Iterator[None]:
    """Set environment variables for the duration of the block (the task's own process), then restore."""
    previous = {key: os.environ.get(key) for key in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for key, value in previous.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
