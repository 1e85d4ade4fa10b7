"""GLM-4.5 / 4.6 / 4.7 MoE (``glm4_moe``): MoE layers from config.json.

vLLM's glm4_moe.py: layer ``i`` is MoE when ``n_routed_experts`` is set and
``i >= first_k_dense_replace`` (no ``moe_layer_freq``). Shared experts are one MLP of width
``n_shared_experts * moe_intermediate_size`` at ``mlp.shared_experts``; the
``num_nextn_predict_layers`` MTP layers sit at ``model.layers.{num_hidden_layers + k}``.

Example (GLM-4.5)::

    build({"model_type": "glm4_moe", "num_hidden_layers": 92, "first_k_dense_replace": 3,
           "n_routed_experts": 160, "n_shared_experts": 1, "moe_intermediate_size": 1536,
           "num_nextn_predict_layers": 1, ...}, None).moe_layer_indices   # [3, ..., 92]
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from checkpoint_tool.model.config_fields import ConfigView
from checkpoint_tool.model.facts import ExpertNaming, ModelFacts
from checkpoint_tool.model.families.common import moe_model_facts
from checkpoint_tool.model.naming import choose_root

MODEL_TYPES = {"glm4_moe", "glm4_moe_lite"}
ARCHITECTURE_PREFIXES = ("Glm4Moe",)


def build(config: dict[str, Any], names: Collection[str] | None) -> ModelFacts:
    cfg = ConfigView(config, family="glm4_moe")
    hidden = cfg.req_int("hidden_size")
    n_layers = cfg.req_int("num_hidden_layers")
    n_routed = cfg.req_int("n_routed_experts")
    moe_i = cfg.req_int("moe_intermediate_size")
    n_shared = cfg.opt_int("n_shared_experts", 0)
    first_k = cfg.opt_int("first_k_dense_replace", 0)
    n_mtp = cfg.opt_int("num_nextn_predict_layers", 0)
    top_k = cfg.opt_int("num_experts_per_tok", 0)
    root = choose_root(["model.layers"], names)
    return moe_model_facts(
        config,
        names,
        family="glm4_moe",
        hidden=hidden,
        n_layers=n_layers,
        main=[(i, f"{root}.{i}.mlp") for i in range(first_k, n_layers)],
        n_mtp=n_mtp,
        mtp_prefix=lambda k: f"{root}.{n_layers + k}.mlp",
        n_routed=n_routed,
        n_shared=n_shared,
        moe_i=moe_i,
        shared_i=n_shared * moe_i,
        top_k=top_k,
        default=ExpertNaming(),
    )
