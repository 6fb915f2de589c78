# One-command set-up from a fresh clone on a CPU machine.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip

.PHONY: setup test bench clean

$(VENV)/.installed: pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q -e '.[dev]'
	touch $@

setup: $(VENV)/.installed

test: setup
	$(PY) -m pytest -q

bench: setup
	$(PY) bench/estimator_fidelity.py

clean:
	rm -rf $(VENV) build *.egg-info
