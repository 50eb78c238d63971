"""The extra ``tls`` against a real MariaDB with TLS and one without: every connection does what the mode says.

The TLS server's certificate is issued by a CA made here for ``127.0.0.1`` only (subjectAltName IP), so a
connection to ``localhost`` is one to a host the certificate does not name. A second CA that signed nothing
stands for a wrong ``ssl_ca``. Encryption is checked from the session (``Ssl_cipher``, :func:`tls_state`)
and, for the replication stream, by the server's count of TLS handshakes it accepted.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from airflow_provider_binlog.contract.positions import BinlogPosition
from airflow_provider_binlog.exceptions import BinlogConfigError
from airflow_provider_binlog.extract.connections import open_dump
from airflow_provider_binlog.hooks.binlog import BinlogHook
from airflow_provider_binlog.snapshot.chunks import SourceConnections
from airflow_provider_binlog.source.connect import LoginTimeoutConnection, TlsConnectionError, tls_state
from airflow_provider_binlog.testing.mariadb import CDC_SETTINGS, LocalMariaDB

pytestmark = pytest.mark.integration

X509_USER, X509_PASSWORD = "tls_x509", "tls-x509-secret-1"


class CertificateAuthority:
    """A CA (EC P-256, valid for a month) that issues certificates into ``folder``."""

    def __init__(self, folder: Path, name: str) -> None:
        self.folder, self.name = folder, name
        self.key = ec.generate_private_key(ec.SECP256R1())
        self.cert = self._builder(name, self.key.public_key(), ca=True).sign(self.key, hashes.SHA256())
        self.path = folder / f"{name}-ca.pem"
        self.path.write_bytes(self.cert.public_bytes(serialization.Encoding.PEM))

    def _builder(self, subject: str, public_key: Any, *, ca: bool) -> x509.CertificateBuilder:
        now = dt.datetime.now(dt.UTC)
        issuer = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, self.name if not ca else subject)])
        return (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
            .issuer_name(issuer)
            .public_key(public_key)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(days=1))
            .not_valid_after(now + dt.timedelta(days=30))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        )

    def issue(self, name: str, *, ip: str | None = None) -> tuple[Path, Path]:
        """Write ``<name>-cert.pem`` and ``<name>-key.pem`` for the subject ``name`` (and the IP ``ip``)."""
        key = ec.generate_private_key(ec.SECP256R1())
        builder = self._builder(name, key.public_key(), ca=False)
        if ip:
            builder = builder.add_extension(
                x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(ip))]), critical=False
            )
        cert, key_path = self.folder / f"{name}-cert.pem", self.folder / f"{name}-key.pem"
        cert.write_bytes(builder.sign(self.key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM))
        key_path.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            )
        )
        return cert, key_path


class Pki:
    """The test's CA, the server's certificate for 127.0.0.1, a client certificate and a CA that signed neither."""

    def __init__(self, folder: Path) -> None:
        self.ca = CertificateAuthority(folder, "test")
        self.server_cert, self.server_key = self.ca.issue("127.0.0.1", ip="127.0.0.1")
        self.client_cert, self.client_key = self.ca.issue("client")
        self.other_ca = CertificateAuthority(folder, "other")


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return Pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def tls_server(pki: Pki) -> Iterator[LocalMariaDB]:
    """A private MariaDB that offers TLS with the test CA's certificate, and a user that must show a client one."""
    options = {
        **CDC_SETTINGS,
        "ssl-ca": str(pki.ca.path),
        "ssl-cert": str(pki.server_cert),
        "ssl-key": str(pki.server_key),
    }
    with LocalMariaDB(options=options) as server:
        server.execute(
            f"CREATE USER '{X509_USER}'@'%' IDENTIFIED BY '{X509_PASSWORD}' REQUIRE X509",
            f"GRANT ALL ON *.* TO '{X509_USER}'@'%'",
        )
        yield server


def connect_as(
    monkeypatch: pytest.MonkeyPatch, server: LocalMariaDB, extra: dict[str, Any], **fields: Any
) -> BinlogHook:
    """Return a hook of a ``mysqlbinlog`` connection to ``server`` (root unless ``fields`` say otherwise)."""
    conn = {
        "conn_type": "mysqlbinlog",
        "host": "127.0.0.1",
        "port": server.port,
        "login": "root",
        "password": server.root_password,
        "extra": extra,
        **fields,
    }
    monkeypatch.setenv("AIRFLOW_CONN_TLS_TEST", json.dumps(conn))
    return BinlogHook("tls_test")


def session_tls(hook: BinlogHook) -> str:
    with hook.cursor() as cur:
        return tls_state(cur)


def tls_handshakes(server: LocalMariaDB) -> int:
    """Return how many TLS handshakes ``server`` has accepted, read over a plaintext connection."""
    conn = LoginTimeoutConnection(**server.connection_kwargs(), tls_mode="disabled")
    try:
        with conn.cursor() as cur:
            cur.execute("SHOW GLOBAL STATUS LIKE 'Ssl_accepts'")
            return int(cur.fetchone()[1])
    finally:
        conn.close()


