# The two commands of the README: `make dev` runs signoff, `make test` runs the tests.
# Both create .venv and install the project from this repo's own files on first use.
PY ?= python3.11
VENV := .venv
STAMP := $(VENV)/.installed

$(STAMP): pyproject.toml
	test -x $(VENV)/bin/python || $(PY) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e '.[test]'
	touch $(STAMP)

.PHONY: install dev test bench
install: $(STAMP)

dev: $(STAMP)
	$(VENV)/bin/signoff dev

test: $(STAMP)
	./scripts/ensure-postgres
	./scripts/ensure-agui-client
	./scripts/ensure-chromium
	$(VENV)/bin/python -m pytest --durations=25 $(PYTEST_ARGS)

bench: $(STAMP)
	./scripts/ensure-postgres
	$(VENV)/bin/python bench/store.py
	$(VENV)/bin/python bench/overhead.py
	$(VENV)/bin/python bench/suspended.py
