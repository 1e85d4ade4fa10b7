"""Pieces every family builder shares: MTP presence, per-layer naming, MoE layer assembly.

Example::

    layer_facts(3, "model.layers.3.mlp", n_routed=256, n_shared=1, moe_i=2048, shared_i=2048,
                top_k=8, names=names, default=ExpertNaming())
    # MoeLayerFacts(layer=3, prefix="model.layers.3.mlp", ..., naming=<detected from names>)
"""

from __future__ import annotations

from collections.abc import Collection

from checkpoint_tool.model.facts import ExpertNaming, MoeLayerFacts
from checkpoint_tool.model.naming import detect_naming


def layer_facts(
    layer: int,
    prefix: str,
    *,
    n_routed: int,
    n_shared: int,
    moe_i: int,
    shared_i: int,
    top_k: int,
    names: Collection[str] | None,
    default: ExpertNaming,
    is_mtp: bool = False,
) -> MoeLayerFacts:
    """Facts of one MoE layer; the naming is detected from ``names`` when given."""
    naming = default if names is None else detect_naming(prefix, names, default)
    gate = f"{prefix}.{naming.shared_name}_gate.weight"
    return MoeLayerFacts(
        layer=layer,
        prefix=prefix,
        is_mtp=is_mtp,
        n_routed=n_routed,
        n_shared=n_shared,
        moe_intermediate_size=moe_i,
        shared_intermediate_size=shared_i if n_shared > 0 else 0,
        top_k=top_k,
        has_shared_expert_gate=names is not None and gate in names,
        naming=naming,
    )


#: names an MTP layer usually has, looked up before scanning every name
_MTP_PROBES = (
    "gate.weight",
    "experts.0.gate_proj.weight",
    "experts.0.w1.weight",
    "experts.gate_up_proj",
)
_MTP_PARENT_PROBES = ("eh_proj.weight", "enorm.weight", "input_layernorm.weight", "e_proj.weight")


def present_mtp_layers(
    prefixes: list[tuple[int, str]], names: Collection[str] | None, notes: list[str]
) -> list[tuple[int, str]]:
    """Keep the MTP layers whose tensors are in the checkpoint (all of them without names).

    Many converted checkpoints drop the MTP layer; a declared-but-absent MTP layer is noted,
    not treated as a MoE layer with missing experts.
    """
    if names is None:
        return prefixes
    kept = []
    for layer, prefix in prefixes:
        # the MoE block's parent (e.g. "model.layers.61.") holds every tensor of the layer
        parent = prefix.rsplit(".", 1)[0] + "."
        probes = [f"{prefix}.{leaf}" for leaf in _MTP_PROBES] + [
            f"{parent}{leaf}" for leaf in _MTP_PARENT_PROBES
        ]
        if any(p in names for p in probes) or any(n.startswith(parent) for n in names):
            kept.append((layer, prefix))
        else:
            notes.append(
                f"config declares MTP layer {layer} ({parent}*) but the checkpoint has no "
                "tensors for it: skipped"
            )
    return kept
