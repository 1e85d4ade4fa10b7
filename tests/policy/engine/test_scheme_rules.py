"""Scheme detection as vLLM does it, per rule: a config edit that triggers it, and one that
does not. Specs are edited in config.json only (the engine decides from the config)."""

from __future__ import annotations

import copy

import pytest

from checkpoint_tool.policy.engine.quark_detect import detect_linear, detect_moe

from .helpers import by_rule, engine, moe_layers

FP8_BLOCK_W = {
    "dtype": "fp8_e4m3",
    "qscheme": "per_block",
    "block_size": [128, 128],
    "symmetric": True,
    "is_dynamic": False,
    "scale_type": "float32",
}
FP8_GROUP_IN = {
    "dtype": "fp8_e4m3",
    "qscheme": "per_group",
    "group_size": 128,
    "symmetric": True,
    "is_dynamic": True,
}
FP8_T = {"dtype": "fp8_e4m3", "qscheme": "per_tensor", "is_dynamic": False, "symmetric": True}
FP8_C = {
    "dtype": "fp8_e4m3",
    "qscheme": "per_channel",
    "is_dynamic": False,
    "ch_axis": 0,
    "symmetric": True,
}
INT4_C = {
    "dtype": "int4",
    "qscheme": "per_channel",
    "is_dynamic": False,
    "symmetric": True,
    "ch_axis": 0,
}
MXFP4 = {
    "dtype": "fp4",
    "qscheme": "per_group",
    "group_size": 32,
    "scale_format": "e8m0",
    "is_dynamic": False,
}


def _global(weight, inp, **extra):
    def edit(qc):
        qc["global_quant_config"] = {
            "weight": weight,
            "input_tensors": inp,
            "output_tensors": None,
            "bias": None,
            **extra,
        }

    return edit


def test_presets_have_no_scheme_findings(variant):
    for preset in ("quark-mxfp4", "quark-hybrid", "quark-nvfp4", "quark-fp8-per-tensor"):
        report = engine(variant(preset))
        assert not [f for f in report.findings if f.rule.startswith("quark_")], preset


def test_mx_group_64_is_refused_for_moe_and_linear(variant):
    w = dict(MXFP4, group_size=64)
    path = variant("quark-mxfp4", _global(w, None))
    found = by_rule(engine(path))
    moe = found["quark_moe_scheme_unsupported"][0]
    assert moe.upstream == "Unsupported FusedMoe scheme" and moe.layers == moe_layers(path)
    assert "group_size 32" in moe.message
    lin = found["quark_linear_scheme_unsupported"][0]
    assert lin.upstream.startswith("No quark compatible scheme was found. Weight config:")


def test_output_tensor_quantization_is_refused(variant):
    found = by_rule(engine(variant("quark-mxfp4", _global(MXFP4, None, output_tensors=FP8_T))))
    assert found["quark_output_or_bias_quant"][0].upstream == (
        "Currently, Quark models with output_tensors and bias quantized are not supported"
    )


def test_kv_cache_group_output_specs_are_dropped_first(variant):
    def edit(qc):
        qc["export"]["kv_cache_group"] = ["*kv_b_proj"]
        spec = copy.deepcopy(qc["global_quant_config"])
        spec["output_tensors"] = FP8_T
        qc["layer_quant_config"]["*kv_b_proj"] = spec

    assert "quark_output_or_bias_quant" not in by_rule(engine(variant("quark-mxfp4", edit)))


def test_per_block_without_block_size(variant):
    def edit(qc):
        key = next(iter(qc["layer_quant_config"]))
        qc["layer_quant_config"][key]["weight"]["block_size"] = None

    f = by_rule(engine(variant("quark-hybrid", edit)))["quark_fp8_block_size_missing"][0]
    assert f.upstream.startswith("Quark W8A8 FP8 per-block weight quantization requires")
    assert f.modules_total == 1


def test_w4a8_is_moe_only(variant):
    path = variant("quark-mxfp4", _global([FP8_T, INT4_C], FP8_T))
    found = by_rule(engine(path))
    assert found["quark_linear_multi_entry"][0].upstream == (
        "Multi-entry weight or activation quantization configs are only supported for NVFP4."
    )
    rocm = found["quark_moe_w4a8_rocm_only"][0]
    assert rocm.severity == "warning" and rocm.layers == moe_layers(path)


def test_fp8_moe_needs_matching_granularity(variant):
    found = by_rule(engine(variant("quark-fp8-per-tensor", _global(FP8_C, FP8_T))))
    f = found["quark_moe_fp8_scales_unsupported"][0]
    assert f.upstream.endswith("Found per_channel, per_tensor")
    # the same spec is a valid linear scheme (static per-tensor input)
    assert "quark_linear_scheme_unsupported" not in found


def test_fp8_block_moe_e8m0_scales_refused_float32_accepted(variant):
    e8m0 = dict(FP8_BLOCK_W, scale_type="float8_e8m0fnu")
    path = variant("quark-fp8-per-tensor", _global(e8m0, FP8_GROUP_IN))
    assert by_rule(engine(path))["quark_moe_fp8_block_e8m0"][0].layers == moe_layers(path)
    ok = by_rule(engine(variant("quark-fp8-per-tensor", _global(FP8_BLOCK_W, FP8_GROUP_IN))))
    assert not [r for r in ok if r.startswith("quark_moe") or r.startswith("quark_linear")]


@pytest.mark.parametrize(
    ("weight", "inp", "linear", "moe"),
    [
        (FP8_BLOCK_W, FP8_GROUP_IN, "fp8_block", "fp8_block"),
        (FP8_BLOCK_W, dict(FP8_GROUP_IN, group_size=64), None, None),  # group != block[1]
        (FP8_BLOCK_W, dict(FP8_GROUP_IN, is_dynamic=False), None, None),  # static input
        (dict(FP8_BLOCK_W, block_size=[64, 64]), FP8_GROUP_IN, None, None),
        (dict(FP8_BLOCK_W, symmetric=False), FP8_GROUP_IN, None, None),
        (FP8_T, FP8_T, "fp8", "fp8"),
        (FP8_T, dict(FP8_T, qscheme="per_channel"), None, None),  # static per-channel input
        (MXFP4, None, "ocp_mx", "ocp_mx"),
        (MXFP4, FP8_T, "w4a8_mxfp4_fp8", "ocp_mx"),  # static fp8 input: MoE allows it
        (dict(MXFP4, scale_format="float32"), None, None, None),
    ],
)
def test_detection_table(weight, inp, linear, moe):
    spec = {"weight": weight, "input_tensors": inp}
    assert detect_linear(spec).scheme == linear
    assert detect_moe(spec).scheme == moe


def test_nvfp4_needs_two_element_lists():
    nv_w = [
        {"dtype": "fp4", "qscheme": "per_group", "group_size": 16, "is_dynamic": False},
        {"dtype": "fp8_e4m3", "qscheme": "per_tensor", "is_dynamic": False},
    ]
    nv_i = [
        {"dtype": "fp4", "qscheme": "per_group", "group_size": 16, "is_dynamic": True},
        {"dtype": "fp8_e4m3", "qscheme": "per_tensor", "is_dynamic": False},
    ]
    assert detect_moe({"weight": nv_w, "input_tensors": nv_i}).scheme == "nvfp4"
    assert detect_linear({"weight": nv_w, "input_tensors": nv_i}).scheme == "nvfp4"
    bad = detect_moe({"weight": nv_w, "input_tensors": nv_i[0]})
    assert bad.rule == "quark_moe_scheme_unsupported"
