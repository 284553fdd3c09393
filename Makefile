# Idempotent entry points: both create .venv on first use and reinstall only
# when a requirements file changes.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: test demo clean

$(PY):
	$(PYTHON) -m venv $(VENV)

$(STAMP): requirements.txt requirements-dev.txt | $(PY)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements-dev.txt
	touch $(STAMP)

test: $(STAMP)
	$(PY) -m pytest -q -n 2 --dist worksteal tests

demo: $(STAMP)
	$(PY) demo.py

clean:
	rm -rf $(VENV) demo_output
