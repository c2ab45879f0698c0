# One-command set-up: `make demo` and `make test` each install everything first.
# TUNELAB_TORCH_SPEC lets a GPU box pick its own torch build, e.g.
#   make demo TUNELAB_TORCH_SPEC="torch==2.13.0 --index-url https://download.pytorch.org/whl/cu128"
PYTHON ?= python3.11
VENV ?= .venv
TUNELAB_TORCH_SPEC ?= torch==2.13.0
LLAMA_CMAKE_ARGS ?= -DGGML_NATIVE=OFF -DGGML_CUDA=OFF -DGGML_METAL=OFF -DGGML_BLAS=OFF -DLLAMA_CURL=OFF -DLLAVA_BUILD=OFF
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install demo test bench clean

$(STAMP): pyproject.toml Makefile scripts/install_system_deps.sh
	# first: cmake and a compiler for llama-cpp-python's build (and chromium for the browser tests)
	./scripts/install_system_deps.sh
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# torch first and pinned: an unpinned torch pulled in by another package is a multi-GB CUDA build
	$(BIN)/pip install -q $(TUNELAB_TORCH_SPEC)
	# The gguf extra builds llama.cpp (llama-cpp-python's sdist) for the CPU; pip caches the
	# wheel, so only the first install pays for it. GGML_NATIVE=OFF: a wheel that runs on any
	# x86-64 machine the cache is shared with, not only the one that built it; LLAVA_BUILD=OFF:
	# no multimodal (mtmd) library, which tunelab does not use (a quarter of the build).
	CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(BIN)/pip install -q -e ".[train,mlx,dev,cluster,eval,gguf,postgres]"
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/tunelab demo

# Two test processes, each test file kept whole on one (its module fixtures, e.g. a local
# Ray cluster, are built once): most of the suite's time is spent waiting on child
# processes, so two share 2 cores well (about 27 min for the whole suite on this machine; tests/conftest.py gives
# torch one thread per process, so two test processes and their workers do not oversubscribe the cores).
test: $(STAMP)
	$(BIN)/python -m pytest -q -n 2 --dist loadfile --durations=25

bench: $(STAMP)
	$(BIN)/python bench/run_all.py

clean:
	rm -rf $(VENV) artifacts .pytest_cache
