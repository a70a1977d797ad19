# Two commands on a fresh machine: `make demo` and `make test`. Each builds .venv from the pinned
# requirement files when it is missing or older than them (idempotent), then runs.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
export PYTHONPATH := $(CURDIR)
export JAX_PLATFORMS ?= cpu
export HF_HUB_OFFLINE := 1

.PHONY: demo test test-slow test-all test-faults test-vllm bench lint venv venv-dev venv-vllm venv-chips venv-gpu venv-tpu sandbox clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# torch first, exactly pinned: it takes the local CPU wheel so nothing pulls a CUDA build.
# The pinned requirement files are the lock; the project itself goes in editable, without deps,
# for its console scripts (prorl-train, prorl-eval, prorl-worker, prorl-prepare, ...).
$(VENV)/.dev-stamp: requirements.txt requirements-dev.txt requirements-graders.txt pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -r requirements-dev.txt
	$(BIN)/pip install -q --no-deps -r requirements-graders.txt
	$(BIN)/pip install -q --no-deps -e .
	touch $@ $(VENV)/.runtime-stamp

$(VENV)/.runtime-stamp: requirements.txt pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -r requirements.txt
	$(BIN)/pip install -q --no-deps -e .
	touch $@

# The rollout workers' vLLM environment, one name for both builds: its own venv (vLLM pins its
# own torch and transformers). VLLM=gpu (NVIDIA GPUs) or cpu; the default is gpu where
# `nvidia-smi -L` lists a GPU. A changed requirement file rebuilds it in place.
VVENV := .venv-vllm
VLLM ?= $(shell nvidia-smi -L >/dev/null 2>&1 && echo gpu || echo cpu)
$(VVENV)/.stamp: requirements.txt requirements-dev.txt requirements-vllm-cpu.txt requirements-vllm.txt
	REBUILD=$$([ -f $@ ] && echo 1 || echo 0) PYTHON=$(PY) VLLM_VENV=$(VVENV) bash launch/vllm_env.sh $(VLLM)

# The code-reward sandbox: bubblewrap and libseccomp from the system's packages (as root with
# apt), else say how.
sandbox:
	@{ command -v bwrap && /sbin/ldconfig -p | grep -q libseccomp.so.2; } >/dev/null || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    apt-get install -y -q bubblewrap libseccomp2 >/dev/null 2>&1 || \
	      { apt-get update -q >/dev/null && apt-get install -y -q bubblewrap libseccomp2 >/dev/null; }; \
	  else \
	    echo "code rewards need bubblewrap and libseccomp: apt-get install bubblewrap libseccomp2"; \
	    exit 1; \
	  fi; }
	@bwrap --version

# The compile-only chips (prorl-compile): libtpu and the CUDA compiler plugin in an environment of
# their own over .venv's packages, so a run in .venv starts exactly as before (no TPU or CUDA
# backend is probed there).
CVENV := .venv-chips
$(CVENV)/.stamp: requirements-chips.txt $(VENV)/.runtime-stamp
	rm -rf $(CVENV) && $(PY) -m venv $(CVENV)
	echo "import site; site.addsitedir('$$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')')" > $$($(CVENV)/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/_prorl_base.pth
	$(CVENV)/bin/pip install -q --no-deps -r requirements-chips.txt
	touch $@

# EXTRAS=wandb (comma-separated extras of pyproject.toml) adds optional packages to .venv.
EXTRAS ?=
venv: $(VENV)/.runtime-stamp
	$(if $(EXTRAS),$(BIN)/pip install -q -e ".[$(EXTRAS)]")
venv-dev: $(VENV)/.dev-stamp
venv-vllm: $(VVENV)/.stamp
venv-chips: $(CVENV)/.stamp

# Accelerators: the CUDA (NVIDIA GPUs) or TPU build of the pinned jax, over the runtime venv.
venv-gpu: $(VENV)/.runtime-stamp
	$(BIN)/pip install -q -r requirements-gpu.txt
venv-tpu: $(VENV)/.runtime-stamp
	$(BIN)/pip install -q -r requirements-tpu.txt

demo: $(VENV)/.runtime-stamp
	$(BIN)/python -m prorl_jax.main --config=configs/tiny.py $(ARGS)

# Two pytest-xdist workers keep the 2 cores of a CI machine busy while tests wait on their
# subprocesses (TEST_WORKERS=0 runs them in one process).
TEST_WORKERS ?= 2

# `make test` is the default suite; the end-to-end tests marked slow (whole runs killed and
# resumed, the README's recipe, two trainer processes, the suite on a model: each over ~30 s)
# are `make test-slow`. CI (.ci/run) runs both, the linter and the fault harness's short mode.
test: sandbox $(VENV)/.dev-stamp $(VVENV)/.stamp $(CVENV)/.stamp
	$(BIN)/python -m pytest -q tests -m "not vllm and not slow" -n $(TEST_WORKERS) $(ARGS)
	VLLM_ENABLE_V1_MULTIPROCESSING=0 VLLM_CPU_KVCACHE_SPACE=1 $(VVENV)/bin/python -m pytest -q tests -m vllm $(ARGS)

test-slow: sandbox $(VENV)/.dev-stamp $(VVENV)/.stamp $(CVENV)/.stamp
	$(BIN)/python -m pytest -q tests -m "slow and not vllm" -n $(TEST_WORKERS) $(ARGS)

test-all: test test-slow

test-vllm: $(VVENV)/.stamp
	VLLM_ENABLE_V1_MULTIPROCESSING=0 VLLM_CPU_KVCACHE_SPACE=1 $(VVENV)/bin/python -m pytest -q tests -m vllm $(ARGS)

# The fault-injection harness's short mode: the tiny run cut twice per mode (serial, pipelined),
# once beside a busy process; every resumed run must end bit-identical (~10 min on 2 cores).
test-faults: $(VENV)/.dev-stamp
	$(BIN)/python bench/faults.py --cuts 2 --steps 3 --load both

bench: $(VENV)/.dev-stamp
	$(BIN)/python bench/train_step.py

lint: $(VENV)/.dev-stamp
	$(BIN)/ruff check prorl_jax tests configs bench
	$(BIN)/ruff format --check prorl_jax tests configs bench

clean:
	rm -rf $(VENV) $(VVENV) $(CVENV) runs .pytest_cache
