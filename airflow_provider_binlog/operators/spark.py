"""The base of operators that submit the provider's bundled PySpark applications."""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import json
import os
import re
import shutil
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import conf

from airflow_provider_binlog.exceptions import BinlogConfigError, MergeError

if TYPE_CHECKING:
    from airflow_provider_binlog.jobs.connect_operations import DetachedOperation

#: The Spark provider's connection type for Spark Connect servers (``SparkConnectHook``).
SPARK_CONNECT_CONN_TYPE = "spark_connect"
#: Spark's log level in a spark-submit driver: WARN, as in Spark's shells, instead of the ~500 INFO lines a
#: merge would print into the task log (``spark.log.level``, Spark configuration docs, "Application Properties").
SPARK_LOG_CONF = {"spark.log.level": "WARN"}
#: What pyspark sets in a process once a remote session started (``pyspark.sql.utils.is_remote``).
CONNECT_MODE_ENV = "SPARK_CONNECT_MODE_ENABLED"
#: Retries of each call of a Connect client whose server does not answer (gRPC UNAVAILABLE): waits of 0.05,
#: 0.2, 0.8, 3.2 and 8 s, about 12 s in all (``pyspark.sql.connect.client.retries.DefaultPolicy``, whose own
#: defaults wait at least 10 minutes per call). Enough for a blip; a dead or restarted server has lost the
#: task's operations anyway, so the task fails and Airflow's retry runs it again.
CONNECT_RETRIES: dict[str, Any] = {"max_retries": 5, "max_backoff": 8000}


