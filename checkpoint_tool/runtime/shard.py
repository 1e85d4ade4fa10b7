"""Tensor-parallel slices of a MoE layer's experts, with zero padding of the intermediate dim.

vLLM's TP layout for experts: gate and up are column-parallel (rows of ``[I, H]`` split),
down is row-parallel (columns of ``[H, I]`` split); the partial outputs of the ranks are summed.
``I`` is first padded up to ``tp x alignment`` (FP8 block rows/cols, MX/NV group columns;
and ``pad_multiple`` per rank) with zero weights and neutral scales, which is exact:
``silu(0) * 0 = 0`` and zero columns of down add nothing. Slicing and padding go through the
codecs (``codec.pad`` / ``codec.slice``), which keep packing and scale groups whole.

Biases (gpt-oss): gate/up biases are sliced and zero padded with their rows; the down bias
is added once, on rank 0 (zeros elsewhere), as vLLM's ``gpt_oss.py`` ``_load_weights_mxfp4``
loads ``w2_bias`` ("only load on rank 0 to avoid duplication"). Padded rows stay exact under
swigluoai too: a zero gate gives ``0 * sigmoid(0) * (0 + 1) = 0``.

Example (MXFP4, I = 96, tp = 2): I padded to 128 (2 ranks x 64, a multiple of 32);
rank 1 gets gate/up rows 64..127 (32 real + 32 zero) and down columns 64..127.
"""

from __future__ import annotations

import math

import torch

from checkpoint_tool.errors import AlignmentError, UsageError
from checkpoint_tool.quant.codecs import get_codec
from checkpoint_tool.quant.storage import round_up
from checkpoint_tool.runtime.weights import ExpertWeights, MoeLayerWeights, Projection


def shard_layer(
    layer: MoeLayerWeights, tp: int, rank: int, *, pad_multiple: int = 1
) -> MoeLayerWeights:
    """Rank ``rank`` of ``tp``: every expert (routed, fused slots, shared) sliced alike."""
    experts = [shard_expert(ex, tp, rank, pad_multiple=pad_multiple) for ex in layer.experts]
    shared = [shard_expert(ex, tp, rank, pad_multiple=pad_multiple) for ex in layer.shared]
    return layer.with_experts(experts, shared)


def rank_intermediate(ex: ExpertWeights, tp: int, *, pad_multiple: int = 1) -> int:
    """Padded intermediate size per rank of expert ``ex`` (a multiple of every alignment)."""
    shape_gu = (ex.gate.out_features, ex.gate.in_features)
    shape_d = (ex.down.out_features, ex.down.in_features)
    align = math.lcm(
        _codec(ex.gate).alignment(-2, shape_gu),
        _codec(ex.up).alignment(-2, shape_gu),
        _codec(ex.down).alignment(-1, shape_d),
        max(1, pad_multiple),
    )
    return round_up(-(-ex.intermediate // tp), align)


def shard_expert(ex: ExpertWeights, tp: int, rank: int, *, pad_multiple: int = 1) -> ExpertWeights:
    """Rank ``rank``'s slice of one expert: gate/up rows and down columns, zero padded."""
    if tp < 1 or not 0 <= rank < tp:
        raise UsageError(f"TP rank {rank} is not in 0..{tp - 1}")
    per_rank = rank_intermediate(ex, tp, pad_multiple=pad_multiple)
    start, stop = rank * per_rank, (rank + 1) * per_rank
    down = _slice(ex.down, -1, start, stop, tp * per_rank)
    if down.bias is not None and rank:
        down = Projection(down.parts, down.scheme, down.name, torch.zeros_like(down.bias))
    return ExpertWeights(
        gate=_slice(ex.gate, -2, start, stop, tp * per_rank),
        up=_slice(ex.up, -2, start, stop, tp * per_rank),
        down=down,
    )


def _slice(proj: Projection, dim: int, start: int, stop: int, padded: int) -> Projection:
    codec = _codec(proj)
    parts = dict(proj.parts)
    size = proj.out_features if dim == -2 else proj.in_features
    try:
        if padded > size:
            parts = codec.pad(parts, dim, padded - size)
        parts = codec.slice(parts, dim, start, stop)
    except AlignmentError as exc:
        raise AlignmentError(
            f"{proj.label}: TP slice [{start}, {stop}) on dim {dim}: {exc}"
        ) from exc
    bias = proj.bias
    if bias is not None and dim == -2:
        if padded > size:
            bias = torch.cat([bias, bias.new_zeros(padded - size)])
        bias = bias[start:stop]
    return Projection(parts, proj.scheme, proj.name, bias)


def _codec(proj: Projection):  # -> codecs.WeightCodec
    return get_codec(proj.scheme)
