"""Model facts from hand-written configs: which layers are MoE, counts, sizes, names."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from checkpoint_tool.errors import InputError
from checkpoint_tool.model import family_of, model_facts

FIXTURES = Path(__file__).parents[1] / "fixtures" / "producer-headers"

R1 = {
    "model_type": "deepseek_v3",
    "architectures": ["DeepseekV3ForCausalLM"],
    "hidden_size": 7168,
    "num_hidden_layers": 61,
    "first_k_dense_replace": 3,
    "moe_layer_freq": 1,
    "n_routed_experts": 256,
    "n_shared_experts": 1,
    "moe_intermediate_size": 2048,
    "num_experts_per_tok": 8,
    "num_nextn_predict_layers": 1,
}


def test_deepseek_r1_moe_layers_and_mtp():
    f = model_facts(R1)
    assert f.family == "deepseek_v3"
    assert f.moe_layer_indices == list(range(3, 62))
    mtp = f.layer(61)
    assert mtp is not None and mtp.is_mtp and mtp.prefix == "model.layers.61.mlp"
    assert not f.layer(60).is_mtp
    first = f.layer(3)
    assert (first.n_routed, first.n_shared, first.top_k) == (256, 1, 8)
    assert (first.moe_intermediate_size, first.shared_intermediate_size) == (2048, 2048)
    assert first.routed_module(255, "up") == "model.layers.3.mlp.experts.255.up_proj"
    assert first.routed_weight(0, "down") == "model.layers.3.mlp.experts.0.down_proj.weight"
    assert first.shared_module("gate") == "model.layers.3.mlp.shared_experts.gate_proj"
    assert first.shared_prefix == "model.layers.3.mlp.shared_experts"


def test_deepseek_v2_layer_freq_and_two_shared():
    cfg = dict(R1, model_type="deepseek_v2", first_k_dense_replace=1, moe_layer_freq=2)
    cfg.update(num_hidden_layers=8, n_shared_experts=2, moe_intermediate_size=1408)
    cfg["num_nextn_predict_layers"] = 0
    f = model_facts(cfg)
    # i >= 1 and i % 2 == 0
    assert f.moe_layer_indices == [2, 4, 6]
    m = f.layer(4)
    assert m.shared_intermediate_size == 2816 and m.shared_chunk_size == 1408


def test_mtp_layer_dropped_when_the_checkpoint_has_no_tensors_for_it():
    names = {"model.layers.3.mlp.experts.0.gate_proj.weight", "model.layers.60.mlp.gate.weight"}
    f = model_facts(R1, names)
    assert 61 not in f.moe_layer_indices
    assert any("MTP layer 61" in n for n in f.notes)
    f2 = model_facts(R1, names | {"model.layers.61.eh_proj.weight"})
    assert 61 in f2.moe_layer_indices


def test_missing_required_field_is_one_line_input_error():
    cfg = dict(R1)
    del cfg["moe_intermediate_size"]
    with pytest.raises(InputError, match="moe_intermediate_size"):
        model_facts(cfg)


def test_glm4_moe_has_no_layer_freq():
    cfg = {
        "model_type": "glm4_moe",
        "hidden_size": 4096,
        "num_hidden_layers": 5,
        "first_k_dense_replace": 1,
        "n_routed_experts": 128,
        "n_shared_experts": 1,
        "moe_intermediate_size": 1408,
        "num_experts_per_tok": 8,
        "num_nextn_predict_layers": 1,
        "moe_layer_freq": 3,  # not a GLM field; must be ignored
    }
    f = model_facts(cfg)
    assert f.family == "glm4_moe"
    assert f.moe_layer_indices == [1, 2, 3, 4, 5]
    assert f.layer(5).is_mtp


def test_qwen3_moe_sparse_step_mlp_only_and_no_shared():
    cfg = {
        "model_type": "qwen3_moe",
        "hidden_size": 2048,
        "num_hidden_layers": 8,
        "num_experts": 128,
        "num_experts_per_tok": 8,
        "moe_intermediate_size": 768,
        "decoder_sparse_step": 2,
        "mlp_only_layers": [3],
    }
    f = model_facts(cfg)
    # (i + 1) % 2 == 0 -> 1, 3, 5, 7; 3 is mlp-only
    assert f.moe_layer_indices == [1, 5, 7]
    m = f.layer(5)
    assert m.n_shared == 0 and m.shared_prefix is None
    with pytest.raises(ValueError):
        m.shared_module("gate")


def test_qwen3_moe_saved_by_transformers5_spells_num_local_experts():
    # transformers 5's Qwen3MoeConfig.attribute_map = {"num_experts": "num_local_experts"}:
    # to_dict() writes the latter; vLLM reads it through transformers, so ckpt must too
    cfg = {
        "model_type": "qwen3_moe",
        "hidden_size": 2048,
        "num_hidden_layers": 4,
        "num_local_experts": 128,
        "num_experts_per_tok": 8,
        "moe_intermediate_size": 768,
    }
    f = model_facts(cfg)
    assert f.moe_layer_indices == [0, 1, 2, 3] and f.layer(2).n_routed == 128
    # the own name wins where both are present; neither is a one-line error naming it
    assert model_facts({**cfg, "num_experts": 64}).layer(0).n_routed == 64
    del cfg["num_local_experts"]
    with pytest.raises(InputError, match="'num_experts'"):
        model_facts(cfg)


def test_qwen2_moe_shared_expert_and_its_gate(synth_ckpt):
    from checkpoint_tool.catalog import open_local

    cat = open_local(synth_ckpt("qwen2-moe"))
    f = model_facts(cat.config, cat.tensors.keys())
    assert family_of(cat.config) == "qwen3_moe"
    m = f.layer(1)
    assert m.n_shared == 1 and m.shared_prefix == "model.layers.1.mlp.shared_expert"
    assert m.has_shared_expert_gate and m.shared_intermediate_size == 128


def test_qwen35_moe_nested_text_config_singular_shared_expert():
    cfg = {
        "model_type": "qwen3_5_moe",
        "architectures": ["Qwen3_5MoeForConditionalGeneration"],
        "text_config": {
            "model_type": "qwen3_5_moe_text",
            "hidden_size": 256,
            "num_hidden_layers": 2,
            "num_experts": 4,
            "num_experts_per_tok": 2,
            "moe_intermediate_size": 64,
            "shared_expert_intermediate_size": 128,
            "mtp_num_hidden_layers": 1,
        },
    }
    root = "model.language_model.layers"
    names = {
        f"{root}.{i}.mlp.{leaf}"
        for i in range(2)
        for leaf in (
            "experts.0.gate_proj.weight",
            "shared_expert.gate_proj.weight",
            "shared_expert_gate.weight",
        )
    }
    names |= {"mtp.layers.0.mlp.experts.0.gate_proj.weight", "mtp.fc.weight"}
    f = model_facts(cfg, names)
    assert f.family == "qwen3_moe"
    assert f.moe_layer_indices == [0, 1, 2]
    m = f.layer(1)
    assert m.prefix == f"{root}.1.mlp"
    assert m.shared_module("up") == f"{root}.1.mlp.shared_expert.up_proj"
    assert m.has_shared_expert_gate
    assert (m.n_shared, m.shared_intermediate_size, m.moe_intermediate_size) == (1, 128, 64)
    assert f.layer(2).prefix == "mtp.layers.0.mlp" and f.layer(2).is_mtp


DSV4 = {
    "model_type": "deepseek_v4",
    "architectures": ["DeepseekV4ForCausalLM"],
    "hidden_size": 512,
    "num_hidden_layers": 3,
    "n_routed_experts": 8,
    "n_shared_experts": 1,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 256,
    "num_hash_layers": 1,
    "num_nextn_predict_layers": 1,
    "expert_dtype": "fp4",
}


def test_deepseek_v4_native_names_every_layer_moe_and_mtp():
    names = {f"layers.{i}.ffn.experts.0.w1.weight" for i in range(3)}
    names |= {f"layers.{i}.ffn.shared_experts.w1.weight" for i in range(3)}
    names |= {"mtp.0.ffn.experts.0.w1.weight", "mtp.0.ffn.shared_experts.w1.weight"}
    f = model_facts(DSV4, names)
    assert f.family == "deepseek_v4" and f.expert_dtype == "fp4"
    assert f.moe_layer_indices == [0, 1, 2, 3]
    m = f.layer(1)
    assert m.prefix == "layers.1.ffn"
    assert m.routed_module(7, "gate") == "layers.1.ffn.experts.7.w1"
    assert m.routed_module(7, "up") == "layers.1.ffn.experts.7.w3"
    assert m.routed_module(7, "down") == "layers.1.ffn.experts.7.w2"
    assert m.shared_module("down") == "layers.1.ffn.shared_experts.w2"
    mtp = f.layer(3)
    assert mtp.is_mtp and mtp.shared_module("gate") == "mtp.0.ffn.shared_experts.w1"


def test_quark_fused_3d_routed_experts_detected_from_real_header_names():
    tensors = json.loads(
        (
            FIXTURES / "quark-0.13_tiny-deepseek_v3_mxfp4-global_ptpc-fp8-attn.tensors.json"
        ).read_text()
    )
    cfg = dict(
        R1, num_hidden_layers=2, first_k_dense_replace=1, n_routed_experts=4, num_experts_per_tok=2
    )
    cfg.update(moe_intermediate_size=128, hidden_size=256, num_nextn_predict_layers=0)
    f = model_facts(cfg, tensors)
    m = f.layer(1)
    assert m.naming.routed_layout == "fused_3d"
    assert m.routed_weight(2, "gate") == "model.layers.1.mlp.experts.gate_up_proj"
    assert m.routed_weight(2, "down") == "model.layers.1.mlp.experts.down_proj"
    assert m.routed_weight(2, "gate") in tensors and m.routed_weight(2, "down") in tensors
    assert m.shared_module("gate") + ".weight" in tensors


def test_generic_fallback_infers_layers_counts_and_sizes_from_names_and_shapes():
    shapes = {}
    for layer in (0, 1):
        for e in range(3):
            p = f"model.layers.{layer}.block_sparse_moe.experts.{e}"
            shapes[f"{p}.w1.weight"] = (96, 64)
            shapes[f"{p}.w3.weight"] = (96, 64)
            shapes[f"{p}.w2.weight"] = (64, 96)
    shapes["model.layers.0.self_attn.q_proj.weight"] = (64, 64)
    f = model_facts({"model_type": "mystery_moe"}, shapes, tensor_shapes=shapes)
    assert f.family == "generic" and f.notes
    assert f.moe_layer_indices == [0, 1]
    m = f.layer(1)
    assert (m.n_routed, m.moe_intermediate_size, m.n_shared) == (3, 96, 0)
    assert m.routed_module(2, "down") == "model.layers.1.block_sparse_moe.experts.2.w2"
    assert f.hidden_size == 64


def test_family_detection_by_architecture_when_model_type_is_unknown():
    assert family_of({"architectures": ["Glm4MoeForCausalLM"]}) == "glm4_moe"
    assert family_of({"model_type": "kimi_k2"}) == "deepseek_v3"
    assert family_of(None) == "generic"
    assert family_of({"model_type": "llama"}) == "generic"
