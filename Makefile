# Thin wrappers over the CLI; humans and CI run the same targets. `make help` prints this block.
#   make bench                      operator level, quick sizes, PyTorch, local device
#   make bench LEVEL=operator FRAMEWORKS=pytorch SIZES=full ARGS="--dtype fp32"
#                                   (FRAMEWORKS= and FRAMEWORK= are one setting in every target)
#   make bench LEVEL=distributed WORLD=4     collectives + data-parallel training on 4 local ranks
#   make bench LEVEL=training       input pipelines (quick: PyTorch over the folder and WebDataset,
#                                   cold and warm, workers 1 and 2; the dataset made on first use)
#   make bench LEVEL=training SIZES=full FRAMEWORKS=pytorch   the full set, workers up to the cores
#   make explain NETWORK=resnet18 FRAMEWORKS=pytorch,tensorflow,jax ARGS=--quick
#                                   the explanation study (docs/guide/explain.md): the operator level at the
#                                   network's shapes, the network level, the feed, data-parallel at
#                                   WORLD ranks, and the report whose Findings explain them; resumable
#   make validate [SMOKE=1] [ONLY=overhead,data_vs_bare]   the suite against bare framework loops
#                                   (benchmarks/validation/): each script's suite/bare table
#   make study [NAME=frameworks_cpu] [ARGS=...]   the studies that write pages of docs/
#                                   (benchmarks/studies/; no NAME: the list and their pages)
#   make test                       everything this machine can run (see tests/conftest.py)
#   make conformance FRAMEWORK=tensorflow   the adapter conformance kit inside that framework's
#                                   own environment (.venvs/<framework>-<hash>, built if missing;
#                                   named with .venv's Python where there is one; needs no .venv)
#   make corpus [CORPUS_FRAMEWORKS=pytorch,jax]   every export of the test corpus (tests/corpus.py)
#                                   through each framework's kit (the kit alone runs 3 of them;
#                                   default: every registered adapter with the network words)
#   make images [FRAMEWORK=pytorch] [BASE=dlsuite/base:debian-bookworm] [WHEELHOUSE=dir]
#                                   framework images through the Docker SDK (docs/guide/containers.md)
#   make sif FRAMEWORK=pytorch      Apptainer SIF from that image (docker save + apptainer build),
#                                   then its check task as an unprivileged user; FRAMEWORK=all for
#                                   every recipe; ARGS="--from-def": Apptainer alone (docs/guide/containers.md)
#   make test-apptainer             the apptainer tests alone (what CI runs of them: the pytorch SIF,
#                                   its check as an unprivileged user, two Slurm nodes), with their
#                                   durations: what they cost (docs/guide/apptainer.md)
#   make cluster-up / cluster-down  a real Slurm cluster on this machine (munged, slurmctld, two
#                                   slurmd; needs root and `apt-get install slurm-wlm munge`)
#   make gpu-check [DEVICE=cuda|cpu] [OUT_DIR=docs/results/<gpu>-<date>]   the prepared acceptance
#                                   run for a lent GPU (docs/guide/gpu-check.md): resumable, each call at
#                                   most 280 s; DEVICE=cpu is CI's rehearsal (tiny sizes, < 3 min)
#   make gpu-wheels                 the host dependencies the GPU machine lacks, as wheels in
#                                   .gpu-wheels/ (carried with the working tree)
#   make envs                       dlsuite envs list: the framework environments, built or not
#   make clean                      .venv and the tools' caches; the framework environments
#                                   (.venvs or DLSUITE_ENVS_DIR) stay: dlsuite envs prune [--all]
#   make slurm-array [ARGS="--tasks 1000"]  a 1,000-task job array on a private local cluster:
#                                   lost/duplicated tasks, scancel + --resume, host ms per task

