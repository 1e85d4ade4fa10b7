"""Per-rank parameters of a linear site (``LinearSite``): the merged shards of one vLLM linear.

vLLM merges HF modules into one parameter (``q_a_proj`` + ``kv_a_proj_with_mqa``, ``gate`` +
``up``): every shard must share one quantization scheme and end on a scale block boundary.
Each rank holds its storage slice of every shard (codec regions of the split dim: rows of a
column-parallel linear, columns of a row-parallel one), concatenated in shard order;
per-tensor values (a scalar scale per shard) become one entry per shard; a column-parallel
bias is split the same way.

Example (column-parallel ``q_b_proj``, rank 1 of 2)::

    params = linear_params(builder, site)
    params[0].name, params[0].ranks[1].pieces
    # ('model.layers.3.self_attn.mla_attn.q_b_proj.weight',
    #  [Piece(source='model.layers.3.self_attn.q_b_proj.weight', slices=(Region(dim=0, ...),))])
"""

from __future__ import annotations

import math

from checkpoint_tool.catalog.safetensors_format import storage_shape
from checkpoint_tool.errors import AlignmentError, InputError
from checkpoint_tool.plan.layouts.narrow import narrow
from checkpoint_tool.plan.layouts.vllm_params import Param, ParamBuilder
from checkpoint_tool.plan.model import OutputTensor, Piece, Region
from checkpoint_tool.quant.storage import StorageFormat
from checkpoint_tool.targets.instance import LinearSite
from checkpoint_tool.targets.shapes import linear_logical, linear_shapes, required, scheme_params


def linear_params(b: ParamBuilder, site: LinearSite) -> list[Param]:
    """Every parameter of a linear site on every rank: each merged shard's rank slice (codec
    regions), concatenated in shard order; per-tensor values one entry per shard; the bias."""
    shards = []
    for hf, out in site.shards:
        tensors = b.index.module(hf)
        if "weight" not in tensors:
            raise b.missing(f"{hf}.weight", b.keys.key(site.vllm, "weight"), site.cite)
        shards.append((hf, out, tensors))
    schemes = [b.index.scheme(t["weight"]) for _, _, t in shards]
    scheme = schemes[0]
    # vLLM deep-compares shard specs (quark.py QuarkConfig._find_matched_config)
    if any(s.producer_identity() != scheme.producer_identity() for s in schemes[1:]):
        names = ", ".join(
            f"{hf} ({s.short()})" for (hf, _, _), s in zip(shards, schemes, strict=True)
        )
        raise InputError(
            f"{b.index.ctx.catalog.root}: vLLM merges {names} into {site.vllm}, which needs "
            "one quantization scheme for all of them (vLLM refuses the model too)"
        )
    if site.quant == "never" and scheme.quantized:
        raise InputError(
            f"{b.index.ctx.catalog.root}: {site.shards[0][0]} is stored {scheme.short()} "
            f"but vLLM builds {site.vllm} without quantization ({site.cite}); dequantize it "
            "first or use --layout hf"
        )
    params = required(scheme_params(b.spec, scheme, site.vllm), scheme, "linear")
    for hf, _, tensors in shards:
        b.check_params(
            hf, tensors, params, lambda p: b.keys.key(site.vllm, p), scheme, site, site.vllm
        )
    codec = b.index.ctx.codec(scheme)
    logicals = []
    for hf, out, tensors in shards:
        logical = b.logical(codec, tensors["weight"])
        if logical[-2:] != (out, site.in_):
            raise InputError(
                f"{b.index.ctx.catalog.root}: {hf}.weight has logical shape "
                f"{list(logical)}, config.json implies {[out, site.in_]} for {site.vllm}; "
                "the checkpoint and its config disagree"
            )
        logicals.append(logical)
    _check_merge(b, site, codec, logicals)
    shapes = linear_shapes(site, codec, b.tp, params)
    role_shapes = codec.storage_shapes(linear_logical(site, b.tp))
    result = []
    for p in params:
        tensors_p = [b.index.take(f"{hf}.{p}") for hf, _, _ in shards]
        role = b.index.role(tensors_p[0])
        scalar = not role_shapes.get(role, ())
        name = b.keys.key(site.vllm, p)
        ranks = [
            _linear_rank(
                b, site, name, codec, role, scalar, tensors_p, logicals, shapes[p], r
            )
            for r in range(b.tp)
        ]
        result.append(
            Param(
                name,
                ranks,
                [t.name for t in tensors_p],
                padded=any(b.index.is_padded(t.name) for t in tensors_p),
            )
        )
    if site.bias:
        result.append(_bias(b, site))
    return result

