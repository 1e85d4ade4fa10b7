"""The vllm-0.33 DeepSeek-V2/V3 target spec: data hygiene, expressions, keys, full-size shapes.

Full-size shapes are checked against numbers worked out by hand from vLLM's create_weights
formulas for DeepSeek-V3 (hidden 7168, 128 heads, q_lora 1536, kv_lora 512, nope/rope/v
128/64/128, dense 18432, 256 experts of 2048) at TP 8.
"""

from __future__ import annotations

import pytest

from checkpoint_tool.errors import InputError, UsageError
from checkpoint_tool.quant.codecs import codec_for_format
from checkpoint_tool.quant.scheme import Scheme, WeightFormat
from checkpoint_tool.synth.builder import build_layout
from checkpoint_tool.targets import list_specs, load_spec
from checkpoint_tool.targets.exprs import evaluate, evaluate_int
from checkpoint_tool.targets.instance import instantiate
from checkpoint_tool.targets.keys import KeyResolver
from checkpoint_tool.targets.shapes import linear_shapes, moe_shapes, vocab_shape


@pytest.fixture(scope="module")
def spec():
    return load_spec("deepseek_v3")


@pytest.fixture(scope="module")
def v3_config():
    return build_layout("deepseek-v3-fp8", sparse=True).config


@pytest.mark.parametrize(
    ("family", "cited"), [("deepseek_v3", "deepseek_v2.py"), ("qwen3_moe", "qwen2_moe.py")]
)
def test_every_entry_cites_the_vllm_source(family, cited):
    spec = load_spec(family)
    assert spec.target == "vllm-0.33" and spec.version == "0.33.0"
    assert spec.files.pattern == "model-rank-{rank}-part-{part}.safetensors"
    assert not spec.files.index
    for m in spec.modules:
        assert m.cite, m.vllm
    for key, s in spec.schemes.items():
        assert s.cite, key
    assert all(a.cite for a in spec.aliases) and all(b.cite for b in spec.buffers)
    assert any(cited in c for c in spec.cite.values())
    assert [(t, f) for t, f, _ in list_specs()] == [
        ("vllm-0.33", "deepseek_v3"),
        ("vllm-0.33", "qwen3_moe"),
        ("vllm-0.33", "qwen3_moe"),
    ]


def test_unknown_family_or_target(spec):
    with pytest.raises(UsageError, match="glm4_moe"):
        load_spec("glm4_moe")
    with pytest.raises(UsageError, match="vllm-9"):
        load_spec("deepseek_v3", target="vllm-9")


def test_expressions():
    names = {"a": 6, "b": 4, "none": None, "kind": "noaux_tc"}
    assert evaluate("a * (b + 2) // 3 - a % b", names) == 10
    assert evaluate("none is None and a >= b", names) is True
    assert evaluate("kind == 'noaux_tc' or not a", names) is True
    assert evaluate(7, names) == 7
    with pytest.raises(InputError, match="missing"):
        evaluate("c + 1", names)
    with pytest.raises(InputError, match="unsupported"):
        evaluate("__import__('os')", names)
    with pytest.raises(InputError, match="unsupported"):
        evaluate("a.real", names)
    with pytest.raises(InputError, match="not a size"):
        evaluate_int("none is None", names, "x")
    # Python's and/or: the deciding operand (a size), and membership
    assert evaluate("none or a * b", names) == 24
    assert evaluate("b or a", names) == 4
    assert evaluate("none and a", names) is None
    assert evaluate("b in layers and a not in layers", {**names, "layers": [1, 4]}) is True


