"""A private local Spark Connect server for tests and the demo: the ``pyspark`` package's own server.

pyspark ships the Spark Connect server (``spark-connect_<scala>-<version>.jar``, main class
``org.apache.spark.sql.connect.service.SparkConnectServer``, Spark docs "Spark Connect Overview",
"Deploying"). :class:`LocalSparkConnect` runs it in the foreground under ``spark-submit`` with a
``local[N]`` master on a free port, as a child process of its own (own process group, stopped by its
PID), so that every merge and snapshot of a test session or a demo shares one JVM instead of starting
one per window.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from airflow_provider_binlog.operators.spark import CONNECT_MODE_ENV, launcher_environment
from airflow_provider_binlog.testing.mariadb import free_port

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
PYTHON_DAEMON_MODULE = "airflow_provider_binlog.jobs.python_daemon"
"""The server's ``spark.python.daemon.module``: Python workers forked with the snapshot's task code imported
(``docs/adr/0028-snapshot-tasks-with-a-warm-python-daemon.md``)."""


@dataclass
class LocalSparkConnect:
    """A Spark Connect server on 127.0.0.1:``port`` with a ``local[cores]`` master.

    Use as a context manager or call :meth:`start` / :meth:`stop`. Its Python workers run this
    interpreter, so they import the provider from the same environment, and are forked by the provider's
    Python daemon (:data:`PYTHON_DAEMON_MODULE`), as ``docs/snapshots.md`` recommends for a Connect server.

    :param cores: local master threads (``local[cores]``).
    :param conf: extra Spark settings of the server (``spark.sql.shuffle.partitions`` ...).
    :param startup_timeout_seconds: how long :meth:`start` waits for the server's port.
    :param python: the Python executable of the server's workers (``PYSPARK_PYTHON``; default this interpreter).
    """

    cores: int = 2
    conf: Mapping[str, str] = field(default_factory=dict)
    startup_timeout_seconds: float = 180.0
    python: str = sys.executable
    port: int = 0
    process: subprocess.Popen[bytes] | None = None
    log_path: Path | None = None

    @property
    def url(self) -> str:
        """Return the client URL, ``sc://127.0.0.1:<port>``."""
        return f"sc://127.0.0.1:{self.port}"

    def connection_json(self) -> str:
        """Return an Airflow ``spark_connect`` connection (JSON) for this server, for ``AIRFLOW_CONN_*``."""
        return f'{{"conn_type": "spark_connect", "host": "sc://127.0.0.1", "port": {self.port}}}'

    def start(self) -> LocalSparkConnect:
        """Launch the server and wait until it accepts connections on its port.

        :raises RuntimeError: when the server exits or does not listen within the startup timeout; the
            message holds the end of its log.
        """
        self.port = self.port or free_port()
        self.log_path = Path(tempfile.mkstemp(prefix="spark-connect-", suffix=".log")[1])
        settings = {
            "spark.connect.grpc.binding.address": "127.0.0.1",
            "spark.connect.grpc.binding.port": str(self.port),
            "spark.ui.enabled": "false",
            "spark.sql.session.timeZone": "UTC",
            "spark.python.daemon.module": PYTHON_DAEMON_MODULE,
            **self.conf,
        }
        master = f"local[{self.cores}]"
        env = {**os.environ, **launcher_environment(master, None), "PYSPARK_PYTHON": self.python}
        env.pop(CONNECT_MODE_ENV, None)
        command = ["spark-submit", "--class", SERVER_CLASS, "--master", master, "--name", "binlog-connect"]
        for key, value in settings.items():
            command += ["--conf", f"{key}={value}"]
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                [*command, "spark-internal"],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        try:
            self._wait_until_listening()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_until_listening(self) -> None:
        deadline = time.monotonic() + self.startup_timeout_seconds
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                raise RuntimeError(f"the Spark Connect server exited: {self.log_tail()}")
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            time.sleep(0.25)
        raise RuntimeError(
            f"the Spark Connect server did not listen on {self.port} in {self.startup_timeout_seconds:.0f} s: "
            f"{self.log_tail()}"
        )

    def log_tail(self, lines: int = 30) -> str:
        """Return the last ``lines`` lines of the server's log."""
        if self.log_path is None or not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        """Stop the server (SIGTERM to its process group, SIGKILL after 30 s) and remove its log."""
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self.process = None
        if self.log_path is not None:
            self.log_path.unlink(missing_ok=True)

    def __enter__(self) -> LocalSparkConnect:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
