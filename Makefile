# Everything builds its own virtual environment from pinned requirements:
# a machine needs only python3 (3.11), pip and make.
#
#   make demo    fp32 vs fp16 vs fp16 + loss scaling on scikit-learn's digits:
#                table, verdict, runs/digits/digits_demo.png, TensorBoard runs;
#                exits 1 if the run does not show the effect
#   make demo-readme  the same, drawing docs/digits_demo.png and writing its
#                table into README.md
#   make bert-demo  BERT-style fp16 pre-training (clipping + accumulation)
#                with two loss-scale managers side by side; exits 1 if the
#                amax-set scale does not skip 10x less at the same loss;
#                draws runs/bert/bert_demo.png
#   make bert-demo-docs  the same, drawing docs/bert_demo.png
#   make test    the installed-wheel check, the test suite on TensorFlow
#                2.21 and on TensorFlow 2.15 (with every Python block and
#                link of README.md and docs/), and the documentation build
#   make check   the quick subset: the suite on TensorFlow 2.21 only
#                (TESTS=tests/managers or PYTEST_ARGS="-k amax" narrow it)
#   make docs    the documentation site into site/ (MkDocs, warnings as
#                errors); open site/index.html
#   make bench   overhead benchmarks, the opt-in options, mp_optimizer.horovod on two
#                processes, bfloat16 vs float32, the finite check's two
#                readings of a float16 gradient, every contender against the
#                cheapest exact skip and on realistic models, then the growth
#                with the number of variables (writes BENCHMARKS.md and
#                docs/scaling.png)
#   make bench-codemod  mp-optimizer-migrate on a big file and a model-zoo tree,
#                then on hostile shapes (long, deep, repetitive: 5 MB each)
#   make soak    20,000-step soak run
#   make test-horovod  TF 2.15 + Horovod built from source (about 12 minutes); also
#                runs the same script on mp_optimizer.horovod (TF 2.21) and compares
#   make test-slurm  mp_optimizer.horovod under a real Slurm's srun: installs
#                slurm-wlm and munge with apt-get if missing (root or sudo),
#                runs a one-node Slurm on 127.0.0.1 for the test, then stops it

PYTHON ?= python3
VENV := .venv
NEWEST := 2.21
OLDEST := 2.15
PYTEST_ARGS ?=
# What the suite runs: `make check TESTS=tests/managers` runs one folder.
TESTS ?= tests
# The suite runs in JOBS processes (pytest-xdist); `make check JOBS=0` runs
# it in this one (as `--pdb` wants).
JOBS ?= 2
export TF_CPP_MIN_LOG_LEVEL := 2
export PYTHONDONTWRITEBYTECODE := 1

.PHONY: demo demo-readme bert-demo bert-demo-docs docs test check test-package test-horovod test-slurm bench bench-codemod soak venvs clean

# .venv/tf2.21/.ready: a venv with the pinned requirements and this project.
$(VENV)/tf%/.ready: requirements/tf%.txt setup.py pyproject.toml
	rm -rf $(VENV)/tf$*
	$(PYTHON) -m venv $(VENV)/tf$*
	$(VENV)/tf$*/bin/python -m pip install --quiet --disable-pip-version-check \
	    -r requirements/tf$*.txt
	$(VENV)/tf$*/bin/python -m pip install --quiet --disable-pip-version-check \
	    --no-deps --no-build-isolation -e .
	touch $@

venvs: $(VENV)/tf$(NEWEST)/.ready $(VENV)/tf$(OLDEST)/.ready

demo: $(VENV)/tf$(NEWEST)/.ready
	$(VENV)/tf$(NEWEST)/bin/python examples/digits_demo.py

demo-readme: $(VENV)/tf$(NEWEST)/.ready
	$(VENV)/tf$(NEWEST)/bin/python examples/digits_demo.py \
	    --png docs/digits_demo.png --readme README.md

bert-demo: $(VENV)/tf$(NEWEST)/.ready
	$(VENV)/tf$(NEWEST)/bin/python -m examples.bert_pretraining

