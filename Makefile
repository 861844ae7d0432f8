# Two commands on a fresh machine: `make run` and `make test` (see README.md).
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
PORT ?= 8761
JS_DIR := tests/interop/js

.PHONY: run stack test test-fast lint check install clean bench system-deps superuser helm-tools kubernetes docs docs-serve

# setuptools tells of every editable install that a folder named like a package may shadow it: true of
# any editable install, and nothing to act on here.
$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	PYTHONWARNINGS="ignore:Editable installation:UserWarning" $(BIN)/pip install --quiet -e '.[dev]'
	touch $@

install: $(BIN)/.installed

# Where collectstatic writes (Docker, systemd) and whitenoise looks at start (it warns when the folder is
# missing). The target is the folder itself, so it is made even where var/ exists already (a test run,
# `make bench` or `make kubernetes` makes var/ too).
STATIC := var/staticfiles

$(STATIC):
	mkdir -p $@

# A node on another port keeps its own database: `PORT=8762 EUREKA_PEER_URLS=... make run` beside a
# first node is a two-node cluster (docs/clusters.md).
DATA_DIR ?= $(if $(filter 8761,$(PORT)),var,var/node-$(PORT))

run: install $(STATIC)
	mkdir -p $(DATA_DIR)
	EUREKA_DATA_DIR=$(DATA_DIR) $(BIN)/python manage.py migrate --noinput
	EUREKA_DATA_DIR=$(DATA_DIR) $(BIN)/gunicorn -c deploy/gunicorn.conf.py --bind 0.0.0.0:$(PORT)

# The first admin account (asks for a name and a password; there is no default one).
superuser: install $(STATIC)
	$(BIN)/python manage.py migrate --noinput
	$(BIN)/python manage.py createsuperuser

# Production topology in the foreground, without Docker: Redis (started if none answers at REDIS_URL),
# gunicorn, Celery worker and Celery beat, reading deploy/.env if present. See deploy/stack.sh.
# `make stack READERS=2` adds a reader with 2 workers on READER_PORT (default PORT + 19: 8780).
# `make stack MESH=1` adds the mesh process (manage.py mesh): xDS on PORT + 10000 (18761), DNS on
# PORT - 161 (8600), unless EUREKA_XDS_PORT / EUREKA_DNS_PORT say otherwise.
READERS ?= $(or $(STACK_READERS),0)
MESH ?= $(or $(STACK_MESH),0)

stack: install $(STATIC)
	PORT=$(PORT) STACK_READERS=$(READERS) STACK_MESH=$(MESH) bash deploy/stack.sh

lint: install
	$(BIN)/ruff check .

# The documentation site (mkdocs.yml, pages in docs/) built into site/. --strict fails on a broken link or
# anchor and on a page left out of the navigation; not --quiet, which hides the warnings strict counts.
# NO_MKDOCS_2_WARNING silences Material's banner about MkDocs 2, printed at every build.
MKDOCS := NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs

docs: install
	$(MKDOCS) build --strict

docs-serve: install
	$(MKDOCS) serve

check: install $(STATIC)
	$(BIN)/python manage.py check
	$(BIN)/python manage.py makemigrations --check --dry-run

$(JS_DIR)/node_modules/.installed: $(JS_DIR)/package.json $(JS_DIR)/package-lock.json
	@if command -v npm >/dev/null 2>&1; then \
		cd $(JS_DIR) && npm ci --silent --no-audit --no-fund && touch node_modules/.installed; \
	else echo "npm not found: the eureka-js-client suite will be skipped (install Node.js 18+ to run it)"; fi

# The integration tests need redis-server (missing = make test fails), the browser test Debian's
# Chromium, the readers' routing test nginx and the DNS interface's tests dig (bind9-dnsutils)
# (missing = those skip, or fail under CI). All are installed when we may (root + apt).
system-deps:
	@missing=""; \
	command -v redis-server >/dev/null 2>&1 || missing="$$missing redis-server"; \
	{ command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; } || missing="$$missing chromium"; \
	{ command -v nginx >/dev/null 2>&1 || test -x /usr/sbin/nginx; } || missing="$$missing nginx"; \
	command -v dig >/dev/null 2>&1 || missing="$$missing bind9-dnsutils"; \
	if [ -n "$$missing" ] && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "installing$$missing (Debian packages) for the integration, browser and DNS tests"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	elif [ -n "$$missing" ]; then \
		case "$$missing" in *chromium*) echo "chromium is missing: the browser test will be skipped (install it with 'sudo apt-get install chromium')";; esac; \
		case "$$missing" in *nginx*) echo "nginx is missing: the readers' nginx routing test will be skipped (install it with 'sudo apt-get install nginx')";; esac; \
		case "$$missing" in *bind9-dnsutils*) echo "dig is missing: the DNS interface's dig tests will be skipped (install it with 'sudo apt-get install bind9-dnsutils')";; esac; \
		case "$$missing" in *redis-server*) echo "redis-server is missing: install it with 'sudo apt-get install redis-server'"; exit 1;; esac; \
	fi

# helm v4 and the ServiceMonitor CRD (controller-gen), built from the Go module proxy into var/tools/
# once (deploy/helm/tools.py); without Go the chart's tests skip (fail under CI).
helm-tools: install
	@if command -v go >/dev/null 2>&1; then $(BIN)/python deploy/helm/tools.py build >/dev/null \
		|| echo "building helm or the ServiceMonitor CRD failed: tests/deploy/test_helm_chart.py will say why"; \
	else echo "go not found: the Helm chart's tests will be skipped (install Go 1.24+)"; fi

# deploy/kubernetes/eureka.yaml: the Helm chart rendered with its defaults (docs/kubernetes.md).
kubernetes: helm-tools
	$(BIN)/python deploy/helm/tools.py render

# pytest-xdist: the tests run in TEST_WORKERS processes, each taking one test module at a time
# (tests/conftest.py). Most of a live test's time is spent waiting (heartbeat intervals, clients'
# fetch timers, JVMs booting), so more processes than cores pay (docs/tests.md). The few tests held
# to a latency or CPU bound (marked serial) run after the others, alone.
TEST_WORKERS ?= 4

# Every suite: the real-client suites of tests/interop run against gunicorn and against granian.
test: install lint check system-deps helm-tools $(JS_DIR)/node_modules/.installed
	$(MKDOCS) build --strict
	$(BIN)/pytest -n $(TEST_WORKERS) -m "not serial"
	$(BIN)/pytest -m serial

# The inner loop: unit and API tests, no server process started (docs/tests.md).
NOT_LIVE = not (live or interop or integration or cluster or browser)

test-fast: install $(STATIC) helm-tools
	$(BIN)/pytest -n $(TEST_WORKERS) -m "$(NOT_LIVE) and not serial"
	$(BIN)/pytest -m "$(NOT_LIVE) and serial"

# `make bench` is the heartbeats-and-fetches benchmark on a node it starts; `make bench BENCH=readers
# BENCH_ARGS="--rounds 1"` runs another (bench/run.py --list names them; bench/README.md).
BENCH ?= phases
BENCH_ARGS ?= $(if $(filter phases,$(BENCH)),--start --runs 3)

bench: install
	$(BIN)/python bench/run.py $(BENCH) $(BENCH_ARGS)

clean:
	rm -rf $(VENV) var site .pytest_cache
