"""DeepSeek-V4 native checkpoints: every decoder layer is MoE, names in DeepSeek's own style.

Names: ``layers.N.ffn.experts.E.w1|w2|w3`` (w1 gate, w3 up, w2 down),
``layers.N.ffn.shared_experts.w1..``, MTP blocks ``mtp.K.ffn.*`` (global index
``num_hidden_layers + K``, as vLLM's ``extract_layer_index`` sees them). Config fields (vLLM
``models/deepseek_v4``): ``n_routed_experts``, ``n_shared_experts`` (None = no shared
expert), ``moe_intermediate_size`` (the shared MLP is ``n_shared * moe_intermediate_size``
wide), ``num_experts_per_tok``, ``num_hash_layers`` (hash-routed, still MoE),
``num_nextn_predict_layers``, ``expert_dtype`` ("fp4" | "fp8").

Example::

    build({"model_type": "deepseek_v4", "num_hidden_layers": 4, "n_routed_experts": 8,
           "n_shared_experts": 1, "moe_intermediate_size": 256, "hidden_size": 512,
           "num_nextn_predict_layers": 1, "expert_dtype": "fp4"}, None).moe_layers[-1].prefix
    # "mtp.0.ffn"
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from checkpoint_tool.model.config_fields import ConfigView
from checkpoint_tool.model.facts import W_PROJ_NAMES, ExpertNaming, ModelFacts
from checkpoint_tool.model.families.common import moe_model_facts
from checkpoint_tool.model.naming import choose_root

MODEL_TYPES = {"deepseek_v4"}
ARCHITECTURE_PREFIXES = ("DeepseekV4",)

DSV4_NAMING = ExpertNaming(proj_names=dict(W_PROJ_NAMES), shared_name="shared_experts")


def build(config: dict[str, Any], names: Collection[str] | None) -> ModelFacts:
    cfg = ConfigView(config, family="deepseek_v4")
    hidden = cfg.req_int("hidden_size")
    n_layers = cfg.req_int("num_hidden_layers")
    n_routed = cfg.req_int("n_routed_experts")
    moe_i = cfg.req_int("moe_intermediate_size")
    n_shared = cfg.opt_int("n_shared_experts", 0)
    n_mtp = cfg.opt_int("num_nextn_predict_layers", 0)
    top_k = cfg.opt_int("num_experts_per_tok", 0)
    root = choose_root(["layers", "model.layers"], names)
    # a converted checkpoint keeps ``mtp.K.*`` under the drafter's own names (deepseek-v4-amd
    # recipe, rule ``keep: mtp``) next to ``model.layers.*``
    mtp_root = choose_root(["model.mtp", "mtp"], names) if root == "model.layers" else "mtp"
    expert_dtype = config.get("expert_dtype")
    return moe_model_facts(
        config,
        names,
        family="deepseek_v4",
        hidden=hidden,
        n_layers=n_layers,
        main=[(i, f"{root}.{i}.ffn") for i in range(n_layers)],
        n_mtp=n_mtp,
        mtp_prefix=lambda k: f"{mtp_root}.{k}.ffn",
        n_routed=n_routed,
        n_shared=n_shared,
        moe_i=moe_i,
        shared_i=n_shared * moe_i,
        top_k=top_k,
        default=DSV4_NAMING,
        expert_dtype=expert_dtype if isinstance(expert_dtype, str) else None,
    )