def test_state_dict_keys_are_the_smallest_alias(spec):
    keys = KeyResolver(spec)
    L = "model.layers.7"
    # MultiHeadLatentAttentionWrapper re-registers the attention modules under mla_attn
    assert keys.key(f"{L}.self_attn.o_proj", "weight") == f"{L}.self_attn.mla_attn.o_proj.weight"
    assert keys.key(f"{L}.self_attn.q_b_proj", "weight_scale") == (
        f"{L}.self_attn.mla_attn.q_b_proj.weight_scale"
    )
    assert keys.key(f"{L}.self_attn.q_a_layernorm", "weight") == (
        f"{L}.self_attn.mla_attn.q_a_layernorm.weight"
    )
    assert keys.key(f"{L}.self_attn.kv_b_proj", "weight") == f"{L}.self_attn.kv_b_proj.weight"
    assert keys.key(f"{L}.self_attn.fused_qkv_a_proj", "weight") == (
        f"{L}.self_attn.fused_qkv_a_proj.weight"
    )
    assert keys.names(f"{L}.self_attn.kv_b_proj", "weight") == {
        f"{L}.self_attn.kv_b_proj.weight",
        f"{L}.self_attn.mla_attn.kv_b_proj.weight",
        f"{L}.self_attn.mla_attn.mla_attn.kv_b_proj.weight",
    }
    # MoERunner registers the gate and wraps the shared experts
    assert keys.key(f"{L}.mlp.gate", "weight") == f"{L}.mlp.experts.gate.weight"
    assert keys.key(f"{L}.mlp.gate", "e_score_correction_bias") == (
        f"{L}.mlp.experts.gate.e_score_correction_bias"
    )
    assert keys.key(f"{L}.mlp.shared_experts.down_proj", "weight") == (
        f"{L}.mlp.experts._shared_experts._layer.down_proj.weight"
    )
    assert keys.key(f"{L}.mlp.experts.routed_experts", "w13_weight") == (
        f"{L}.mlp.experts.routed_experts.w13_weight"
    )
    assert keys.key("model.embed_tokens", "weight") == "model.embed_tokens.weight"
    assert keys.key(f"{L}.mlp.gate_up_proj", "weight") == f"{L}.mlp.gate_up_proj.weight"


def test_sites_of_deepseek_v3(spec, v3_config):
    inst = instantiate(spec, v3_config, fse_layers={})
    assert inst.num_layers == 61 and inst.moe_layers == list(range(3, 61))
    linears = {s.vllm: s for s in inst.linears}
    fused = linears["model.layers.5.self_attn.fused_qkv_a_proj"]
    assert fused.shards == (
        ("model.layers.5.self_attn.q_a_proj", 1536),
        ("model.layers.5.self_attn.kv_a_proj_with_mqa", 576),
    )
    assert fused.in_ == 7168 and fused.parallel == "replicated"
    assert "model.layers.0.mlp.gate_up_proj" in linears
    assert "model.layers.3.mlp.gate_up_proj" not in linears
    assert "model.layers.3.mlp.shared_experts.gate_up_proj" in linears
    assert "model.layers.3.self_attn.q_proj" not in linears  # q_lora_rank is set
    assert len(inst.moes) == 58 and inst.moes[0].slots == 256
    assert len(inst.buffers) == 61 * 4
    with_fse = instantiate(spec, v3_config, fse_layers={3: True})
    assert with_fse.moes[0].slots == 257
    assert "model.layers.3.mlp.shared_experts.gate_up_proj" not in {
        s.vllm for s in with_fse.linears
    }
    no_lora = instantiate(spec, {**v3_config, "q_lora_rank": None}, fse_layers={})
    names = {s.vllm for s in no_lora.linears}
    assert "model.layers.3.self_attn.q_proj" in names
    assert "model.layers.3.self_attn.kv_a_proj_with_mqa" in names
    assert "model.layers.3.self_attn.fused_qkv_a_proj" not in names


def _block_fp8():
    return codec_for_format(WeightFormat.FP8_BLOCK, block=(128, 128))


