# Two commands on a fresh machine: `make run` and `make test` (see README.md).
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
PORT ?= 8761
JS_DIR := tests/interop/js

.PHONY: run stack test lint check install clean bench redis-server

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

install: $(BIN)/.installed

# var/staticfiles is where collectstatic writes (Docker, systemd); whitenoise serves it when present.
var:
	mkdir -p var/staticfiles

run: install var
	$(BIN)/python manage.py migrate --noinput
	$(BIN)/gunicorn -c deploy/gunicorn.conf.py --bind 0.0.0.0:$(PORT)

# Production topology in the foreground, without Docker: Redis (started if none answers at REDIS_URL),
# gunicorn, Celery worker and Celery beat, reading deploy/.env if present. See deploy/stack.sh.
stack: install var
	PORT=$(PORT) bash deploy/stack.sh

lint: install
	$(BIN)/ruff check .

check: install var
	$(BIN)/python manage.py check
	$(BIN)/python manage.py makemigrations --check --dry-run

$(JS_DIR)/node_modules/.installed: $(JS_DIR)/package.json $(JS_DIR)/package-lock.json
	@if command -v npm >/dev/null 2>&1; then \
		cd $(JS_DIR) && npm ci --silent --no-audit --no-fund && touch node_modules/.installed; \
	else echo "npm not found: the eureka-js-client suite will be skipped (install Node.js 18+ to run it)"; fi

# The integration tests start a real redis-server: install it when missing and we may (root + apt).
redis-server:
	@command -v redis-server >/dev/null 2>&1 || { \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
			echo "installing redis-server (Debian package) for the integration tests"; \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server; \
		else \
			echo "redis-server is missing: install it with 'sudo apt-get install redis-server'"; exit 1; \
		fi; }

test: install lint check redis-server $(JS_DIR)/node_modules/.installed
	$(BIN)/pytest

bench: install
	bash bench/run.sh --start --runs 3

clean:
	rm -rf $(VENV) var .pytest_cache
