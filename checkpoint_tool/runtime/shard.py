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
from functools import lru_cache

import torch

from checkpoint_tool.errors import AlignmentError, InputError, UsageError
from checkpoint_tool.quant.codecs import get_codec
from checkpoint_tool.quant.codecs.ops import apply_pad, apply_region
from checkpoint_tool.quant.scheme import Scheme
from checkpoint_tool.quant.storage import round_up
from checkpoint_tool.regions import Pad, Region
from checkpoint_tool.runtime.weights import ExpertWeights, MoeLayerWeights, Projection

#: a projection's form: its scheme and each role's storage shape (every expert of a layer has
#: the same few, so the slicing plan of a form is worked out once: ``_slice_plan``)
Form = tuple[Scheme, tuple[tuple[str, tuple[int, ...]], ...]]


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
    schemes = (ex.gate.scheme, ex.up.scheme, ex.down.scheme)
    return _memo(_rank_intermediate, schemes, shape_gu, shape_d, ex.intermediate, tp, pad_multiple)


@lru_cache(maxsize=256)
def _rank_intermediate(
    schemes: tuple[Scheme, Scheme, Scheme],
    shape_gu: tuple[int, int],
    shape_d: tuple[int, int],
    intermediate: int,
    tp: int,
    pad_multiple: int,
) -> int:
    gate, up, down = (get_codec(s) for s in schemes)
    align = math.lcm(
        gate.alignment(-2, shape_gu),
        up.alignment(-2, shape_gu),
        down.alignment(-1, shape_d),
        max(1, pad_multiple),
    )
    return round_up(-(-intermediate // tp), align)


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
    try:
        pads, regions = _memo(_slice_plan, _form(proj), dim, start, stop, padded)
    except AlignmentError as exc:
        raise AlignmentError(
            f"{proj.label}: TP slice [{start}, {stop}) on dim {dim}: {exc}"
        ) from exc
    except InputError:
        get_codec(proj.scheme).check_parts(proj.parts, name=proj.name)  # the same error, named
        raise
    parts = {}
    for role, t in proj.parts.items():
        pad, region = pads.get(role), regions.get(role)
        if pad is not None:
            t = apply_pad(t, pad)
        parts[role] = apply_region(t, region) if region is not None else t
    bias = proj.bias
    if bias is not None and dim == -2:
        size = proj.out_features
        if padded > size:
            bias = torch.cat([bias, bias.new_zeros(padded - size)])
        bias = bias[start:stop]
    return Projection(parts, proj.scheme, proj.name, bias)


@lru_cache(maxsize=1024)
def _slice_plan(
    form: Form, dim: int, start: int, stop: int, padded: int
) -> tuple[dict[str, Pad | None], dict[str, Region | None]]:
    """(pads, then regions) per role that take a projection of ``form`` to its TP slice
    ``[start, stop)`` of ``dim``, padded to ``padded`` on that dim first: the codec's
    ``pad`` then ``slice``, worked out (and the form checked) once per form."""
    codec = get_codec(form[0])
    shape = codec.check_parts(dict(form[1]))
    axis = dim % len(shape)
    pads: dict[str, Pad | None] = {}
    if padded > shape[axis]:
        pads = codec.storage_pads(shape, dim, padded - shape[axis])
        shape = (*shape[:axis], padded, *shape[axis + 1 :])
    return pads, codec.storage_regions(shape, dim, start, stop)


def _memo(fn, *key):  # type: ignore[no-untyped-def]
    """``fn(*key)`` from its cache; a scheme that cannot be hashed (one holding a dict, such
    as a per-tensor override table) is worked out every time."""
    try:
        return fn(*key)
    except TypeError:  # unhashable: lru_cache raises before calling ``fn``
        return fn.__wrapped__(*key)


def _form(proj: Projection) -> Form:
    return proj.scheme, tuple((r, tuple(t.shape)) for r, t in proj.parts.items())
