"""Model families: the table (``families_data/families.yaml``, one builder), and the generic
detector for models it does not name; ``family_of(config)`` picks one.

Example::

    family_of({"model_type": "kimi_k2"})                          # "deepseek_v3"
    family_of({"architectures": ["Glm4MoeForCausalLM"]})          # "glm4_moe"
    FAMILIES["qwen3_moe"].moe_layers.rule                         # "sparse_step"
"""

from __future__ import annotations

from typing import Any

from checkpoint_tool.model.config_fields import config_parts
from checkpoint_tool.model.families.spec import FamilySpec, RoutingDefaults, load_families

#: family name -> its row of the table, in the order families are tried
FAMILIES: dict[str, FamilySpec] = load_families()


def routing_defaults(model_type: str) -> RoutingDefaults | None:
    """The routing a model type assumes when config.json omits ``scoring_func`` /
    ``topk_method`` (the table's ``routing`` entries), or None: the runtime's own defaults
    (softmax, greedy)."""
    for spec in FAMILIES.values():
        if model_type in spec.routing:
            return spec.routing[model_type]
    return None


def family_of(config: dict[str, Any] | None) -> str:
    """The name of the table's row that describes ``config`` (``deepseek_v3``, ``qwen3_moe``,
    ``minimax_m3``, ``llama4``, ...), or ``generic``.

    ``model_type`` decides, of any part of config.json (a multimodal wrapper's own, e.g.
    ``qwen3_5_moe``, or its ``text_config``'s, ``qwen3_5_moe_text``); then the architecture
    name, read at the top level only, where transformers and vLLM keep it
    (``get_architectures`` reads ``hf_config``, not ``hf_text_config``).
    """
    if not config:
        return "generic"
    types = {doc.get("model_type") for doc in config_parts(config)}
    for name, spec in FAMILIES.items():
        if types & spec.model_types:
            return name
    archs = config.get("architectures") or []
    for name, spec in FAMILIES.items():
        if any(isinstance(a, str) and a.startswith(spec.architecture_prefixes) for a in archs):
            return name
    return "generic"


def loads_fused_experts(config: dict[str, Any] | None) -> bool:
    """Does the vLLM model of ``config``'s family read routed experts stored as fused 3-D
    tensors (the table's ``naming.routed_layout: fused_3d``, e.g. Llama-4: ``llama4.py``
    ``Llama4Model.load_moe_expert_weights``; per model type where the table says so, e.g.
    Qwen3-VL-MoE: ``qwen3_vl_moe.py``)? Then a fused tensor needs no split."""
    family = family_of(config)
    if family not in FAMILIES or not config:
        return False
    types = {doc.get("model_type") for doc in config_parts(config)}
    return FAMILIES[family].naming_for(types).routed_layout == "fused_3d"
