# Two commands on a fresh machine: `make demo` and `make test` (see README.md).
VENV ?= .venv
PY := $(VENV)/bin/python
SHARED_DATA := ../shared/data/locomo_observations.truths.jsonl
# The LoCoMo truths where the team's shared folder is beside the clone, else the project's sample.
DEMO_DATA ?= $(if $(wildcard $(SHARED_DATA)),$(SHARED_DATA),samples/demo.truths.jsonl)
# The LoCoMo sessions (non-commercial: read from the shared folder, never copied here), mined
# with the offline extractor when the shared folder is beside the clone; none otherwise.
SHARED_SESSIONS := ../shared/data/locomo_sessions.jsonl
DEMO_SESSIONS ?= $(wildcard $(SHARED_SESSIONS))
# The demo uses the offline rule judge whatever .env says; `make demo DEMO_JUDGE=llm` to change.
DEMO_JUDGE ?= rules
# The dry run lists each would-be merge for the small sample, only its summary for larger files.
DEMO_VERBOSITY ?= $(if $(findstring samples/,$(DEMO_DATA)),1,0)
PYTEST_ARGS ?=
export LITELLM_LOCAL_MODEL_COST_MAP := True

.PHONY: install dist demo test test-all test-fast test-slow test-package bench db-stop

install: $(VENV)/.installed

# The app's dependencies are declared once, in pyproject.toml; requirements/base.txt installs
# the app from it (editable, with [local]) at the versions of requirements/pins.txt.
$(VENV)/.installed: pyproject.toml requirements/base.txt requirements/pins.txt requirements/test.txt
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check --upgrade pip
	$(PY) -m pip install -q --disable-pip-version-check -r requirements/test.txt
	touch $@

# The wheel and the sdist in dist/ (python -m build; setuptools comes from the package index
# into build's own isolated environment), checked with twine: what `pip install` in a host
# project takes (README "Use it in your own project"). Old builds are removed first, so dist/
# holds exactly one version; build/ and the egg-info are setuptools' leftovers, removed too.
dist: install
	@rm -rf dist build iris_consolidation.egg-info
	@$(PY) -m build --outdir dist . >build.log 2>&1 || { cat build.log >&2; exit 1; }
	@rm -f build.log
	@$(PY) -m twine check --strict dist/*
	@ls dist/*.whl dist/*.tar.gz

demo: install
	@test -f "$(DEMO_DATA)" || { echo "make demo: no truths file at $(DEMO_DATA); set DEMO_DATA=path/to/file.truths.jsonl" >&2; exit 2; }
	@echo "== migrate"
	@$(PY) manage.py migrate --verbosity 0
	@echo "== load $(DEMO_DATA)"
	@$(PY) manage.py load_truths --create-users "$(DEMO_DATA)"
	@if [ -n "$(DEMO_SESSIONS)" ]; then \
		echo "== load sessions $(DEMO_SESSIONS)"; \
		$(PY) manage.py load_sessions "$(DEMO_SESSIONS)" && \
		echo "== mine the sessions (offline extractor; every session: --full)" && \
		IRIS_CONSOLIDATION_JUDGE=rules $(PY) manage.py consolidate_truths --sync --only mine --full --verbosity 0; \
	fi
	@echo "== dry run (judge: $(DEMO_JUDGE); nothing is changed)"
	@IRIS_CONSOLIDATION_JUDGE=$(DEMO_JUDGE) $(PY) manage.py consolidate_truths --dry-run --verbosity $(DEMO_VERBOSITY)
	@echo "== consolidate (judge: $(DEMO_JUDGE))"
	@IRIS_CONSOLIDATION_JUDGE=$(DEMO_JUDGE) $(PY) manage.py consolidate_truths --sync --verbosity 0
	@echo "== see it: $(PY) manage.py createsuperuser, then $(PY) manage.py runserver and open http://127.0.0.1:8000/admin/ (runs, reviews, a merged truth's lineage and undo)"

# pytest's exit 5 means it collected no test: report it, and fail.
define run_pytest
	@$(PY) -m pytest $(1) $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "make: pytest collected no tests (exit 5); counted as a failure." >&2; fi; \
	exit $$rc
endef

# The whole suite but the `slow` fault tests (real qcluster processes killed and restarted,
# 429 waits, schedule catch-up: about 6 minutes more), so that it stays under 10 minutes.
test: install
	$(call run_pytest,-m "not slow and not packaging")

test-all: install
	$(call run_pytest,)

test-fast: install
	$(call run_pytest,-m "not slow and not browser and not packaging")

test-slow: install
	$(call run_pytest,-m "slow and not packaging")

# The wheel built from this clone, installed with [local] into a fresh virtual environment and
# used by a new host project as README's "Use it in your own project" says (about 2 minutes).
test-package: install
	$(call run_pytest,-m packaging)

# The version the benchmark times beside this one, on the same data in the same run (a git
# worktree in .bench-previous); PREVIOUS= (empty) times this version alone.
PREVIOUS ?= d38df08
bench: install
	@if [ -n "$(PREVIOUS)" ]; then git worktree remove --force .bench-previous 2>/dev/null; \
	  git worktree add --quiet --force --detach .bench-previous $(PREVIOUS); fi
	$(PY) benchmarks/phase1.py $(if $(PREVIOUS),--previous .bench-previous)

# The embedded PostgreSQL keeps running between commands (a fast shutdown; it restarts on next use).
db-stop:
	@pid=$$(head -1 .pgdata/postmaster.pid 2>/dev/null); \
	if [ -n "$$pid" ] && kill -INT "$$pid" 2>/dev/null; then echo "Stopped the embedded PostgreSQL (pid $$pid)."; \
	else echo "The embedded PostgreSQL is not running."; fi
