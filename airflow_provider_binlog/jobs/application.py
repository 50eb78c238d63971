"""What every bundled Spark application shares: its error, the session settings, and how it is run.

An application is bound to its command line by its module's ``application(argv)``
(:class:`Application`); :func:`run_application` runs it under ``spark-submit`` and prints one JSON
summary line; the operators run the same object on a Spark Connect session (``operators/spark.py``).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_provider_binlog.contract import ContractError
from airflow_provider_binlog.contract.types import SPARK_SQL_CONF
from airflow_provider_binlog.contract.uris import STORAGE_OPTIONS_ENV, storage_options_from_env

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)


class MergeJobError(ContractError):
    """The window cannot be merged as staged or configured; the message says what to fix.

    A retry with the same arguments cannot fix it. :func:`run_application` reports every
    :class:`~airflow_provider_binlog.contract.ContractError` this way (exit code 2).
    """


def configure_session(spark: SparkSession) -> None:
    """Set the Spark SQL settings the jobs rely on (UTC, microsecond timestamps, no rebasing).

    :param spark: the session.
    """
    for key, value in SPARK_SQL_CONF.items():
        spark.conf.set(key, value)


@dataclass(frozen=True)
class Application:
    """A bundled Spark application bound to its command line: what to run on a session.

    The same object runs under ``spark-submit`` (:func:`run_application`, this module's ``main``) and
    in the Airflow worker as a Spark Connect client (the operators call :attr:`job` on a remote session).

    :param name: Spark application name.
    :param log_level: Python logging level name for the spark-submit driver.
    :param job: does the work on a session and returns the JSON-able summary; raises
        :class:`~airflow_provider_binlog.contract.ContractError` (:class:`MergeJobError`) for failures a retry of
        the same arguments cannot fix.
    """

    name: str
    log_level: str
    job: Callable[[SparkSession], dict[str, Any]]


def run_application(app: Application) -> int:
    """Run a bundled Spark application: log to stderr, start the session, print one JSON summary line.

    :param app: the application bound to its arguments.
    :returns: the exit code: 0, or 2 after printing ``{"error": ...}`` for a
        :class:`~airflow_provider_binlog.contract.ContractError` (:class:`MergeJobError` is one).
    """
    logging.basicConfig(
        level=app.log_level.upper(),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    from pyspark.sql import SparkSession

    builder: Any = SparkSession.builder
    spark = builder.appName(app.name).getOrCreate()
    try:
        summary = app.job(spark)
    except ContractError as err:
        log.error("%s failed: %s", app.name, err)
        print(json.dumps({"error": str(err)}), flush=True)
        return 2
    print(json.dumps(summary, sort_keys=True, default=str), flush=True)
    return 0


def add_storage_option_argument(parser: argparse.ArgumentParser) -> None:
    """Add the repeatable ``--storage-option KEY=VALUE`` option (see :func:`job_storage_options`)."""
    parser.add_argument(
        "--storage-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help=f"storage option of the staging and target stores (also read from ${STORAGE_OPTIONS_ENV}, JSON)",
    )


def job_storage_options(specs: Sequence[str]) -> dict[str, str]:
    """Return a job's storage options: those handed in the environment, then ``--storage-option`` values.

    The operators hand them in :data:`~airflow_provider_binlog.contract.uris.STORAGE_OPTIONS_ENV` so that
    credentials are on no command line; a ``--storage-option`` of the same key wins.

    :param specs: ``KEY=VALUE`` values.
    :raises MergeJobError: if a value has no ``=``.
    """
    options = storage_options_from_env()
    for spec in specs:
        key, sep, value = spec.partition("=")
        if not sep:
            raise MergeJobError(f"--storage-option {spec!r} must look like KEY=VALUE")
        options[key] = value
    return options
