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

.PHONY: install book test test-fast smoke full check sync provenance labels clean

$(BIN)/.installed: requirements.txt pyproject.toml
	@command -v $(PYTHON) >/dev/null || { echo "error: $(PYTHON) not found; set PYTHON=/path/to/python3.11" >&2; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements.txt
	$(BIN)/python -m pip install --quiet --no-deps -e .
	touch $@

install: $(BIN)/.installed

book: install
	$(BIN)/jupyter-book build . --warningiserror --nitpick --keep-going --quiet
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
