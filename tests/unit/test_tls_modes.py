"""The extra ``tls``: the mode each set of TLS extras means, and the contradictions refused when validated."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest

from airflow_provider_binlog.source.config import TLS_MODES, conn_fields, parse_extras
from airflow_provider_binlog.source.connect import LoginTimeoutConnection, TlsConnectionError, tls_context


@pytest.mark.parametrize(
    ("extras", "mode"),
    [
        ({}, "preferred"),  # the MySQL clients' default, and pymysql 1.2's without TLS options
        ({"ssl_ca": "/ca.pem"}, "verify_identity"),  # pymysql checked the CA and the host name
        ({"ssl": {"ca": "/ca.pem"}}, "verify_identity"),
        ({"ssl": {"capath": "/cas"}}, "verify_identity"),
        ({"ssl": {"ca": "/ca.pem", "check_hostname": False}}, "verify_ca"),
        ({"ssl_cert": "/c.pem", "ssl_key": "/k.pem"}, "required"),  # pymysql required TLS, verified nothing
        ({"tls": "disabled"}, "disabled"),
        ({"tls": "required"}, "required"),
        ({"tls": "verify_ca", "ssl_ca": "/ca.pem"}, "verify_ca"),
        ({"tls": "", "ssl_ca": "/ca.pem"}, "verify_identity"),  # an empty form field is unset
    ],
)
def test_the_mode_is_the_extra_tls_else_what_the_tls_files_imply(
    extras: dict[str, object], mode: str
) -> None:
    assert parse_extras(extras).tls_mode() == mode


@pytest.mark.parametrize(
    ("extras", "says"),
    [
        ({"tls": "disabled", "ssl_ca": "/ca.pem"}, "tls=disabled but TLS files are set (ca): remove them"),
        ({"tls": "disabled", "ssl_cert": "/c.pem"}, "tls=disabled but TLS files are set (cert)"),
        ({"tls": "verify_ca"}, "tls=verify_ca verifies the server against a CA, but none is set: set ssl_ca"),
        ({"tls": "verify_identity", "ssl_cert": "/c.pem"}, "tls=verify_identity verifies the server"),
        (
            {"tls": "required", "ssl_ca": "/ca.pem"},
            "tls=required does not verify the server, but ssl_ca is set",
        ),
        ({"tls": "preferred", "ssl": {"ca": "/ca.pem"}}, "set tls=verify_identity (or verify_ca)"),
        ({"ssl_key": "/k.pem"}, "ssl_key is set without ssl_cert"),
        ({"tls": "verify_ca", "ssl": {"ca": "/ca.pem", "check_hostname": True}}, "remove ssl.check_hostname"),
        ({"ssl": {"verify_mode": "none"}}, "extra ssl.verify_mode is not supported"),
        ({"tls": "verify"}, "extra tls='verify' must be one of 'disabled', 'preferred', 'required'"),
    ],
)
def test_contradicting_tls_extras_are_refused_saying_what_to_set(
    extras: dict[str, object], says: str
) -> None:
    with pytest.raises(ValueError, match="^") as raised:
        parse_extras(extras)
    assert says in str(raised.value)


@pytest.mark.parametrize(
    ("extras", "warns"),
    [
        ({"ssl_cert": "/c.pem", "ssl_key": "/k.pem"}, True),
        ({"tls": "preferred", "ssl_cert": "/c.pem"}, True),
        ({"ssl_cert": "/c.pem", "ssl_ca": "/ca.pem"}, False),
        ({"tls": "required"}, False),
        ({}, False),
    ],
)
def test_a_client_certificate_without_a_ca_warns_that_the_server_is_not_verified(
    extras: dict[str, object], warns: bool
) -> None:
    warnings = parse_extras(extras).tls_warnings()
    assert bool(warnings) == warns
    if warns:
        assert "the server's certificate is not verified" in warnings[0]
        assert "Set ssl_ca and tls=verify_identity" in warnings[0]


def test_the_form_offers_the_modes() -> None:
    assert conn_fields()["tls"]["schema"]["enum"] == [None, *TLS_MODES]


def test_ssl_options_leave_check_hostname_to_the_mode() -> None:
    extras = parse_extras({"ssl": {"ca": "/ca.pem", "check_hostname": False}, "ssl_cert": "/c.pem"})
    assert extras.ssl_options() == {"ca": "/ca.pem", "cert": "/c.pem"}


def test_each_mode_builds_the_context_of_its_meaning(tmp_path: Path) -> None:
    import certifi

    ca = {"ca": certifi.where()}
    assert tls_context("disabled", {}) is None
    for mode in ("preferred", "required"):
        context = tls_context(mode, {})
        assert context is not None
        assert (context.verify_mode, context.check_hostname) == (ssl.CERT_NONE, False)
        assert tls_context(mode, {}) is context  # no files: made once per process
    verify_ca, verify_identity = tls_context("verify_ca", ca), tls_context("verify_identity", ca)
    assert verify_ca is not None
    assert verify_identity is not None
    assert (verify_ca.verify_mode, verify_ca.check_hostname) == (ssl.CERT_REQUIRED, False)
    assert (verify_identity.verify_mode, verify_identity.check_hostname) == (ssl.CERT_REQUIRED, True)


def test_a_missing_tls_file_is_a_tls_error_naming_the_file_and_the_machine(tmp_path: Path) -> None:
    missing = str(tmp_path / "ca.pem")
    with pytest.raises(TlsConnectionError) as raised:
        tls_context("verify_identity", {"ca": missing})
    assert raised.value.args[0] == 2026
    assert f"TLS (mode verify_identity) failed: cannot load the TLS files (ca={missing})" in str(raised.value)
    assert "must exist on every machine that connects (Airflow workers, and Spark executors" in str(
        raised.value
    )


def test_a_connection_applies_its_mode_to_pymysql() -> None:
    def connection(mode: str, **settings: object) -> LoginTimeoutConnection:
        return LoginTimeoutConnection(
            host="127.0.0.1", port=1, user="u", defer_connect=True, tls_mode=mode, **settings
        )

    assert not connection("disabled").ssl
    preferred = connection("preferred")
    assert preferred.ssl
    assert not preferred._ssl_required
    assert preferred.ctx is tls_context("preferred", {})
    required = connection("required")
    assert required.ssl
    assert required._ssl_required
    assert required.ctx.verify_mode == ssl.CERT_NONE


def test_a_tls_error_survives_pickling_between_processes() -> None:
    import pickle

    err = TlsConnectionError("verify_ca", "certificate verify failed: self-signed certificate")
    back = pickle.loads(pickle.dumps(err))
    assert (type(back), back.args, back.mode) == (TlsConnectionError, err.args, "verify_ca")
