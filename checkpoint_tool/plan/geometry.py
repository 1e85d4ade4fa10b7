"""The padded expert intermediate size an HF-layout output is written with.

vLLM splits the expert intermediate dim over the TP ranks with ``I // tp`` and needs each
share to be a whole number of scale groups/blocks (the alignment the policy computes per
layer: 32 MXFP4, 16 NVFP4, 128 block FP8, ...). config.json has ONE ``moe_intermediate_size``
for every layer, so the padded size ``I'`` is the smallest multiple of ``I`` rounded up to
``lcm(moe_tp * a_layer)`` over all MoE layers; ``--pad-to P`` replaces each layer's
alignment by ``P`` (which must be a multiple of it). The shared MLP of a layer that is not
fused is ``n_shared * moe_intermediate_size`` wide in DeepSeek-style loaders, so it is padded
to ``n_shared * I'`` and its alignment joins the LCM; Qwen-style configs record the shared
width separately (``shared_expert_intermediate_size``) and it is padded on its own.

Example (MXFP4 experts, I = 160, --tp 2)::

    geometry.padded  # 192: each rank holds 96 = 3 groups of 32 instead of 80
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from checkpoint_tool.errors import UsageError
from checkpoint_tool.model.config_fields import config_field
from checkpoint_tool.policy.decision import PolicyDecision
from checkpoint_tool.quant.storage import round_up

SHARED_KEY = "shared_expert_intermediate_size"
WIDTH_KEY = "moe_intermediate_size"


@dataclass(frozen=True)
class Geometry:
    """Intermediate sizes before/after padding (``None`` fields: no MoE layers)."""

    tp: int = 1
    moe_tp: int = 1
    size: int | None = None
    padded: int | None = None
    #: the per-rank alignment the padded size satisfies (``--pad-to``, or the LCM of the
    #: alignments the routed and unfused shared experts' schemes need)
    pad_to: int | None = None
    #: Qwen-style separate shared width, before/after padding
    shared_size: int | None = None
    shared_padded: int | None = None
    #: the config.json keys of the routed and the separate shared width (``ModelFacts``'s
    #: ``width_key`` / ``shared_width_key``, family data): where a padded output writes them
    size_key: str = WIDTH_KEY
    shared_key: str = SHARED_KEY

    @property
    def pads(self) -> bool:
        return self.size != self.padded or self.shared_size != self.shared_padded

    def routed_target(self) -> int:
        assert self.padded is not None
        return self.padded

    def shared_target(self, n_shared: int, width: int) -> int:
        """Padded width of a non-fused shared MLP ``width`` wide (``n_shared`` experts)."""
        if self.shared_size is not None:
            return width if self.shared_padded is None else self.shared_padded
        assert self.size is not None and self.padded is not None
        if width == n_shared * self.size:
            return n_shared * self.padded
        if width == self.size:  # one shared expert per module (indexed layout)
            return self.padded
        return width


def _alignment(pad_to: int | None, scheme_alignment: int, what: str) -> int:
    if pad_to is None:
        return max(1, scheme_alignment)
    if pad_to < 1:
        raise UsageError(f"--pad-to must be >= 1, got {pad_to}")
    if pad_to % max(1, scheme_alignment):
        raise UsageError(
            f"--pad-to {pad_to} is not a multiple of the alignment {scheme_alignment} that "
            f"{what} needs; choose a multiple of {scheme_alignment}"
        )
    return pad_to


def plan_geometry(
    decision: PolicyDecision,
    fse_layers: Mapping[int, bool],
    *,
    pad_to: int | None,
    config: Mapping[str, Any] | None,
) -> Geometry:
    """The padded intermediate size(s) for the decision's TP (see the module docstring).

    Each layer's alignment is the policy's (``LayerDecision.routed_alignment``, and
    ``shared_alignment`` for a shared MLP that stays separate); this only takes their LCM.
    """
    layers = decision.facts.moe_layers
    tp, moe_tp = decision.tp, decision.moe_tp
    size_key = decision.facts.width_key
    shared_key = decision.facts.shared_width_key or SHARED_KEY
    if not layers:
        return Geometry(tp=tp, moe_tp=tp, size_key=size_key, shared_key=shared_key)
    separate = config_field(config, shared_key) is not None
    units: list[int] = []
    shared_units: list[int] = []
    chosen: set[int] = set()
    for layer in layers:
        d = decision.layer(layer.layer)
        a_routed = d.routed_alignment if d is not None else 1
        a = _alignment(pad_to, a_routed, f"the experts of MoE layer {layer.layer}")
        chosen.add(a)
        units.append(moe_tp * a)
        if layer.n_shared <= 0 or fse_layers.get(layer.layer, False):
            continue
        a_shared = a_routed
        if d is not None and d.shared_alignment is not None:
            a_shared = d.shared_alignment
        a_s = _alignment(pad_to, a_shared, f"the shared expert of MoE layer {layer.layer}")
        chosen.add(a_s)
        if separate:
            shared_units.append(tp * a_s)
        else:
            unit = tp * a_s
            units.append(unit // math.gcd(layer.n_shared, unit))
    sizes = sorted({layer.moe_intermediate_size for layer in layers})
    unit = math.lcm(*units)
    size = sizes[-1]
    padded = size if all(s % unit == 0 for s in sizes) else round_up(size, unit)
    if padded != size and len(sizes) > 1:
        raise UsageError(
            f"MoE layers have different intermediate sizes {sizes}; config.json can record "
            "only one padded size: convert without padding (--tp 1) or per layer group"
        )
    shared_size = shared_padded = None
    if separate:
        shared_size = int(config_field(config, shared_key))
        shared_padded = (
            shared_size
            if not shared_units or shared_size % math.lcm(*shared_units) == 0
            else round_up(shared_size, math.lcm(*shared_units))
        )
    return Geometry(
        tp=tp,
        moe_tp=moe_tp,
        size=size,
        padded=padded,
        pad_to=math.lcm(*chosen) if pad_to is None else pad_to,
        shared_size=shared_size,
        shared_padded=shared_padded,
        size_key=size_key,
        shared_key=shared_key,
    )