bert-demo-docs: $(VENV)/tf$(NEWEST)/.ready
	$(VENV)/tf$(NEWEST)/bin/python -m examples.bert_pretraining \
	    --png docs/bert_demo.png

# Runs every part even when one fails, and fails at the end if any did, so
# a red TensorFlow version never hides the other. The environments are
# built first, side by side (each pip install keeps one core busy); one that
# fails is built again by the part that needs it, which then fails.
ENVIRONMENTS := $(VENV)/tf$(NEWEST)/.ready $(VENV)/tf$(OLDEST)/.ready \
    $(VENV)/package/.ready $(VENV)/docs/.ready
test:
	@$(MAKE) --no-print-directory -j 2 $(ENVIRONMENTS) || \
	  echo "make test: an environment failed to build; its part will say"; \
	failed=""; \
	for part in test-package test-$(NEWEST) test-$(OLDEST) docs; do \
	  $(MAKE) --no-print-directory $$part || failed="$$failed $$part"; \
	done; \
	if [ -n "$$failed" ]; then echo "make test: failed:$$failed"; exit 1; fi; \
	echo "make test: test-package, test-$(NEWEST), test-$(OLDEST) and docs passed"

# The documentation site. The API pages are read from the docstrings of the
# package as pip installs it (a copy in .venv/docs/package, without
# TensorFlow: the docstrings are read, not imported), so they follow the
# installed layout rather than the repository's folders. With `--strict`
# any warning fails the build: a broken link or anchor, a page missing from
# the nav, a docstring that does not parse, an API name that does not
# resolve. (`--quiet` would hide the warnings from `--strict` too.)
$(VENV)/docs/.ready: requirements/docs.txt
	rm -rf $(VENV)/docs
	$(PYTHON) -m venv $(VENV)/docs
	$(VENV)/docs/bin/python -m pip install --quiet --disable-pip-version-check \
	    -r requirements/docs.txt
	touch $@

docs: $(VENV)/docs/.ready
	rm -rf $(VENV)/docs/package site
	$(VENV)/docs/bin/python -m pip install --quiet --disable-pip-version-check \
	    --no-deps --no-build-isolation --target $(VENV)/docs/package . \
	    >$(VENV)/docs/install.log 2>&1 || { cat $(VENV)/docs/install.log; exit 1; }
	rm -rf build *.egg-info
	MP_OPTIMIZER_PACKAGE=$(VENV)/docs/package NO_MKDOCS_2_WARNING=1 \
	    $(VENV)/docs/bin/mkdocs build --strict >$(VENV)/docs/build.log 2>&1 \
	    || { grep -v '^INFO' $(VENV)/docs/build.log; exit 1; }
	@echo "make docs: site/index.html"

# Builds the sdist, then the wheel from that sdist, installs the wheel (not
# editable) into its own venv and tests it from an empty directory, so a file
# missing from the distributions fails here. The sdist's test suite must
# also collect without errors, against the installed wheel (the sdist's own
# package folders are removed first: `managers/` becomes mp_optimizer.managers
# only when installed).
# The wheel is installed into .venv/package, a light environment layered on
# .venv/tf2.21: a .pth file puts tf2.21's site-packages after its own, so
# TensorFlow is installed once for the suite, the demo and the wheel check.
# Python reads .pth files only in site directories, so tf2.21's editable
# install of this project stays out of sight; the wheel in .venv/package's
# own site-packages comes first on sys.path.
$(VENV)/package/.ready: requirements/package.txt $(VENV)/tf$(NEWEST)/.ready
	rm -rf $(VENV)/package
	$(PYTHON) -m venv $(VENV)/package
	$(VENV)/package/bin/python -c "import sysconfig; print(sysconfig.get_path('purelib'))" \
	    >$(VENV)/package/site.txt
	$(VENV)/tf$(NEWEST)/bin/python -c "import sysconfig; print(sysconfig.get_path('purelib'))" \
	    >"$$(cat $(VENV)/package/site.txt)/zz_tf$(NEWEST).pth"
	# A pip that shows PEP 639 licence expressions (`pip show`: License-Expression).
	$(VENV)/package/bin/python -m pip install --quiet --disable-pip-version-check \
	    pip==26.3
	$(VENV)/package/bin/python -m pip install --quiet --disable-pip-version-check \
	    -r requirements/package.txt
	touch $@

