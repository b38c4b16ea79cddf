# Two commands do all the set-up on a fresh machine: `make run` and `make test`.
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
HOST ?= 127.0.0.1
PORT ?= 8000
export HOST PORT

.PHONY: install run test lint typecheck format migrate admin worker clean bench chromium prometheus \
	haproxy container-tools image-base image image-test

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	touch $@

install: $(VENV)/.installed

migrate: install
	$(BIN)/python manage.py migrate --noinput

admin: migrate
	$(BIN)/python manage.py bootstrap_admin

# Migrates, creates the first admin when there is none, collects the static files when they changed
# (`manage.py prepare`, one process), and serves the gateway with Daphne on $(HOST):$(PORT), with a
# Celery worker (beat and the audit ingest in it) beside it. Ctrl-C or SIGTERM stops both, the
# server draining its requests first (docs/operations.md, "Stopping").
run: install
	GATEWAY_BIN_DIR=$(BIN) scripts/run.sh

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# The type checker over what [tool.mypy] in pyproject.toml lists (apps/proxy and every app's services).
typecheck: install
	$(BIN)/mypy

format: install
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

# The suite on every core (a test module stays on one worker, with its live servers; the slow modules
# first, in tests/conftest.py's order; the 25 slowest tests are listed, to keep the whole under ten
# minutes), then the
# browser tests in their own process (tests/e2e/conftest.py says why).
test: lint typecheck chromium prometheus haproxy
	$(BIN)/python -m pytest -n auto --dist loadfile --no-loadscope-reorder --durations=25
	$(BIN)/python -m pytest tests/e2e

# Debian's chromium for the browser tests; installed when missing and we are root.
chromium:
	@command -v chromium >/dev/null || { test "$$(id -u)" = 0 && \
		{ apt-get install -y -q chromium >/dev/null 2>&1 || \
		  { apt-get update -q >/dev/null && apt-get install -y -q chromium >/dev/null; }; }; } || \
		{ echo "The browser tests need Debian's chromium: sudo apt-get install -y chromium"; exit 1; }

# Debian's prometheus and promtool for tests/observability/test_prometheus.py (a real Prometheus
# scrapes a live gateway, loads deploy/observability/alerts.yml and runs the dashboard's queries);
# installed when missing and we are root. The package's own service is not needed: the tests start
# prometheus themselves, on a free loopback port.
prometheus:
	@{ command -v prometheus && command -v promtool; } >/dev/null || { test "$$(id -u)" = 0 && \
		{ apt-get install -y -q --no-install-recommends prometheus >/dev/null 2>&1 || \
		  { apt-get update -q >/dev/null && \
		    apt-get install -y -q --no-install-recommends prometheus >/dev/null; }; }; } || \
		{ echo "The Prometheus tests need Debian's prometheus: sudo apt-get install -y prometheus"; exit 1; }

# Debian's haproxy for tests/test_two_nodes.py (two gateway nodes behind a local balancer); installed
# when missing and we are root. The tests start it themselves, on a free loopback port.
haproxy:
	@command -v haproxy >/dev/null || { test "$$(id -u)" = 0 && \
		{ apt-get install -y -q --no-install-recommends haproxy >/dev/null 2>&1 || \
		  { apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends haproxy >/dev/null; }; }; } || \
		{ echo "The two-node tests need Debian's haproxy: sudo apt-get install -y haproxy"; exit 1; }

# The gateway's overhead against a zero-latency upstream (bench/run.py): prints a table and rewrites
# the generated block of docs/benchmarks.md. Eight to nine minutes with the start-up, memory and soak
# cases (BENCH_FOOTPRINT=0 and BENCH_SOAK_REQUESTS=0 skip them); needs wrk (installed when root).
# `python -m bench.compare <ref>...` measures several commits side by side in one run.
bench: install
	@test -x $(BIN)/py-spy || $(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[dev,bench]'
	$(BIN)/python -m bench.run
	$(BIN)/python -m bench.writer

# The container image (Dockerfile), built with podman (docs/deployment.md, "The image"). Where the
# official python:3.11-slim-bookworm cannot be pulled (these machines reach no image registry), the
# base is Debian bookworm with Python 3.11 made here with mmdebstrap: BASE_IMAGE=python:3.11-slim-bookworm
# builds on the official one instead. podman, runc and mmdebstrap are installed when missing and we are
# root; runc and cgroupfs because crun refuses this machine's cgroups (/etc/containers/containers.conf
# is written only when there is none).
IMAGE ?= localhost/llm-gateway:dev
LOCAL_BASE := localhost/debian-python:bookworm
BASE_IMAGE ?= $(LOCAL_BASE)
CA_BUNDLE := /etc/ssl/certs/ca-certificates.crt

container-tools:
	@{ command -v podman && command -v mmdebstrap && command -v runc; } >/dev/null || { test "$$(id -u)" = 0 && \
		{ apt-get install -y -q podman runc mmdebstrap >/dev/null 2>&1 || \
		  { apt-get update -q >/dev/null && apt-get install -y -q podman runc mmdebstrap >/dev/null; }; }; } || \
		{ echo "The image needs podman, runc and mmdebstrap: sudo apt-get install -y podman runc mmdebstrap"; exit 1; }
	@test -e /etc/containers/containers.conf || { test "$$(id -u)" = 0 && mkdir -p /etc/containers && \
		printf '[containers]\ndefault_ulimits = []\n\n[engine]\ncgroup_manager = "cgroupfs"\nruntime = "runc"\n' \
		> /etc/containers/containers.conf; } || true

image-base: container-tools
	@if [ "$(BASE_IMAGE)" = "$(LOCAL_BASE)" ] && ! podman image exists $(LOCAL_BASE); then \
		rootfs=$$(mktemp -d) && \
		mmdebstrap --quiet --variant=minbase --include=python3,python3-venv,ca-certificates bookworm \
			"$$rootfs/rootfs.tar" && \
		podman import --quiet "$$rootfs/rootfs.tar" $(LOCAL_BASE) >/dev/null; status=$$?; \
		rm -rf "$$rootfs"; exit $$status; \
	fi

image: image-base
	podman build --quiet --format docker --network=host \
		$$(test -f $(CA_BUNDLE) && echo "--volume=$(CA_BUNDLE):$(CA_BUNDLE):ro") \
		--build-arg BASE_IMAGE=$(BASE_IMAGE) --tag $(IMAGE) .
	@podman image inspect $(IMAGE) --format 'Image $(IMAGE): {{.Size}} bytes'

# Builds the image and runs it against the local PostgreSQL and Redis (tests/image); .ci/run calls it.
image-test: install image
	GATEWAY_TEST_IMAGE=$(IMAGE) $(BIN)/python -m pytest tests/image

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
