"""ERNIE-4.5 MoE as vLLM reads it (``model_executor/models/ernie45_moe.py``): MoE layers by
``moe_layer_start_index`` / ``moe_layer_end_index`` / ``moe_layer_interval``, two shared
experts as one MLP, top k ``moe_k``, softmax scores with the correction bias picking the
experts and the weights renormalised (``FusedMoE(renormalize=True, e_score_correction_bias)``)."""

from __future__ import annotations

from checkpoint_tool.model import model_facts
from checkpoint_tool.runtime.routing import RoutingConfig

from .layouts import INTER, E, ernie45_moe


def test_facts_follow_the_index_range():
    config, tensors = ernie45_moe(layers=6)
    config["moe_layer_interval"] = 2
    facts = model_facts(config, set(tensors))
    assert facts.family == "ernie4_5_moe"
    # 1 <= i <= 4 and (i + 1) % 2 == 0
    assert facts.moe_layer_indices == [1, 3]
    layer = facts.moe_layers[0]
    assert (layer.n_routed, layer.n_shared, layer.moe_intermediate_size) == (E, 2, INTER)
    assert layer.shared_intermediate_size == 2 * INTER and layer.top_k == 2


def test_routing_reads_moe_k_and_renormalises():
    config, _ = ernie45_moe()
    cfg = RoutingConfig.from_hf_config(config)
    assert (cfg.top_k, cfg.scoring_func, cfg.topk_method, cfg.norm_topk_prob) == (
        2,
        "softmax",
        "noaux_tc",
        True,
    )
    assert RoutingConfig.from_hf_config({**config, "norm_topk_prob": False}).norm_topk_prob is False
