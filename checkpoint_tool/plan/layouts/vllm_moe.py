"""Per-rank routed-expert parameters (``w13_*`` / ``w2_*``) of one MoE layer.

The planned (HF-layout) per-expert tensors are already renamed, FSE-redirected (shared
expert j in slot ``n_routed + j``) and padded to the padded intermediate size ``I'``. For TP
rank ``r`` of ``tp`` (``I_r = I' / tp``) each expert contributes:

- ``w13_<p>``: its gate rows ``[r*I_r, (r+1)*I_r)`` then its up rows (storage: bytes of packed
  FP4, whole scale groups/blocks, via the codec), all experts stacked: ``2E`` pieces written
  back to back as ``[E, 2*I_r, ...]``;
- ``w2_<p>``: its down columns ``[r*I_r, (r+1)*I_r)``, stacked: ``[E, H, I_r/...]``;
- per-tensor values: ``[E, 2]`` (gate, up) and ``[E]``; a ``per_expert`` role keeps the up
  value only (vLLM's loader writes gate then up into one slot) and drops the gate one, by
  rule ``vllm_sharded_per_expert``.

The executor streams a stacked tensor piece by piece, so memory stays at one expert's slice.

Example (Quark MXFP4, 8 routed + 1 FSE slot, I' = 128, H = 256, TP 2, rank 0)::

    params = moe_params(builder, site, layer_facts)
    [p.name for p in params]
    # ['model.layers.1.mlp.experts.routed_experts.w13_weight', '..w2_weight',
    #  '..w13_weight_scale', '..w2_weight_scale']
    params[0].ranks[0].shape    # [9, 128, 128]   (E, 2 * 64 rows, 256 / 2 bytes)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from checkpoint_tool.errors import InputError, UsageError
from checkpoint_tool.model import MoeLayerFacts
from checkpoint_tool.plan.layouts.narrow import narrow_shaped, piece_shape
from checkpoint_tool.plan.layouts.vllm_params import Param, ParamBuilder
from checkpoint_tool.plan.model import DroppedTensor, OutputTensor, Piece, Region
from checkpoint_tool.quant.storage import StorageFormat
from checkpoint_tool.targets.instance import MoeSite
from checkpoint_tool.targets.shapes import (
    moe_intermediate,
    moe_shapes,
    required,
    scheme_params,
)

if TYPE_CHECKING:
    from checkpoint_tool.quant.scheme import Scheme

PER_EXPERT_RULE = "vllm_sharded_per_expert"
#: (codec, logical shape, dim, rank) -> storage regions, shared by the experts of one layer
RegionCache = dict[tuple[StorageFormat, tuple[int, ...], int, int], dict[str, Region | None]]


def moe_params(b: ParamBuilder, site: MoeSite, layer: MoeLayerFacts) -> list[Param]:
    """Every ``w13_*`` / ``w2_*`` parameter of ``site`` on every rank."""
    if layer.naming.routed_layout != "per_expert":
        raise UsageError(
            f"{layer.routed_prefix}: routed experts stored as {layer.naming.routed_layout} "
            "tensors; --layout vllm-sharded needs one tensor per expert and projection (vLLM "
            "quantizes the fused experts it builds for this config): use --layout hf"
        )
    regions: RegionCache = {}
    slots = range(site.slots)
    modules = {
        (e, proj): layer.routed_module(e, proj) for e in slots for proj in ("gate", "up", "down")
    }
    for (e, proj), module in modules.items():
        if "weight" not in b.index.module(module):
            template = b.spec.moe.w2 if proj == "down" else b.spec.moe.w13
            key = b.keys.key(site.vllm, template.format(param="weight"))
            raise b.missing(f"{module}.weight", key,
                            f"expert slot {e} of {site.slots}, {site.cite}")  # fmt: skip
    scheme = _layer_scheme(b, site, modules)
    sp = scheme_params(b.spec, scheme, site.vllm)
    params = required(sp, scheme, "moe")
    for (_, proj), module in modules.items():
        template = b.spec.moe.w2 if proj == "down" else b.spec.moe.w13

        def key_of(p: str, template: str = template) -> str:
            return b.keys.key(site.vllm, template.format(param=p))

        b.check_params(
            module,
            b.index.module(module),
            params,
            key_of,
            scheme,
            site,
            "routed experts",
        )
    codec = b.index.ctx.codec(scheme)
    logical = {k: _logical(b, codec, site, module, k[1]) for k, module in modules.items()}
    shapes = moe_shapes(site, b.spec, codec, b.tp, params, sp.per_expert)
    role_shapes = codec.storage_shapes((2 * moe_intermediate(site, b.tp), site.hidden))
    out = []
    for p in params:
        role = b.index.role(b.index.get(f"{modules[0, 'gate']}.{p}"))  # type: ignore[arg-type]
        scalar = not role_shapes.get(role, ())
        w13_projs = ("up",) if scalar and p in sp.per_expert else ("gate", "up")
        w13, w2 = b.spec.moe.w13.format(param=p), b.spec.moe.w2.format(param=p)
        out.append(
            _param(b, site, modules, logical, codec, p, role, w13_projs, shapes[w13], regions)
        )
        out.append(
            _param(b, site, modules, logical, codec, p, role, ("down",), shapes[w2], regions)
        )
    return out


def _layer_scheme(b: ParamBuilder, site: MoeSite, modules: dict) -> Scheme:
    """The one scheme every projection of every slot shares (vLLM: one method per layer)."""
    first = None
    for (_e, _proj), module in modules.items():
        scheme = b.index.scheme(b.index.module(module)["weight"])
        if first is None:
            first = (scheme, module)
        elif scheme.storage_identity() != first[0].storage_identity():
            raise InputError(
                f"{b.index.ctx.catalog.root}: {module} is {scheme.short()} but {first[1]} is "
                f"{first[0].short()}; vLLM builds the routed experts of MoE layer {site.layer} "
                "(with any fused shared-expert slots) with one quantization method"
            )
    assert first is not None
    return first[0]


def _logical(
    b: ParamBuilder, codec: StorageFormat, site: MoeSite, module: str, proj: str
) -> tuple[int, ...]:
    weight = b.index.module(module)["weight"]
    logical = b.logical(codec, weight)
    want = (site.hidden, site.intermediate) if proj == "down" else (site.intermediate, site.hidden)
    if logical != want:
        raise InputError(
            f"{b.index.ctx.catalog.root}: {module}.weight has logical shape {list(logical)} after "
            f"padding, vLLM's {site.vllm} expects {list(want)} per expert (config.json sizes); "
            "the checkpoint and its config disagree"
        )
    return logical


def _slice(
    b: ParamBuilder,
    codec: StorageFormat,
    role: str,
    logical: tuple[int, ...],
    dim: int,
    rank: int,
    t: OutputTensor,
    cache: RegionCache,
) -> tuple[Piece, tuple[int, ...]]:
    """Rank ``rank``'s share of intermediate dim ``dim`` of one expert tensor: one piece, and
    its storage shape."""
    if len(t.pieces) != 1:
        raise UsageError(
            f"{t.name}: planned from {len(t.pieces)} source pieces; --layout vllm-sharded "
            "cannot stack it into an expert parameter (use --layout hf)"
        )
    piece = t.pieces[0]
    entry = b.entries[piece.source]
    region = None
    if role in codec.roles:
        key = (codec, logical, dim, rank)
        regions = cache.get(key)
        if regions is None:  # the same for every expert of a layer: compute once
            size = logical[dim] // b.tp
            regions = codec.storage_regions(logical, dim, rank * size, (rank + 1) * size,
                                            name=t.name)  # fmt: skip
            cache[key] = regions
        region = regions.get(role)
    if region is None:
        return piece, tuple(piece_shape(piece, entry))
    return narrow_shaped(piece, entry, region.dim, region.start, region.stop)


def _drop_gate_values(b: ParamBuilder, site: MoeSite, modules: dict, p: str, key: str) -> None:
    """A per-expert value vLLM keeps once for gate and up: the gate's is dropped, named."""
    for e in range(site.slots):
        gate = b.index.drop(f"{modules[e, 'gate']}.{p}")
        for source in {piece.source for piece in gate.pieces}:
            b.index.planned.dropped.append(
                DroppedTensor(
                    name=source,
                    rule=PER_EXPERT_RULE,
                    reason=(
                        f"vLLM's {key} holds one {p} per expert; its loader writes gate then "
                        "up into the same slot, so the up_proj value is written"
                    ),
                )
            )


