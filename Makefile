# The project's entry point. On a fresh machine with Python 3.11:
#   make book   # create .venv, install everything, build the book (HTML in _build/html)
#   make test   # unit tests, smoke run of every chapter, strict book build, freshness check
PYTHON ?= python3.11
VENV   ?= .venv
BIN    := $(VENV)/bin
NB     ?=
ARGS   ?=
# pytest workers (pytest-xdist): one per core of the 2-core machines the book is built for; the
# strict build and the browser tests share one worker (xdist_group "book"), so the book is built once
WORKERS ?= 2
# Multi30k for the translation chapters: a copy beside the project (as in CI) when there is one;
# otherwise the loader downloads it (see data/README.md).
ifneq ($(wildcard ../shared/data/multi30k/train.en.gz),)
export GMLM_MULTI30K_DIR ?= $(abspath ../shared/data/multi30k)
endif

.PHONY: install book test test-fast smoke full check sync provenance labels clean gpu-wheels gpu-data gpu-run gpu-start gpu-wait gpu-promote gpu-probe test-newest newest-env newest-tests

# The packages are installed by uv (Astral's pip-compatible installer, itself installed from PyPI into the
# virtual environment first): the same pinned versions as `pip install -r requirements.txt`, several times
# faster than pip (its commit has the measurement). uv byte-compiles every installed module at once
# (--compile-bytecode, as pip does by default): where PYTHONDONTWRITEBYTECODE is set (as on the machine
# this project is developed on) Python would otherwise compile each module again in every process that
# imports it, about 10 s of CPU in each one that imports JAX, Flax, pandas and matplotlib (every test
# worker, chapter kernel and subprocess test).
# uv reads no pip.conf (a package mirror: UV_INDEX_URL); where it fails, pip installs instead, said (pip is
# upgraded last, so a failed step finds the venv's own pip as it was).
UV_VERSION ?= 0.13.9
# $(call INSTALL,bin folder,arguments): one installation into that virtual environment
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

# Sphinx copies the book's static files (book/_static: its CSS) only in a build that rewrites some page
# (a build it finds nothing out of date in ends before the copy), so a change to them alone would leave
# the built book with the old copy: when one differs from its built copy, or that is missing, every page
# is rebuilt (--all), which copies them.
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

check: install
	$(BIN)/python -m gmlm_lib.book check

sync: install
	$(BIN)/python -m gmlm_lib.book sync

provenance: install
	$(BIN)/python -m gmlm_lib.book provenance

labels: install
	$(BIN)/python -m gmlm_lib.book labels

clean:
	rm -rf _build

# The translation and Ising unit tests (models, training, checkpoints, decoding, metrics; the exact model
# and the samplers; the profiler trace the PaDIR chapter reads; the compile clock's listener) on Python 3.12 with the newest JAX, Flax, Optax and Orbax the package index offers
# (pyproject.toml's loose bounds, nothing pinned): Colab and the lent GPU machine run newer versions than
# requirements.txt pins. CI runs it (.ci/run): newest-env beside the main tests, newest-tests after them.
# It leaves out the tests marked slow (the main suite runs them), among them those that count compiled programs.
PYTHON_NEWEST ?= python3.12
VENV_NEWEST   ?= .venv-newest
NEWEST_TESTS  ?= tests/test_translation_models.py tests/test_translation_data.py tests/test_mt_config.py \
                 tests/test_validation.py tests/test_ising.py tests/test_samplers.py tests/test_devtrace.py \
                 tests/test_timing.py \
                 tests/test_gpu_run.py::test_compile_clock_counts_compilations_and_persistent_cache_hits \
                 tests/test_gpu_run.py::test_persistent_cache_turns_on_after_compiling_and_keeps_a_folder_set_before

test-newest: newest-env newest-tests

