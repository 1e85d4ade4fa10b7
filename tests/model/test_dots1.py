"""dots.llm1 as vLLM 0.33 reads it: by the Transformers backend (no dots1.py of its own since
0.23; ``registry.py`` falls back to ``transformers.Dots1ForCausalLM``), MoE from
``first_k_dense_replace``, two shared experts as one MLP never fused, sigmoid scores with the
correction bias picking the experts."""

from __future__ import annotations

from checkpoint_tool.model import model_facts
from checkpoint_tool.runtime.routing import RoutingConfig

from .layouts import INTER, E, dots1


def test_facts_follow_first_k_dense_replace_and_never_fuse():
    config, tensors = dots1(layers=4)
    facts = model_facts(config, set(tensors))
    assert facts.family == "dots1"
    assert facts.moe_layer_indices == [1, 2, 3]
    layer = facts.moe_layers[0]
    assert (layer.n_routed, layer.n_shared, layer.moe_intermediate_size) == (E, 2, INTER)
    assert layer.shared_intermediate_size == 2 * INTER
    assert facts.fse_unsupported and "Transformers backend" in facts.fse_unsupported


def test_routing_is_sigmoid_with_the_correction_bias():
    config, _ = dots1()
    cfg = RoutingConfig.from_hf_config(config)
    assert (cfg.top_k, cfg.scoring_func, cfg.topk_method, cfg.norm_topk_prob) == (
        2,
        "sigmoid",
        "noaux_tc",
        True,
    )
    assert cfg.routed_scaling_factor == 2.5
