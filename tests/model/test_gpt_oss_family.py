"""The gpt-oss row of the family table, on openai/gpt-oss-20b's layout (tests/model/layouts.py)."""

from __future__ import annotations

from checkpoint_tool.model import model_facts
from checkpoint_tool.model.families import FAMILIES, family_of, routing_defaults

from .layouts import INTER, E, gpt_oss


def _facts(layers: int = 2):
    config, tensors = gpt_oss(layers=layers)
    shapes = {k: v[1] for k, v in tensors.items()}
    return model_facts(config, tensors.keys(), tensor_shapes=shapes)


def test_every_layer_is_moe_with_fused_experts_and_no_shared_expert():
    facts = _facts(layers=3)
    assert facts.family == "gpt_oss" and facts.moe_layer_indices == [0, 1, 2]
    m = facts.layer(2)
    assert m.prefix == "model.layers.2.mlp"
    assert (m.n_routed, m.n_shared, m.moe_intermediate_size, m.top_k) == (E, 0, INTER, 2)
    assert m.naming.routed_layout == "fused_3d" and m.naming.gate_up_name == "gate_up_proj"
    assert m.naming.router_name == "router"
    assert not any(layer.is_mtp for layer in facts.moe_layers)


def test_fse_never_applies_and_routing_renormalises():
    spec = FAMILIES["gpt_oss"]
    assert spec.fse is not None and not spec.fse.supported and "shared expert" in spec.fse.reason
    r = routing_defaults("gpt_oss")
    assert r is not None and (r.scoring_func, r.topk_method, r.norm_topk_prob) == (
        "softmax",
        "greedy",
        True,
    )
    assert family_of({"architectures": ["GptOssForCausalLM"]}) == "gpt_oss"