class SparkJobOperator(SparkSubmitOperator):
    """Run one of the provider's bundled PySpark applications, over spark-submit or Spark Connect.

    The Spark connection decides how:

    * a ``spark`` connection (local, standalone, YARN, Kubernetes): ``spark-submit`` of the application
      file, as :class:`SparkSubmitOperator` does. When no Spark home is configured (``SPARK_HOME`` unset
      in the environment and in ``env_vars``), the submit process gets ``SPARK_HOME`` and ``PATH``
      pointing at the ``pyspark`` package this interpreter has, and for a local master the job's Python
      is this interpreter (:func:`launcher_environment`);
    * a ``spark_connect`` connection (the Spark provider's ``SparkConnectHook``: host ``sc://host``,
      port, optional user id, token and SSL): the application runs in this task's process as a Spark
      Connect client of a long-lived server, so a window pays no JVM start. The server's Python workers
      must be able to import this provider (they read snapshot chunks), installed there or shipped with
      ``ship_provider``; ``spark.sql.*`` settings in ``conf`` are set on the client session, other settings
      belong to the server's configuration.

    With ``deferrable=True`` over Spark Connect, the job's long Spark actions (the merge's writes of new
    files, the snapshot's chunk reads) are handed to the server as detached operations: the task defers to
    :class:`~airflow_provider_binlog.triggers.spark_connect.SparkConnectOperationTrigger`, freeing its worker
    slot, and :meth:`execute_complete` runs the task again, which takes the finished output and makes the
    Delta commits itself (``docs/adr/0024-deferrable-spark-work.md``). Over spark-submit the job runs in the
    worker as without it (nothing to watch: see the ADR), and the task logs why.

    Before it defers, the task watches a detached action for ``defer_after_seconds``: one that ends within
    that time is taken in the worker without a deferral (a round trip through the triggerer and the scheduler
    costs seconds, and it avoids an Airflow 3.3 scheduler race on tasks resumed within a second or two, see
    the ADR).

    :param deferrable: defer while Spark Connect runs the long actions; default from
        ``[operators] default_deferrable``.
    :param defer_after_seconds: seconds to watch a detached action from the worker before deferring (0:
        defer at once); default from ``[binlog] defer_after_seconds``, else 10.
    :param ship_provider: ship this provider's code to Spark's Python workers with the job
        (:func:`~airflow_provider_binlog.jobs.shipping.provider_archive`: added to the Connect session as a
        ``pyfile`` artifact, or to spark-submit's ``py_files``), for a Spark side that does not have the
        provider installed; default from ``[binlog] ship_provider``, else False.
    """

    #: Module of the bundled application: its ``application(argv)`` binds it to a command line.
    job_module: ClassVar[str]
    #: Storage options of the staging and target stores, handed to the job in its environment.
    storage_options: dict[str, str] | None = None
    _connect_session: Any = None
    #: Whether this task resumes from a deferral (outputs of its operations must be taken or cleaned up).
    _deferred: bool = False

    def __init__(
        self,
        *,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        defer_after_seconds: float = conf.getfloat("binlog", "defer_after_seconds", fallback=10.0),
        ship_provider: bool = conf.getboolean("binlog", "ship_provider", fallback=False),
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if defer_after_seconds < 0:
            raise ValueError(f"defer_after_seconds must be 0 or more, got {defer_after_seconds!r}")
        self.deferrable = deferrable
        self.defer_after_seconds = defer_after_seconds
        self.ship_provider = ship_provider

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
        timestamps) and the log level :data:`SPARK_LOG_CONF` are added to the operator's ``conf``; a setting
        the user passed wins (``conf={"spark.log.level": "INFO"}`` brings Spark's INFO lines back). The
        operator's :attr:`storage_options` go to the job in
        :data:`~airflow_provider_binlog.contract.uris.STORAGE_OPTIONS_ENV` (never on the command line).

        :param context: the task context.
        :param args: the application's arguments.
        :param failure: what failed, for the :class:`MergeError` message.
        :param env: extra environment variables for the submit process only (secrets go here).
        :raises MergeError: when the Spark application fails.
        :raises BinlogConfigError: when the Spark connection does not exist, when spark-submit would run
            from a pyspark package whose Python files and jars are of different releases
            (:func:`pyspark_install_problem`), or when Spark's Python workers cannot import the provider.
        """
        from airflow.exceptions import AirflowException

        from airflow_provider_binlog.contract.types import SPARK_SQL_CONF
        from airflow_provider_binlog.contract.uris import STORAGE_OPTIONS_ENV

        self.conf = {**SPARK_SQL_CONF, **SPARK_LOG_CONF, **(self.conf or {})}
        if self.storage_options:
            env = {**(env or {}), STORAGE_OPTIONS_ENV: json.dumps(self.storage_options)}
        conn = self._spark_connection()
        if conn.conn_type == SPARK_CONNECT_CONN_TYPE:
            self._run_connected(args, failure=failure, env=env)
            return
        if self.deferrable:
            self.log.info(
                "deferrable=True: not deferring, the job runs in this worker: Spark connection %r is a "
                "spark-submit connection, whose driver runs in this task (Spark standalone runs no Python "
                "application in cluster mode); use a spark_connect connection to defer",
                self._conn_id,
            )
        self.application_args = args
        if self.ship_provider:
            from airflow_provider_binlog.jobs.shipping import provider_archive

            self.py_files = ",".join(filter(None, [self.py_files, str(provider_archive())]))
        master, deploy_mode = self._spark_master(conn)
        launcher = launcher_environment(master, deploy_mode, env_vars=self.env_vars)
        if "SPARK_HOME" in launcher and (problem := pyspark_install_problem(launcher["SPARK_HOME"])):
            raise BinlogConfigError(f"{failure}: {problem}")
        if launcher:
            self.log.info("Environment for spark-submit: %s", launcher)
        # A submitted application starts a classic session: it must not inherit this process's Connect mode.
        with _patched_environ({**launcher, **(env or {})}), _restored_environ(CONNECT_MODE_ENV):
            os.environ.pop(CONNECT_MODE_ENV, None)
            try:
                super().execute(context)
            except AirflowException as err:
                self._raise_for_missing_code(err, failure)
                raise MergeError(f"{failure}: {err}") from err

    def _run_connected(self, args: list[str], *, failure: str, env: Mapping[str, str] | None) -> None:
        """Run the application in this process on a session of the Spark Connect server of the connection.

        A detached action that ends within ``defer_after_seconds`` is resumed here, as
        :meth:`execute_complete` would after a deferral; a longer one defers the task.

        :raises MergeError: when the job fails (a :class:`~airflow_provider_binlog.contract.ContractError`,
            such as the merge's ``MergeJobError``) or Spark Connect reports an
            error (server unreachable, query failed); the message starts with ``failure``.
        :raises TaskDeferred: when a detached action runs longer than ``defer_after_seconds``.
        """
        from airflow.providers.apache.spark.hooks.spark_connect import SparkConnectHook

        app = importlib.import_module(self.job_module).application(args)
        url = SparkConnectHook(self._conn_id).get_connection_url()
        self.log.info("Running %s as a Spark Connect client of %s", app.name, url.split(";")[0])
        while (detached := self._run_session(app, url, failure=failure, env=env)) is not None:
            event = self._watch_before_deferring(url, detached)
            if event is None:
                from airflow_provider_binlog.triggers.spark_connect import SparkConnectOperationTrigger

                self.log.info(
                    "Deferring while Spark Connect runs %s (operation %s)",
                    detached.description,
                    detached.operation_id,
                )
                self.defer(
                    trigger=SparkConnectOperationTrigger(conn_id=self._conn_id, operation=detached.to_dict()),
                    method_name="execute_complete",
                )
            self._resume(event, within=self.defer_after_seconds)

    def _run_session(
        self, app: Any, url: str, *, failure: str, env: Mapping[str, str] | None
    ) -> DetachedOperation | None:
        """Run ``app``'s job on a new session; return the operation it detached, or None when it finished."""
        from pyspark.errors import PySparkException
        from pyspark.sql import SparkSession
        from pyspark.sql.connect.client.retries import DefaultPolicy

        from airflow_provider_binlog.contract import ContractError
        from airflow_provider_binlog.jobs.actions import detaching
        from airflow_provider_binlog.jobs.connect_operations import OperationDetached, leave_session

        # pyspark marks the whole process as a Connect client (CONNECT_MODE_ENV) when a remote session
        # starts, which would turn later classic sessions of this process into Connect ones.
        with _patched_environ(env or {}), _restored_environ(CONNECT_MODE_ENV):
            try:
                spark = SparkSession.builder.remote(url).create()  # never a session of someone else
                spark.client.set_retry_policies([DefaultPolicy(**CONNECT_RETRIES)])
                self._connect_session = spark
                try:
                    self._set_session_conf(spark)
                    if self.ship_provider:
                        from airflow_provider_binlog.jobs.shipping import provider_archive

                        spark.addArtifacts(str(provider_archive()), pyfile=True)
                    in_place = not (self.deferrable or self._deferred)
                    with contextlib.nullcontext() if in_place else detaching(submit=self.deferrable):
                        summary = app.job(spark)
                except OperationDetached as signal:
                    leave_session(spark)  # the server runs the operation in this session; the watcher ends it
                    return signal.operation
                except PySparkException as err:
                    if server_gone(err):  # no session to release: stopping would wait out the retries again
                        leave_session(spark)
                    raise
                finally:
                    self._connect_session = None
                    spark.stop()
            except (ContractError, PySparkException) as err:
                self._raise_for_missing_code(err, failure)
                if server_gone(err):
                    raise MergeError(
                        f"{failure}: the Spark Connect server {url.split(';')[0]} stopped answering (gRPC "
                        "UNAVAILABLE after about 12 s of retries; its operations of this task are lost); check "
                        "that it runs and is reachable from the worker: Airflow's retry starts over on a new "
                        "session"
                    ) from err
                raise MergeError(f"{failure}: {err}") from err
        self.log.info("%s finished: %s", app.name, json.dumps(summary, sort_keys=True, default=str))
        return None

    def _raise_for_missing_code(self, err: Exception, failure: str) -> None:
        """Fail at once when Spark's Python workers could not import the shipped packages: retries cannot help.

        :raises BinlogConfigError: naming the module and the two remedies.
        """
        from airflow_provider_binlog.jobs.shipping import SHIPPED_PACKAGES

        missing = re.search(r"No module named '([\w.]+)'", str(err))
        if missing is None or missing.group(1).split(".")[0] not in SHIPPED_PACKAGES:
            return
        shipped = "although the task shipped it: " if self.ship_provider else ""
        raise BinlogConfigError(
            f"{failure}: the Spark server's Python workers cannot import {missing.group(1)!r} ({shipped}"
            f"{str(err).splitlines()[0]}); install airflow-provider-binlog (with its dependencies) into the "
            "Python the Spark workers run, or set ship_provider=True on the operator (or [binlog] "
            "ship_provider = True) to send its code with every task"
        ) from err

    def _watch_before_deferring(self, url: str, operation: DetachedOperation) -> dict[str, Any] | None:
        """Watch ``operation`` for up to ``defer_after_seconds``; return its event if it ended, else None.

        The watch is the trigger's (:func:`~airflow_provider_binlog.jobs.connect_operations.watch_operation`,
        bounded by ``within``): giving up only closes this client's stream, the operation goes on for the
        trigger; an operation seen to end is released and reported, never given up on.
        """
        import asyncio

        from airflow_provider_binlog.jobs.connect_operations import watch_operation

        if self.defer_after_seconds <= 0:
            return None

        outcome = asyncio.run(watch_operation(url, operation, within=self.defer_after_seconds))
        return None if outcome is None else outcome.event(operation)

    def execute_complete(self, context: Any, event: Mapping[str, Any]) -> Any:
        """Resume after the trigger: run the task again, which takes the operation's output and commits it.

        The task re-plans the same work and finds the finished output by its name; tables already committed
        are skipped, so handling one event twice commits once. When the operation failed or was lost
        (``status`` ``error``), the rest of the task runs in this worker without deferring, so a failure the
        operation keeps hitting is raised here instead of deferring again.

        :param context: the task context.
        :param event: the trigger's payload (``status``, ``message``, ``lost``, ``operation_id``).
        :returns: what :meth:`execute` returns.
        """
        self._resume(event)
        return self.execute(context)

    def _resume(self, event: Mapping[str, Any], *, within: float | None = None) -> None:
        """Go on after a detached operation ended: take its output; after a failure, run in this worker.

        :param event: the operation's event (:meth:`~.connect_operations.OperationOutcome.event`).
        :param within: the seconds the worker watched it, when it ended before the task deferred.
        """
        self._deferred = True
        watched = f" within {within:g} s, without deferring" if within is not None else ""
        if event.get("status") == "success":
            self.log.info(
                "Spark Connect operation %s finished%s; finishing the task",
                event.get("operation_id"),
                watched,
            )
            return
        self.log.warning(
            "Spark Connect operation %s did not finish (%s%s); running the rest of the task in this worker",
            event.get("operation_id"),
            event.get("message"),
            ", the server no longer knew it" if event.get("lost") else "",
        )
        self.deferrable = False

    def _set_session_conf(self, spark: Any) -> None:
        """Set the operator's ``spark.sql.*`` settings on a Connect session; warn about the others."""
        for key, value in (self.conf or {}).items():
            if key.startswith("spark.sql."):
                spark.conf.set(key, str(value))
            elif SPARK_LOG_CONF.get(key) == value:
                continue  # the provider's default for spark-submit drivers; a Connect server logs as it is set up
            else:
                self.log.warning(
                    "Spark setting %s is not applied over Spark Connect: set it on the server", key
                )

    def on_kill(self) -> None:
        """Stop the Spark work of a killed task: interrupt the Connect session's operations, or the submit."""
        session = self._connect_session
        if session is not None:
            session.interruptAll()
            return
        super().on_kill()

    def _spark_connection(self) -> Any:
        """Return the Spark connection.

        :raises BinlogConfigError: when it does not exist.
        """
        from airflow.exceptions import AirflowNotFoundException
        from airflow.sdk import BaseHook

        try:
            return BaseHook.get_connection(self._conn_id)
        except AirflowNotFoundException as err:
            raise BinlogConfigError(
                f"Spark connection {self._conn_id!r} does not exist; create it (e.g. AIRFLOW_CONN_"
                f'{self._conn_id.upper()}=\'{{"conn_type": "spark", "host": "local[2]"}}\' for spark-submit, '
                f"or a spark_connect connection to a Spark Connect server)"
            ) from err

    def _spark_master(self, conn: Any) -> tuple[str, str | None]:
        """Return the master URL and deploy mode of a ``spark`` connection (as the Spark hook reads them)."""
        host = conn.host or ""
        if conn.conn_type == "spark" and host and ("://" in host or not conn.port):
            master = host
        else:
            master = f"{conn.conn_type}://{host}"
        if conn.port:
            master = f"{master}:{conn.port}"
        deploy_mode = self._deploy_mode or conn.extra_dejson.get("deploy-mode")
        return master, deploy_mode


def server_gone(err: BaseException) -> bool:
    """Return whether ``err`` (or an exception it was raised from) says the Connect server did not answer.

    That is gRPC status UNAVAILABLE (connection refused or dropped, after :data:`CONNECT_RETRIES`), which
    pyspark reports as a ``SparkConnectGrpcException``.
    """
    import grpc
    from pyspark.errors.exceptions.connect import SparkConnectGrpcException

    seen: BaseException | None = err
    while seen is not None:
        if (
            isinstance(seen, SparkConnectGrpcException)
            and seen.getGrpcStatusCode() == grpc.StatusCode.UNAVAILABLE
        ):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def pyspark_home() -> str | None:
    """Return the directory of the installed ``pyspark`` package (a usable ``SPARK_HOME``), if any."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        return None
    home = Path(next(iter(spec.submodule_search_locations)))
    return str(home) if (home / "bin" / "spark-class").exists() else None


def pyspark_install_problem(home: str | None = None) -> str | None:
    """Return why the ``pyspark`` package at ``home`` cannot run Spark jobs, or None when it can.

    A ``pyspark`` package is a usable Spark installation only when its Python files and its JVM jars are
    one release. ``apache-airflow-providers-apache-spark`` depends on ``pyspark-client``, which installs
    the Python files of its own release into the same ``pyspark`` folder, so installing both (in either
    order, or in parallel as ``uv`` does) can leave 4.2.0 Python files beside 4.3.0 jars; Spark then fails
    at the first job with errors that do not say why.

    :param home: the ``pyspark`` package directory (default: the installed one, :func:`pyspark_home`).
    :returns: the problem with the one command that fixes it, or None (also when no pyspark is installed).
    """
    home = home or pyspark_home()
    if home is None:
        return None
    version_file = Path(home) / "version.py"
    found = re.search(r"__version__\s*(?::\s*str\s*)?=\s*[\"']([^\"']+)[\"']", version_file.read_text())
    python_version = found.group(1) if found else "unknown"
    jars = sorted(p.name for p in (Path(home) / "jars").glob("spark-core_*.jar"))
    jar_version = jars[0].rsplit("-", 1)[-1].removesuffix(".jar") if jars else None
    if jar_version is None or jar_version == python_version:
        return None
    return (
        f"the pyspark package at {home} holds Python files of pyspark {python_version} beside the JVM jars "
        f"of Spark {jar_version} (pyspark-client, a dependency of apache-airflow-providers-apache-spark, "
        "writes into the same folder); make them one release with: "
        f"pip install --force-reinstall --no-deps pyspark=={jar_version}"
    )


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
    with _restored_environ(*env):
        os.environ.update(env)
        yield


@contextlib.contextmanager
def _restored_environ(*keys: str) -> Iterator[None]:
    """Give the environment variables ``keys`` back the values (or absence) they had before the block."""
    previous = {key: os.environ.get(key) for key in keys}
    try:
        yield
    finally:
        for key, value in previous.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
