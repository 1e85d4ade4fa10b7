"""DeepSeek-V2 / V3 / R1 (and Kimi-K2, same architecture): MoE layers from config.json.

A layer ``i < num_hidden_layers`` is MoE when ``n_routed_experts`` is set,
``i >= first_k_dense_replace`` and ``i % moe_layer_freq == 0`` (vLLM's deepseek_v2.py rule).
``num_nextn_predict_layers`` MTP layers follow at indices ``num_hidden_layers + k``
(``model.layers.61`` for R1) and are MoE too. The shared expert is one MLP of width
``n_shared_experts * moe_intermediate_size``.

Example (DeepSeek-R1)::

    build({"model_type": "deepseek_v3", "num_hidden_layers": 61, "first_k_dense_replace": 3,
           "n_routed_experts": 256, "n_shared_experts": 1, "moe_intermediate_size": 2048,
           "num_nextn_predict_layers": 1, "hidden_size": 7168, ...}, None).moe_layer_indices
    # [3, 4, ..., 60, 61]
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from checkpoint_tool.errors import InputError
from checkpoint_tool.model.config_fields import ConfigView
from checkpoint_tool.model.facts import ExpertNaming, ModelFacts
from checkpoint_tool.model.families.common import moe_model_facts
from checkpoint_tool.model.naming import choose_root

MODEL_TYPES = {"deepseek_v2", "deepseek_v3", "deepseek_v32", "kimi_k2"}
ARCHITECTURE_PREFIXES = ("DeepseekV2", "DeepseekV3", "DeepseekV32", "KimiK2")


def build(config: dict[str, Any], names: Collection[str] | None) -> ModelFacts:
    cfg = ConfigView(config, family="deepseek_v3")
    hidden = cfg.req_int("hidden_size")
    n_layers = cfg.req_int("num_hidden_layers")
    n_routed = cfg.req_int("n_routed_experts")
    moe_i = cfg.req_int("moe_intermediate_size")
    n_shared = cfg.opt_int("n_shared_experts", 0)
    first_k = cfg.opt_int("first_k_dense_replace", 0)
    freq = cfg.opt_int("moe_layer_freq", 1)
    n_mtp = cfg.opt_int("num_nextn_predict_layers", 0)
    top_k = cfg.opt_int("num_experts_per_tok", 0)
    if freq <= 0:
        raise InputError(f"config.json: moe_layer_freq must be >= 1, got {freq}; fix config.json")
    root = choose_root(["model.layers"], names)
    main = [(i, f"{root}.{i}.mlp") for i in range(n_layers) if i >= first_k and i % freq == 0]
    return moe_model_facts(
        config,
        names,
        family="deepseek_v3",
        hidden=hidden,
        n_layers=n_layers,
        main=main,
        n_mtp=n_mtp,
        mtp_prefix=lambda k: f"{root}.{n_layers + k}.mlp",
        n_routed=n_routed,
        n_shared=n_shared,
        moe_i=moe_i,
        shared_i=n_shared * moe_i,
        top_k=top_k,
        default=ExpertNaming(),
    )
