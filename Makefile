# Developer and CI targets.
#
#   make check   from a clean checkout: make the environments below, then
#                test and asan (what .ci/run runs)
#   make build   build the extensions in place for every Python below
#   make test    typecheck, lint-imports and docs, then the whole suite with
#                torch on $(PYTHON) and on each of $(TORCH_PYTHONS) (there once
#                per tracer mechanism); the tracer tests on each of
#                $(TRACER_PYTHONS), once per mechanism
#   make typecheck  mypy --strict on the package, on $(PYTHON) ([tool.mypy] in
#                pyproject.toml; mypy comes with the test extras)
#   make lint-imports  the package's layers, checked by import-linter
#                ([tool.importlinter] in pyproject.toml; a test extra too)
#   make docs    the manual (docs/, mkdocs.yml) built with mkdocs build --strict
#                into build/site: a broken link or anchor, or a page left out of
#                the nav, fails it (mkdocs comes with the test extras)
#   make asan    the tracer built with AddressSanitizer into $(ASAN_DIR) (the
#                in-place build is left alone), its tests run against it
#   make bench   bench/bench_tracer.py --all on every Python
#
# PYTHON (3.11, the CPU torch pinned in TORCH_SPEC) and TORCH_PYTHONS (3.12,
# 3.13: the ordinary torch wheel from the package index, run on the CPU) run
# everything; TRACER_PYTHONS have no torch and run test/tracer/ only.
# Override any: make test PYTHON=python3.11 TORCH_PYTHONS= TRACER_PYTHONS=
# Each suite runs on PYTEST_JOBS processes (pytest-xdist; 1: without it).

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c

PYTHON ?= .venv/bin/python
TORCH_PYTHONS ?= $(wildcard .venv-3.12/bin/python .venv-3.13/bin/python)
TRACER_PYTHONS ?= $(wildcard .venv-3.9/bin/python .venv-3.10/bin/python)
ALL_PYTHONS := $(PYTHON) $(TORCH_PYTHONS) $(TRACER_PYTHONS)
# absolute paths (asan runs from inside its tree); bare names stay on PATH
ALL_PYTHONS_ABS = $(foreach p,$(ALL_PYTHONS),$(if $(findstring /,$(p)),$(abspath $(p)),$(p)))
TRACER_TESTS := test/tracer
PYTEST_FLAGS ?= -q -p no:cacheprovider
PYTEST_JOBS ?= 2
# loadfile: a module's tests share one worker, so a module-scoped venv is built once
XDIST = $(if $(filter-out 0 1,$(PYTEST_JOBS)),-n $(PYTEST_JOBS) --dist loadfile)

ASAN_DIR ?= build/asan
ASAN_EXAMPLES ?= 60
LIBASAN = $(shell gcc -print-file-name=libasan.so)

# $(call mechanisms,PY): the tracer mechanisms that interpreter offers
mechanisms = $$($(1) -c 'import sys; print("monitoring settrace" if sys.version_info >= (3, 12) else "settrace")')

PY39 ?= $(or $(lastword $(wildcard $(HOME)/.pyenv/versions/3.9*/bin/python3)),$(shell command -v python3.9))
PY310 ?= $(or $(lastword $(wildcard $(HOME)/.pyenv/versions/3.10*/bin/python3)),$(shell command -v python3.10))
PY311 ?= $(or $(lastword $(wildcard $(HOME)/.pyenv/versions/3.11*/bin/python3)),$(shell command -v python3.11))
PY312 ?= $(or $(lastword $(wildcard $(HOME)/.pyenv/versions/3.12*/bin/python3)),$(shell command -v python3.12))
PY313 ?= $(or $(lastword $(wildcard $(HOME)/.pyenv/versions/3.13*/bin/python3)),$(shell command -v python3.13))
TORCH_SPEC ?= torch==2.13.0

.PHONY: check venvs build test typecheck lint-imports docs smoke asan bench clean-asan

