"""ckpt's MXFP4 against vLLM's online quantizer ``downcast_to_mxfp`` (Triton, interpreted on CPU).

Runs ``benchmarks/compare_vllm_mxfp4.py`` on the installed vLLM's ``mxfp4_utils.py`` (the
engine tier's venv; skipped where vLLM is not installed). The two agree on every scale and every
element value; the bytes differ only where the encodings do: vLLM writes a negative value that
rounds to zero as -0 (code 8, Quark +0) and an all-zero group's scale as byte 0 (Quark 1).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.vllm

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "compare_vllm_mxfp4.py"


def _vllm_file() -> Path:
    spec = importlib.util.find_spec("vllm")
    if spec is None or spec.origin is None:
        pytest.skip("vLLM is not installed (the engine tier: make test-vllm)")
    path = Path(spec.origin).parent / "model_executor/layers/quantization/utils/mxfp4_utils.py"
    if not path.is_file():
        pytest.skip(f"{path.name} not in this vLLM")
    return path


def test_differences_are_only_negative_zero_and_zero_group_scales() -> None:
    pytest.importorskip("triton")
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "--vllm-file", str(_vllm_file()), "--rows", "64",
         "--cols", "256"],
        check=True, capture_output=True, text=True, env=env,
    )  # fmt: skip
    result = json.loads(out.stdout)
    for case in result.values():
        assert case["unexplained"] == 0, result
    assert result["normal"]["of_which_negative_zero"] > 0  # the difference is real, and named
    assert result["normal"]["scales_differ"] == 0
    assert result["adversarial"]["of_which_all_zero_group"] > 0
