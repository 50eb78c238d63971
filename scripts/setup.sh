#!/usr/bin/env bash
# Set up everything `make demo` and `make test` need on a fresh Debian/Ubuntu machine:
# system packages (MariaDB server if none, Java 17, docker-compose for validating the compose file,
# percona-toolkit for the online schema change tests, the build dependencies of mysqlclient),
# a .venv with the provider and its test extras, and the pinned pyspark/JVM pair.
set -euo pipefail
cd "$(dirname "$0")/.."

PYSPARK_VERSION=4.3.0
PYTHON=${PYTHON:-$(command -v python3.11 || command -v python3)}
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi

need_apt=()
if ! command -v mariadbd >/dev/null && ! command -v mysqld >/dev/null \
   && [ ! -x /usr/sbin/mariadbd ] && [ ! -x /usr/sbin/mysqld ]; then
  need_apt+=(mariadb-server mariadb-client)
fi
if ! command -v java >/dev/null; then need_apt+=(openjdk-17-jre-headless); fi
if ! command -v docker-compose >/dev/null; then need_apt+=(docker-compose); fi
if ! command -v pt-online-schema-change >/dev/null; then need_apt+=(percona-toolkit); fi  # tests of the online schema change cut-over
# mysqlclient (snapshot chunk reads) has no Linux wheels: its build needs a C compiler, pkg-config and the
# MariaDB Connector/C headers.
if ! command -v cc >/dev/null; then need_apt+=(gcc libc6-dev); fi
if ! command -v pkg-config >/dev/null; then need_apt+=(pkg-config); fi
if ! pkg-config --exists libmariadb 2>/dev/null && ! pkg-config --exists mysqlclient 2>/dev/null; then
  need_apt+=(libmariadb-dev)
fi
if [ "${WITH_SYSBENCH:-0}" = 1 ] && ! command -v sysbench >/dev/null; then need_apt+=(sysbench); fi
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "setup: installing Debian packages: ${need_apt[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
fi

if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv with $PYTHON"
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip uv
.venv/bin/uv pip install -q --compile-bytecode --python .venv/bin/python -e ".[test]"
# apache-airflow-providers-apache-spark depends on pyspark-client, which writes into the same
# `pyspark` package folder as pyspark and can leave Python files of another version beside the
# JVM jars. Reinstall the pinned pyspark last, then check that the pair matches.
.venv/bin/uv pip install -q --python .venv/bin/python --reinstall --no-deps --compile-bytecode "pyspark==${PYSPARK_VERSION}"
.venv/bin/python - <<PY
import sys
import pyspark.version
from airflow_provider_binlog.operators.spark import pyspark_home, pyspark_install_problem

if problem := pyspark_install_problem():
    sys.exit(f"setup: {problem}")
assert pyspark.version.__version__ == "${PYSPARK_VERSION}", f"pyspark is {pyspark.version.__version__}"
print(f"setup: pyspark {pyspark.version.__version__} with matching jars in {pyspark_home()}")
PY
java -version 2>&1 | head -1
touch .venv/.setup-done
