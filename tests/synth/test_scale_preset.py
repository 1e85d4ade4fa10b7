"""The scale preset ``moe-1024x80-mxfp4``: its full-size plan of tensors, counted by hand.

Building all ~486k specs takes seconds, so the full layout is checked through a three-layer
build at full sizes (one dense layer, two MoE layers of 1024 experts) and the dims it repeats.
"""

from __future__ import annotations

import re
from collections import Counter

from checkpoint_tool.synth import PRESETS, build_layout

PRESET = "moe-1024x80-mxfp4"
#: per layer, by hand: 2 layer norms + MLA (q_a, q_a_layernorm, q_b, kv_a, kv_a_layernorm,
#: kv_b, o: BF16, one tensor each)
LAYER_COMMON = 2 + 7
#: a dense layer: its gate/up/down MLP, MXFP4 weight + weight_scale each
DENSE_LAYER = LAYER_COMMON + 3 * 2
#: a MoE layer: router weight + bias, 1024 routed experts and one shared expert, 3 x 2 each
MOE_LAYER = LAYER_COMMON + 2 + (1024 + 1) * 3 * 2
#: embed_tokens, model.norm, lm_head
OUTSIDE = 3


def _per_layer(names: list[str]) -> Counter[int | None]:
    layer = re.compile(r"^model\.layers\.(\d+)\.")
    return Counter(int(m.group(1)) if (m := layer.match(n)) else None for n in names)


def test_full_dims_are_1024_experts_by_80_layers():
    full = PRESETS[PRESET].full
    assert (full.num_layers, full.n_routed, full.first_dense, full.shards) == (80, 1024, 1, 192)
    assert (full.hidden, full.moe_intermediate, full.mtp_layers) == (7168, 1024, 0)


def test_full_size_tensor_plan_counted_by_hand():
    layout = build_layout(PRESET, sparse=True, num_layers=3)
    specs = {s.name: (s.dtype, tuple(s.shape)) for s in layout.tensors}
    assert len(specs) == len(layout.tensors)
    counts = _per_layer(list(specs))
    assert counts == {None: OUTSIDE, 0: DENSE_LAYER, 1: MOE_LAYER, 2: MOE_LAYER}
    e = "model.layers.2.mlp.experts.1023"
    assert specs[f"{e}.gate_proj.weight"] == ("U8", (1024, 7168 // 2))
    assert specs[f"{e}.gate_proj.weight_scale"] == ("U8", (1024, 7168 // 32))
    assert specs[f"{e}.down_proj.weight"] == ("U8", (7168, 1024 // 2))
    assert specs[f"{e}.down_proj.weight_scale"] == ("U8", (7168, 1024 // 32))
    assert specs["model.layers.1.self_attn.q_b_proj.weight"] == ("BF16", (128 * 192, 1536))
    assert specs["model.layers.1.mlp.gate.weight"] == ("BF16", (1024, 7168))
    assert specs["lm_head.weight"] == ("BF16", (163840, 7168))
    full = PRESETS[PRESET].full
    total = OUTSIDE + full.first_dense * DENSE_LAYER
    total += (full.num_layers - full.first_dense) * MOE_LAYER
    assert total == 486_737


def test_config_is_deepseek_v3_with_a_quark_mxfp4_config():
    cfg = build_layout(PRESET, sparse=True, num_layers=2).config
    assert cfg["model_type"] == "deepseek_v3"
    assert (cfg["n_routed_experts"], cfg["n_group"], cfg["topk_group"]) == (1024, 8, 4)
    assert (cfg["hidden_size"], cfg["vocab_size"], cfg["num_nextn_predict_layers"]) == (
        7168,
        163840,
        0,
    )
    q = cfg["quantization_config"]
    assert q["quant_method"] == "quark"
    assert q["global_quant_config"]["weight"]["dtype"] == "fp4"
    assert "lm_head" in q["exclude"]
    assert "model.layers.0.self_attn.o_proj" in q["exclude"]


def test_tiny_variant_has_32_experts():
    names = [s.name for s in build_layout(PRESET).tensors]
    assert _per_layer(names)[1] == LAYER_COMMON + 2 + (32 + 1) * 3 * 2
