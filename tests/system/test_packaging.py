"""The package a user installs: a wheel built from this tree, installed into a fresh virtualenv.

CI runs this on every change: ``python -m build`` must produce a wheel and an sdist with complete
metadata, and the wheel with its ``spark`` extra must install into an empty virtualenv, register the
provider with Airflow and end with a pyspark whose Python files and jars are one release (or name the
one command that makes them so).
"""

from __future__ import annotations

import email
import json
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from airflow_provider_binlog import __version__

REPO = Path(__file__).resolve().parents[2]
UV = shutil.which("uv", path=str(Path(sys.executable).parent)) or shutil.which("uv")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(UV is None, reason="uv is not installed (make setup installs it into .venv)"),
]


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Build as a release does: the sdist, then the wheel from the unpacked sdist (no build/ in the tree)."""
    out = tmp_path_factory.mktemp("dist")
    build_env = {**os.environ, "PATH": f"{Path(UV or '').parent}{os.pathsep}{os.environ['PATH']}"}
    subprocess.run(
        [
            sys.executable,
            "-m",
            "build",
            "--installer",
            "uv",
            "--outdir",
            str(out),
            str(REPO),
        ],
        check=True,
        capture_output=True,
        env=build_env,
    )
    return out


def test_wheel_metadata_names_the_project_its_licence_and_urls(dist: Path) -> None:
    (wheel,) = dist.glob("*.whl")
    assert wheel.name == f"airflow_provider_binlog-{__version__}-py3-none-any.whl"
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        info = f"airflow_provider_binlog-{__version__}.dist-info"
        meta = email.message_from_bytes(archive.read(f"{info}/METADATA"))
        entry_points = archive.read(f"{info}/entry_points.txt").decode()
    assert meta["Name"] == "airflow-provider-binlog"
    assert meta["Version"] == __version__
    assert meta["License-Expression"] == "Apache-2.0"
    assert f"{info}/licenses/LICENSE" in names
    assert meta["Author"] == "airflow-provider-binlog contributors"
    urls = dict(u.split(", ", 1) for u in meta.get_all("Project-URL"))
    assert set(urls) == {"Homepage", "Documentation", "Source", "Changelog"}
    assert "get_provider_info:get_provider_info" in entry_points
    assert "airflow_provider_binlog/py.typed" in names
    assert "airflow_provider_binlog/jobs/merge/job.py" in names, "the bundled Spark jobs travel in the wheel"
    tables = [n for n in names if n.startswith("airflow_provider_binlog/extract/charset_tables/")]
    assert "airflow_provider_binlog/extract/charset_tables/big5.json.gz" in tables  # package data (ADR 0032)
    assert len(tables) == 33
    assert not [n for n in names if n.startswith(("tests/", "example_dags/", "benchmarks/"))]


def test_sdist_carries_the_example_dags_docs_and_changelog(dist: Path) -> None:
    (sdist,) = dist.glob("*.tar.gz")
    with tarfile.open(sdist) as archive:
        names = {n.split("/", 1)[1] for n in archive.getnames() if "/" in n}
    assert {"CHANGELOG.md", "LICENSE", "README.md", "example_dags/binlog_cdc.py", "docs/index.md"} <= names


def test_wheel_installs_into_a_fresh_venv_and_registers_the_provider(dist: Path, tmp_path: Path) -> None:
    (wheel,) = dist.glob("*.whl")
    venv = tmp_path / "venv"
    subprocess.run([UV, "venv", "-q", "--python", sys.executable, str(venv)], check=True)
    python = str(venv / "bin" / "python")
    subprocess.run([UV, "pip", "install", "-q", "--python", python, f"{wheel}[spark]"], check=True)

    def run(code: str) -> str:
        env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "AIRFLOW_HOME": str(tmp_path / "airflow")}
        done = subprocess.run([python, "-c", code], check=True, capture_output=True, text=True, env=env)
        return done.stdout.strip()

    check = (
        "from airflow_provider_binlog.operators.spark import pyspark_install_problem as p; print(p() or '')"
    )
    assert run(check) == ""
    # What pip did to a user: pyspark-client (the Spark provider's dependency) installed over pyspark.
    subprocess.run(
        [UV, "pip", "install", "-q", "--python", python, "--reinstall", "--no-deps", "pyspark-client==4.2.0"],
        check=True,
    )
    problem = run(check)
    assert "Python files of pyspark 4.2.0 beside the JVM jars of Spark 4.3.0" in problem
    command = problem.split("make them one release with: ", 1)[1].split()
    assert command == ["pip", "install", "--force-reinstall", "--no-deps", "pyspark==4.3.0"]
    subprocess.run([UV, *command[:2], "-q", "--python", python, *command[2:]], check=True)
    assert run(check) == ""
    provider = json.loads(
        run(
            "import json; from airflow.providers_manager import ProvidersManager as M; "
            "p = M().providers['airflow-provider-binlog']; "
            "print(json.dumps({'version': p.version, 'docs': p.data['documentation-url']}))"
        )
    )
    assert provider == {
        "version": __version__,
        "docs": "https://github.com/airflow-provider-binlog/airflow-provider-binlog/tree/main/docs",
    }
    run("from airflow_provider_binlog.operators import BinlogExtractOperator, BinlogMergeOperator")
