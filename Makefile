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

# MobileNetV2 on generated samples: ONNX Runtime's defaults, the best by hand (int8 or not),
# and tessera's plan within the accuracy budget, timed in one run; then the saved plan is
# loaded, checked against the reference and drawn.
demo: $(STAMP)
	$(BIN)/tessera targets
	mkdir -p build
	$(BIN)/tessera bench "$$($(BIN)/python -m tessera.zoo mobilenetv2 --samples build/samples)" \
		-t onnxruntime,openvino --samples build/samples --accuracy 'cosine>=0.999,top1>=0.99' \
		--seconds 0.5 --save build/demo.tess
	$(BIN)/tessera run build/demo.tess --check --bench 50
	$(BIN)/tessera explain build/demo.tess --html build/demo.html | tail -n 1

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy

test: lint
	$(BIN)/python -m pytest -q -m "not slow"
