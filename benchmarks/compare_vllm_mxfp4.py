"""Element-level comparison of ckpt's MXFP4 (= AMD Quark 0.13's export) with vLLM's online
quantizer ``downcast_to_mxfp`` (``vllm/model_executor/layers/quantization/utils/mxfp4_utils.py``),
run on CPU under ``TRITON_INTERPRET=1``.

vLLM's two Triton kernels (``_compute_quant_and_scale``, ``_downcast_to_mxfp``) and its host
wrapper are taken from the vLLM source file given (``--vllm-file``, e.g. unpacked from
``pip download vllm==0.33.0 --no-deps``) and executed with ``triton`` alone, so vLLM itself need
not be importable. Inputs: seeded BF16 weights (normal, and adversarial: E2M1 ties at many
binades, negatives that round to zero, all-zero groups). Prints, per input: elements and scales
that differ, and which rule explains each difference.

Usage::

    TRITON_INTERPRET=1 python benchmarks/compare_vllm_mxfp4.py --vllm-file PATH/mxfp4_utils.py
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from checkpoint_tool.quant.requant.mxfp4 import quantize_mxfp4

KERNELS = ("_compute_quant_and_scale", "_downcast_to_mxfp", "permute_shape", "downcast_to_mxfp")


def load_vllm(path: Path):  # type: ignore[no-untyped-def]
    """``downcast_to_mxfp`` from vLLM's source, with only ``triton`` / ``torch`` imported."""
    import triton
    import triton.language as tl

    tree = ast.parse(path.read_text())
    funcs = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in KERNELS]
    found = {f.name for f in funcs}
    if found != set(KERNELS):
        raise SystemExit(f"{path}: missing {sorted(set(KERNELS) - found)}")
    module = ast.Module(body=funcs, type_ignores=[])
    ns = {"triton": triton, "tl": tl, "torch": torch}
    filename = str(path)
    code = compile(module, filename, "exec")
    # triton.jit reads the source of each kernel: keep the file's lines reachable
    import linecache

    linecache.cache[filename] = (
        len(path.read_text()),
        None,
        path.read_text().splitlines(True),
        filename,
    )
    exec(code, ns)
    return ns["downcast_to_mxfp"]


def adversarial(rows: int, cols: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    ties = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 6.0, 7.0, 0.5, 1.0, 1.5, 2.0, 3.0])
    pick = ties[torch.randint(0, len(ties), (rows, cols), generator=g)]
    sign = torch.where(torch.rand(rows, cols, generator=g) < 0.5, -1.0, 1.0)
    w = pick * sign * 2.0 ** torch.randint(-20, 10, (rows, 1), generator=g).float()
    w[1] = 0.0
    w[2, :64] = -(torch.rand(64, generator=g) * 0.1)
    w[2, 0] = -6.0
    return w.to(torch.bfloat16)


def compare(x: torch.Tensor, downcast) -> dict[str, object]:  # type: ignore[no-untyped-def]
    ours_w, ours_s = quantize_mxfp4(x)
    v_w, v_s, _ = downcast(x, axis=-1)
    v_w, v_s = v_w.contiguous(), v_s.contiguous()
    lo = lambda b: torch.stack((b & 0x0F, b >> 4), dim=-1).reshape(b.shape[0], -1)  # noqa: E731
    a, b = lo(ours_w), lo(v_w)
    diff = a != b
    neg_zero = diff & (a == 0) & (b == 8)
    scale_diff = ours_s != v_s
    zero_group = (x.float().abs().reshape(x.shape[0], -1, 32).amax(-1) == 0) & scale_diff
    return {
        "elements": x.numel(),
        "elements_differ": int(diff.sum()),
        "of_which_negative_zero": int(neg_zero.sum()),
        "scales": ours_s.numel(),
        "scales_differ": int(scale_diff.sum()),
        "of_which_all_zero_group": int(zero_group.sum()),
        "unexplained": int(diff.sum() - neg_zero.sum()) + int(scale_diff.sum() - zero_group.sum()),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vllm-file", type=Path, required=True)
    ap.add_argument("--rows", type=int, default=256)
    ap.add_argument("--cols", type=int, default=1024)
    args = ap.parse_args()
    if os.environ.get("TRITON_INTERPRET") != "1":
        raise SystemExit(
            "set TRITON_INTERPRET=1 (vLLM's Triton kernels run on CPU in the interpreter)"
        )
    downcast = load_vllm(args.vllm_file)
    g = torch.Generator().manual_seed(0)
    normal = (torch.randn(args.rows, args.cols, generator=g) * 0.02).to(torch.bfloat16)
    out = {
        "normal": compare(normal, downcast),
        "adversarial": compare(adversarial(args.rows, args.cols, 1), downcast),
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
