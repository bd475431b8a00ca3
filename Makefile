# The two commands of the README. Both set up .venv on a fresh machine (no GPU, no network beyond PyPI).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: setup plan test bench

$(BIN)/campaign: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# pinned CPU build from local disk; a bare `torch` would pull a multi-GB CUDA build
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[torch,data,report,fast,quant,dev,mlflow,ray]'
	touch $(BIN)/campaign

setup: $(BIN)/campaign

plan: setup
	$(BIN)/campaign memory llama-3.1-8b --method qlora --batch 2 --seq-len 2048 --grad-checkpointing --mixed-precision --card rtx-4090

test: setup
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/python -m pytest -q

bench: setup
	$(BIN)/python benchmarks/memory_reference.py
	$(BIN)/python benchmarks/cli_speed.py
