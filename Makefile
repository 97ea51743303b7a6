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

# Python's bytecode and pytest's rewritten test modules are cached between runs even where the
# shell sets PYTHONDONTWRITEBYTECODE (without the cache, collecting the tests alone takes 24 s).
TEST := env -u PYTHONDONTWRITEBYTECODE $(PY) -m pytest
FAST_TESTS := tests/unit tests/ui -m "not integration and not browser and not model"

# The static checks; the process-free tier (with the torch tests) on two workers in a shuffled
# order (pytest-randomly prints its seed; `-p randomly --randomly-seed=N` replays it); then the
# real-process tiers on three workers, in file order. Workers share the slow services by xdist
# group: each service runs once, on the worker that holds its tests (tests/conftest.py). The few
# tests that judge their own timing (p99 lateness, p99 under a hostile body) run last, alone.
test: setup
	scripts/check.sh
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict
	$(TEST) -n 2 --dist loadgroup -m "not integration and not browser"
	$(TEST) -n 3 --dist loadgroup -p no:randomly -m "(integration or browser) and not timing"
	$(TEST) -p no:randomly -m "timing"

# On every change: no process, no network, no torch.
test-fast: setup
	$(TEST) -n 2 --dist loadgroup $(FAST_TESTS)

# The documentation site (mkdocs.yml) into site/, strictly: a broken link or a missing page fails.
.PHONY: docs results
docs: setup results
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict

# The results page and the records index, rendered from docs/benchmarks/ and docs/records/.
results: setup
	$(PY) scripts/render_results.py
