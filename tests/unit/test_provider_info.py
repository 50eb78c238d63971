from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from airflow_provider_binlog import __version__
from airflow_provider_binlog.get_provider_info import get_provider_info


def test_provider_info_names_what_the_package_ships() -> None:
    info = get_provider_info()
    assert info["package-name"] == "airflow-provider-binlog"
    assert info["versions"] == [__version__]
    assert info["connection-types"] == [
        {
            "connection-type": "mysql_binlog",
            "hook-class-name": "airflow_provider_binlog.hooks.binlog.BinlogHook",
        }
    ]
    modules = [m for group in info["operators"] for m in group["python-modules"]]
    for module in modules + info["hooks"][0]["python-modules"]:
        __import__(module)


def test_airflow_lists_the_provider() -> None:
    airflow = Path(sys.executable).parent / "airflow"
    listing = subprocess.run(
        [str(airflow), "providers", "list", "--output", "plain"],
        capture_output=True,
        text=True,
        check=True,
        env=os.environ.copy(),
    ).stdout
    assert "airflow-provider-binlog" in listing
    assert __version__ in listing