def _param(
    b: ParamBuilder,
    site: MoeSite,
    modules: dict,
    logical: dict,
    codec: StorageFormat,
    p: str,
    role: str,
    projs: tuple[str, ...],
    want: tuple,
    regions: RegionCache,
) -> Param:
    """``w13_<p>`` (``projs`` gate and up, or up alone: rows) or ``w2_<p>`` (down: columns),
    every expert slot stacked."""
    down = projs == ("down",)
    name = (b.spec.moe.w2 if down else b.spec.moe.w13).format(param=p)
    key = b.keys.key(site.vllm, name)
    if projs == ("up",):
        _drop_gate_values(b, site, modules, p, key)
    items = [
        (b.index.take(f"{modules[e, proj]}.{p}"), logical[e, proj])
        for e in range(site.slots)
        for proj in projs
    ]
    what = f"{site.slots} experts x " + ("down columns" if down else "[gate | up] rows")
    return _stacked(b, site, key, items, codec, role, 1 if down else 0, want, what, regions)


def _stacked(
    b: ParamBuilder,
    site: MoeSite,
    key: str,
    items: list[tuple[OutputTensor, tuple]],
    codec: StorageFormat,
    role: str,
    dim: int,
    want: tuple,
    what: str,
    regions: RegionCache,
) -> Param:
    """Each rank: the rank's share of ``dim`` of every item, stacked (one piece per item)."""
    ranks = []
    for r in range(b.tp):
        sliced = [_slice(b, codec, role, logical, dim, r, t, regions) for t, logical in items]
        pieces = [piece for piece, _ in sliced]
        shapes = [shape for _, shape in sliced]
        ops = [f"vllm routed experts rank {r}/{b.tp}: {what}"]
        ranks.append(b.tensor(key, items[-1][0], pieces, "stack", 0, want, ops, site.layer, shapes))
    used = [t.name for t, _ in items]
    padded = any(b.index.is_padded(n) for n in used)
    return Param(key, ranks, used, expert=True, padded=padded)
