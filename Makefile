# Idempotent entry points: both create .venv on first use and reinstall only
# when a requirements file changes.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: test demo interop clean

$(PY):
	$(PYTHON) -m venv $(VENV)

$(STAMP): requirements.txt requirements-dev.txt requirements-text.txt requirements-beam.txt | $(PY)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements-dev.txt -r requirements-text.txt -r requirements-beam.txt
	touch $(STAMP)

# Three workers for two cores: a worker waiting for a fixture that another
# one builds (conftest.build_once), or for a script's subprocess, leaves its
# core to the third.
test: $(STAMP)
	$(PY) -m pytest -q -n 3 --dist worksteal tests

demo: $(STAMP)
	$(PY) demo.py

# Converted models against Hugging Face transformers (tests/interop), in the
# benchmark environment, which has torch and transformers. Their files are
# named check_*.py so that `make test` (the project's venv, no torch) does not
# collect them. One of them fine-tunes MiniLM for minutes.
interop:
	bash bench/setup_bench_env.sh
	bench/.venv/bin/python -m pytest -q -o python_files='check_*.py' tests/interop

clean:
	rm -rf $(VENV) demo_output
