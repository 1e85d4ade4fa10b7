"""FSE redirection: shared expert j of a fused layer becomes routed expert ``n_routed + j``.

As vLLM's DeepSeek loader does at load time (``vllm/model_executor/models/deepseek_v2.py``,
``load_weights``: ``mlp.shared_experts`` -> ``mlp.experts.{n_routed_experts + j}``), but
offline: a widened shared MLP (``n_shared`` experts stored as one MLP ``n_shared * I`` wide)
is split into ``n_shared`` chunks of ``I`` along the intermediate dim -- rows of gate/up
(dim 0), columns of down (dim 1: the weight *and its scales*, every name containing
``down_proj.weight``) -- and each chunk is written under its routed slot's name, in the
checkpoint's own naming (the recipe's rename rules run afterwards).

Per-tensor (0-d) scales cannot be chunked: the policy refuses FSE for such layers when
``n_shared > 1``; the planner re-checks and raises rather than guess.

Example (n_routed 256, n_shared 2, I 2048, MXFP4)::

    chunks(part_of("model.layers.3.mlp.shared_experts.down_proj.weight"))
    # [Chunk(slot=256, target="model.layers.3.mlp.experts.256.down_proj.weight",
    #        ranges=[(0, 2048)]),
    #  Chunk(slot=257, target="model.layers.3.mlp.experts.257.down_proj.weight",
    #        ranges=[(2048, 4096)])]
"""

from __future__ import annotations

from dataclasses import dataclass

from checkpoint_tool.errors import AlignmentError, UsageError
from checkpoint_tool.model.facts import Proj
from checkpoint_tool.plan.experts import ExpertPart


@dataclass(frozen=True)
class Chunk:
    """One routed slot filled from a shared expert tensor."""

    slot: int
    #: the output name in source naming (before the recipe's rename rules)
    target: str
    #: logical ranges of the intermediate dim taken from the source (gate_up: gate, up)
    ranges: list[tuple[int, int]]
    #: 0-based chunk index and count, for reports
    j: int
    n: int


def chunks(name: str, suffix: str, part: ExpertPart, ndim: int) -> list[Chunk]:
    """The routed-slot chunks of shared expert tensor ``name`` (parameter ``suffix``)."""
    layer = part.layer
    routed = layer.naming.routed_layout
    if routed == "fused_3d":
        raise UsageError(
            f"{name}: MoE layer {layer.layer} stores its routed experts as 3-D fused tensors; "
            "ckpt cannot append shared-expert slots to them: convert with --fse off"
        )
    n, width = layer.n_shared, layer.shared_chunk_size
    total = layer.shared_intermediate_size
    if part.index is not None:  # indexed shared layout: one module per shared expert
        js = [part.index]
        base = 0
        per_module = width
    else:
        js = list(range(n))
        base = None
        per_module = total
    if n > 1 and part.index is None and ndim == 0:
        raise AlignmentError(
            f"tensor '{name}': a per-tensor (0-d) value cannot be chunked into {n} routed "
            f"expert slots (MoE layer {layer.layer}); FSE with n_shared > 1 needs block- or "
            "group-quantized shared experts: convert with --fse off"
        )
    out: list[Chunk] = []
    for j in js:
        start = (j * width) if base is None else 0
        ranges = [(start, start + width)]
        if part.proj == "gate_up":
            ranges.append((per_module + start, per_module + start + width))
        slot = layer.n_routed + j
        for proj, proj_ranges in _targets(part, routed, ranges, name):
            module = layer.routed_module(slot, proj)
            out.append(Chunk(slot=slot, target=f"{module}.{suffix}", ranges=proj_ranges, j=j, n=n))
    return out


def _targets(
    part: ExpertPart, routed: str, ranges: list[tuple[int, int]], name: str
) -> list[tuple[Proj, list[tuple[int, int]]]]:
    """(routed proj, ranges) pairs: a shared gate_up goes to a fused routed gate_up, or is
    split into a gate and an up tensor when the routed experts store them apart."""
    if part.proj == "gate_up":
        if routed == "per_expert_gate_up":
            return [("gate", ranges)]
        return [("gate", ranges[:1]), ("up", ranges[1:])]
    if routed == "per_expert_gate_up" and part.proj in ("gate", "up"):
        raise UsageError(
            f"{name}: the routed experts of MoE layer {part.layer.layer} fuse gate and up "
            "(gate_up_proj) but the shared expert stores them apart; ckpt cannot join two "
            "source tensors into one slot yet: convert with --fse off"
        )
    assert part.proj != "gate_up"
    return [(part.proj, ranges)]
