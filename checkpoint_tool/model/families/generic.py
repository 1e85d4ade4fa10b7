"""Generic fallback: infer MoE layers from tensor names when the model type is unknown.

Documented behaviour (best effort, reported in ``ModelFacts.notes``):

- a MoE layer is any ``<root>.<i>.<block>.experts.*`` group of tensors, ``<root>`` ending in
  ``layers`` or ``mtp`` (``model.layers.3.mlp.experts.0.w1.weight`` -> layer 3, prefix
  ``model.layers.3.mlp``; ``mtp.0.ffn.experts...`` -> MTP layer ``num_hidden_layers + 0``);
- routed expert count: config ``n_routed_experts`` / ``num_experts`` / ``num_local_experts``,
  else the highest expert index + 1 (or dim 0 of a 3-D fused tensor);
- shared experts: ``<prefix>.shared_expert(s).*`` tensors; count from ``n_shared_experts`` or
  the indices, else 1;
- intermediate sizes: config ``moe_intermediate_size`` / ``intermediate_size`` /
  ``shared_expert_intermediate_size``, else the gate projection's row count from the shapes.

Example::

    build({}, ["model.layers.0.block_sparse_moe.experts.0.w1.weight", ...],
          shapes={"model.layers.0.block_sparse_moe.experts.0.w1.weight": (14336, 4096)})
    # ModelFacts(family="generic", moe_layers=[MoeLayerFacts(layer=0, n_routed=8, ...)])
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from typing import Any

from checkpoint_tool.model.config_fields import ConfigView
from checkpoint_tool.model.facts import ExpertNaming, ModelFacts, MoeLayerFacts
from checkpoint_tool.model.families.common import Sizes, layer_facts

_EXPERTS_RE = re.compile(
    r"^(?P<prefix>(?P<root>(?:\w+\.)*?(?:layers|mtp))\.(?P<idx>\d+)\.(?P<block>[A-Za-z_]\w*))"
    r"\.(?P<kind>experts|shared_experts|shared_expert)\.(?:(?P<e>\d+)\.)?"
)
_ROUTED_KEYS = ("n_routed_experts", "num_experts", "num_local_experts")


def build(
    config: dict[str, Any] | None,
    names: Collection[str] | None,
    shapes: Mapping[str, tuple[int, ...]] | None = None,
) -> ModelFacts:
    cfg = ConfigView(config or {}, family="generic")
    notes = ["model type not recognised: MoE layers inferred from tensor names (generic)"]
    if names is None:
        notes.append("no tensor names given: no MoE layer can be inferred")
        return ModelFacts(
            family="generic",
            model_type=(config or {}).get("model_type"),
            hidden_size=cfg.opt_int("hidden_size", 0),
            num_hidden_layers=cfg.opt_int("num_hidden_layers", 0),
            notes=notes,
        )
    groups = _scan(names)
    main_max = max((g["idx"] for g in groups.values() if not g["mtp"]), default=-1)
    n_layers = cfg.opt_int("num_hidden_layers", main_max + 1)
    layers: list[MoeLayerFacts] = []
    for prefix, g in sorted(groups.items(), key=lambda kv: (kv[1]["mtp"], kv[1]["idx"])):
        if not g["routed"]:
            continue
        layer = n_layers + g["idx"] if g["mtp"] else g["idx"]
        # sizes unknown yet: the probe only tells the naming (and so where the shapes are)
        probe = layer_facts(
            layer, prefix, Sizes(0, 0, 0, 0, 0), names=names, default=ExpertNaming()
        )
        n_routed = _first_int(cfg, _ROUTED_KEYS) or _routed_count(probe, g, shapes)
        moe_i = _first_int(cfg, ("moe_intermediate_size",)) or _routed_width(probe, shapes)
        moe_i = moe_i or cfg.opt_int("intermediate_size", 0)
        n_shared = 0
        shared_i = 0
        if g["shared"]:
            n_shared = cfg.opt_int("n_shared_experts", 0) or (g["shared_max"] + 1)
            shared_i = (
                cfg.opt_int("shared_expert_intermediate_size", 0)
                or _shared_width(probe, n_shared, shapes)
                or n_shared * moe_i
            )
        if not moe_i:
            notes.append(f"{prefix}: routed intermediate size unknown (no config field, no shapes)")
        layers.append(
            layer_facts(
                layer,
                prefix,
                Sizes(n_routed, n_shared, moe_i, shared_i, cfg.opt_int("num_experts_per_tok", 0)),
                names=names,
                default=ExpertNaming(),
                is_mtp=g["mtp"],
            )
        )
    hidden = cfg.opt_int("hidden_size", 0) or _hidden_from_shapes(layers, shapes)
    # the key the width was read from is the one a padded output must rewrite (MiniMax-M2:
    # intermediate_size; vLLM minimax_m2.py MiniMaxM2MoE builds FusedMoE from it)
    width_key = "moe_intermediate_size"
    widths = {m.moe_intermediate_size for m in layers}
    if cfg.get(width_key) is None and widths == {cfg.get("intermediate_size")}:
        width_key = "intermediate_size"
    shared_key = "shared_expert_intermediate_size"
    return ModelFacts(
        family="generic",
        model_type=(config or {}).get("model_type"),
        hidden_size=hidden,
        num_hidden_layers=n_layers,
        num_mtp_layers=sum(1 for m in layers if m.is_mtp),
        moe_layers=layers,
        notes=notes,
        width_key=width_key,
        shared_width_key=shared_key if cfg.get(shared_key) is not None else None,
    )


def _scan(names: Collection[str]) -> dict[str, dict[str, Any]]:
    groups: dict[str, dict[str, Any]] = {}
    for name in names:
        if "experts" not in name and "shared_expert" not in name:
            continue
        m = _EXPERTS_RE.match(name)
        if m is None:
            continue
        g = groups.setdefault(
            m["prefix"],
            {
                "idx": int(m["idx"]),
                "mtp": m["root"].split(".")[0] == "mtp" or ".mtp" in m["root"],
                "routed": False,
                "e_max": -1,
                "shared": False,
                "shared_max": 0,
            },
        )
        e = int(m["e"]) if m["e"] is not None else None
        if m["kind"] == "experts":
            g["routed"] = True
            if e is not None:
                g["e_max"] = max(g["e_max"], e)
        else:
            g["shared"] = True
            if e is not None:
                g["shared_max"] = max(g["shared_max"], e)
    return groups


def _first_int(cfg: ConfigView, keys: tuple[str, ...]) -> int:
    for key in keys:
        value = cfg.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return 0


def _routed_count(
    probe: MoeLayerFacts, g: dict[str, Any], shapes: Mapping[str, tuple[int, ...]] | None
) -> int:
    if probe.naming.routed_layout == "fused_3d" and shapes:
        shape = shapes.get(probe.routed_weight(0, "gate"))
        if shape and len(shape) == 3:
            return shape[0]
    return g["e_max"] + 1


def _routed_width(probe: MoeLayerFacts, shapes: Mapping[str, tuple[int, ...]] | None) -> int:
    if not shapes:
        return 0
    shape = shapes.get(probe.routed_weight(0, "gate"))
    if not shape:
        return 0
    if probe.naming.routed_layout == "fused_3d":
        return shape[1] // 2 if len(shape) == 3 else 0
    if probe.naming.routed_layout == "per_expert_gate_up":
        return shape[0] // 2
    return shape[0]


def _shared_width(
    probe: MoeLayerFacts, n_shared: int, shapes: Mapping[str, tuple[int, ...]] | None
) -> int:
    if not shapes:
        return 0
    for shared in ("shared_experts", "shared_expert"):
        for gate in ("gate_proj", "w1"):
            shape = shapes.get(f"{probe.prefix}.{shared}.{gate}.weight")
            if shape:
                return shape[0]
            shape = shapes.get(f"{probe.prefix}.{shared}.0.{gate}.weight")
            if shape:
                return shape[0] * n_shared
    return 0


def _hidden_from_shapes(
    layers: list[MoeLayerFacts], shapes: Mapping[str, tuple[int, ...]] | None
) -> int:
    if not shapes or not layers:
        return 0
    shape = shapes.get(layers[0].routed_weight(0, "down"))
    if not shape:
        return 0
    return shape[-2]
