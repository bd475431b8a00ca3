# The two commands of the README (make plan, make test); both set up .venv on a fresh machine (no GPU, no network
# beyond PyPI). make test-fast is the quick tier while working (CONTRIBUTING.md, "Test tiers").
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: setup plan lint test test-fast bench

$(BIN)/campaign: pyproject.toml setup.py src/campaign/memory/_allocator.c
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# pinned CPU build from local disk; a bare `torch` would pull a multi-GB CUDA build
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[torch,data,report,fast,quant,dev,mlflow,ray,lightning]'
	touch $(BIN)/campaign

setup: $(BIN)/campaign

plan: setup
	$(BIN)/campaign memory llama-3.1-8b --method qlora --batch 2 --seq-len 2048 --grad-checkpointing --mixed-precision --card rtx-4090

# the quality gates: ruff and mypy as pyproject.toml configures them, the whole tree clean (CONTRIBUTING.md, "Test
# tiers")
lint: setup
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/mypy

# everything, the 25 slowest tests listed at the end (CI runs this through .ci/run)
test: lint
	$(BIN)/python -m pytest -q --durations=25

# under 3 minutes on 2 cores: no test marked slow, ray or browser (markers applied in tests/conftest.py), two
# workers (pytest-xdist)
test-fast: lint
	$(BIN)/python -m pytest -q -n 2 -m "not slow and not ray and not browser"

bench: setup
	$(BIN)/python benchmarks/memory_reference.py
	$(BIN)/python benchmarks/cli_speed.py
