# Serving Lab: `make run` sets up and starts the lab; `make test` sets up and runs every test.
.PHONY: setup run check test test-fast clean-data

PY := .venv/bin/python

setup:
	scripts/setup.sh

run: setup
	$(PY) -m lab start

# ruff (lint and format) and mypy over the whole tree: any finding fails.
check: setup
	scripts/check.sh

# The static checks, the fast tier in a shuffled order (pytest-randomly; its seed is printed
# at the top, `-p randomly --randomly-seed=N` replays it), then the real-process tiers in file
# order (they share one instance of each slow service, stopped by the runs_last test at the end).
test: setup
	scripts/check.sh
	$(PY) -m pytest -m "not integration and not browser"
	$(PY) -m pytest -p no:randomly -m "integration or browser"

# On every change: no process, no network, no sleep.
test-fast: setup
	$(PY) -m pytest -m "not integration and not browser"
