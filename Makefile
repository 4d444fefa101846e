# Two commands on a fresh machine: `make demo` and `make test` (see README.md).
VENV ?= .venv
PY := $(VENV)/bin/python
# The repository's invented sample, whose model verdicts are recorded in samples/ (the demo
# replays them offline); any truths file with DEMO_DATA=path (then DEMO_RECORDED's verdicts miss:
# clusters not in the recording are kept, so use DEMO_JUDGE=llm or rules there).
DEMO_DATA ?= samples/demo.truths.jsonl
# The LoCoMo sessions (non-commercial: read from the shared folder, never copied here), mined
# with the offline extractor when the demo loads the shared LoCoMo truths beside them; none otherwise.
SHARED_DATA := ../shared/data/locomo_observations.truths.jsonl
SHARED_SESSIONS := ../shared/data/locomo_sessions.jsonl
DEMO_SESSIONS ?= $(if $(filter $(SHARED_DATA),$(DEMO_DATA)),$(wildcard $(SHARED_SESSIONS)),)
# The judge: `replay` (default) answers with a real model's recorded verdicts on the sample,
# through litellm from a server on 127.0.0.1 (no key, no network); `llm` calls the configured
# model (a key is needed: README "Using an LLM"); `rules` is the offline rule judge.
DEMO_JUDGE ?= replay
DEMO_RECORDED ?= samples/demo.recorded.jsonl
DEMO_JUDGE_ARGS := $(if $(filter replay,$(DEMO_JUDGE)),--replay "$(DEMO_RECORDED)",)
DEMO_JUDGE_ENV := IRIS_CONSOLIDATION_JUDGE=$(if $(filter replay,$(DEMO_JUDGE)),rules,$(DEMO_JUDGE))
# The dry run lists each would-be merge for the small sample, only its summary for larger files.
DEMO_VERBOSITY ?= $(if $(findstring samples/,$(DEMO_DATA)),1,0)
# The demo's last lines: where to see a merge's and a supersede's lineage in the admin.
define DEMO_POINTERS
from django.db.models import Count
from django.urls import reverse
from iris_consolidation.models import Truth
for reason in ("merged", "superseded"):
    new = Truth.objects.filter(replaces__retired_reason=reason).annotate(n=Count("replaces")).order_by("-n", "pk").first()
    if new:
        url = reverse("admin:iris_consolidation_truth_lineage", args=[new.pk])
        print(f"   {reason}: http://127.0.0.1:8000{url}  #{new.pk} {new.content!r} ({new.user})")
endef
export DEMO_POINTERS
PYTEST_ARGS ?=
export LITELLM_LOCAL_MODEL_COST_MAP := True

.PHONY: install dist demo test test-all test-fast test-slow test-package typecheck bench db-stop

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
	@case "$(DEMO_JUDGE)" in replay|llm|rules) ;; *) echo "make demo: DEMO_JUDGE must be replay, llm or rules (got $(DEMO_JUDGE))" >&2; exit 2;; esac
	@echo "== migrate"
	@$(PY) manage.py migrate --verbosity 0
	@$(PY) manage.py createcachetable
	@echo "== load $(DEMO_DATA)"
	@$(PY) manage.py load_truths --create-users "$(DEMO_DATA)"
	@if [ -n "$(DEMO_SESSIONS)" ]; then \
		echo "== load sessions $(DEMO_SESSIONS)"; \
		$(PY) manage.py load_sessions "$(DEMO_SESSIONS)" && \
		echo "== mine the sessions (offline extractor; every session: --full)" && \
		IRIS_CONSOLIDATION_JUDGE=rules $(PY) manage.py consolidate_truths --sync --only mine --full --verbosity 0; \
	fi
	@echo "== dry run (judge: $(DEMO_JUDGE); nothing is changed)"
	@$(DEMO_JUDGE_ENV) $(PY) manage.py consolidate_truths --dry-run --verbosity $(DEMO_VERBOSITY) $(DEMO_JUDGE_ARGS)
	@echo "== consolidate (judge: $(DEMO_JUDGE))"
	@$(DEMO_JUDGE_ENV) $(PY) manage.py consolidate_truths --sync --verbosity 0 $(DEMO_JUDGE_ARGS)
	@echo "== see it in the admin: $(PY) manage.py createsuperuser, then $(PY) manage.py runserver, and open a lineage (the sources, the judge's reasoning, undo):"
	@$(PY) manage.py shell --no-imports -c "$$DEMO_POINTERS"
	@echo "   every run and review: http://127.0.0.1:8000/admin/iris_consolidation/consolidationrun/"

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

# mypy with django-stubs over the app and the project's settings (pyproject.toml [tool.mypy]);
# about 2 minutes cold on a shared 2-core machine, seconds with its cache (.mypy_cache).
typecheck: install
	$(PY) -m mypy

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
