# Quick start: `make demo` runs the example CDC DAG end to end on a private MariaDB; `make test` runs
# lint, types, the import-layer contracts (pyproject.toml [tool.importlinter]) and the whole test suite
# (unit, integration against a private MariaDB + local Spark, system tests of the example DAG).
.PHONY: setup demo test lint unit benchmark clean

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

test: lint
	$(PY) -m pytest -p no:cacheprovider -n 2 --dist loadfile --durations=25 tests

unit: setup
	$(PY) -m pytest -p no:cacheprovider tests/unit

benchmark: setup
	WITH_SYSBENCH=1 bash scripts/setup.sh
	$(PY) benchmarks/extract_throughput.py

clean:
	rm -rf $(VENV) .work