test-package: $(VENV)/package/.ready
	rm -rf dist build build.log *.egg-info
	$(VENV)/package/bin/python -m build --no-isolation --outdir dist . \
	    >build.log 2>&1 || { cat build.log; exit 1; }
	$(VENV)/package/bin/python -m pip install --quiet --disable-pip-version-check \
	    --no-deps --force-reinstall dist/*.whl
	tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && \
	    cp tests/package/installed_package_check.py $$tmp/test_installed_package.py && \
	    cp tests/package/typing_check.py $$tmp/test_typing.py && \
	    cp README.md $$tmp/ && \
	    cd $$tmp && $(CURDIR)/$(VENV)/package/bin/python -m pytest -q \
	    -p no:cacheprovider test_installed_package.py test_typing.py && \
	    tar xzf $(CURDIR)/dist/*.tar.gz && cd mp_optimizer-* && \
	    rm -rf mp_optimizer managers && \
	    $(CURDIR)/$(VENV)/package/bin/python -m pytest -q -p no:cacheprovider \
	    --collect-only tests >collect.log && tail -n 1 collect.log

# The quick subset: the suite on the newest TensorFlow only. Narrower ones:
# `make check TESTS=tests/managers`, `make check PYTEST_ARGS="-k amax -x"`.
check: test-$(NEWEST)

# `make demo` and `make bench` run on the newest TensorFlow only, so the
# tests that run them (the digits demo, every benchmark script once) are left
# out of the oldest version's suite; the library's tests run on both.
NEWEST_ONLY := tests/test_demo.py tests/benchmarks/test_smoke.py

# Temporary files (pytest's and absltest's) go to a folder removed after.
# Tests are handed to the JOBS processes a class at a time (`loadscope`), so
# a class's setUpClass (a cluster, a demo run) runs once, in one process;
# in collection order (not xdist's most-tests-first), which tests/conftest.py
# starts with the classes marked `long_run`, so no process ends alone on one.
# The ten slowest tests are listed at the end, with the run's load average.
test-%: $(VENV)/tf%/.ready
	tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && \
	    TMPDIR=$$tmp $(VENV)/tf$*/bin/python -m pytest $(TESTS) -q \
	    -p no:cacheprovider -n $(JOBS) --dist loadscope --no-loadscope-reorder \
	    --durations=10 \
	    $(if $(filter $*,$(OLDEST)),$(addprefix --ignore=,$(NEWEST_ONLY))) \
	    $(PYTEST_ARGS); status=$$?; \
	    echo "load average: $$(cut -d' ' -f1-3 /proc/loadavg)"; exit $$status

# Horovod has no wheels: it compiles against the installed TensorFlow (it
# does not build against TF 2.21), so it gets its own TF 2.15 environment.
$(VENV)/horovod/.ready: requirements/tf$(OLDEST).txt setup.py
	rm -rf $(VENV)/horovod
	$(PYTHON) -m venv $(VENV)/horovod
	$(VENV)/horovod/bin/python -m pip install --quiet --disable-pip-version-check \
	    -r requirements/tf$(OLDEST).txt wheel==0.48.0 cmake==3.31.6
	HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_MPI=1 \
	HOROVOD_WITHOUT_PYTORCH=1 HOROVOD_WITHOUT_MXNET=1 \
	    $(VENV)/horovod/bin/python -m pip install --quiet \
	    --disable-pip-version-check --no-build-isolation horovod==0.28.1
	$(VENV)/horovod/bin/python -m pip install --quiet --disable-pip-version-check \
	    --no-deps --no-build-isolation -e .
	touch $@