check: venvs
	$(MAKE) test asan PYTHON=.venv/bin/python \
	    TORCH_PYTHONS=".venv-3.12/bin/python .venv-3.13/bin/python" \
	    TRACER_PYTHONS=".venv-3.9/bin/python .venv-3.10/bin/python"

venvs: .venv/.installed .venv-3.12/.installed .venv-3.13/.installed \
    .venv-3.9/.installed .venv-3.10/.installed

# $(call torch_venv,DIR,PYTHON,TORCH,EXTRAS): torch first (the shim compiles
# against it), then the package with EXTRAS; TORCH again, so that nothing an
# extra needs can replace the torch the shim was built for
define torch_venv
test -n "$(2)" || { echo "python for $(1) not found"; exit 1; }
$(2) -m venv $(1)
$(1)/bin/python -m pip install -q --upgrade pip setuptools wheel
$(1)/bin/python -m pip install -q "$(3)"
MEMLAB_WERROR=1 $(1)/bin/python -m pip install -q --no-build-isolation -e ".[$(4)]" "$(3)" pytest-xdist
touch $(1)/.installed
endef

# 3.11 also gets the training frameworks (Lightning, transformers), whose
# callbacks' tests skip elsewhere
EXTRAS_311 := test,lightning,transformers

# 3.11: the CPU build pinned in TORCH_SPEC; 3.12, 3.13: the ordinary wheel
.venv/.installed: pyproject.toml setup.py
	$(call torch_venv,.venv,$(PY311),$(TORCH_SPEC),$(EXTRAS_311))

.venv-3.12/.installed .venv-3.13/.installed: .venv-%/.installed: pyproject.toml setup.py
	$(call torch_venv,.venv-$*,$(PY$(subst .,,$*)),torch,test)

.venv-3.9/.installed .venv-3.10/.installed: .venv-%/.installed:
	py="$(PY$(subst .,,$*))"; test -n "$$py" || { echo "python$* not found"; exit 1; }; \
	    $$py -m venv .venv-$*
	.venv-$*/bin/python -m pip install -q --upgrade pip "setuptools>=77" wheel && .venv-$*/bin/python -m pip install -q pytest hypothesis pytest-xdist
	touch $@

build:
	for py in $(PYTHON) $(TORCH_PYTHONS); do \
	    MEMLAB_WERROR=1 $$py setup.py -q build_ext --inplace; \
	done
	for py in $(TRACER_PYTHONS); do \
	    MEMLAB_WERROR=1 MEMLAB_NO_TORCHSHIM=1 $$py setup.py -q build_ext --inplace; \
	done

# The compiled modules first, so a broken build fails in one clear line.
smoke: build
	for py in $(PYTHON) $(TORCH_PYTHONS); do \
	    $$py -c 'import pytorch_memlab._tracer, pytorch_memlab._torchshim, pytorch_memlab._testsource, pytorch_memlab; print("import ok")'; \
	done
	for py in $(TRACER_PYTHONS); do $$py -c 'import sys; sys.path.insert(0, "."); import pytorch_memlab._tracer, pytorch_memlab._testsource'; done

# The package's types ([tool.mypy] in pyproject.toml), on $(PYTHON) only: the
# C extensions are typed by their .pyi stubs, so nothing needs building.
typecheck:
	$(PYTHON) -m mypy

# The manual's links and nav ([validation] in mkdocs.yml); its samples are run
# by test/test_readme.py with the rest of the suite.
docs:
	$(PYTHON) -m mkdocs build --strict -d build/site

# The layers of [tool.importlinter] in pyproject.toml (function-level imports
# included): needs no build either.
LINT_IMPORTS ?= $(dir $(PYTHON))lint-imports
lint-imports:
	$(LINT_IMPORTS)

