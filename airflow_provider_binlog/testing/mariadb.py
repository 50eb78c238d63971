"""Private MariaDB servers for tests, the demo and benchmarks.

:class:`LocalMariaDB` starts ``mariadbd`` from the installed binaries with its own data directory,
free TCP port and socket, the binary log settings a CDC pipeline needs (or deliberately wrong ones,
for tests of the validation errors), and stops exactly the process it started.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CDC_SETTINGS: Mapping[str, str] = {
    "log-bin": "mariadb-bin",
    "binlog-format": "ROW",
    "binlog-row-image": "FULL",
    "binlog-row-metadata": "FULL",
    "gtid-strict-mode": "1",
    "server-id": "1",
    "character-set-server": "utf8mb4",
    "collation-server": "utf8mb4_unicode_ci",
}
"""Server options of a well-configured source (MariaDB manual, "Binary Log Formats", "gtid_strict_mode")."""

_SEARCH_DIRS = ("/usr/sbin", "/usr/bin", "/usr/local/sbin", "/usr/local/bin")


def find_binary(*names: str) -> str:
    """Return the path of the first of ``names`` found on PATH or in the usual sbin folders.

    :raises FileNotFoundError: when none is installed (install Debian's ``mariadb-server``).
    """
    for name in names:
        found = shutil.which(name) or next(
            (str(Path(d, name)) for d in _SEARCH_DIRS if Path(d, name).is_file()), None
        )
        if found:
            return found
    raise FileNotFoundError(f"none of {names} is installed; install the Debian package mariadb-server")


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class LocalMariaDB:
    """A private ``mariadbd`` process: own datadir, free port, socket, chosen server options.

    Use as a context manager or call :meth:`start` / :meth:`stop`. The root account has the
    password :attr:`root_password` and is reachable over TCP on 127.0.0.1:``port``.

    :param options: server options (``--name=value`` without dashes); defaults to :data:`CDC_SETTINGS`.
    :param base_dir: where the datadir lives; a new temporary folder when omitted (removed on stop).
    :param startup_timeout_seconds: how long :meth:`start` waits for the server to accept logins.
    """

    options: Mapping[str, str] = field(default_factory=lambda: dict(CDC_SETTINGS))
    base_dir: Path | None = None
    startup_timeout_seconds: float = 60.0
    root_password: str = "binlog-test-pw"
    port: int = 0
    process: subprocess.Popen[bytes] | None = None
    _owns_base_dir: bool = False

    @property
    def datadir(self) -> Path:
        """Return the server's data directory."""
        assert self.base_dir is not None
        return self.base_dir / "data"

    @property
    def tmpdir(self) -> Path:
        """Return the server's own temporary directory (``--tmpdir``), beside its datadir."""
        assert self.base_dir is not None
        return self.base_dir / "tmp"

    @property
    def socket_path(self) -> Path:
        """Return the server's Unix socket path."""
        assert self.base_dir is not None
        return self.base_dir / "mariadb.sock"

    def connection_kwargs(self, **overrides: Any) -> dict[str, Any]:
        """Return pymysql connection keyword arguments for the root account."""
        kwargs: dict[str, Any] = {
            "host": "127.0.0.1",
            "port": self.port,
            "user": "root",
            "password": self.root_password,
            "autocommit": True,
            "charset": "utf8mb4",
        }
        kwargs.update(overrides)
        return kwargs

    def uri(self) -> str:
        """Return an Airflow connection URI (``mysql://root:...@127.0.0.1:port``) for this server."""
        return f"mysql://root:{self.root_password}@127.0.0.1:{self.port}"

    def start(self) -> LocalMariaDB:
        """Initialise the datadir on first start, launch the server and wait until it accepts logins.

        :raises RuntimeError: when the server exits or does not answer within the startup timeout.
        """
        if self.base_dir is None:
            self.base_dir = Path(tempfile.mkdtemp(prefix="binlog-mariadb-"))
            self._owns_base_dir = True
        first_start = not self.datadir.exists()
        if first_start:
            self._install_db()
        self.port = self.port or free_port()
        self._launch()
        try:
            self._wait_until_ready(use_password=not first_start)
            if first_start:
                self._set_root_password()
        except BaseException:
            self.stop()
            raise
        return self

    def _install_db(self) -> None:
        """Create the system tables in a new datadir.

        :raises RuntimeError: when ``mariadb-install-db`` fails; the message holds the tail of its output.
        """
        self.datadir.mkdir(parents=True)
        self.tmpdir.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(
            [
                find_binary("mariadb-install-db", "mysql_install_db"),
                "--no-defaults",
                f"--datadir={self.datadir}",
                f"--tmpdir={self.tmpdir}",  # its temporary tables out of the shared /tmp (they collided there)
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
                "--user=root" if os.geteuid() == 0 else f"--user={os.getlogin()}",
            ],
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            output = (done.stdout + done.stderr).strip().splitlines()
            raise RuntimeError(
                f"mariadb-install-db exited {done.returncode} for {self.datadir}: " + "\n".join(output[-20:])
            )

    def _launch(self) -> None:
        assert self.base_dir is not None
        self.tmpdir.mkdir(parents=True, exist_ok=True)
        args = [
            find_binary("mariadbd", "mysqld"),
            "--no-defaults",
            f"--datadir={self.datadir}",
            f"--port={self.port}",
            "--bind-address=127.0.0.1",
            f"--socket={self.socket_path}",
            f"--pid-file={self.base_dir / 'mariadb.pid'}",
            f"--log-error={self.base_dir / 'error.log'}",
            "--innodb-buffer-pool-size=128M",
            f"--tmpdir={self.tmpdir}",
            "--skip-name-resolve",
        ]
        if os.geteuid() == 0:
            args.append("--user=root")
        args += [f"--{name}={value}" for name, value in self.options.items()]
        self.process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def _wait_until_ready(self, *, use_password: bool) -> None:
        import pymysql

        deadline = time.monotonic() + self.startup_timeout_seconds
        password = self.root_password if use_password else ""
        while True:
            assert self.process is not None
            if self.process.poll() is not None:
                raise RuntimeError(f"mariadbd exited with {self.process.returncode}: {self.error_log_tail()}")
            try:
                pymysql.connect(**self.connection_kwargs(password=password)).close()
                return
            except pymysql.err.OperationalError as err:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"mariadbd did not accept logins: {err}") from err
                time.sleep(0.1)

    def _set_root_password(self) -> None:
        import pymysql

        conn = pymysql.connect(**self.connection_kwargs(password=""))
        try:
            with conn.cursor() as cur:
                cur.execute("SET SESSION sql_log_bin = 0")
                cur.execute("CREATE USER IF NOT EXISTS 'root'@'127.0.0.1'")
                cur.execute("GRANT ALL ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION")
                cur.execute(
                    "SELECT Host FROM mysql.user WHERE User = 'root' AND Host IN ('localhost', '127.0.0.1', '::1')"
                )
                for (host,) in cur.fetchall():
                    cur.execute("ALTER USER 'root'@%s IDENTIFIED BY %s", (host, self.root_password))
        finally:
            conn.close()

    def error_log_tail(self, lines: int = 20) -> str:
        """Return the last ``lines`` lines of the server's error log (for failure messages)."""
        assert self.base_dir is not None
        log = self.base_dir / "error.log"
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:]) if log.exists() else ""

    def stop(self, *, remove: bool = True) -> None:
        """Stop the server process this object started (SIGTERM, then SIGKILL after 60 s).

        :param remove: also delete the temporary base directory when this object created it.
        """
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None
        if remove and self._owns_base_dir and self.base_dir is not None:
            shutil.rmtree(self.base_dir, ignore_errors=True)

    def restart(self) -> None:
        """Stop and start the server on the same datadir and port (a new binlog file begins)."""
        self.stop(remove=False)
        self._launch()
        self._wait_until_ready(use_password=True)

    def execute(self, *statements: str, database: str | None = None) -> list[tuple[Any, ...]]:
        """Run statements as root in one autocommit session; return the rows of the last one."""
        import pymysql

        conn = pymysql.connect(**self.connection_kwargs(database=database))
        try:
            rows: list[tuple[Any, ...]] = []
            with conn.cursor() as cur:
                for statement in statements:
                    cur.execute(statement)
                    rows = list(cur.fetchall())
            return rows
        finally:
            conn.close()

    @contextmanager
    def scratch_database(self, prefix: str) -> Iterator[str]:
        """Create a database named ``<prefix>_<random hex>``; drop it afterwards."""
        name = f"{prefix}_{uuid.uuid4().hex[:10]}"
        self.execute(f"CREATE DATABASE `{name}`")
        try:
            yield name
        finally:
            self.execute(f"DROP DATABASE IF EXISTS `{name}`")

    def purge_binlogs_before_current(self, timeout_seconds: float = 30.0) -> str:
        """Rotate the binlog and purge every older file; return the oldest file left.

        :raises TimeoutError: when the files are still there after ``timeout_seconds``.
        """
        self.execute("FLUSH BINARY LOGS")
        return self.purge_binlogs_to(str(self.execute("SHOW MASTER STATUS")[0][0]), timeout_seconds)

    def purge_binlogs_to(self, name: str, timeout_seconds: float = 30.0) -> str:
        """Purge every binlog file before ``name``; return ``name``.

        MariaDB keeps a file until its InnoDB binlog checkpoint is written (asynchronously after a
        rotation), so ``PURGE BINARY LOGS`` is repeated until the older files are gone.

        :raises TimeoutError: when the files are still there after ``timeout_seconds``.
        """
        deadline = time.monotonic() + timeout_seconds
        while True:
            self.execute(f"PURGE BINARY LOGS TO '{name}'")
            if str(self.execute("SHOW BINARY LOGS")[0][0]) == name:
                return name
            if time.monotonic() > deadline:
                raise TimeoutError(f"binlogs before {name} were not purged within {timeout_seconds} s")
            time.sleep(0.2)

    def __enter__(self) -> LocalMariaDB:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
