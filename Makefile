# Quick start: `make demo` runs the example CDC DAG end to end on a private MariaDB; `make test` runs
# lint, types, the import-layer contracts (pyproject.toml [tool.importlinter]), the documentation build and
# the whole test suite (unit, integration against a private MariaDB + local Spark, system tests of the
# example DAG, the wheel installed into a fresh venv).
.PHONY: setup demo test lint docs unit benchmark clean

VENV := .venv
PY := $(VENV)/bin/python

setup: $(VENV)/.setup-done

$(VENV)/.setup-done: pyproject.toml scripts/setup.sh
	bash scripts/setup.sh

demo: setup
	$(PY) scripts/demo.py

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

# The how-to pages include the example DAGs by their [START howto_...] markers; warnings (a broken link,
# a marker that moved) fail the build.
docs: setup
	$(VENV)/bin/sphinx-build -W --keep-going -q -b html docs docs/_build/html

test: lint docs
	$(PY) -m pytest -p no:cacheprovider -n 2 --dist loadfile --no-loadscope-reorder --durations=40 tests

unit: setup
	$(PY) -m pytest -p no:cacheprovider tests/unit

benchmark: setup
	WITH_SYSBENCH=1 bash scripts/setup.sh
	$(PY) benchmarks/extract_throughput.py

clean:
	rm -rf $(VENV) .work docs/_build dist
