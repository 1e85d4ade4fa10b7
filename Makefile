# Two entry points for a fresh machine: `make demo` and `make test`.
# Set-up takes the CPU build of torch (torch==2.13.0, from PIP_FIND_LINKS / /opt/wheels when
# present) so CPU-only machines never download a multi-GB CUDA build.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
TORCH_SPEC ?= torch==2.13.0
FIND_LINKS := $(if $(wildcard /opt/wheels),--find-links /opt/wheels,)
STAMP  := $(VENV)/.ckpt-installed

.PHONY: setup demo test lint bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q $(FIND_LINKS) "$(TORCH_SPEC)"
	$(BIN)/pip install -q $(FIND_LINKS) -e ".[dev,ray]"
	touch $(STAMP)

setup: $(STAMP)

demo: $(STAMP)
	$(BIN)/ckpt demo

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/python -m pytest

lint: $(STAMP)
	$(BIN)/ruff check .

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis
