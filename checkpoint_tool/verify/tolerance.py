"""How close the converted layer's runtime output must be to the source reference.

The converted checkpoint holds the *same quantized bytes* as the source (moved, renamed,
padded with exact zeros, fused into slots), so the reference (float64 on decoded weights) and
the runtime (grouped GEMM) differ only by:

- accumulation order in float32 (split-K, TP partial sums, fused slot vs separate MLP):
  ~1e-7 relative, bounded here at 2e-5 -- weight-only paths (BF16, FP8 weight-only, MXFP4,
  NVFP4 run W4A16 as in vLLM) on CPU, where the activations stay float32;
- w8a8 (block FP8 with dynamic activations): both sides quantize activations per token and
  128-group to FP8, and an intermediate value that lands within a float32 rounding of an FP8
  tie may round the other way (one FP8 step, 1/16 relative, on a few elements): 1e-3;
- on a GPU the Triton kernels take bf16 activations (as vLLM runs them): bf16 rounding of
  inputs, intermediates and per-rank outputs, ~3e-3 relative (H200, synth presets): 1e-2.
  The torch backend runs float32 activations on any device, with the float32 bounds above.

Any real conversion error (a byte of one expert, a swapped expert, a lost shared expert, a
scale off by a power of two) moves the output by far more: the checks in tests/verify show it.

``max_rel`` bounds ``max |got - ref| / max |ref|`` (catches an error concentrated on one token
or one channel that the L2 norm averages away); it is 5x the L2 bound.

Example::

    tol = tolerance_for([scheme_mxfp4], bf16_activations=False)
    tol.rel, tol.max_rel, tol.basis   # (2e-05, 0.0001, 'weight-only mxfp4/32, float32 activations')
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from checkpoint_tool.formats import format_of
from checkpoint_tool.quant.scheme import Scheme

WEIGHT_ONLY_FP32 = 2e-5
W8A8_FP32 = 1e-3
BF16_ACTIVATIONS = 1e-2
MAX_FACTOR = 5.0


@dataclass(frozen=True)
class Tolerance:
    rel: float
    max_rel: float
    basis: str


def is_w8a8(scheme: Scheme) -> bool:
    """The runtime quantizes activations too (``Format.runs_w8a8``: block FP8 with dynamic
    activations quantizes them to FP8)."""
    return format_of(scheme).runs_w8a8(scheme)


def tolerance_for(schemes: Iterable[Scheme], *, bf16_activations: bool) -> Tolerance:
    """The bound for a layer whose expert projections use ``schemes``, run with bf16 or
    float32 activations."""
    schemes = list(schemes)
    distinct = sorted({s.short() for s in schemes})
    w8a8 = any(is_w8a8(s) for s in schemes)
    kind = "w8a8" if w8a8 else "weight-only"
    names = ", ".join(distinct) or "no experts"
    if bf16_activations:
        rel = BF16_ACTIVATIONS
        basis = f"{kind} {names}, bf16 activations"
    elif w8a8:
        rel = W8A8_FP32
        basis = f"w8a8 {names} (FP8 activation rounding), float32 activations"
    else:
        rel = WEIGHT_ONLY_FP32
        basis = f"weight-only {names}, float32 activations"
    return Tolerance(rel=rel, max_rel=rel * MAX_FACTOR, basis=basis)