test-horovod: $(VENV)/horovod/.ready $(VENV)/tf$(NEWEST)/.ready
	PATH=$(CURDIR)/$(VENV)/horovod/bin:$$PATH $(VENV)/horovod/bin/python -m pytest \
	    tests/scale_out/test_horovod.py -q -p no:cacheprovider -rs

# Slurm (docs/horovod.md): apt-get installs slurm-wlm and munge when one of
# SLURM_TOOLS is missing; a one-node Slurm then runs on 127.0.0.1 with its
# key, configuration, state and logs in a temporary folder
# (tests/workers/slurm_loopback.py), for tests/scale_out/test_horovod_slurm.py
# on both TensorFlow versions. The trap cancels its jobs, stops its daemons
# and removes the folder, whatever happened. Under `make test` that module
# skips (it submits jobs only here); here MP_OPTIMIZER_REQUIRE_SLURM=1 runs
# it, and makes a missing Slurm a failure.
SLURM_TOOLS := srun slurmctld slurmd munged
test-slurm: $(VENV)/tf$(NEWEST)/.ready $(VENV)/tf$(OLDEST)/.ready
	@missing=""; for tool in $(SLURM_TOOLS); do \
	  command -v $$tool >/dev/null || missing="$$missing $$tool"; done; \
	if [ -n "$$missing" ]; then \
	  echo "make test-slurm:$$missing missing: apt-get install slurm-wlm munge"; \
	  sudo=$$([ "$$(id -u)" = 0 ] || echo sudo); \
	  install="$$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	      --no-install-recommends \
	      slurm-wlm munge"; \
	  $$install >/dev/null 2>&1 || { $$sudo apt-get update -qq && \
	      $$install >/dev/null; } || exit 1; \
	fi
	@tmp=$$(mktemp -d) && \
	trap '$(PYTHON) tests/workers/slurm_loopback.py stop "$$tmp/slurm"; rm -rf "$$tmp"' EXIT && \
	{ $(PYTHON) tests/workers/slurm_loopback.py start "$$tmp/slurm" || exit 1; } && \
	export SLURM_CONF="$$tmp/slurm/slurm.conf" MP_OPTIMIZER_REQUIRE_SLURM=1 \
	    TMPDIR="$$tmp" && \
	failed=""; for version in $(NEWEST) $(OLDEST); do \
	  echo "make test-slurm: TensorFlow $$version"; \
	  $(VENV)/tf$$version/bin/python -m pytest tests/scale_out/test_horovod_slurm.py \
	      -q -p no:cacheprovider -rs || failed="$$failed $$version"; \
	done; \
	if [ -n "$$failed" ]; then echo "make test-slurm: failed on TensorFlow$$failed"; exit 1; fi

bench: $(VENV)/tf$(NEWEST)/.ready
	$(VENV)/tf$(NEWEST)/bin/python benchmarks/overhead.py
	$(VENV)/tf$(NEWEST)/bin/python benchmarks/options.py
	$(VENV)/tf$(NEWEST)/bin/python benchmarks/horovod_loopback.py
	$(VENV)/tf$(NEWEST)/bin/python benchmarks/bfloat16.py
	$(VENV)/tf$(NEWEST)/bin/python benchmarks/check_readings.py
	$(VENV)/tf$(NEWEST)/bin/python benchmarks/floor.py
	$(VENV)/tf$(NEWEST)/bin/python benchmarks/scaling.py

bench-codemod: $(VENV)/tf$(NEWEST)/.ready
	$(VENV)/tf$(NEWEST)/bin/python benchmarks/codemod_speed.py
	$(VENV)/tf$(NEWEST)/bin/python benchmarks/codemod_shapes.py

soak: $(VENV)/tf$(NEWEST)/.ready
	$(VENV)/tf$(NEWEST)/bin/python -m pytest tests -q -p no:cacheprovider \
	    -m soak --run-soak

clean:
	rm -rf $(VENV) build dist build.log *.egg-info runs site
