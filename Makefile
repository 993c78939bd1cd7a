# One-command setup and test on a fresh CPU machine.
#   make setup      create .venv and install the pinned environment (quick when already done)
#   make test       setup, then the test suite
#   make reproduce  setup, then the embedded default run (CONFIG=... to use another config)
PYTHON ?= python3.11
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
# torch first, pinned, so pip takes the CPU wheel instead of resolving a multi-GB CUDA build for it.
TORCH_PIN := torch==2.13.0

CONFIG ?= config/default.yaml
RESULTS ?= results

.PHONY: setup test reproduce clean-venv

setup: $(STAMP)

$(STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "error: $(PYTHON) not found (Python 3.11 is required)"; exit 1; }
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check $(TORCH_PIN)
	$(PY) -m pip install --quiet --disable-pip-version-check -e ".[test]"
	@touch $(STAMP)

test: setup
	$(PY) -m pytest $(PYTEST_ARGS)

reproduce: setup
	$(VENV)/bin/hara data --config $(CONFIG) --out $(RESULTS)/data
	$(VENV)/bin/hara base-model --config $(CONFIG) --size tiny-s --data $(RESULTS)/data --out $(RESULTS)/base_model/tiny-s

clean-venv:
	rm -rf $(VENV)
