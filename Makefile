# One-command set-up: `make demo` and `make test` each install everything first.
# TUNELAB_TORCH_SPEC lets a GPU box pick its own torch build, e.g.
#   make demo TUNELAB_TORCH_SPEC="torch==2.13.0 --index-url https://download.pytorch.org/whl/cu128"
PYTHON ?= python3.11
VENV ?= .venv
TUNELAB_TORCH_SPEC ?= torch==2.13.0
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install demo test bench clean

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# torch first and pinned: an unpinned torch pulled in by another package is a multi-GB CUDA build
	$(BIN)/pip install -q $(TUNELAB_TORCH_SPEC)
	$(BIN)/pip install -q -e ".[train,mlx,dev,cluster]"
	./scripts/install_system_deps.sh
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/tunelab demo

test: $(STAMP)
	$(BIN)/python -m pytest -q

bench: $(STAMP)
	$(BIN)/python bench/run_all.py

clean:
	rm -rf $(VENV) artifacts .pytest_cache
