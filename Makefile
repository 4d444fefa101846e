# Two commands on a fresh machine: `make demo` and `make test` (see README.md).
VENV ?= .venv
PY := $(VENV)/bin/python
SHARED_DATA := ../shared/data/locomo_observations.truths.jsonl
DEMO_DATA ?= $(if $(wildcard $(SHARED_DATA)),$(SHARED_DATA),samples/demo.truths.jsonl)
export LITELLM_LOCAL_MODEL_COST_MAP := True

.PHONY: install demo test test-slow

install: $(VENV)/.installed

$(VENV)/.installed: requirements/base.txt requirements/test.txt requirements/nodeps.txt
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements/test.txt
	$(PY) -m pip install -q --no-deps -r requirements/nodeps.txt
	touch $@

demo: install
	$(PY) manage.py migrate --verbosity 0
	$(PY) manage.py load_truths $(DEMO_DATA)
	$(PY) manage.py consolidate_truths --dry-run --verbosity 0
	$(PY) manage.py consolidate_truths --sync

test: install
	$(PY) -m pytest
