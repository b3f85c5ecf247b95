# The project's entry point. On a fresh machine with Python 3.11:
#   make book   # create .venv, install everything, build the book (HTML in _build/html)
#   make test   # unit tests, smoke run of every chapter, strict book build, freshness check
PYTHON ?= python3.11
VENV   ?= .venv
BIN    := $(VENV)/bin
NB     ?=
ARGS   ?=
# pytest workers: one per core; the strict build and the browser tests share one (xdist_group "book")
WORKERS ?= 2
# Multi30k: a copy beside the project (as in CI) when there is one; otherwise the loader downloads it
ifneq ($(wildcard ../shared/data/multi30k/train.en.gz),)
export GMLM_MULTI30K_DIR ?= $(abspath ../shared/data/multi30k)
endif

.PHONY: install book test test-fast smoke full check sync provenance labels clean gpu-wheels gpu-data gpu-run gpu-start gpu-wait gpu-promote gpu-probe test-newest newest-env newest-tests

# uv installs the pinned versions several times faster than pip, byte-compiled once (with PYTHONDONTWRITEBYTECODE
# set, every process importing JAX would compile them again); where uv fails, pip installs instead, said.
UV_VERSION ?= 0.13.9
INSTALL     = echo "uv pip install $(2)  (into $(1))"; \
              { $(1)/python -m uv pip install --quiet --compile-bytecode --python $(1)/python $(2) \
                || { echo "make: uv failed (above); installing with pip instead" >&2; \
                     $(1)/python -m pip install --quiet $(2); }; }

