"""A pipeline-state store in memory, for tests of the state document without an Airflow metadata database."""

from __future__ import annotations

from collections.abc import Mapping


class DictStore:
    """Variables in a dict: the get/set contract of Airflow Variables (``pipeline.state.VariableStore``).

    :param data: the stored texts to start with, ``{key: text}``.
    :ivar data: ``{key: stored text}``; tests read and change it to play another writer.
    """

    def __init__(self, data: Mapping[str, str] | None = None) -> None:
        self.data: dict[str, str] = dict(data or {})

    def get(self, key: str) -> str | None:
        """Return the text stored under ``key``, None when there is none."""
        return self.data.get(key)

    def set(self, key: str, value: str) -> None:
        """Store ``value`` under ``key``, replacing what was there."""
        self.data[key] = value
