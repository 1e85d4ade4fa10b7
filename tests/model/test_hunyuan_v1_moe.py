"""Hunyuan MoE V1 (Hunyuan-A13B) as vLLM 0.33 reads it: by the Transformers backend
(``registry.py`` ``_TRANSFORMERS_SUPPORTED_MODELS``), every layer MoE with one shared MLP
``mlp.shared_mlp`` never fused, and ``moe_intermediate_size`` / ``moe_topk`` lists per layer
(``transformers/moe.py`` ``maybe_per_layer``)."""

from __future__ import annotations

import pytest

from checkpoint_tool.errors import InputError
from checkpoint_tool.model import model_facts
from checkpoint_tool.model.config_checks import check_config
from checkpoint_tool.runtime.routing import RoutingConfig

from .layouts import INTER, E, hunyuan_v1_moe


def test_facts_name_the_shared_mlp_and_the_router():
    config, tensors = hunyuan_v1_moe(layers=3)
    facts = model_facts(config, set(tensors))
    assert facts.family == "hunyuan_v1_moe"
    assert facts.moe_layer_indices == [0, 1, 2]
    layer = facts.moe_layers[0]
    assert (layer.n_routed, layer.n_shared, layer.moe_intermediate_size) == (E, 1, INTER)
    assert layer.shared_intermediate_size == INTER
    assert layer.shared_module("gate") == "model.layers.0.mlp.shared_mlp.gate_proj"
    assert layer.naming.router_name == "gate.wg"
    assert facts.fse_unsupported and "Transformers backend" in facts.fse_unsupported


def test_a_width_per_layer_passes_the_range_checks_entry_by_entry():
    config, _ = hunyuan_v1_moe()
    check_config(config)
    for bad in ([], [INTER, 0], [INTER, "x"]):
        with pytest.raises(InputError, match="moe_intermediate_size"):
            check_config({**config, "moe_intermediate_size": bad})


def test_a_top_k_per_layer_routes_when_every_layer_agrees():
    config, _ = hunyuan_v1_moe()
    assert RoutingConfig.from_hf_config(config).top_k == 2
    with pytest.raises(InputError, match="top-k per layer"):
        RoutingConfig.from_hf_config({**config, "moe_topk": [2, 4]})
