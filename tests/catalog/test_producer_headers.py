"""The catalog reads real producers' layouts and resolves each tensor as the producer meant."""

from __future__ import annotations

import pytest

from catalog.producer_ckpt import (
    QUARK_STEMS,
    fixture_json,
    producer_fixture,
    quark_checkpoint,
    write_checkpoint,
)
from checkpoint_tool.catalog import open_catalog
from checkpoint_tool.quant.findings import catalog_findings
from checkpoint_tool.quant.resolve import resolve_catalog, scheme_differences
from checkpoint_tool.quant.scheme import WeightFormat as F


def _resolved(tmp_path, stem, **kw):
    cat = open_catalog(quark_checkpoint(tmp_path / stem, stem, **kw))
    return cat, resolve_catalog(cat)


@pytest.mark.parametrize("stem", QUARK_STEMS)
def test_catalog_reads_producer_headers_exactly(tmp_path, stem):
    _, tensors = producer_fixture(stem)
    cat = open_catalog(quark_checkpoint(tmp_path / stem, stem, shards=3))
    assert {n: (e.dtype, e.shape) for n, e in cat.tensors.items()} == tensors
    assert len(cat.files) == 3 and cat.index is not None


@pytest.mark.parametrize("stem", QUARK_STEMS)
def test_producer_output_has_no_errors_and_vllm_agrees_with_quark(tmp_path, stem):
    cat, rc = _resolved(tmp_path, stem)
    issues = catalog_findings(cat, rc)
    assert [i for i in issues if i.severity == "error"] == []
    fused = [n for n in cat.tensors if n.endswith((".experts.gate_up_proj", ".experts.down_proj"))]
    assert sorted(i.tensor for i in issues) == sorted(fused)
    assert {i.rule for i in issues} <= {"fused_experts_unquantized"}
    assert scheme_differences(rc.qconfig, list(rc.weights())) == []


def test_mxfp4_global_ptpc_fp8_attn_resolves_as_the_producer_meant(tmp_path):
    _, rc = _resolved(tmp_path, "mxfp4-global_ptpc-fp8-attn")
    t = rc.tensors
    for layer in (0, 1):
        for proj in ("q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj", "o_proj"):
            w = t[f"model.layers.{layer}.self_attn.{proj}.weight"]
            assert w.scheme.format is F.FP8_PER_CHANNEL
            assert "'*self_attn*'" in w.scheme.rule and "fnmatch" in w.scheme.rule
            s = t[f"model.layers.{layer}.self_attn.{proj}.weight_scale"]
            assert s.role == "scale" and s.scheme == w.scheme
    for name in (
        "model.layers.0.mlp.gate_proj.weight",
        "model.layers.0.mlp.down_proj.weight",
        "model.layers.1.mlp.shared_experts.up_proj.weight",
    ):
        assert t[name].scheme.format is F.MXFP4
        assert t[name].scheme.rule == "vllm: global_quant_config"
        assert t[name.replace(".weight", ".weight_scale")].role == "scale"
    head = t["lm_head.weight"]
    assert head.scheme.format is F.UNQUANTIZED and "exclude 'lm_head'" in head.scheme.rule
    for name in ("model.layers.1.mlp.experts.gate_up_proj", "model.layers.1.mlp.experts.down_proj"):
        assert t[name].role == "weight" and t[name].scheme.format is F.UNQUANTIZED
        assert "fused 3-D expert" in t[name].scheme.rule and t[name].module == name
    for name in (
        "model.layers.1.mlp.gate.weight",
        "model.norm.weight",
        "model.embed_tokens.weight",
    ):
        assert t[name].scheme.format is F.UNQUANTIZED
    assert t["model.layers.1.mlp.gate.e_score_correction_bias"].role == "bias"


