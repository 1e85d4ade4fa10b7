"""The bundled recipes: they load, match their families, and rename real producer names right."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from checkpoint_tool.quant.scheme import Scheme, WeightFormat
from checkpoint_tool.recipes import (
    RuleSet,
    bundled_dir,
    list_recipes,
    load_recipe,
    recipe_for_config,
)

HEADERS = Path(__file__).parents[1] / "fixtures" / "producer-headers"
PRODUCER_NAME_LISTS = sorted(HEADERS.glob("*.tensors.json"))


def test_every_bundled_recipe_loads_and_is_named_after_its_file():
    names = [r.name for r in list_recipes()]
    assert names == sorted(p.stem for p in bundled_dir().glob("*.yaml"))
    assert {"deepseek-v3", "deepseek-v4-amd", "qwen3.5-moe", "generic"} <= set(names)


@pytest.mark.parametrize("path", PRODUCER_NAME_LISTS, ids=lambda p: p.name.split(".")[0])
def test_deepseek_v3_recipe_accepts_every_quark_export_name_unchanged(path):
    names = sorted(json.loads(path.read_text()))
    rules = RuleSet(load_recipe("deepseek-v3"))
    for name in names:
        out = rules.rename(name)
        assert out.matched, name
        assert out.name == name, name


def test_deepseek_v3_fse_redirect_and_alias_on_quark_names():
    rules = RuleSet(load_recipe("deepseek-v3"))
    mx = Scheme(format=WeightFormat.MXFP4, group_size=32, source="quark")
    out = rules.rename(
        "model.layers.1.mlp.shared_experts.down_proj.weight_scale",
        redirect_to="model.layers.1.mlp.experts.4.down_proj.weight_scale",
        scheme=mx,
        is_scale=True,
    )
    assert out.name == "model.layers.1.mlp.experts.4.down_proj.weight_scale"
    assert out.steps[0] == "fse"
    native = Scheme(format=WeightFormat.FP8_BLOCK, block=(128, 128), source="deepseek_fp8")
    kept = rules.rename(
        "model.layers.3.self_attn.q_a_proj.weight_scale_inv", scheme=native, is_scale=True
    )
    assert kept.name == "model.layers.3.self_attn.q_a_proj.weight_scale_inv"


def test_deepseek_v3_recipe_flags_names_it_does_not_know():
    rules = RuleSet(load_recipe("deepseek-v3"))
    assert not rules.rename("transformer.h.0.attn.weight").matched
    dropped = rules.rename("model.layers.0.self_attn.rotary_emb.inv_freq")
    assert dropped.dropped and "inv_freq" in dropped.reason


# DeepSeek-V4 native names (FORMATS.md §3/§4) -> what vLLM's AMD mapper makes of them.
DSV4_FP4 = {
    "embed.weight": "model.embed_tokens.weight",
    "norm.weight": "model.norm.weight",
    "hc_head_fn": "model.hc_head_fn",
    "layers.0.attn.wq_a.weight": "model.layers.0.attn.wq_a.weight",
    "layers.0.attn.wq_a.scale": "model.layers.0.attn.wq_a.weight_scale_inv",
    "layers.0.attn_norm.weight": "model.layers.0.attn_norm.weight",
    "layers.0.hc_attn_scale": "model.layers.0.hc_attn_scale",
    "layers.3.ffn.gate.weight": "model.layers.3.ffn.gate.weight",
    "layers.3.ffn.gate.bias": "model.layers.3.ffn.gate.e_score_correction_bias",
    "layers.3.ffn.experts.7.w1.weight": "model.layers.3.ffn.experts.7.w1.weight",
    "layers.3.ffn.experts.7.w1.scale": "model.layers.3.ffn.experts.7.w1.weight_scale",
    "layers.3.ffn.experts.7.w2.scale": "model.layers.3.ffn.experts.7.w2.weight_scale",
    "layers.3.ffn.experts.7.w3.input_scale": "model.layers.3.ffn.experts.7.w3.input_scale_2",
    "layers.3.ffn.shared_experts.w1.weight": "model.layers.3.ffn.shared_experts.w1.weight",
    "layers.3.ffn.shared_experts.w2.weight": "model.layers.3.ffn.shared_experts.down_proj.weight",
    "layers.3.ffn.shared_experts.w2.scale": "model.layers.3.ffn.shared_experts.down_proj.weight_scale_inv",
    "layers.1.engram.embed.weight": "model.layers.1.engram.embed_tokens.weight",
    "layers.1.engram.embed.scale": "model.layers.1.engram.embed_tokens.weight_scale_inv",
    "layers.1.engram.embed.weight_scale": "model.layers.1.engram.embed_tokens.weight_scale_inv",
    "mtp.0.ffn.experts.1.w1.scale": "mtp.0.ffn.experts.1.w1.scale",
    "mtp.0.embed.weight": "mtp.0.embed.weight",
}


@pytest.mark.parametrize(("source", "expected"), sorted(DSV4_FP4.items()))
def test_deepseek_v4_amd_mapper_fp4(source, expected):
    rules = RuleSet(load_recipe("deepseek-v4-amd"), {"expert_dtype": "fp4"})
    out = rules.rename(source)
    assert out.engine_name == expected
    # every written name is a fixed point of the mapper the loader applies again
    if not out.kept:
        assert rules.loader_view(out.name) == out.engine_name


def test_deepseek_v4_amd_head_is_left_for_the_loader():
    rules = RuleSet(load_recipe("deepseek-v4-amd"), {"expert_dtype": "fp4"})
    out = rules.rename("head.weight")
    assert (out.name, out.engine_name) == ("head.weight", "lm_head.weight")


def test_deepseek_v4_amd_fp8_experts_use_inv_scales():
    rules = RuleSet(load_recipe("deepseek-v4-amd"), {"expert_dtype": "fp8"})
    assert (
        rules.rename("layers.3.ffn.experts.7.w1.scale").name
        == "model.layers.3.ffn.experts.7.w1.weight_scale_inv"
    )


def test_deepseek_v4_amd_fse_redirected_shared_expert_gets_expert_names():
    rules = RuleSet(load_recipe("deepseek-v4-amd"), {"expert_dtype": "fp4"})
    w2 = rules.rename(
        "layers.3.ffn.shared_experts.w2.weight", redirect_to="layers.3.ffn.experts.256.w2.weight"
    )
    assert w2.name == "model.layers.3.ffn.experts.256.w2.weight"  # no down_proj rename
    scale = rules.rename(
        "layers.3.ffn.shared_experts.w1.scale", redirect_to="layers.3.ffn.experts.256.w1.scale"
    )
    assert scale.name == "model.layers.3.ffn.experts.256.w1.weight_scale"


def test_deepseek_v4_amd_engram_alias_is_skipped_whatever_the_scheme():
    rules = RuleSet(load_recipe("deepseek-v4-amd"), {"expert_dtype": "fp4"})
    mx8 = Scheme(format=WeightFormat.MXFP8, group_size=32, source="deepseek_v4")
    out = rules.rename("layers.1.engram.embed.scale", scheme=mx8, is_scale=True)
    assert out.name == "model.layers.1.engram.embed_tokens.weight_scale_inv"


def test_deepseek_v4_amd_drops_the_vision_tower():
    rules = RuleSet(load_recipe("deepseek-v4-amd"))
    for name in ("vision.blocks.0.attn.weight", "aligner.proj.weight", "image_newline"):
        assert rules.rename(name).dropped, name


QWEN_NAMES = [
    "model.embed_tokens.weight",
    "model.layers.0.mlp.experts.3.gate_proj.weight",
    "model.layers.0.mlp.experts.3.gate_proj.weight_scale",
    "model.layers.0.mlp.shared_expert.down_proj.weight",
    "model.layers.0.mlp.shared_expert_gate.weight",
    "model.language_model.layers.0.mlp.gate.weight",
    "model.visual.blocks.0.attn.qkv.weight",
    "mtp.layers.0.mlp.experts.0.up_proj.weight",
    "lm_head.weight",
]


def test_qwen_recipe_passes_names_through_and_redirects_fse():
    # vLLM's Qwen3NextSparseMoeBlock fuses the shared expert into slot num_experts
    # (qwen3_next.py load_weights: maybe_fuse_shared_experts(ckpt_prefix="mlp.shared_expert"))
    recipe = load_recipe("qwen3.5-moe")
    rules = RuleSet(recipe)
    for name in QWEN_NAMES:
        out = rules.rename(name)
        assert out.matched and out.name == name, name
    assert recipe.fse.supported
    src = "model.language_model.layers.0.mlp.shared_expert.up_proj.weight"
    slot = "model.language_model.layers.0.mlp.experts.512.up_proj.weight"
    out = rules.rename(src, redirect_to=slot)
    assert out.name == slot and out.steps[0] == "fse"
    gate = "model.language_model.layers.0.mlp.shared_expert_gate.weight"
    assert rules.rename(gate).name == gate


def test_generic_recipe_accepts_anything():
    rules = RuleSet(load_recipe("generic"))
    out = rules.rename("whatever.you.like")
    assert out.matched and out.name == "whatever.you.like"


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        ({"model_type": "deepseek_v3", "architectures": ["DeepseekV3ForCausalLM"]}, "deepseek-v3"),
        ({"model_type": "deepseek_v2"}, "deepseek-v3"),
        ({"architectures": ["DeepseekV4ForCausalLM"]}, "deepseek-v4-amd"),
        ({"model_type": "qwen3_moe"}, "qwen3.5-moe"),
        (
            {"model_type": "qwen3_5_moe", "text_config": {"model_type": "qwen3_5_moe_text"}},
            "qwen3.5-moe",
        ),
        ({"model_type": "llama"}, "generic"),
        (None, "generic"),
    ],
)
def test_recipe_for_config(config, expected):
    assert recipe_for_config(config).name == expected
