"""gpt-oss's fused gate/up projection: rows interleaved ``[g0, u0, g1, u1, ...]``, split apart.

gpt-oss stores each layer's ``gate_up_proj`` as one ``[E, 2I, ...]`` tensor whose even rows are
the gate's and odd rows the up's (vLLM 0.33 ``fused_moe/activation.py`` ``MoEActivation``:
"SWIGLUOAI expects gate/up *interleaved* in w13 ([gate0, up0, gate1, ...]), as in gpt-oss
checkpoints"; ``SwigluOAIAndMul.forward_native`` reads ``x[..., ::2]`` / ``x[..., 1::2]``).
The runtime keeps gate and up as two projections, so a loader splits the rows here: every
storage role whose row axis is the weight's (the weight, per-row scales, the bias) takes its
even or odd rows. Only formats whose rows are independent (granularity 1 on the row axis:
unquantized, MXFP4, NVFP4, FP8 per channel) can be split this way.

Example::

    proj = Projection({"weight": w_u8 [2I, H/2], "scale": s_u8 [2I, H/32]}, scheme,
                      bias=b [2I])
    gate, up = split_interleaved(proj)   # rows 0, 2, 4, ... and 1, 3, 5, ...: [I, H/2] each
"""

from __future__ import annotations

from checkpoint_tool.errors import InputError
from checkpoint_tool.quant.scheme import WeightFormat
from checkpoint_tool.runtime.weights import Projection

#: formats whose every stored role has one entry per weight row (so rows split one by one)
ROW_INDEPENDENT = (
    WeightFormat.UNQUANTIZED,
    WeightFormat.MXFP4,
    WeightFormat.NVFP4,
    WeightFormat.FP8_PER_CHANNEL,
)


def split_interleaved(proj: Projection) -> tuple[Projection, Projection]:
    """``(gate, up)`` of an interleaved gate/up projection ``[2I, in]`` (rows ``0::2``, ``1::2``)."""
    rows = proj.out_features
    if rows % 2:
        raise InputError(f"{proj.label}: interleaved gate/up has an odd row count {rows}")
    if proj.format not in ROW_INDEPENDENT:
        raise InputError(
            f"{proj.label}: {proj.format.value} rows are not stored one by one; an interleaved "
            "gate/up split needs unquantized, mxfp4, nvfp4 or fp8 per-channel storage"
        )
    halves = []
    for first in (0, 1):
        parts = {}
        for role, t in proj.parts.items():
            # per-row roles have the rows first; per-matrix ones (a global scale) stay whole
            parts[role] = t[first::2].contiguous() if t.dim() and t.shape[0] == rows else t
        bias = None if proj.bias is None else proj.bias[first::2].contiguous()
        label = f"{proj.label}[{'gate' if first == 0 else 'up'} rows]"
        halves.append(Projection(parts, proj.scheme, label, bias))
    return halves[0], halves[1]