# The slow tests build packages in fresh venvs with the pinned CPU torch
# (TORCH_SPEC, 3.11 only) and do not depend on the tracer mechanism: they run
# once, on $(PYTHON).
test: smoke typecheck lint-imports docs
	echo "== $(PYTHON): the whole suite"
	PYTHONPATH=$(CURDIR) $(PYTHON) -m pytest $(PYTEST_FLAGS) $(XDIST) test
	for py in $(TORCH_PYTHONS); do \
	    for mech in $(call mechanisms,$$py); do \
	        echo "== $$py, $$mech: the whole suite but the slow install tests"; \
	        PYTHONPATH=$(CURDIR) PYTORCH_MEMLAB_TRACER=$$mech \
	            $$py -m pytest $(PYTEST_FLAGS) $(XDIST) -m "not slow" test; \
	    done; \
	done
	for py in $(TRACER_PYTHONS); do \
	    for mech in $(call mechanisms,$$py); do \
	        echo "== $$py, $$mech: the tracer tests"; \
	        PYTHONPATH=$(CURDIR) PYTORCH_MEMLAB_TRACER=$$mech \
	            $$py -m pytest $(PYTEST_FLAGS) $(XDIST) $(TRACER_TESTS); \
	    done; \
	done

# The ASan build lives in its own tree: a copy of the package's Python files
# plus _tracer built with -fsanitize=address for each interpreter.  Tests run
# from inside that tree so its package, not the in-place one, is imported;
# the first step checks that.  PYTHONMALLOC=malloc lets ASan see Python
# objects too (a reference-count slip becomes a use-after-free report).  ASan
# stops the process at its first report (a failure); the logs are searched as
# well, for reports from subprocesses.
asan: clean-asan
	mkdir -p $(ASAN_DIR)
	tar --exclude='*.so' --exclude=__pycache__ -cf - pytorch_memlab | tar -xf - -C $(ASAN_DIR)
	for py in $(ALL_PYTHONS); do \
	    tag=$$($$py -c 'import sys; print(sys.implementation.cache_tag)'); \
	    MEMLAB_ASAN=1 MEMLAB_NO_TORCHSHIM=1 MEMLAB_TEST_SOURCE=1 $$py setup.py -q build_ext --force \
	        -b $(ASAN_DIR) -t $(ASAN_DIR)/tmp-$$tag; \
	done
	cd $(ASAN_DIR) && for py in $(ALL_PYTHONS_ABS); do \
	    for mech in $(call mechanisms,$$py); do \
	        echo "== ASan: $$py, $$mech"; \
	        log=asan-$$($$py -c 'import sys; print(sys.implementation.cache_tag)')-$$mech.log; \
	        export LD_PRELOAD=$(LIBASAN) ASAN_OPTIONS=detect_leaks=0 PYTHONMALLOC=malloc \
	            PYTHONPATH=. PYTORCH_MEMLAB_TRACER=$$mech \
	            MEMLAB_PROPERTY_EXAMPLES=$(ASAN_EXAMPLES); \
	        $$py -c 'import os, pytorch_memlab._tracer as t, pytorch_memlab._testsource as s; assert t.__file__.startswith(os.getcwd()) and s.__file__.startswith(os.getcwd()), (t.__file__, s.__file__)'; \
	        $$py -m pytest $(PYTEST_FLAGS) $(addprefix $(CURDIR)/,$(TRACER_TESTS)) \
	            2>&1 | tee $$log; \
	        unset LD_PRELOAD; \
	        if grep -q "ERROR: AddressSanitizer" asan-*.log; then \
	            echo "AddressSanitizer reported an error (see $(ASAN_DIR)/asan-*.log)"; exit 1; \
	        fi; \
	    done; \
	done
	@echo "asan: clean"

clean-asan:
	rm -rf $(ASAN_DIR)

bench: build
	for py in $(ALL_PYTHONS); do \
	    PYTHONPATH=$(CURDIR) $$py bench/bench_tracer.py --all; \
	done
