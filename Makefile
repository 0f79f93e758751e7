# The two quick-start commands: `make demo` and `make test`. Both set everything up first.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: setup demo test lint

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --disable-pip-version-check -q -e '.[all,dev]'
	touch $(STAMP)

setup: $(STAMP)

demo: $(STAMP)
	$(BIN)/tessera targets
	$(BIN)/tessera config show -t "openvino,onnxruntime,cpu -mcpu=skylake"
	$(BIN)/tessera explain "$$($(BIN)/python -m tessera.zoo mlp)" -t onnxruntime,openvino,torch

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy

test: lint
	$(BIN)/python -m pytest -q -m "not slow"