# the environment alone (.ci/run builds it while the main tests run: pip waits mostly on the network and the disk)
newest-env:
	@command -v $(PYTHON_NEWEST) >/dev/null || { echo "error: $(PYTHON_NEWEST) not found; set PYTHON_NEWEST=/path/to/python3.12" >&2; exit 1; }
	rm -rf $(VENV_NEWEST)
	$(PYTHON_NEWEST) -m venv $(VENV_NEWEST)
	$(VENV_NEWEST)/bin/python -m pip install --quiet uv==$(UV_VERSION) || echo "make: could not install uv; pip installs instead" >&2
	@$(call INSTALL,$(VENV_NEWEST)/bin,--upgrade -e ".[test]" jupytext)
	@$(call INSTALL,$(VENV_NEWEST)/bin,--upgrade pip)
	$(VENV_NEWEST)/bin/python -c "import sys, jax, flax, optax, orbax.checkpoint as o; print('newest: Python', sys.version.split()[0], '| jax', jax.__version__, '| flax', flax.__version__, '| optax', optax.__version__, '| orbax', o.__version__)"

# the tests alone, in the environment newest-env made
newest-tests:
	@test -x $(VENV_NEWEST)/bin/python || { echo "error: $(VENV_NEWEST) does not exist; run make newest-env first (make test-newest runs both)" >&2; exit 1; }
	$(VENV_NEWEST)/bin/python -m pytest -n $(WORKERS) -m "not slow" -p no:cacheprovider --durations=15 $(NEWEST_TESTS)

# --- the translation chapters on a GPU machine without network, git or notebook tooling (issue 45) ---
# Here, with a network:  make gpu-wheels      (the notebook tooling as Python 3.12 wheels, into .whl/)
#                        make gpu-data        (Multi30k copied into .gpu-data/, which travels with the tree)
#                        (an earlier run's OUT/jax-cache.tar.gz, from GPU_CACHE_OUT=1, copied into .gpu-cache/: below)
# There:  make gpu-run OUT=dir COMMIT=$$(git rev-parse HEAD) DATA=folder-of-multi30k [GPU_PYTHON=python3]
# runs padir, stutter, dependency_decoding and ablations in the full profile with the machine's own
# JAX and Flax (from notebooks/NAME.md, which may run ahead of its notebook until this run), and leaves the
# executed notebooks, provenance.md, the run records and log.txt in OUT. The commit must be that of the
# clean tree that was copied there; it names the sources even where git metadata travelled with the tree (a
# stale copy of .git was seen on the lent machine: GIT_DIR points git at nothing). The padir and ablations
# chapters time one update on the device and fit their updates to their train_seconds (gmlm_lib.mt.sizing);
# what else the run costs (compiling above all: see gpu-probe) each chapter's provenance and the log report;
# the log also sums, after each chapter (one stopped at the deadline too), the seconds by program compiled.
# GPU_XLA_FLAGS sets XLA_FLAGS for the run (gpu-probe says which settings compile faster); GMLM_COMPILE_THREADS=1
# in the environment compiles one program at a time (the library compiles side by side by default). GPU_DEADLINE=seconds
# interrupts the batch then (SIGINT): it logs the chapter it stopped in and keeps what finished (that
# chapter's finished cells too), before the machine's own limit kills it.
# GPU_JAX_CACHE (empty: off) is JAX's persistent compilation cache, shared by the four chapters' kernels: the
# later chapters decode (and the ablations retrain) the PaDIR chapter's models with the same programs, and on
# a GPU a program compiles in seconds; a chapter run alone, as on Colab, compiles its own.
# GPU_PROFILE=smoke rehearses it (tests/test_gpu_run.py runs it on the CPU at smoke size; the chapters after padir
# open its smoke run folder, as the full run's open runs/padir/en-de: gmlm_lib.book.runner.run_batch). Back here: make gpu-promote FROM=OUT (the notebooks the current sources made, into the
# book, checked), then make check and commit.
WHEELS      ?= .whl
GPU_PYTHON  ?= python3
GPU_PROFILE ?= full
GPU_SITE    ?= /tmp/gmlm-site
GPU_ARGS    ?=
GPU_DEADLINE ?= 0
GPU_JAX_CACHE ?= /tmp/gmlm-jax-cache
# programs that compile in less time are not written to it (the probe's and the chapters' alike)
GPU_CACHE_MIN_S ?= 0.2
# XLA_FLAGS of the run, added to any the environment sets (empty: none added), recorded in every chapter's
# provenance; "auto": the compile
# probe (gpu-probe's PROBE_* settings) runs first and chooses them (benchmarks/compile_probe.py, choose()),
# its rows in OUT/probe.json (a probe that fails leaves XLA's defaults, and the run goes on); GPU_DEADLINE
# counts from the start of gpu-run, the probe included. Each probed
# setting compiles cold in a fresh GPU_JAX_CACHE, and the chosen one's cache is kept there for the chapters:
# the probe's PaDIR update and decoder are the run's own programs (--cache; a cache holding files is left alone)
GPU_XLA_FLAGS ?=
# the run-records.tar.gz of an earlier gpu-run (put it in the tree: untracked files travel): its sizing decisions are
# restored first, so chapters run in a later batch that rebuild the PaDIR run folder train the updates it decided
GPU_SIZING_FROM ?=
# compiled programs across lent machines (on a GPU most of a chapter's first run is compiling): GPU_CACHE_OUT=1
# packs the batch's programs into OUT/jax-cache.tar.gz at its end (at most 15 MiB, the earliest written first:
# the PaDIR chapter's, which the others share; those restored before it began last; one more file in OUT);
# GPU_JAX_CACHE_FROM=that archive (put it in an ignored folder such as .gpu-cache/ and carry it) fills
# GPU_JAX_CACHE with them first. A program compiled on another kind of device, driver or JAX version is not read
# (its key differs): it compiles again, as without. JAX puts XLA's autotuning cache inside GPU_JAX_CACHE; JAX 0.10.2
# (requirements.txt) keys every program on that folder's path, so under it a cache packed at another path is not
# read, while 0.11.2 (the GPU machine's) and 0.12.0.1 (make newest-env's) leave the path out of the key. Keep the
# default GPU_JAX_CACHE.
GPU_CACHE_OUT ?=
GPU_JAX_CACHE_FROM ?=
PLATFORMS   := $(foreach n,2_28 2_27 2_17 2014 1,--platform $(if $(filter 2014 1,$(n)),manylinux$(n),manylinux_$(n))_x86_64)

