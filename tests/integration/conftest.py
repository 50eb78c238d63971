"""Fixtures of the integration tests' merges: a staging root and a target root per test."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def staging(tmp_path: Path) -> Path:
    """The test's staging root (windows are staged under ``<staging>/<pipeline>/window=<seq>``)."""
    return tmp_path / "staging"


@pytest.fixture
def target(tmp_path: Path) -> str:
    """The test's target root (table ``db.t`` is merged into ``<target>/db/t``)."""
    return str(tmp_path / "target")
