"""Fixtures shared by the unit tests."""

from __future__ import annotations

import pytest


class ParseTimeAccess(AssertionError):
    pass


@pytest.fixture
def no_io_at_parse_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make any connection, Variable or database access during parsing fail loudly."""
    import pymysql
    from airflow.sdk import BaseHook, Variable

    def forbidden(*args: object, **kwargs: object) -> None:
        raise ParseTimeAccess(f"parsing touched {args!r}")

    monkeypatch.setattr(BaseHook, "get_connection", classmethod(forbidden))
    monkeypatch.setattr(Variable, "get", staticmethod(forbidden))
    monkeypatch.setattr(pymysql, "connect", forbidden)
