"""The one builder of the family table (``build_facts``) and the pieces it shares with the
generic detector: per-layer facts with the naming detected from tensor names, MTP presence.

Example::

    r1 = Sizes(n_routed=256, n_shared=1, moe_i=2048, shared_i=2048, top_k=8)
    layer_facts(3, "model.layers.3.mlp", r1, names=names, default=ExpertNaming())
    # MoeLayerFacts(layer=3, prefix="model.layers.3.mlp", ..., naming=<detected from names>)
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from checkpoint_tool.model.config_fields import ConfigView, config_parts, text_config
from checkpoint_tool.model.facts import ExpertNaming, ModelFacts, MoeLayerFacts
from checkpoint_tool.model.families.spec import FamilySpec
from checkpoint_tool.model.naming import choose_root, detect_naming


@dataclass(frozen=True)
class Sizes:
    """Expert counts and widths of a MoE layer (a table family's layers all share one)."""

    n_routed: int
    n_shared: int
    moe_i: int
    shared_i: int
    top_k: int


def layer_facts(
    layer: int,
    prefix: str,
    sizes: Sizes,
    *,
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
        n_routed=sizes.n_routed,
        n_shared=sizes.n_shared,
        moe_intermediate_size=sizes.moe_i,
        shared_intermediate_size=sizes.shared_i if sizes.n_shared > 0 else 0,
        top_k=sizes.top_k,
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
    prefixes: list[tuple[int, str]],
    names: Collection[str] | None,
    notes: list[str],
    *,
    declared: bool = True,
) -> list[tuple[int, str]]:
    """Keep the MTP layers whose tensors are in the checkpoint (all of them without names,
    when config.json ``declared`` them).

    Many converted checkpoints drop the MTP layer; a declared-but-absent MTP layer is noted,
    not treated as a MoE layer with missing experts. A layer only vLLM's default count
    implies (``declared=False``) is kept when its tensors are there and silently left out
    otherwise.
    """
    if names is None and not declared:
        return []
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
        elif declared:
            notes.append(
                f"config declares MTP layer {layer} ({parent}*) but the checkpoint has no "
                "tensors for it: skipped"
            )
    return kept


def build_facts(
    spec: FamilySpec, config: dict[str, Any], names: Collection[str] | None
) -> ModelFacts:
    """Facts of a model of a table family: sizes read from config.json by ``spec.keys``, MoE
    layers picked by the family's rule, MTP layers after them (kept only when present, see
    ``present_mtp_layers``). Every layer has the same sizes.

    Example::

        build_facts(load_families()["glm4_moe"], {"hidden_size": 4096,
                    "num_hidden_layers": 4, "first_k_dense_replace": 1, "n_routed_experts": 8,
                    "n_shared_experts": 1, "moe_intermediate_size": 256,
                    "num_nextn_predict_layers": 1}, None).moe_layer_indices
        # [1, 2, 3, 4]   (4: the MTP layer, model.layers.4.mlp)
    """
    cfg = ConfigView(config, family=spec.name)
    keys = spec.keys
    hidden = cfg.req_int(keys.hidden_size)
    n_layers = cfg.req_int(keys.num_hidden_layers)
    n_routed = cfg.req_int(keys.n_routed)
    moe_i = cfg.req_int(keys.moe_intermediate_size)
    n_shared, shared_i = spec.shared.sizes(cfg, moe_i)
    moe = spec.moe_layers.select(cfg, n_layers, n_routed)
    root = choose_root(spec.decoder_roots(text_config(config) is not config), names)
    block = spec.layers.block
    types = {doc.get("model_type") for doc in config_parts(config)} - {None}
    n_mtp, stated = spec.mtp.count_of(cfg, types)  # type: ignore[arg-type]
    naming = spec.naming_for(types)
    declared = spec.mtp.prefixes(n_mtp, root, n_layers, block, names)
    sizes = Sizes(n_routed, n_shared, moe_i, shared_i, cfg.opt_int(keys.top_k, 0))
    notes: list[str] = []
    mtp = present_mtp_layers(declared, names, notes, declared=stated)
    layers = [
        layer_facts(i, prefix, sizes, names=names, default=naming, is_mtp=i >= n_layers)
        for i, prefix in [(i, f"{root}.{i}.{block}") for i in moe] + mtp
    ]
    expert_dtype = cfg.get(keys.expert_dtype) if keys.expert_dtype else None
    return ModelFacts(
        family=spec.name,
        # the checkpoint's own model_type: the top level of a multimodal wrapper
        model_type=config.get("model_type"),
        hidden_size=hidden,
        num_hidden_layers=n_layers,
        # vLLM's drafter allocates the count it reads or defaults (kept layers when defaulted)
        num_mtp_layers=len(declared) if stated else len(mtp),
        expert_dtype=expert_dtype if isinstance(expert_dtype, str) else None,
        moe_layers=layers,
        notes=notes,
        width_key=keys.moe_intermediate_size,
        shared_width_key=getattr(spec.shared, "width", None),
        fse_unsupported=spec.fse.unsupported(types),  # type: ignore[arg-type]
    )
