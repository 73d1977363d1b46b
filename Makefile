# The two commands of the README: `make dev` runs signoff, `make test` runs the tests.
# Both create .venv on first use: `make dev` installs signoff alone, `make test` adds the test
# tools. What pip says goes to .venv/install.log, shown only when it fails.
# Any Python 3.11 or newer: the first of these on PATH (or PY=/path/to/python).
PY ?= $(shell for p in python3.11 python3.12 python3.13 python3.14 python3; do \
	command -v $$p >/dev/null 2>&1 && $$p -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null \
	&& { echo $$p; break; }; done)
VENV := .venv
# The suite waits on Temporal and subprocesses as much as it computes: one worker more than cores
# (pytest-xdist; each worker has its own Temporal dev server and PostgreSQL database).
TEST_WORKERS ?= $(shell $(PY) -c 'import os; print((os.cpu_count() or 1) + 1)' 2>/dev/null || echo 2)
RUNTIME := $(VENV)/.installed
TESTING := $(VENV)/.installed-test
PIP = $(VENV)/bin/pip install -q --disable-pip-version-check

$(VENV)/bin/python:
	@test -n "$(PY)" || { echo "signoff needs Python 3.11 or newer (python3.11, python3.12, ... or PY=/path/to/python)"; exit 1; }
	@$(PY) -m venv $(VENV)

$(RUNTIME): pyproject.toml $(VENV)/bin/python
	@echo "Installing signoff into $(VENV) (first run: a minute) ..."
	@$(PIP) -e . > $(VENV)/install.log 2>&1 || { cat $(VENV)/install.log; exit 1; }
	@touch $(RUNTIME)

$(TESTING): $(RUNTIME)
	@$(PIP) -e '.[test]' > $(VENV)/install.log 2>&1 || { cat $(VENV)/install.log; exit 1; }
	@touch $(TESTING)

.PHONY: install dev test test-deep bench
install: $(TESTING)

dev: $(RUNTIME)
	@$(VENV)/bin/signoff dev

test: $(TESTING)
	./scripts/ensure-postgres
	./scripts/ensure-agui-client
	./scripts/ensure-chromium
	@# Bytecode once, before the workers and the hundreds of `signoff` processes the tests start
	@# (each would compile the modules it imports again where PYTHONDONTWRITEBYTECODE is set, as on
	@# many CI images; pytest's rewritten test modules are cached only where it is unset).
	@$(VENV)/bin/python -m compileall -q -j 0 -x '/node_modules/' engine activities workflows api service signoff tests > /dev/null
	PYTHONDONTWRITEBYTECODE= $(VENV)/bin/python -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=25 $(PYTEST_ARGS)

# The races at their full counts (a quarter in `make test`: docs/testing.md), before a release or
# after a change to a claim, a lock or the decision path.
test-deep:
	SIGNOFF_TEST_RACE_SCALE=1 $(MAKE) test

bench: $(TESTING)
	./scripts/ensure-postgres
	$(VENV)/bin/python bench/store.py
	$(VENV)/bin/python bench/overhead.py
	$(VENV)/bin/python bench/suspended.py
