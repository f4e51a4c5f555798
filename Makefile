# agentlog: two commands for a new user -- `make demo` and `make test` (see README.md).
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
AGENTLOG := $(VENV)/bin/agentlog
BYTECODE_DIRS := runtime clients consumers analytics infra examples ui bench tools

.PHONY: setup system-packages up down demo demo-pydantic-ai test test-long lint unit docs bench bench-stages bench-sink bench-rebuild chaos fuzz compare compare-agents clean

$(VENV)/.installed: pyproject.toml
	@echo "agentlog setup: creating the virtualenv $(VENV) and installing agentlog with its dev tools (uv; seconds from its cache, a minute or two cold)"
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip uv
	@# uv resolves and installs what pip would, in parallel and linked from its cache; its summary is
	@# printed, not its line per package.
	@# --compile-bytecode: uv, unlike pip, leaves the dependencies' bytecode to the first import, and
	@# where PYTHONDONTWRITEBYTECODE is set that first import never writes it -- every process then
	@# compiles PydanticAI & co. from source (a worker's cold start 1.9 s instead of 0.9).
	set -o pipefail; $(VENV)/bin/uv pip install --compile-bytecode --python $(VENV)/bin/python -e '.[dev]' 2>&1 | { grep -v '^ [-+~] ' || true; }
	touch $@

# Debian packages the suite needs (infra/debian-packages.txt: Chromium for the UI's browser tests).
system-packages:
	tools/system_packages.sh

setup: $(VENV)/.installed system-packages
	@# The project's own modules (an editable install: imported from here), compiled where they
	@# changed, for the same reason.
	$(PY) -m compileall -q -j 0 $(BYTECODE_DIRS) > /dev/null

# Kafka (KRaft), PostgreSQL and the schema registry, started from this repository's files.
up: setup
	$(AGENTLOG) infra up
	$(AGENTLOG) schemas register

down:
	-$(AGENTLOG) infra down

demo: up
	$(PY) -m examples.demo

# The same refund agent written as a PydanticAI agent (examples/refund_pydantic_ai.py), same crash.
demo-pydantic-ai: up
	$(PY) -m examples.demo --pydantic-ai

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports
	$(PY) tools/check_cycles.py

unit: setup
	$(PY) -m pytest -m unit

# Sets everything up, starts the services, runs the suite but its long tier (pytest-xdist,
# TEST_WORKERS=4), stops the services and prints where the time went (tools/test_suite.sh).
test:
	VENV=$(VENV) TEST_MARK="not long" tools/test_suite.sh

# The long tier (tests/conftest.py LONG): its own clusters, stacks and browser, and the tests at
# scale. CI runs it after `make test`.
test-long:
	VENV=$(VENV) TEST_MARK=long tools/test_suite.sh

bench: up
	$(PY) bench/refund40.py

# Where one step's and one submit/result's time goes, per stage (median, p90): see bench/stages.py
# (WORKLOAD=sync: a step of the sync workload, bench/peers/workload.py).
bench-stages: up
	$(PY) bench/stages.py $(if $(RUNS),--runs $(RUNS)) $(if $(WORKLOAD),--workload $(WORKLOAD))

bench-sink: up
	$(PY) bench/sink.py

# Rebuild time with one run waiting behind 200,000 events of ended runs, vs none (EVENTS=1000000, OLD=<checkout>).
bench-rebuild: up
	$(PY) bench/rebuild.py --events $(or $(EVENTS),200000) $(if $(OLD),--old $(OLD))

# Faults on a 3-node cluster of its own (ports 27092-27094; the network row a second one behind
# proxies, 27400-27422), one table: see bench/chaos.py.
chaos: up
	$(PY) bench/chaos.py

# agentlog beside Restate 1.7.12, Temporal's dev server (1.32) and DBOS 3.4 on the same end-to-end
# workloads (async and sync model calls), L, T, CPU per step and R: see bench/compare.py and
# docs/benchmarks.md. Installs the peers into .agentlog/peers (never needed by the tests or CI).
# COMPARE_ARGS="--rounds 1 --t-runs 40 --temporal-t-runs 10 --dbos-t-runs 10" for a short sitting.
compare: up
	bench/peers/install.sh
	$(PY) bench/compare.py $(COMPARE_ARGS)
	$(MAKE) compare-agents

# The same 40-step PydanticAI agent on agentlog, DBOS's and Restate's PydanticAI integrations and
# plain PydanticAI: L, T, R, bytes and CPU a step, ratios to agentlog, issue 37's framework targets
# (bench/compare_agents.py). COMPARE_AGENTS_ARGS="--rounds 1 --t-runs 40" for a shorter sitting.
compare-agents: up
	bench/peers/install.sh
	$(PY) bench/compare_agents.py $(COMPARE_AGENTS_ARGS)

# 100,000 fuzzed commands, submissions and workflow inputs against a worker on the in-memory log.
fuzz: setup
	$(PY) bench/fuzz.py

clean: down
	rm -rf .agentlog

# The documentation site, into build/site; --strict (and mkdocs.yml's validation) turns a broken
# link, an unlisted page or an unresolved API reference into a failure.
docs: setup
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir build/site
