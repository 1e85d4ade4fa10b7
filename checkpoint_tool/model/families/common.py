"""Pieces every family builder shares: MTP presence, per-layer naming, MoE layer assembly.

A family states which layers are MoE, their sizes and its default naming; ``moe_model_facts``
does the rest.

Example::

    layer_facts(3, "model.layers.3.mlp", n_routed=256, n_shared=1, moe_i=2048, shared_i=2048,
                top_k=8, names=names, default=ExpertNaming())
    # MoeLayerFacts(layer=3, prefix="model.layers.3.mlp", ..., naming=<detected from names>)
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

from checkpoint_tool.model.facts import ExpertNaming, Family, ModelFacts, MoeLayerFacts
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


def moe_model_facts(
    config: dict[str, Any],
    names: Collection[str] | None,
    *,
    family: Family,
    hidden: int,
    n_layers: int,
    main: list[tuple[int, str]],
    n_mtp: int,
    mtp_prefix: Callable[[int], str],
    n_routed: int,
    n_shared: int,
    moe_i: int,
    shared_i: int,
    top_k: int,
    default: ExpertNaming,
    expert_dtype: str | None = None,
) -> ModelFacts:
    """Facts of a model whose MoE layers are ``main`` plus ``n_mtp`` MTP layers after them.

    ``main`` lists ``(layer, prefix)`` of the decoder's MoE layers; MTP layer ``k`` has index
    ``n_layers + k`` and prefix ``mtp_prefix(k)``, and is kept only when present (see
    ``present_mtp_layers``). Every layer has the same sizes.

    Example::

        moe_model_facts(config, None, family="glm4_moe", hidden=4096, n_layers=4,
                        main=[(1, "model.layers.1.mlp")], n_mtp=1,
                        mtp_prefix=lambda k: f"model.layers.{4 + k}.mlp", n_routed=8,
                        n_shared=1, moe_i=256, shared_i=256, top_k=2, default=ExpertNaming())
        # ModelFacts(family="glm4_moe", moe_layers=[<layer 1>, <layer 4, is_mtp>], ...)
    """
    notes: list[str] = []
    mtp = present_mtp_layers([(n_layers + k, mtp_prefix(k)) for k in range(n_mtp)], names, notes)
    layers = [
        layer_facts(
            i,
            prefix,
            n_routed=n_routed,
            n_shared=n_shared,
            moe_i=moe_i,
            shared_i=shared_i,
            top_k=top_k,
            names=names,
            default=default,
            is_mtp=i >= n_layers,
        )
        for i, prefix in main + mtp
    ]
    return ModelFacts(
        family=family,
        model_type=config.get("model_type"),
        hidden_size=hidden,
        num_hidden_layers=n_layers,
        num_mtp_layers=n_mtp,
        expert_dtype=expert_dtype,
        moe_layers=layers,
        notes=notes,
    )
