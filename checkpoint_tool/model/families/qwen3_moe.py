"""Qwen2-MoE / Qwen3-MoE / Qwen3-Next / Qwen3.5-MoE: MoE layers from config.json.

vLLM's rule (qwen3_moe.py, qwen3_next.py): layer ``i`` is MoE when ``i`` is not in
``mlp_only_layers``, ``num_experts > 0`` and ``(i + 1) % decoder_sparse_step == 0``. The
shared expert is **singular**, ``mlp.shared_expert.{gate,up,down}_proj``, of width
``shared_expert_intermediate_size`` (0 or absent: no shared expert, as in Qwen3-MoE), with a
sigmoid ``mlp.shared_expert_gate``. Qwen3.5-MoE nests the language model in ``text_config``
and its tensors under ``model.language_model.layers``; its MTP block is ``mtp.layers.K``
(``mtp_num_hidden_layers``).

Example (Qwen3.5-MoE)::

    build({"model_type": "qwen3_5_moe", "text_config": {"num_hidden_layers": 40,
           "num_experts": 256, "moe_intermediate_size": 512,
           "shared_expert_intermediate_size": 512, ...}}, names).moe_layers[0].shared_prefix
    # "model.language_model.layers.0.mlp.shared_expert"
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from checkpoint_tool.model.config_fields import ConfigView, text_config
from checkpoint_tool.model.facts import ExpertNaming, ModelFacts
from checkpoint_tool.model.families.common import moe_model_facts
from checkpoint_tool.model.naming import choose_root

MODEL_TYPES = {
    "qwen2_moe",
    "qwen3_moe",
    "qwen3_next",
    "qwen3_5_moe",
    "qwen3_5_moe_text",
    "qwen3_vl_moe",
}
ARCHITECTURE_PREFIXES = ("Qwen2Moe", "Qwen3Moe", "Qwen3Next", "Qwen3_5Moe", "Qwen3VLMoe")

QWEN_NAMING = ExpertNaming(shared_name="shared_expert")


def build(config: dict[str, Any], names: Collection[str] | None) -> ModelFacts:
    tc = text_config(config)
    cfg = ConfigView(tc, family="qwen3_moe")
    hidden = cfg.req_int("hidden_size")
    n_layers = cfg.req_int("num_hidden_layers")
    n_routed = cfg.req_int("num_experts")
    moe_i = cfg.req_int("moe_intermediate_size")
    step = cfg.opt_int("decoder_sparse_step", 1) or 1
    mlp_only = set(cfg.int_list("mlp_only_layers"))
    shared_i = cfg.opt_int("shared_expert_intermediate_size", 0)
    n_mtp = cfg.opt_int("mtp_num_hidden_layers", 0)
    top_k = cfg.opt_int("num_experts_per_tok", 0)
    n_shared = 1 if shared_i > 0 else 0
    nested = tc is not config
    candidates = ["model.layers", "model.language_model.layers"]
    root = choose_root(candidates[::-1] if nested else candidates, names)
    main = [
        (i, f"{root}.{i}.mlp")
        for i in range(n_layers)
        if i not in mlp_only and n_routed > 0 and (i + 1) % step == 0
    ]
    return moe_model_facts(
        config,
        names,
        family="qwen3_moe",
        hidden=hidden,
        n_layers=n_layers,
        main=main,
        n_mtp=n_mtp,
        mtp_prefix=lambda k: f"mtp.layers.{k}.mlp",
        n_routed=n_routed,
        n_shared=n_shared,
        moe_i=moe_i,
        shared_i=shared_i,
        top_k=top_k,
        default=QWEN_NAMING,
    )