$(BIN)/.installed: requirements.txt pyproject.toml
	@command -v $(PYTHON) >/dev/null || { echo "error: $(PYTHON) not found; set PYTHON=/path/to/python3.11" >&2; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet uv==$(UV_VERSION) || echo "make: could not install uv; pip installs instead" >&2
	@$(call INSTALL,$(BIN),-r requirements.txt)
	@$(call INSTALL,$(BIN),--no-deps -e .)
	@$(call INSTALL,$(BIN),--upgrade pip)
	touch $@

install: $(BIN)/.installed

# Sphinx copies book/_static only in a build that rewrites a page: when a static file differs from its built
# copy (or has none), every page is rebuilt (--all), which copies it.
BUILT_STATIC ?= _build/html/_static
STATIC_CHANGED = $(foreach f,$(wildcard book/_static/*),$(shell cmp -s $(f) $(BUILT_STATIC)/$(notdir $(f)) || echo $(f)))

book: install
	$(BIN)/jupyter-book build . --warningiserror --nitpick --keep-going --quiet$(if $(strip $(STATIC_CHANGED)), --all)
	@echo "book: $(CURDIR)/_build/html/index.html"

test: install
	$(BIN)/python -m pytest -n $(WORKERS) --dist loadgroup $(ARGS)

test-fast: install
	$(BIN)/python -m pytest -n $(WORKERS) --dist loadgroup -m "not slow" $(ARGS)

smoke: install
	$(BIN)/python -m gmlm_lib.book run smoke $(if $(NB),$(NB),--all)

full: install
	$(BIN)/python -m gmlm_lib.book run full $(if $(NB),$(NB),--all)

check sync provenance labels: install
	$(BIN)/python -m gmlm_lib.book $@

clean:
	rm -rf _build

# The library's unit tests on Python 3.12 with the newest JAX, Flax, Optax and Orbax (Colab and the GPU machine
# run newer versions than requirements.txt pins); CI builds newest-env beside the main tests. Not the slow tests.
PYTHON_NEWEST ?= python3.12
VENV_NEWEST   ?= .venv-newest
NEWEST_TESTS  ?= $(addprefix tests/test_,translation_models.py translation_data.py mt_config.py validation.py ising.py \
  samplers.py devtrace.py timing.py gpu_run.py::test_compile_clock_counts_compilations_and_persistent_cache_hits \
  gpu_run.py::test_persistent_cache_turns_on_after_compiling_and_keeps_a_folder_set_before)

test-newest: newest-env newest-tests

newest-env:
	@command -v $(PYTHON_NEWEST) >/dev/null || { echo "error: $(PYTHON_NEWEST) not found; set PYTHON_NEWEST=/path/to/python3.12" >&2; exit 1; }
	rm -rf $(VENV_NEWEST)
	$(PYTHON_NEWEST) -m venv $(VENV_NEWEST)
	$(VENV_NEWEST)/bin/python -m pip install --quiet uv==$(UV_VERSION) || echo "make: could not install uv; pip installs instead" >&2
	@$(call INSTALL,$(VENV_NEWEST)/bin,--upgrade -e ".[test]" jupytext)
	@$(call INSTALL,$(VENV_NEWEST)/bin,--upgrade pip)
	$(VENV_NEWEST)/bin/python -c "import sys, jax, flax, optax, orbax.checkpoint as o; print('newest: Python', sys.version.split()[0], '| jax', jax.__version__, '| flax', flax.__version__, '| optax', optax.__version__, '| orbax', o.__version__)"

newest-tests:
	@test -x $(VENV_NEWEST)/bin/python || { echo "error: $(VENV_NEWEST) does not exist; run make newest-env first (make test-newest runs both)" >&2; exit 1; }
	$(VENV_NEWEST)/bin/python -m pytest -n $(WORKERS) -m "not slow" -p no:cacheprovider --durations=15 $(NEWEST_TESTS)

# --- the accelerator run of the translation chapters (runbook: benchmarks/gpu_runs/README.md) ---
# Here, with a network: make gpu-wheels (the notebook tooling as Python 3.12 wheels) and make gpu-data (Multi30k into
# .gpu-data/); there: make gpu-run OUT=dir COMMIT=$$(git rev-parse HEAD) DATA=.gpu-data, or gpu-start and gpu-wait;
# back here: make gpu-promote FROM=dir. Each target is one call of gmlm_lib.book.batch, which says what it does.
# Unset variables leave the option out (batch's own default); the runbook gives the values a lent machine needs.
WHEELS        ?= .whl
GPU_PYTHON    ?= python3
GPU_JAX_CACHE ?= /tmp/gmlm-jax-cache
GPU_RUN_DIR   ?= /tmp/gmlm-gpu-run
PROBE_KINDS   ?= padir
PROBE_FLAGS   ?= --flags= --flags=--xla_gpu_autotune_level=0
opt         = $(if $(2),$(1) "$(2)")
BATCH       = $(GPU_PYTHON) -m gmlm_lib.book batch
PROBE       = --probe '--kinds $(PROBE_KINDS) $(PROBE_FLAGS) $(PROBE_ARGS)'
GPU_OPTIONS = $(GPU_ARGS) $(PROBE) --commit "$(COMMIT)" --data "$(DATA)" --wheels "$(WHEELS)" --jax-cache "$(GPU_JAX_CACHE)" \
  --run-dir "$(GPU_RUN_DIR)" $(call opt,--profile,$(GPU_PROFILE)) $(call opt,--deadline,$(GPU_DEADLINE)) \
  $(call opt,--xla-flags,$(GPU_XLA_FLAGS)) $(call opt,--probe-timeout,$(PROBE_TIMEOUT)) \
  $(call opt,--cache-out-mib,$(GPU_CACHE_OUT_MIB)) $(call opt,--sizing-from,$(GPU_SIZING_FROM)) \
  $(call opt,--cache-from,$(GPU_JAX_CACHE_FROM))
PLATFORMS   := $(foreach n,2_28 2_27 2_17 2014 1,--platform $(if $(filter 2014 1,$(n)),manylinux$(n),manylinux_$(n))_x86_64)

gpu-wheels:
	@command -v $(PYTHON) >/dev/null || { echo "error: $(PYTHON) not found" >&2; exit 1; }
	$(PYTHON) -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
	  $(PLATFORMS) -d $(WHEELS) -r requirements-gpu.txt

gpu-data:
	@test -f "$(GMLM_MULTI30K_DIR)/train.en.gz" || { echo "error: set GMLM_MULTI30K_DIR (Multi30k to copy)" >&2; exit 2; }
	mkdir -p .gpu-data && cp "$(GMLM_MULTI30K_DIR)"/*.gz .gpu-data/

gpu-run:
	$(BATCH) run $(GPU_OPTIONS) $(call opt,--out,$(OUT))
gpu-start:
	$(BATCH) start $(GPU_OPTIONS)
gpu-wait:
	$(BATCH) wait --run-dir "$(GPU_RUN_DIR)" $(call opt,--wait,$(WAIT)) $(call opt,--out,$(OUT))
gpu-probe:
	$(BATCH) probe --data "$(DATA)" --commit "$(COMMIT)" $(PROBE) $(call opt,--out,$(OUT))
gpu-promote: install
	$(BIN)/python -m gmlm_lib.book batch promote "$(FROM)"
