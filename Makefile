# The two quick-start commands: `make demo` and `make test`. Both set everything up first.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: setup demo test lint

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --disable-pip-version-check -q -e '.[all,ray,dev]'
	touch $(STAMP)

setup: $(STAMP)

demo: $(STAMP)
	$(BIN)/tessera targets
	mkdir -p build
	$(BIN)/tessera bench "$$($(BIN)/python -m tessera.zoo mlp)" -t all --seconds 0.5 --save build/demo.tess
	$(BIN)/tessera run build/demo.tess --check --bench 200
	$(BIN)/tessera explain build/demo.tess --html build/demo.html | tail -n 1

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy

test: lint
	$(BIN)/python -m pytest -q -m "not slow"
