# Thin wrappers over the CLI; humans and CI run the same targets.
#   make bench                      operator level, quick sizes, PyTorch, local device
#   make bench LEVEL=operator FRAMEWORKS=pytorch SIZES=full ARGS="--dtype fp32"
#   make test                       everything this machine can run (see tests/conftest.py)

PYTHON     ?= python3
VENV       ?= .venv
PY         := $(VENV)/bin/python
LEVEL      ?= operator
FRAMEWORKS ?= pytorch
SIZES      ?= quick
ARGS       ?=
EXTRAS     ?= torch,dev
comma      := ,
STAMP      := $(VENV)/.installed-$(shell sha256sum pyproject.toml | cut -c1-12)-$(subst $(comma),_,$(EXTRAS))

QUICK_FLAG := $(if $(filter quick,$(SIZES)),--quick,)

.PHONY: bench test lint format venv clean overhead

venv: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --upgrade --quiet pip
	$(PY) -m pip install --quiet -e '.[$(EXTRAS)]'
	@rm -f $(VENV)/.installed-* && touch $@

bench: $(STAMP)
	$(VENV)/bin/dlsuite run --level $(LEVEL) --framework $(FRAMEWORKS) $(QUICK_FLAG) $(ARGS)

test: $(STAMP)
	$(PY) -m pytest $(PYTEST_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

format: $(STAMP)
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

overhead: $(STAMP)
	$(PY) benchmarks/overhead.py $(ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache *.egg-info
