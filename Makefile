# The two commands of the README. Each creates or refreshes .venv by itself.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
EXTRAS ?= dev
STAMP  := $(VENV)/.installed

.PHONY: demo test install clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# torch first and pinned: on the dev machines 2.13.0 is a local CPU wheel; any other spec
# pulls GBs of CUDA packages. pyproject keeps torch>=2.4 for users.
$(STAMP): $(BIN)/python pyproject.toml Makefile
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e ".[$(EXTRAS)]"
	touch $@

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/genrl-swarm run --recipe bandit

test: $(STAMP)
	$(BIN)/python -m pytest -q

clean:
	rm -rf $(VENV) runs .pytest_cache .mypy_cache