def _bias(b: ParamBuilder, site: LinearSite) -> Param:
    """``bias`` of a linear: each shard's vector, the rank's rows of it (column-parallel),
    concatenated in shard order (vLLM's QKVParallelLinear / MergedColumnParallelLinear
    weight_loader on ``bias``)."""
    if site.parallel == "row":
        raise InputError(f"target spec: a row-parallel bias ({site.vllm}) is not modelled")
    name = b.keys.key(site.vllm, "bias")
    tensors = []
    for hf, out in site.shards:
        if b.index.get(f"{hf}.bias") is None:
            raise b.missing(f"{hf}.bias", name, site.cite)
        tensor = b.index.take(f"{hf}.bias")
        if b.index.scheme(tensor).quantized or list(tensor.shape) != [out]:
            raise InputError(
                f"{b.index.ctx.catalog.root}: {hf}.bias is {tensor.dtype}{tensor.shape}; "
                f"vLLM's {name} needs an unquantized [{out}] per shard"
            )
        tensors.append((out, tensor))
    split = site.parallel == "column"
    ranks = []
    for r in range(b.tp):
        pieces: list[Piece] = []
        for out, tensor in tensors:
            if split:
                size = out // b.tp
                pieces.extend(narrow(tensor, b.entries, 0, r * size, (r + 1) * size))
            else:
                pieces.extend(tensor.pieces)
        want = [sum(out // b.tp if split else out for out, _ in tensors)]
        ops = [f"vllm {site.parallel} rank {r}/{b.tp}", "bias"]
        ranks.append(
            b.tensor(name, tensors[0][1], pieces, "concat", 0, want, ops, site.layer)
        )
    return Param(name, ranks, [t.name for _, t in tensors])

def _check_merge(
    b: ParamBuilder, site: LinearSite, codec: StorageFormat, logicals: list[tuple[int, ...]]
) -> None:
    """Merged shards concatenate their scales: every shard but the last must end on a
    scale block boundary (vLLM validate_fp8_block_shape requires the same)."""
    for (hf, out), logical in zip(site.shards[:-1], logicals[:-1], strict=True):
        per_rank = out // b.tp if site.parallel == "column" else out
        unit = codec.alignment(0, logical)
        if per_rank % unit:
            raise AlignmentError(
                f"{hf}: {per_rank} rows per rank are not a multiple of {unit} "
                f"({codec.label} scale blocks), so its scales cannot be concatenated into "
                f"{site.vllm}; vLLM refuses this layout too"
            )

def _linear_rank(
    b: ParamBuilder,
    site: LinearSite,
    name: str,
    codec: StorageFormat,
    role: str,
    scalar: bool,
    tensors: list[OutputTensor],
    logicals: list[tuple[int, ...]],
    want: tuple[int, ...],
    rank: int,
) -> OutputTensor:
    pieces: list[Piece] = []
    axis = 0
    for (_hf, _out), tensor, logical in zip(site.shards, tensors, logicals, strict=True):
        if scalar:
            if (
                math.prod(storage_shape(tensor.dtype, tuple(tensor.shape))) != 1
                or len(tensor.pieces) != 1
            ):
                raise InputError(
                    f"{b.index.ctx.catalog.root}: {tensor.name} has shape {tensor.shape}; "
                    f"vLLM's {name} holds one value per shard"
                )
            pieces.append(tensor.pieces[0])
            continue
        region = _region(b, site, codec, role, logical, rank, tensor.name)
        if region is None:
            pieces.extend(tensor.pieces)
            if tensor.combine == "concat":
                axis = tensor.axis
        else:
            pieces.extend(narrow(tensor, b.entries, region.dim, region.start, region.stop))
            axis = region.dim if len(site.shards) == 1 else 0
    if scalar:
        return b.tensor(name, tensors[0], pieces, "stack", 0, want,
                           [f"vllm {site.parallel}: one value per shard"], site.layer)  # fmt: skip
    ops = [f"vllm {site.parallel} rank {rank}/{b.tp}"]
    if len(site.shards) > 1:
        ops.append(f"merge {[hf.rsplit('.', 1)[-1] for hf, _ in site.shards]}")
    return b.tensor(name, tensors[0], pieces, "concat", axis, want, ops, site.layer)

def _region(
    b: ParamBuilder,
    site: LinearSite,
    codec: StorageFormat,
    role: str,
    logical: tuple[int, ...],
    rank: int,
    tensor: str,
) -> Region | None:
    """Storage region of ``rank``'s share of one shard (None: the whole tensor)."""
    if site.parallel == "replicated" or role not in codec.roles:
        return None
    dim = len(logical) - (2 if site.parallel == "column" else 1)
    size = logical[dim] // b.tp
    regions = codec.storage_regions(logical, dim, rank * size, (rank + 1) * size, name=tensor)
    return regions.get(role)