def test_nvfp4_roles_and_scales(tmp_path):
    _, rc = _resolved(tmp_path, "nvfp4")
    m = "model.layers.0.self_attn.kv_b_proj"
    roles = {
        s: rc.tensors[f"{m}.{s}"].role
        for s in ("weight", "weight_scale", "weight_scale_2", "input_scale_2")
    }
    assert roles == {
        "weight": "weight",
        "weight_scale": "scale",
        "weight_scale_2": "global_scale",
        "input_scale_2": "input_scale",
    }
    s = rc.tensors[f"{m}.weight"].scheme
    assert (s.format, s.group_size, s.scale_dtypes) == (F.NVFP4, 16, ("F8_E4M3",))
    assert s.input_scale_suffix == "input_scale_2" and s.activation == "static"


def test_fp8_per_tensor_static_activation_scales(tmp_path):
    _, rc = _resolved(tmp_path, "fp8-per-tensor")
    s = rc.tensors["model.layers.1.mlp.shared_experts.down_proj.weight"].scheme
    assert s.format is F.FP8_PER_TENSOR and s.activation == "static"
    assert s.input_scale_suffix == "input_scale" and "BF16" in s.input_scale_dtypes
    assert (
        rc.tensors["model.layers.1.mlp.shared_experts.down_proj.input_scale"].role == "input_scale"
    )


def test_per_expert_mxfp4_experts_resolve_on_the_fused_moe_layer(tmp_path):
    _, rc = _resolved(tmp_path, "preprocessed-per-expert_mxfp4")
    w = rc.tensors["model.layers.1.mlp.experts.3.down_proj.weight"]
    assert w.scheme.format is F.MXFP4
    assert "FusedMoE layer 'model.layers.1.mlp.experts'" in w.scheme.rule
    assert rc.qconfig.producer_scheme_for(w.module).format is F.MXFP4


