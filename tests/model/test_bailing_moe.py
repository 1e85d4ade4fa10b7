"""Bailing-MoE (Ling) as vLLM reads it (``model_executor/models/bailing_moe.py``): layers
below ``first_k_dense_replace`` dense, ``num_shared_experts`` shared experts as one MLP that
many times as wide, never fused (``BailingMoE`` hands them to ``FusedMoEFactory`` as
``shared_experts``)."""

from __future__ import annotations

from checkpoint_tool.model import model_facts
from checkpoint_tool.model.families import family_of

from .layouts import INTER, E, bailing_moe


def test_facts_follow_first_k_dense_replace():
    config, tensors = bailing_moe(layers=4, first_dense=1)
    facts = model_facts(config, set(tensors))
    assert facts.family == "bailing_moe"
    assert facts.moe_layer_indices == [1, 2, 3]
    layer = facts.moe_layers[0]
    assert (layer.n_routed, layer.n_shared, layer.moe_intermediate_size) == (E, 2, INTER)
    assert layer.shared_intermediate_size == 2 * INTER and layer.top_k == 2
    assert layer.naming.shared_name == "shared_experts"


def test_shared_experts_never_fuse():
    config, tensors = bailing_moe()
    facts = model_facts(config, set(tensors))
    assert facts.fse_unsupported and "bailing_moe.py" in facts.fse_unsupported


def test_only_the_two_bailing_moe_architectures_are_claimed():
    assert family_of({"architectures": ["BailingMoeV2ForCausalLM"]}) == "bailing_moe"
    # other model files of vLLM (bailing_moe_linear.py, bailing_moe_v3.py)
    assert family_of({"architectures": ["BailingMoeV2_5ForCausalLM"]}) == "generic"
    assert family_of({"architectures": ["BailingMoeV3ForCausalLM"]}) == "generic"