gpu-wheels:
	@command -v $(PYTHON) >/dev/null || { echo "error: $(PYTHON) not found" >&2; exit 1; }
	$(PYTHON) -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
	  $(PLATFORMS) -d $(WHEELS) -r requirements-gpu.txt
	@echo "gpu-wheels: $$(ls $(WHEELS)/*.whl | wc -l) wheels in $(WHEELS)/ ($$(du -sh $(WHEELS) | cut -f1))"

gpu-data:
	@test -f "$(GMLM_MULTI30K_DIR)/train.en.gz" || { echo "error: gpu-data copies Multi30k from GMLM_MULTI30K_DIR (or ../shared/data/multi30k); set it" >&2; exit 2; }
	mkdir -p .gpu-data && cp "$(GMLM_MULTI30K_DIR)"/*.gz .gpu-data/
	@echo "gpu-data: $$(ls .gpu-data | wc -l) files in .gpu-data/ (make gpu-run DATA=.gpu-data there)"

gpu-promote: install
	@test -d "$(FROM)" || { echo "error: gpu-promote needs FROM=the folder gpu-run filled (OUT)" >&2; exit 2; }
	$(BIN)/python -m gmlm_lib.book promote "$(FROM)"

define GPU_ARGS_CHECK
	@test -n "$(COMMIT)" || { echo "error: gpu-run needs COMMIT=\$$(git rev-parse HEAD) of the clean tree copied here" >&2; exit 2; }
	@test -f "$(DATA)/train.en.gz" || { echo "error: gpu-run needs DATA=folder holding Multi30k (train.en.gz, ...); got '$(DATA)'" >&2; exit 2; }
endef

gpu-run:
	@test -n "$(OUT)" || { echo "error: gpu-run needs OUT=folder (the executed notebooks and log go there)" >&2; exit 2; }
	$(GPU_ARGS_CHECK)
	@mkdir -p "$(OUT)"; site=""; start=$$(date +%s); \
	if [ -d "$(WHEELS)" ] && ls $(WHEELS)/*.whl >/dev/null 2>&1; then \
	  echo "gpu-run: installing $$(ls $(WHEELS)/*.whl | wc -l) wheels from $(WHEELS)/ into $(GPU_SITE)"; \
	  $(GPU_PYTHON) -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
	    --target $(GPU_SITE) $(WHEELS)/*.whl || exit 1; \
	  site=":$(GPU_SITE)"; export PATH="$(GPU_SITE)/bin:$$PATH"; \
	fi; \
	export GIT_DIR="$(CURDIR)/.no-git-read" GMLM_COMMIT=$(COMMIT) GMLM_MULTI30K_DIR=$(abspath $(DATA)) PYTHONUNBUFFERED=1; \
	xla='$(GPU_XLA_FLAGS)'; if [ "$$xla" = auto ]; then \
	  echo "gpu-run: choosing XLA_FLAGS with the compile probe (its rows in $(OUT)/probe.json)"; \
	  chosen=$$(mktemp); JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=$(GPU_CACHE_MIN_S) $(PROBE_CMD) --choose "$$chosen" \
	    --timeout $(PROBE_TIMEOUT) $(if $(GPU_JAX_CACHE),--cache "$(abspath $(GPU_JAX_CACHE))") \
	    || echo "gpu-run: the compile probe failed (above); the chapters run with XLA's defaults" >&2; \
	  xla=$$(cat "$$chosen"); rm -f "$$chosen"; \
	fi; \
	if [ -n "$$xla" ]; then export XLA_FLAGS="$${XLA_FLAGS:+$$XLA_FLAGS }$$xla"; echo "gpu-run: XLA_FLAGS=$$XLA_FLAGS"; fi; \
	left=$$(( $(GPU_DEADLINE) - $$(date +%s) + start )); [ $$left -gt 1 ] || left=1; \
	PYTHONPATH="$(CURDIR)$$site$${PYTHONPATH:+:$$PYTHONPATH}" \
	  $(if $(GPU_JAX_CACHE),JAX_COMPILATION_CACHE_DIR=$(abspath $(GPU_JAX_CACHE)) JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=$(GPU_CACHE_MIN_S)) \
	  $(if $(filter-out 0,$(GPU_DEADLINE)),timeout --signal=INT --kill-after=30 $$left) \
	  $(GPU_PYTHON) -m gmlm_lib.book batch $(GPU_PROFILE) $(GPU_ARGS) --out "$(OUT)" \
	  $(if $(GPU_SIZING_FROM),--sizing-from "$(abspath $(GPU_SIZING_FROM))") \
	  $(if $(GPU_JAX_CACHE_FROM),--cache-from "$(abspath $(GPU_JAX_CACHE_FROM))") $(if $(GPU_CACHE_OUT),--cache-out)

# What compiling costs there, before a run is sized: `make gpu-probe OUT=dir DATA=folder-of-multi30k` times
# one update and batch-1 decoding of the GPU preset's untrained models (PROBE_KINDS) under each XLA flag
# setting of PROBE_FLAGS, each in its own process (an XLA that does not know a flag is reported, not fatal),
# and writes probe.json and the table probe.md to OUT (benchmarks/compile_probe.py). No notebook tooling needed.
# PROBE_ARGS="--programs decode" leaves the updates out (decoding only: seconds a setting, not minutes).
PROBE_KINDS ?= padir
PROBE_FLAGS ?= --flags= --flags=--xla_gpu_autotune_level=0
# seconds one probed setting may take in gpu-run (each about a minute on an H200); past it, that setting failed
PROBE_TIMEOUT ?= 150
# the probe's command, in gpu-probe and in gpu-run GPU_XLA_FLAGS=auto (their recipes set its environment)
PROBE_CMD = PYTHONPATH="$(CURDIR)$${PYTHONPATH:+:$$PYTHONPATH}" $(GPU_PYTHON) benchmarks/compile_probe.py \
  --kinds $(PROBE_KINDS) $(PROBE_FLAGS) $(PROBE_ARGS) --json "$(OUT)/probe.json"

gpu-probe:
	@test -n "$(OUT)" || { echo "error: gpu-probe needs OUT=folder (probe.json and probe.md go there)" >&2; exit 2; }
	@test -f "$(DATA)/train.en.gz" || { echo "error: gpu-probe needs DATA=folder holding Multi30k (train.en.gz, ...); got '$(DATA)'" >&2; exit 2; }
	@mkdir -p "$(OUT)"; export GIT_DIR="$(CURDIR)/.no-git-read" GMLM_MULTI30K_DIR=$(abspath $(DATA)) PYTHONUNBUFFERED=1 \
	  $(if $(COMMIT),GMLM_COMMIT=$(COMMIT)); \
	$(PROBE_CMD) > "$(OUT)/probe.md"; status=$$?; cat "$(OUT)/probe.md"; exit $$status

# A lent machine may stop one command sooner than the run needs while the machine itself stays lent
# longer. `make gpu-start` (the variables of gpu-run, but no OUT) checks them, starts gpu-run in a new
# process session (setsid), which outlives the command that started it, and returns at once;
# `make gpu-wait OUT=dir WAIT=seconds` waits at most WAIT seconds for that batch, copying into OUT what
# it has made so far (notebooks, provenance.md, run records, log.txt) each second as it changes, so that a
# command cut short before WAIT ends still leaves in OUT every file the batch had finished (each copied
# whole: written beside it, then renamed), and prints the log; it succeeds once the batch has ended well,
# and fails saying "still runs" (wait again) or how the batch ended.
GPU_RUN_DIR ?= /tmp/gmlm-gpu-run
WAIT        ?= 0

gpu-start:
	$(GPU_ARGS_CHECK)
	@if [ -f "$(GPU_RUN_DIR)/pid" ] && [ ! -f "$(GPU_RUN_DIR)/status" ] && kill -0 $$(cat "$(GPU_RUN_DIR)/pid") 2>/dev/null; then \
	  echo "error: the batch gpu-start began (pid $$(cat $(GPU_RUN_DIR)/pid)) still runs; make gpu-wait OUT=dir WAIT=seconds" >&2; exit 2; fi
	@rm -rf "$(GPU_RUN_DIR)"; mkdir -p "$(GPU_RUN_DIR)"
	@setsid sh -c '$(MAKE) --no-print-directory gpu-run OUT="$(GPU_RUN_DIR)/out"; echo $$? > "$(GPU_RUN_DIR)/status"' \
	  > "$(GPU_RUN_DIR)/console.log" 2>&1 < /dev/null & echo $$! > "$(GPU_RUN_DIR)/pid"
	@echo "gpu-start: gpu-run runs in the background (pid $$(cat $(GPU_RUN_DIR)/pid), console in $(GPU_RUN_DIR)/console.log); make gpu-wait OUT=dir WAIT=seconds"

gpu-wait:
	@test -n "$(OUT)" || { echo "error: gpu-wait needs OUT=folder (what the batch made so far is copied there)" >&2; exit 2; }
	@test -f "$(GPU_RUN_DIR)/pid" || { echo "error: no batch was started in $(GPU_RUN_DIR); make gpu-start first" >&2; exit 2; }
	@end=$$(( $$(date +%s) + $(WAIT) )); mkdir -p "$(OUT)"; \
	gather() { for f in "$(GPU_RUN_DIR)"/out/*; do [ -f "$$f" ] || continue; d="$(OUT)/$${f##*/}"; \
	  if ! cmp -s "$$f" "$$d"; then cp -p "$$f" "$$d.part" && mv -f "$$d.part" "$$d"; fi; done; }; \
	while gather; [ ! -f "$(GPU_RUN_DIR)/status" ] && kill -0 $$(cat "$(GPU_RUN_DIR)/pid") 2>/dev/null && [ $$(date +%s) -lt $$end ]; do sleep 1; done; \
	gather; \
	cat "$(GPU_RUN_DIR)/out/log.txt" 2>/dev/null || tail -n 20 "$(GPU_RUN_DIR)/console.log"; \
	if [ -f "$(GPU_RUN_DIR)/status" ]; then \
	  status=$$(cat "$(GPU_RUN_DIR)/status"); echo "gpu-wait: the batch ended with status $$status"; \
	  [ "$$status" = 0 ] || { tail -n 20 "$(GPU_RUN_DIR)/console.log"; exit 1; }; \
	elif kill -0 $$(cat "$(GPU_RUN_DIR)/pid") 2>/dev/null; then echo "gpu-wait: the batch still runs; make gpu-wait again"; exit 1; \
	else echo "error: the batch ended without a status (killed?); its console:" >&2; tail -n 20 "$(GPU_RUN_DIR)/console.log" >&2; exit 1; fi
