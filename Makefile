# Two commands on a fresh machine: `make demo` and `make test`. Each builds .venv from the pinned
# requirement files when it is missing or older than them (idempotent), then runs.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
export PYTHONPATH := $(CURDIR)
export JAX_PLATFORMS ?= cpu
export HF_HUB_OFFLINE := 1

.PHONY: demo test test-all bench lint venv venv-dev clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# torch first, exactly pinned: it takes the local CPU wheel so nothing pulls a CUDA build.
$(VENV)/.dev-stamp: requirements.txt requirements-dev.txt | $(BIN)/python
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -r requirements-dev.txt
	touch $@ $(VENV)/.runtime-stamp

$(VENV)/.runtime-stamp: requirements.txt | $(BIN)/python
	$(BIN)/pip install -q -r requirements.txt
	touch $@

venv: $(VENV)/.runtime-stamp
venv-dev: $(VENV)/.dev-stamp

demo: $(VENV)/.runtime-stamp
	$(BIN)/python -m prorl_jax.main --config=configs/tiny.py $(ARGS)

test: $(VENV)/.dev-stamp
	$(BIN)/python -m pytest -q tests $(ARGS)

bench: $(VENV)/.dev-stamp
	$(BIN)/python bench/train_step.py

lint: $(VENV)/.dev-stamp
	$(BIN)/ruff check prorl_jax tests configs bench

clean:
	rm -rf $(VENV) runs .pytest_cache
