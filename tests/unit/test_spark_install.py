from __future__ import annotations

from pathlib import Path

import pytest

from airflow_provider_binlog.operators.spark import pyspark_install_problem


def fake_pyspark(root: Path, python_version: str, jar_version: str | None) -> Path:
    (root / "bin").mkdir(parents=True)
    (root / "bin" / "spark-class").write_text("")
    (root / "jars").mkdir()
    (root / "version.py").write_text(f'__version__: str = "{python_version}"\n')
    if jar_version is not None:
        (root / "jars" / f"spark-core_2.13-{jar_version}.jar").write_bytes(b"")
    return root


def test_matching_python_files_and_jars_are_fine(tmp_path: Path) -> None:
    assert pyspark_install_problem(str(fake_pyspark(tmp_path, "4.3.0", "4.3.0"))) is None


def test_a_pyspark_client_without_jars_is_not_a_spark_installation_to_check(tmp_path: Path) -> None:
    assert pyspark_install_problem(str(fake_pyspark(tmp_path, "4.2.0", None))) is None


@pytest.mark.parametrize(("python_version", "jar_version"), [("4.2.0", "4.3.0"), ("4.3.0", "4.2.1")])
def test_mixed_releases_name_the_one_command_that_fixes_them(
    tmp_path: Path, python_version: str, jar_version: str
) -> None:
    problem = pyspark_install_problem(str(fake_pyspark(tmp_path, python_version, jar_version)))
    assert problem is not None
    assert f"Python files of pyspark {python_version} beside the JVM jars of Spark {jar_version}" in problem
    assert problem.endswith(f"pip install --force-reinstall --no-deps pyspark=={jar_version}")