def _deepseek_fp8_tensors(hidden=256, inter=384, experts=2):
    t = {}

    def lin(name, out, inp):
        t[f"{name}.weight"] = ("F8_E4M3", (out, inp))
        t[f"{name}.weight_scale_inv"] = ("F32", (-(-out // 128), -(-inp // 128)))

    t["model.embed_tokens.weight"] = ("BF16", (512, hidden))
    t["lm_head.weight"] = ("BF16", (512, hidden))
    t["model.layers.0.mlp.gate.weight"] = ("BF16", (experts, hidden))
    t["model.layers.0.mlp.gate.e_score_correction_bias"] = ("F32", (experts,))
    t["model.layers.0.input_layernorm.weight"] = ("BF16", (hidden,))
    lin("model.layers.0.self_attn.q_a_proj", 192, hidden)
    lin("model.layers.0.self_attn.kv_a_proj_with_mqa", 96, hidden)
    for e in range(experts):
        for proj, (o, i) in {
            "gate_proj": (inter, hidden),
            "up_proj": (inter, hidden),
            "down_proj": (hidden, inter),
        }.items():
            lin(f"model.layers.0.mlp.experts.{e}.{proj}", o, i)
    lin("model.layers.0.mlp.shared_experts.down_proj", hidden, inter)
    lin("model.layers.0.mlp.shared_experts.gate_proj", inter, hidden)
    lin("model.layers.0.mlp.shared_experts.up_proj", inter, hidden)
    return t


def test_deepseek_r1_block_fp8(tmp_path):
    qc = fixture_json("deepseek-ai_DeepSeek-V3_R1.quantization_config.json")
    root = write_checkpoint(
        tmp_path / "r1",
        _deepseek_fp8_tensors(),
        {"model_type": "deepseek_v3", "quantization_config": qc},
    )
    cat = open_catalog(root)
    rc = resolve_catalog(cat)
    assert catalog_findings(cat, rc) == []
    s = rc.tensors["model.layers.0.mlp.experts.1.down_proj.weight"].scheme
    assert (s.format, s.block, s.scale_suffix, s.scale_dtypes) == (
        F.FP8_BLOCK,
        (128, 128),
        "weight_scale_inv",
        ("F32",),
    )
    assert rc.tensors["model.layers.0.mlp.experts.1.down_proj.weight_scale_inv"].role == "scale"
    head = rc.tensors["lm_head.weight"].scheme  # BF16 in DeepSeek's files, not in ignored_layers
    assert head.format is F.UNQUANTIZED and "ParallelLMHead" in head.rule


def test_modelopt_nvfp4_hf_quant_config(tmp_path):
    hfq = fixture_json(
        "modelopt_hf_quant_config.vipertsniper_DeepSeek-R1-Distill-Qwen-32B-NVFP4.json"
    )
    t = {"lm_head.weight": ("BF16", (512, 256)), "model.norm.weight": ("BF16", (256,))}
    for proj, (o, i) in {"q_proj": (256, 256), "k_proj": (64, 256), "v_proj": (64, 256)}.items():
        m = f"model.layers.0.self_attn.{proj}"
        t[f"{m}.weight"] = ("U8", (o, i // 2))
        t[f"{m}.weight_scale"] = ("F8_E4M3", (o, i // 16))
        t[f"{m}.weight_scale_2"] = ("F32", ())
        t[f"{m}.input_scale"] = ("F32", ())
    root = write_checkpoint(tmp_path / "mo", t, {"model_type": "qwen2"}, hf_quant_config=hfq)
    cat = open_catalog(root)
    rc = resolve_catalog(cat)
    assert catalog_findings(cat, rc) == []
    s = rc.tensors["model.layers.0.self_attn.k_proj.weight"].scheme
    assert (s.source, s.format, s.input_scale_suffix) == ("modelopt", F.NVFP4, "input_scale")
    assert rc.tensors["lm_head.weight"].scheme.format is F.UNQUANTIZED
    assert rc.tensors["model.layers.0.self_attn.k_proj.input_scale"].role == "input_scale"


def test_deepseek_v4_native_names(tmp_path):
    h, inter = 256, 128
    t = {
        "embed.weight": ("BF16", (512, h)),
        "head.weight": ("BF16", (512, h)),
        "norm.weight": ("BF16", (h,)),
        "layers.0.hc_attn_fn": ("F32", (24, 4 * h)),
        "layers.0.attn_norm.weight": ("BF16", (h,)),
        "layers.0.attn.attn_sink": ("F32", (4,)),
        "layers.0.attn.wq_a.weight": ("F8_E4M3", (192, h)),
        "layers.0.attn.wq_a.scale": ("F8_E8M0", (2, 2)),
        "layers.0.attn.indexer.weights_proj.weight": ("BF16", (4, h)),
        "layers.0.ffn.gate.weight": ("BF16", (4, h)),
        "layers.0.ffn.gate.bias": ("F32", (4,)),
        "layers.0.ffn.shared_experts.w1.weight": ("F8_E4M3", (inter, h)),
        "layers.0.ffn.shared_experts.w1.scale": ("F8_E8M0", (1, 2)),
    }
    for e in range(2):
        for w, (o, i) in {"w1": (inter, h), "w3": (inter, h), "w2": (h, inter)}.items():
            t[f"layers.0.ffn.experts.{e}.{w}.weight"] = ("I8", (o, i // 2))
            t[f"layers.0.ffn.experts.{e}.{w}.scale"] = ("F8_E8M0", (o, i // 32))
    config = {
        "model_type": "deepseek_v4",
        "expert_dtype": "fp4",
        "quantization_config": {
            "quant_method": "fp8",
            "weight_block_size": [128, 128],
            "scale_fmt": "ue8m0",
            "activation_scheme": "dynamic",
        },
    }
    cat = open_catalog(write_checkpoint(tmp_path / "v4", t, config))
    rc = resolve_catalog(cat)
    assert catalog_findings(cat, rc) == []
    ex = rc.tensors["layers.0.ffn.experts.1.w2.weight"].scheme
    assert (ex.source, ex.format, ex.scale_suffix) == ("deepseek_v4", F.MXFP4, "scale")
    lin = rc.tensors["layers.0.attn.wq_a.weight"].scheme
    assert (lin.format, lin.scale_is_e8m0) == (F.FP8_BLOCK, True)
    assert rc.tensors["layers.0.ffn.experts.1.w2.scale"].role == "scale"
    assert rc.tensors["head.weight"].scheme.format is F.UNQUANTIZED
    assert rc.tensors["layers.0.hc_attn_fn"].role == "other"
    assert rc.tensors["layers.0.ffn.gate.bias"].role == "bias"