def test_full_size_block_fp8_shapes_at_tp8(spec, v3_config):
    inst = instantiate(spec, v3_config, fse_layers={3: True})
    linears = {s.vllm: s for s in inst.linears}
    params = ["weight", "weight_scale_inv"]

    def shapes(module):
        return linear_shapes(linears[module], _block_fp8(), 8, params)

    L = "model.layers.3"
    assert shapes(f"{L}.self_attn.fused_qkv_a_proj") == {
        "weight": (2112, 7168), "weight_scale_inv": (17, 56)}  # fmt: skip
    assert shapes(f"{L}.self_attn.q_b_proj") == {
        "weight": (3072, 1536), "weight_scale_inv": (24, 12)}  # fmt: skip
    assert shapes(f"{L}.self_attn.kv_b_proj") == {
        "weight": (4096, 512), "weight_scale_inv": (32, 4)}  # fmt: skip
    assert shapes(f"{L}.self_attn.o_proj") == {
        "weight": (7168, 2048), "weight_scale_inv": (56, 16)}  # fmt: skip
    assert shapes("model.layers.0.mlp.gate_up_proj") == {
        "weight": (4608, 7168), "weight_scale_inv": (36, 56)}  # fmt: skip
    assert shapes("model.layers.0.mlp.down_proj") == {
        "weight": (7168, 2304), "weight_scale_inv": (56, 18)}  # fmt: skip
    assert vocab_shape(inst.vocabs[0], 64, 8) == (16160, 7168)
    moe = inst.moes[0]
    assert moe_shapes(moe, spec, _block_fp8(), 8, params, []) == {
        "w13_weight": (257, 512, 7168),
        "w13_weight_scale_inv": (257, 4, 56),
        "w2_weight": (257, 7168, 256),
        "w2_weight_scale_inv": (257, 56, 2),
    }


def test_full_size_fp4_and_per_tensor_expert_shapes_at_tp8(spec, v3_config):
    moe = instantiate(spec, v3_config, fse_layers={}).moes[0]
    mx = codec_for_format(WeightFormat.MXFP4)
    assert moe_shapes(moe, spec, mx, 8, ["weight", "weight_scale"], []) == {
        "w13_weight": (256, 512, 3584),
        "w13_weight_scale": (256, 512, 224),
        "w2_weight": (256, 7168, 128),
        "w2_weight_scale": (256, 7168, 8),
    }
    nv = codec_for_format(WeightFormat.NVFP4)
    got = moe_shapes(moe, spec, nv, 8, ["weight_scale", "weight_scale_2", "input_scale"], [])
    assert got == {
        "w13_weight_scale": (256, 512, 448),
        "w2_weight_scale": (256, 7168, 16),
        "w13_weight_scale_2": (256, 2),
        "w2_weight_scale_2": (256,),
        "w13_input_scale": (256, 2),
        "w2_input_scale": (256,),
    }
    fp8 = codec_for_format(WeightFormat.FP8_PER_TENSOR)
    got = moe_shapes(moe, spec, fp8, 8, ["weight_scale", "input_scale"], ["input_scale"])
    assert got == {
        "w13_weight_scale": (256, 2),
        "w2_weight_scale": (256,),
        "w13_input_scale": (256,),
        "w2_input_scale": (256,),
    }


def test_per_tensor_linear_scales_have_one_entry_per_shard(spec, v3_config):
    inst = instantiate(spec, v3_config, fse_layers={})
    linears = {s.vllm: s for s in inst.linears}
    fp8 = codec_for_format(WeightFormat.FP8_PER_TENSOR)
    got = linear_shapes(
        linears["model.layers.3.self_attn.fused_qkv_a_proj"], fp8, 4,
        ["weight", "weight_scale", "input_scale"],
    )  # fmt: skip
    assert got == {"weight": (2112, 7168), "weight_scale": (2,), "input_scale": (2,)}
    nv = codec_for_format(WeightFormat.NVFP4)
    got = linear_shapes(
        linears["model.layers.3.self_attn.o_proj"], nv, 4,
        ["weight", "weight_scale", "weight_scale_2", "input_scale_2"],
    )  # fmt: skip
    assert got == {
        "weight": (7168, 2048), "weight_scale": (7168, 256),
        "weight_scale_2": (1,), "input_scale_2": (1,),
    }  # fmt: skip


def test_scheme_without_parameter_list_is_refused(spec):
    from checkpoint_tool.targets.shapes import scheme_key, scheme_params

    mxfp8 = Scheme(format=WeightFormat.MXFP8, source="quark", group_size=32)
    assert scheme_key(mxfp8) == "quark/mxfp8"
    with pytest.raises(UsageError, match="quark/mxfp8"):
        scheme_params(spec, mxfp8, "model.layers.3.mlp.experts.routed_experts")
    assert scheme_key(Scheme(format=WeightFormat.UNQUANTIZED, source="quark")) == "unquantized"
