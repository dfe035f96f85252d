# The commands the README and the manual name. Everything installs into .venv from the pinned requirements.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# The 1.x MCP client cannot share .venv with mcp 2.x: the interoperability test runs it from here.
MCP1_VENV := .venv-mcp1
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: install install-dev run test docs lint format bench unasync clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(VENV)/.installed: requirements.txt | $(BIN)/python
	$(BIN)/pip install --quiet -r requirements.txt
	touch $@

$(VENV)/.installed-dev: requirements.txt requirements-dev.txt | $(BIN)/python
	$(BIN)/pip install --quiet -r requirements-dev.txt
	touch $(VENV)/.installed $@

$(MCP1_VENV)/.installed: requirements-mcp1.txt
	$(PYTHON) -m venv $(MCP1_VENV)
	$(MCP1_VENV)/bin/pip install --quiet -r requirements-mcp1.txt
	touch $@

install: $(VENV)/.installed
install-dev: $(VENV)/.installed-dev $(MCP1_VENV)/.installed

# The web server, a Celery worker and beat on the embedded default (Procfile.dev, run by honcho) in development
# mode (DEBUG: the settings default to production), with
# console logs (honcho stamps the time); the logins and a curl come last, once everything answers.
# Ctrl-C stops all of them once: honcho forwards it to each process and waits for them. The recipe's shell
# traps the same SIGINT and exits 0 once honcho is done, so make reports no "Error 130" for a clean stop.
run: export DEBUG ?= true
run: export LOG_FORMAT ?= console
run: export LOG_TIMESTAMPS ?= false
run: install
	@$(BIN)/python manage.py migrate --noinput --verbosity 0
	@$(BIN)/python manage.py sync_tools --verbosity 0
	@$(BIN)/python manage.py seed_demo --verbosity 0
	@echo "Starting Toolgate on http://$(HOST):$(PORT)/ (web, worker, beat, MCP host); the demo's logins follow once it is ready."
	@trap 'exit 0' INT; PATH="$(CURDIR)/$(BIN):$$PATH" WEB_ADDRESS=$(HOST):$(PORT) PORT=$(PORT) $(BIN)/honcho -f Procfile.dev start

# Four pytest-xdist workers on two cores (the suite waits on servers, browsers and subprocesses much of the time),
# each with its own test database and Redis database (tests/support/xdist_services.py;
# `python -m` puts the tree on sys.path for `-p`). `loadfile` hands out whole files in collection order, so the
# browser tests still run last in their worker: Playwright's session browser keeps an event loop running there.
# PYTEST_ARGS narrows a run (CI: `--engine-sensitive` on the embedded default; tests/conftest.py says which).
test: install-dev
	$(BIN)/python -m pytest -p tests.support.xdist_services --numprocesses 4 --dist loadfile $(PYTEST_ARGS)

# The manual (docs/, mkdocs.yml) on http://127.0.0.1:8001, rebuilt as pages, settings or .env.example change.
# `make test` builds it with --strict (tests/arch/test_docs_site.py), so a broken link fails the suite.
docs: export NO_MKDOCS_2_WARNING ?= 1
docs: install-dev
	$(BIN)/mkdocs serve --dev-addr 127.0.0.1:8001

lint: install-dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy runner

format: install-dev
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

# Needs PostgreSQL and Redis (DATABASE_URL / REDIS_URL, defaults on 127.0.0.1); installs wrk when missing.
bench: export DEBUG ?= true
bench: install-dev
	$(BIN)/python -m bench.machine
	$(BIN)/python -m bench.runner_overhead
	$(BIN)/python -m bench.exec_throughput
	$(BIN)/python -m bench.exec_cost
	$(BIN)/python -m bench.mcp_vs_rest
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python -m bench.mcp_gateway
	$(BIN)/python -m bench.refresh_scale
	$(BIN)/python -m bench.audit_scale
	$(BIN)/python -m bench.tool_search
	$(BIN)/python -m bench.http_clients

# The blocking HTTP/1.1 pool and fetch loop are generated from their async sources (runner/http1/unasync.py).
unasync:
	$(BIN)/python -m runner.http1.unasync

clean:
	rm -rf $(VENV) $(MCP1_VENV) .pytest_cache .ruff_cache .mypy_cache