def verified(pki: Pki, mode: str = "verify_identity") -> dict[str, Any]:
    return {"tls": mode, "ssl_ca": str(pki.ca.path)}


ALL_MODES = ("disabled", "preferred", "required", "verify_ca", "verify_identity")


@pytest.mark.parametrize("mode", ALL_MODES)
def test_each_mode_against_a_server_with_tls(
    mode: str, pki: Pki, tls_server: LocalMariaDB, monkeypatch: pytest.MonkeyPatch
) -> None:
    extra = verified(pki, mode) if mode.startswith("verify") else {"tls": mode}
    state = session_tls(connect_as(monkeypatch, tls_server, extra))
    if mode == "disabled":
        assert state == "plaintext"
    else:
        version, cipher = state.split()
        assert version.startswith("TLSv1."), state
        assert cipher, state


@pytest.mark.parametrize("mode", ALL_MODES)
def test_each_mode_against_a_server_without_tls(
    mode: str, pki: Pki, mariadb: LocalMariaDB, monkeypatch: pytest.MonkeyPatch
) -> None:
    extra = verified(pki, mode) if mode.startswith("verify") else {"tls": mode}
    hook = connect_as(monkeypatch, mariadb, extra)
    if mode in ("disabled", "preferred"):
        assert session_tls(hook) == "plaintext"
        return
    with pytest.raises(BinlogConfigError) as raised:  # never plaintext: a stripped TLS cannot downgrade
        hook.get_conn()
    message = str(raised.value)
    assert (
        f"TLS (mode {mode}) failed: SSL is required but the server doesn't support it; start the server with"
        in message
    )
    assert "connect_timeout" not in message
    assert "a retry cannot succeed" in message


