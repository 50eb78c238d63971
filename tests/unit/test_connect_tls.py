"""The TLS contexts of source connections (``source.connect.LoginTimeoutConnection``)."""

from __future__ import annotations

import ssl

import pytest

from airflow_provider_binlog.source.connect import LoginTimeoutConnection


def _connection(**settings: object) -> LoginTimeoutConnection:
    return LoginTimeoutConnection(host="127.0.0.1", port=1, user="u", defer_connect=True, **settings)


def test_connections_without_tls_options_share_one_context_and_those_with_options_get_their_own() -> None:
    first, second = _connection(), _connection()
    if not first.ssl:
        pytest.skip("pymysql before 1.2 makes no TLS context for a connection without TLS options")
    assert first.ctx is second.ctx  # made once per process: loading the CA store took 17-40 ms a connection
    assert first.ctx.verify_mode == ssl.CERT_NONE  # pymysql's PREFERRED mode: no verification
    assert not first.ctx.check_hostname
    verified = _connection(ssl={"verify_mode": "required"})
    assert verified.ctx is not first.ctx
    assert verified.ctx.verify_mode == ssl.CERT_REQUIRED
    assert _connection(ssl={"verify_mode": "required"}).ctx is not verified.ctx
