"""Which MoE layers the numeric check runs: one per distinct conversion policy by default.

A layer's *policy* is what the conversion did to it, read from the two checkpoints' headers
and config (no tensor data): shared experts fused into routed slots or kept separate, expert
intermediate dim padded or not, the routed and shared schemes as the converted config
resolves them, hash routing (DeepSeek-V4 ``tid2eid`` layers) and the layer's name family
(DeepSeek-V4's MTP layers keep ``mtp.K.*``, which other rename rules reach; DeepSeek-V3's MTP
layer is ``model.layers.61`` like the others). The default sample is the first layer of each distinct policy, in layer order
-- so a hybrid checkpoint (some layers fused, some not, a BF16 shared expert here, block FP8
there) gets every case checked, and a uniform one costs a single layer.

Example (quark-hybrid at --tp 2)::

    [s.label for s in sample_layers(src, dst)]
    # ['separate shared, padded, mxfp4/32 routed, unquantized shared',      # layer 1
    #  'separate shared, padded, mxfp4/32 routed, fp8_block[128,128] shared',  # layer 2
    #  'fused shared, padded, mxfp4/32 routed, mxfp4/32 shared']               # layer 3
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Union

from checkpoint_tool.errors import UsageError
from checkpoint_tool.layers.loader import CheckpointView

if TYPE_CHECKING:
    from checkpoint_tool.verify.sharded import ShardedView

#: the converted side: an hf-layout checkpoint or a vllm-sharded output
ConvertedView = Union[CheckpointView, "ShardedView"]
#: ``--layers``: ``sample`` (one per policy), ``all``, or layer numbers (None: ``sample``)
LayerSelection = Sequence[int] | Literal["all", "sample"] | None


@dataclass(frozen=True)
class LayerPolicy:
    layer: int
    fused: bool
    padded: bool
    is_mtp: bool
    routed_scheme: str
    shared_scheme: str | None
    #: DeepSeek-V4 hash-routed layer (experts from ``ffn.gate.tid2eid``)
    hash_routed: bool = False
    #: the converted layer's name family, e.g. "model.layers.*.ffn" or "mtp.*.ffn" (DeepSeek-V4
    #: keeps the drafter's own names: other rename rules reach it)
    names: str = ""

    @property
    def key(self) -> tuple:
        return (
            self.fused,
            self.padded,
            self.routed_scheme,
            self.shared_scheme,
            self.hash_routed,
            self.names,
        )

    @property
    def label(self) -> str:
        shared = (
            "no shared experts"
            if self.shared_scheme is None
            else ("fused shared" if self.fused else "separate shared")
        )
        parts = [shared, "padded" if self.padded else "not padded", f"{self.routed_scheme} routed"]
        if self.shared_scheme is not None:
            parts.append(f"{self.shared_scheme} shared")
        if self.hash_routed:
            parts.append("hash-routed")
        if self.is_mtp:
            parts.append("MTP")
        return ", ".join(parts)


def layer_policy(src: CheckpointView, dst: ConvertedView, layer: int) -> LayerPolicy:
    """What the conversion did to ``layer`` (headers and config only)."""
    lf = dst.layer_facts(layer)
    routed = dst.routed_scheme(layer)
    shared = dst.shared_scheme(layer)
    padded = dst.expert_intermediate(layer) != src.expert_intermediate(layer)
    if not padded and lf.shared_prefix is not None and not dst.fused_slots(layer):
        padded = dst.shared_intermediate(layer) != src.shared_intermediate(layer)
    return LayerPolicy(
        layer=layer,
        fused=bool(dst.fused_slots(layer)),
        padded=padded,
        is_mtp=lf.is_mtp,
        routed_scheme=routed.short() if routed else "missing",
        shared_scheme=shared.short() if shared else None,
        hash_routed=src.hash_routed(layer),
        names=re.sub(r"\.\d+\.", ".*.", f"{lf.prefix}."),
    )


def all_layers(src: CheckpointView, dst: ConvertedView) -> list[LayerPolicy]:
    """Every MoE layer of both checkpoints, in layer order (``--layers all``)."""
    return [layer_policy(src, dst, i) for i in _available(src, dst)]


def _available(src: CheckpointView, dst: ConvertedView) -> list[int]:
    available = [  # a partial conversion (convert --layers) holds only some layers' tensors
        i
        for i in dst.facts.moe_layer_indices
        if src.facts.layer(i) is not None and dst.routed_scheme(i) is not None
    ]
    if not available:
        raise UsageError(
            f"{dst.where}: no MoE layer in common with the source; nothing to check numerically "
            "(pass --no-numeric)"
        )
    return available


def sample_layers(
    src: CheckpointView, dst: ConvertedView, layers: Sequence[int] | None = None
) -> list[LayerPolicy]:
    """``layers`` when given (each must be a MoE layer of both), else one per policy."""
    available = _available(src, dst)
    if layers is not None:
        unknown = sorted(set(layers) - set(available))
        if unknown:
            raise UsageError(
                f"--layers {','.join(map(str, unknown))}: not MoE layers of both checkpoints "
                f"(available: {','.join(map(str, available))})"
            )
        return [layer_policy(src, dst, i) for i in sorted(set(layers))]
    chosen: dict[tuple, LayerPolicy] = {}
    for i in available:
        policy = layer_policy(src, dst, i)
        chosen.setdefault(policy.key, policy)
    return sorted(chosen.values(), key=lambda p: p.layer)


def select_layers(
    src: CheckpointView, dst: ConvertedView, layers: LayerSelection
) -> tuple[list[LayerPolicy], list[LayerPolicy]]:
    """(layers that must run, layers run while ``--max-seconds`` allows).

    ``sample`` / None: one per policy, all required; a list: those, all required; ``all``: the
    policy sample required first, then every other MoE layer in a spread order (halving the
    gaps), so a run stopped by the budget still covers the model evenly.
    """
    if layers is None or layers == "sample":
        return sample_layers(src, dst), []
    if layers == "all":
        sample = sample_layers(src, dst)
        everything = all_layers(src, dst)
        done = {p.layer for p in sample}
        rest = [p for p in everything if p.layer not in done]
        return sample, [rest[i] for i in spread_order(len(rest))]
    if isinstance(layers, str):
        raise UsageError(f"--layers {layers!r}: give all, sample or layer numbers like 3,4 or 3-5")
    return sample_layers(src, dst, list(layers)), []


def spread_order(n: int) -> list[int]:
    """0..n-1 ordered so every prefix is spread out (ends, then midpoints breadth first):
    ``spread_order(5)`` -> ``[0, 4, 2, 1, 3]``."""
    if n <= 2:
        return list(range(n))
    order, gaps = [0, n - 1], deque([(0, n - 1)])
    while gaps:
        lo, hi = gaps.popleft()
        if hi - lo >= 2:
            mid = (lo + hi) // 2
            order.append(mid)
            gaps.extend(((lo, mid), (mid, hi)))
    return order


def selection_label(layers: LayerSelection) -> str:
    if layers is None or isinstance(layers, str):
        return layers or "sample"
    return ",".join(map(str, layers))
