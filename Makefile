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
	$(BIN)/pip install -q -e ".[train,mlx,dev,cluster,eval]"
	./scripts/install_system_deps.sh
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/tunelab demo

# Two test processes, each test file kept whole on one (its module fixtures, e.g. a local
# Ray cluster, are built once): most of the suite's time is spent waiting on child
# processes, so two share 2 cores well (17.9 min instead of ~37 serially on this machine).
test: $(STAMP)
	$(BIN)/python -m pytest -q -n 2 --dist loadfile

bench: $(STAMP)
	$(BIN)/python bench/run_all.py

clean:
	rm -rf $(VENV) artifacts .pytest_cache
