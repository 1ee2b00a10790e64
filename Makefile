# `make demo` and `make test` create .venv when missing, then run.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
CORE := $(VENV)/.installed-core
DEV := $(VENV)/.installed-dev

.PHONY: demo test test-all lint format bench clean

# the demo needs the package only; the tests add pytest, ruff and lm-eval (35 s more to install here)
$(CORE): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e .
	touch $(CORE)

$(DEV): $(CORE)
	$(BIN)/pip install -q -e '.[dev]'
	touch $(DEV)

demo: $(CORE)
	$(BIN)/python -m anchorft.demo --out runs/demo

test: $(DEV)
	$(BIN)/python -m pytest -q

test-all: $(DEV)
	$(BIN)/python -m pytest -q -m ''

lint: $(DEV)
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks

format: $(DEV)
	$(BIN)/ruff check --fix src tests benchmarks
	$(BIN)/ruff format src tests benchmarks

bench: $(DEV)
	for f in benchmarks/*.py; do $(BIN)/python $$f || exit 1; done

clean:
	rm -rf $(VENV) runs .pytest_cache