PYTHON     ?= python3
VENV       ?= .venv
PY         := $(VENV)/bin/python
LEVEL      ?= operator
FRAMEWORKS ?= pytorch
SIZES      ?= quick
ARGS       ?=
WORLD      ?= 2
EXTRAS     ?= torch,dev,corpus
FRAMEWORK  ?= pytorch
comma      := ,
# FRAMEWORKS (bench, explain) and FRAMEWORK (conformance, images, sif) are one setting: either
# spelling works for every target (make bench FRAMEWORK=tensorflow ran PyTorch, unsaid); both
# given and different is an error
given       = $(filter command line environment environment override override,$(origin $(1)))
ifneq ($(call given,FRAMEWORK),)
ifeq ($(call given,FRAMEWORKS),)
FRAMEWORKS := $(FRAMEWORK)
else ifneq ($(FRAMEWORKS),$(FRAMEWORK))
$(error FRAMEWORKS=$(FRAMEWORKS) and FRAMEWORK=$(FRAMEWORK) disagree: they are one setting; give one of them)
endif
else ifneq ($(call given,FRAMEWORKS),)
FRAMEWORK := $(FRAMEWORKS)
endif
REQS       := containers/pytorch/requirements.txt
HASH       := $(shell cat pyproject.toml $(REQS) | sha256sum | cut -c1-12)
# everything: what the tests, lint and the corpus need (make venv, make test, make lint)
STAMP      := $(VENV)/.installed-$(HASH)-$(subst $(comma),_,$(EXTRAS))
# what `make bench` needs: the suite and PyTorch (not the dev tools, not the test corpus's
# torchvision/transformers/onnxscript); a full install satisfies it too
BENCH_STAMP := $(VENV)/.installed-$(HASH)-bench

