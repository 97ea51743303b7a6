# Serving Lab: `make run` sets up and starts the lab; `make test` sets up and runs every test.
.PHONY: setup run test test-fast clean-data

PY := .venv/bin/python

setup:
	scripts/setup.sh

run: setup
	$(PY) -m lab start

test: setup
	$(PY) -m pytest

test-fast: setup
	$(PY) -m pytest -m "not integration and not browser"