def test_verify_identity_refuses_a_certificate_for_another_host(
    pki: Pki, tls_server: LocalMariaDB, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert session_tls(connect_as(monkeypatch, tls_server, verified(pki, "verify_ca"), host="localhost"))
    hook = connect_as(monkeypatch, tls_server, verified(pki), host="localhost")
    with pytest.raises(
        BinlogConfigError,
        match=r"TLS \(mode verify_identity\) failed: certificate verify failed: Hostname mismatch.*'localhost'",
    ):
        hook.get_conn()


def test_a_wrong_ca_fails_without_retry_naming_the_certificate_problem(
    pki: Pki, tls_server: LocalMariaDB, monkeypatch: pytest.MonkeyPatch
) -> None:
    hook = connect_as(monkeypatch, tls_server, {"tls": "verify_ca", "ssl_ca": str(pki.other_ca.path)})
    with pytest.raises(BinlogConfigError) as raised:
        hook.get_conn()
    message = str(raised.value)
    # the server sends its chain with the CA that signed it, which the connection's CA did not
    assert (
        "TLS (mode verify_ca) failed: certificate verify failed: self-signed certificate in certificate chain"
        in (message)
    ), message
    assert "connection 'tls_test'" in message
    from airflow.sdk.exceptions import AirflowFailException

    assert isinstance(raised.value, AirflowFailException)  # Airflow fails the task without its retries
    from pymysqlreplication.event import RotateEvent

    with pytest.raises(BinlogConfigError, match=r"TLS \(mode verify_ca\) failed: certificate verify failed"):
        with hook.probe_stream("mariadb-bin.000001", 4, [RotateEvent]) as stream:
            stream.fetchone()
    with pytest.raises(BinlogConfigError, match=r"replication connection .*TLS \(mode verify_ca\) failed"):
        with open_dump(
            hook.dump_settings(), server_id=0, start=BinlogPosition("mariadb-bin.000001", 4), flavor="mariadb"
        ):
            pass


@pytest.mark.parametrize("mode", ["preferred", "required", "verify_identity"])
def test_the_replication_stream_is_encrypted(
    mode: str, pki: Pki, tls_server: LocalMariaDB, monkeypatch: pytest.MonkeyPatch
) -> None:
    hook = connect_as(monkeypatch, tls_server, verified(pki) if mode.startswith("verify") else {"tls": mode})
    first = str(tls_server.execute("SHOW BINARY LOGS")[0][0])
    settings = hook.dump_settings()
    before = tls_handshakes(tls_server)
    with open_dump(settings, server_id=0, start=BinlogPosition(first, 4), flavor="mariadb") as events:
        assert sum(1 for _ in events) > 1  # the dump's events arrived over the TLS socket
    assert tls_handshakes(tls_server) - before == 1  # the dump's connection, and nothing else


def test_a_stream_without_tls_makes_no_handshake(
    tls_server: LocalMariaDB, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The handshake count above can fail: a plaintext dump leaves it unchanged."""
    hook = connect_as(monkeypatch, tls_server, {"tls": "disabled"})
    first = str(tls_server.execute("SHOW BINARY LOGS")[0][0])
    before = tls_handshakes(tls_server)
    with open_dump(
        hook.dump_settings(), server_id=0, start=BinlogPosition(first, 4), flavor="mariadb"
    ) as events:
        assert sum(1 for _ in events) > 1
    assert tls_handshakes(tls_server) == before


def chunk_tls(source: dict[str, Any]) -> tuple[str, str, str]:
    """Return (row driver, TLS of the row connection, TLS of the meta connection) of a chunk reader of ``source``.

    A Spark executor gets the settings as JSON (``SOURCE_ENV``): they go through it here too.
    """
    with SourceConnections(json.loads(json.dumps(source))) as connections:
        rows = connections.rows()
        with rows.connection.cursor() as cur:
            row_state = tls_state(cur)
        with connections.meta().cursor() as cur:
            return rows.driver, row_state, tls_state(cur)


@pytest.mark.parametrize(
    ("mode", "driver"),
    [
        ("disabled", "mysqlclient"),
        ("preferred", "mysqlclient"),
        ("required", "pymysql"),
        ("verify_ca", "pymysql"),
    ],
)
def test_snapshot_chunk_connections_use_the_mode(
    mode: str,
    driver: str,
    pki: Pki,
    tls_server: LocalMariaDB,
    mariadb: LocalMariaDB,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    extra = verified(pki, mode) if mode.startswith("verify") else {"tls": mode}
    used, row_state, meta_state = chunk_tls(connect_as(monkeypatch, tls_server, extra).sql_settings())
    assert used == driver
    if mode == "disabled":
        assert (row_state, meta_state) == ("plaintext", "plaintext")
    else:
        assert row_state.startswith("TLSv1."), row_state
        assert meta_state.startswith("TLSv1."), meta_state
    if mode in ("disabled", "preferred"):  # and plaintext where the server offers no TLS
        assert chunk_tls(connect_as(monkeypatch, mariadb, extra).sql_settings()) == (
            driver,
            "plaintext",
            "plaintext",
        )


def test_preferred_chunk_rows_fall_back_to_plaintext_where_mysqlclient_enforces_tls(
    mariadb: LocalMariaDB, monkeypatch: pytest.MonkeyPatch
) -> None:
    """MySQL's libmysqlclient and Connector/C 3.4 refuse ssl_mode=REQUIRED with a server without TLS (2026);
    Debian 12's Connector/C 3.3 does not, so that refusal is simulated."""
    import MySQLdb

    connect, modes = MySQLdb.connect, []

    def enforcing(*args: Any, **kwargs: Any) -> Any:
        modes.append(kwargs.get("ssl_mode"))
        if kwargs.get("ssl_mode") == "REQUIRED":
            raise MySQLdb.OperationalError(2026, "SSL is required, but the server does not support it")
        return connect(*args, **kwargs)

    monkeypatch.setattr(MySQLdb, "connect", enforcing)
    assert chunk_tls(connect_as(monkeypatch, mariadb, {}).sql_settings()) == (
        "mysqlclient",
        "plaintext",
        "plaintext",
    )
    assert modes == ["REQUIRED", "DISABLED"]


def test_a_client_certificate_without_a_ca_warns_and_is_presented(
    pki: Pki, tls_server: LocalMariaDB, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    extra = {"ssl_cert": str(pki.client_cert), "ssl_key": str(pki.client_key)}
    hook = connect_as(monkeypatch, tls_server, extra, login=X509_USER, password=X509_PASSWORD)
    with caplog.at_level(logging.WARNING, logger="airflow_provider_binlog.hooks.binlog"):
        assert session_tls(hook).startswith("TLSv1.")  # REQUIRE X509: the server saw the client certificate
    assert hook.extras().tls_mode() == "required"
    assert any("the server's certificate is not verified" in r.getMessage() for r in caplog.records)
    no_cert = connect_as(
        monkeypatch, tls_server, {"tls": "required"}, login=X509_USER, password=X509_PASSWORD
    )
    with pytest.raises(BinlogConfigError, match="refused user"):
        no_cert.get_conn()


def test_a_missing_ca_file_names_the_file_and_the_machines_that_need_it(
    tmp_path: Path, tls_server: LocalMariaDB, monkeypatch: pytest.MonkeyPatch
) -> None:
    hook = connect_as(monkeypatch, tls_server, {"ssl_ca": str(tmp_path / "absent.pem")})
    with pytest.raises(
        BinlogConfigError, match=r"cannot load the TLS files \(ca=.*absent.pem\) on .*Spark executors"
    ):
        hook.get_conn()
    with pytest.raises(TlsConnectionError):
        SourceConnections(hook.sql_settings()).meta()


def test_the_connection_test_reports_the_mode_and_the_tls_in_use(
    pki: Pki, tls_server: LocalMariaDB, mariadb: LocalMariaDB, monkeypatch: pytest.MonkeyPatch
) -> None:
    ok, message = connect_as(monkeypatch, tls_server, verified(pki)).test_connection()
    line = next(line for line in message.split(";\n") if line.startswith("tls="))
    assert ok, message
    assert line.startswith("tls=verify_identity (TLSv1."), line
    assert line.endswith(": ok, encrypted; the server's certificate was verified (its CA and host name)"), (
        line
    )
    _, message = connect_as(monkeypatch, mariadb, {}).test_connection()
    line = next(line for line in message.split(";\n") if line.startswith("tls="))
    assert line.startswith(
        "tls=preferred (plaintext): note: the session is not encrypted: the server offers no TLS"
    ), line