# SIZES is quick or full, said explicitly (DLSUITE_QUICK in the environment does not turn full
# into quick); any other word, a typo such as SIZES=ful, would silently have run the full sizes
QUICK_FLAG := $(if $(filter quick,$(SIZES)),--quick,--no-quick)
ifneq ($(filter bench,$(MAKECMDGOALS)),)
ifneq ($(words $(SIZES)) $(filter quick full,$(SIZES)),1 $(SIZES))
$(error SIZES=$(SIZES): expected quick or full (a network's operator shapes: ARGS="--sizes from:resnet50"))
endif
endif
WORLD_FLAG := $(if $(filter distributed all,$(subst $(comma), ,$(LEVEL))),--world-size $(WORLD),)

.PHONY: help schema validate study explain bench test lint format venv clean overhead report conformance corpus envs images sif test-apptainer cluster-up cluster-down cluster-status slurm-array gpu-check gpu-wheels

venv: $(STAMP)

# The framework is pinned by its requirements file (also used as a constraint, so resolving the
# extras never drifts to another release). One install: uv where it is (pip's configuration,
# which finds a machine's local torch wheel, passed on), else pip (suite/envs.py: venv_install;
# DLSUITE_INSTALLER=pip forces pip).
# Bytecode: compiled after the install where PYTHONDONTWRITEBYTECODE keeps Python from keeping
# its own; not for make bench, whose one run imports a fraction of it (--lazy-bytecode).
INSTALL = PYTHONPATH="$(CURDIR)" $(PYTHON) -m suite.envs venv $(2) $(VENV) --quiet -r $(REQS) -c $(REQS) -e '.[$(1)]'

$(STAMP): pyproject.toml $(REQS)
	$(call INSTALL,$(EXTRAS))
	@rm -f $(VENV)/.installed-* && touch $@ $(BENCH_STAMP)

$(BENCH_STAMP): pyproject.toml $(REQS)
	@if [ -f $(STAMP) ]; then touch $@; else \
	    $(call INSTALL,torch,--lazy-bytecode) && rm -f $(VENV)/.installed-* && touch $@; fi

# The comment block that opens this file, without its '#'s
help:
	@sed -n '1,/^$$/s/^# \{0,1\}//p' $(firstword $(MAKEFILE_LIST))

bench: $(BENCH_STAMP)
	$(VENV)/bin/dlsuite run --level $(LEVEL) --framework $(FRAMEWORKS) $(QUICK_FLAG) $(WORLD_FLAG) $(ARGS)

# The explanation study: benchmarks/studies/explain_study.py runs the four levels' commands (each
# resumable) and `dlsuite report`; `ARGS=--print` prints the command sequence only.
NETWORK ?= resnet18
OUT     ?= runs/explain-$(NETWORK)
explain: $(STAMP)
	$(PY) -m benchmarks.studies.explain_study --network $(NETWORK) --frameworks $(FRAMEWORKS) --world-size $(WORLD) --out $(OUT) $(ARGS)

# The conformance kit runs inside each framework's own environment (tests/integration/
# test_envs.py), not a second time in this interpreter.
# Two pytest-xdist workers (tests/conftest.py says how the tests are grouped); TEST_WORKERS=0
# runs them in this process.
# As root with apt, the system packages the tests use are installed first (tests/system-deps.sh;
# SYSTEM_DEPS=0 skips that); elsewhere the tests that need them are deselected with a note.
# CPUINFO=tests/cpus/<file>: the whole run as if on that CPU (every CPU fact the suite reads
# comes from the file: suite/cpuinfo.py, tests/cpus/README.md).
TEST_WORKERS ?= 2
SYSTEM_DEPS  ?= 1
CPUINFO      ?=
test: $(STAMP)
	@if [ "$(SYSTEM_DEPS)" != 0 ] && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    bash tests/system-deps.sh; fi
	$(if $(CPUINFO),DLSUITE_CPUINFO="$(abspath $(CPUINFO))") $(PY) -m pytest --ignore=tests/conformance $(if $(filter-out 0,$(TEST_WORKERS)),-n $(TEST_WORKERS) --dist loadscope,) $(PYTEST_ARGS)

# It builds nothing but each framework's environment: suite/envs.py needs only the standard
# library, so it runs from the checkout (no PyTorch needed). With .venv's interpreter where
# there is one: an environment's name hashes the Python that makes it, so the kit tests the
# environment `dlsuite run` (from .venv) uses, also where the system python3 is another
# release; without a .venv, $(PYTHON), which `make venv` makes it from. The kit's corpus tests
# export their models with an interpreter that has PyTorch (.venv after `make venv`, or
# DLSUITE_CORPUS_PYTHON); where there is none they are skipped with one line saying so.
ENVS_PY = $(if $(wildcard $(PY)),$(PY),$(PYTHON))
conformance:
	@for fw in $(subst $(comma), ,$(FRAMEWORK)); do \
	    env=$$(PYTHONPATH="$(CURDIR)" $(ENVS_PY) -m suite.envs create "$$fw" --with pytest) || exit 1; \
	    echo "== conformance kit: $$fw in $$env"; \
	    DLSUITE_CONFORMANCE="$$fw" PYTHONPATH="$(CURDIR)" "$$env/bin/python" -m pytest tests/conformance $(PYTEST_ARGS) || exit 1; \
	done

# The whole test corpus (tests/corpus.py: every export) in each network-level framework's kit;
# the kit alone (make conformance, CI) runs its CI subset. Not part of make bench.
# (default: from the registry, every adapter with the network words that runs the network level)
CORPUS_FRAMEWORKS ?= $(shell $(PY) -c 'from suite.adapters import ADAPTERS as A; \
    print(",".join(n for n in A.names() if {"network"} <= A.load(n).words & A.load(n).levels))')
corpus: $(STAMP)
	@for fw in $(subst $(comma), ,$(CORPUS_FRAMEWORKS)); do \
	    env=$$($(VENV)/bin/dlsuite envs create "$$fw" --with pytest) || exit 1; \
	    echo "== the whole corpus: $$fw in $$env"; \
	    DLSUITE_CORPUS_ALL=1 DLSUITE_CONFORMANCE="$$fw" PYTHONPATH="$(CURDIR)" "$$env/bin/python" -m pytest tests/conformance/test_corpus.py $(PYTEST_ARGS) || exit 1; \
	done

# (the suite is all it needs: the lighter install make bench makes, not the dev tools and corpus)
envs: $(BENCH_STAMP)
	$(VENV)/bin/dlsuite envs list

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

format: $(STAMP)
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

# schemas/config.schema.json and docs/guide/configuration.md's option table, from the one declaration
# of each option (suite/settings.py); tests/unit/test_options.py fails when they are not current
schema: $(STAMP)
	$(VENV)/bin/python -m suite.config --write

# The validation scripts (benchmarks/validation/): the suite against bare framework loops, each
# printing its suite/bare table; SMOKE=1: tiny sizes, that each runs (CI's
# tests/integration/test_validation_smoke.py); ONLY=overhead,allreduce_vs_bare: those only.
# One script with its own options: .venv/bin/python -m benchmarks.validation.overhead --help.
SMOKE ?=
ONLY  ?=
validate: $(STAMP)
	$(PY) -m benchmarks.validation $(if $(SMOKE),--smoke,) $(if $(ONLY),--only $(ONLY),)

overhead: $(STAMP)
	$(PY) -m benchmarks.validation.overhead $(ARGS)

# The studies that write pages of docs/ (benchmarks/studies/): `make study` lists them and the
# page each writes; make study NAME=frameworks_cpu ARGS="--frameworks pytorch,jax" runs one.
NAME ?=
study: $(STAMP)
	$(PY) -m benchmarks.studies $(NAME) $(ARGS)

report: $(STAMP)
	@test -n "$(RUN)" || { echo "make report RUN=<run-dir> [RUN='dir1 dir2']: name the run directory (the --out of dlsuite run)" >&2; exit 2; }
	$(VENV)/bin/dlsuite report $(RUN)

# Images: BASE empty = debian:bookworm-slim from a registry; WHEELHOUSE set = install from that
# directory only, filled first on this host (pip download, this host's pip configuration).
BASE       ?=
WHEELHOUSE ?=
images: $(STAMP)
	$(VENV)/bin/dlsuite images build --framework $(FRAMEWORK) $(if $(BASE),--base $(BASE),) \
	    $(if $(WHEELHOUSE),--wheelhouse $(WHEELHOUSE) --prepare-wheelhouse,) $(ARGS)

sif: $(STAMP)
	$(VENV)/bin/dlsuite images sif --framework $(FRAMEWORK) $(ARGS)

# Apptainer required (no silent deselection); needs root for the Docker daemon and the cluster.
test-apptainer: $(STAMP)
	DLSUITE_REQUIRE_APPTAINER=1 $(PY) -m pytest tests/integration/test_apptainer.py --durations=0 $(PYTEST_ARGS)

# The local Slurm cluster (cluster/local-cluster.sh; DLSUITE_CLUSTER_DIR, DLSUITE_CLUSTER_NODES).
# Then: dlsuite run --scheduler slurm --site local ... (docs/guide/clusters.md)
cluster-up:
	bash cluster/local-cluster.sh up

cluster-down:
	bash cluster/local-cluster.sh down

cluster-status:
	bash cluster/local-cluster.sh status

# benchmarks/studies/slurm_array.py (a study): its own cluster on free ports (docs/guide/clusters.md, "At scale")
slurm-array: $(STAMP)
	$(PY) -m benchmarks.studies.slurm_array $(ARGS)

# The GPU machine's own python3 (PyTorch with CUDA, torchvision, JAX, CuPy, pynvml) runs the
# suite from source; the few host dependencies it lacks come as wheels from .gpu-wheels/, which
# the script installs into .gpu-site/ (no index, no venv). DEVICE=cpu: this machine's .venv.
DEVICE     ?= cuda
OUT_DIR    ?=
GPU_PYTHON ?= $(if $(filter cpu,$(DEVICE)),$(PY),python3)
GPU_WHEELS := .gpu-wheels
#: what the lent machine's Python 3.12 lacks of the host's dependencies (MACHINE-NOTES)
GPU_WHEEL_PKGS := jsonschema referencing rpds-py jsonschema-specifications
gpu-check:
	$(GPU_PYTHON) -m benchmarks.validation.gpu_check --device $(DEVICE) $(if $(OUT_DIR),--out $(OUT_DIR),) $(ARGS)

# Wheels for the GPU machine's Python 3.12 (manylinux x86_64), at the versions of this .venv.
gpu-wheels: $(STAMP)
	@mkdir -p $(GPU_WHEELS)
	@for pkg in $(GPU_WHEEL_PKGS); do \
	    v=$$($(PY) -c "import importlib.metadata as m; print(m.version('$$pkg'))") || exit 1; \
	    $(PY) -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
	        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
	        -d $(GPU_WHEELS) "$$pkg==$$v" || exit 1; done
	@ls $(GPU_WHEELS)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache *.egg-info
