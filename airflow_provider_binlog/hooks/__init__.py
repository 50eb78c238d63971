"""Hooks of the binlog provider."""

from __future__ import annotations

from airflow_provider_binlog.hooks.binlog import BinlogHook

__all__ = ["BinlogHook"]
