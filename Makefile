# The commands the README names. Everything installs into .venv from the pinned requirements.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: install install-dev run test lint format bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(VENV)/.installed: requirements.txt | $(BIN)/python
	$(BIN)/pip install --quiet -r requirements.txt
	touch $@

$(VENV)/.installed-dev: requirements.txt requirements-dev.txt | $(BIN)/python
	$(BIN)/pip install --quiet -r requirements-dev.txt
	touch $(VENV)/.installed $@

install: $(VENV)/.installed
install-dev: $(VENV)/.installed-dev

# The web server, a Celery worker and beat on the embedded default; Ctrl-C stops all three.
run: install
	$(BIN)/python manage.py migrate --noinput
	$(BIN)/python manage.py sync_tools
	$(BIN)/python manage.py seed_demo --base-url http://$(HOST):$(PORT)
	@trap 'kill 0' INT TERM EXIT; \
	$(BIN)/celery -A config worker --pool=solo --loglevel=INFO & \
	$(BIN)/celery -A config beat --loglevel=INFO & \
	$(BIN)/python manage.py runserver $(HOST):$(PORT)

test: install-dev
	$(BIN)/pytest

lint: install-dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy runner

format: install-dev
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

bench: install-dev
	$(BIN)/python -m bench.runner_overhead
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python -m bench.mcp_gateway

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .mypy_cache
