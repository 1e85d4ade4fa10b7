"""Quark scheme detection vs vLLM 0.32/0.33 (quark.py ``_get_scheme_cls_from_config``,
quark_moe.py ``get_moe_method_target``): INT4 W4A16 and MXFP8 are schemes vLLM builds."""

from __future__ import annotations

from checkpoint_tool.policy.engine.quark_detect import detect_linear, detect_moe

INT4 = {"dtype": "int4", "qscheme": "per_group", "group_size": 128, "symmetric": True}
MXFP8 = {"dtype": "fp8_e4m3", "qscheme": "per_group", "group_size": 32, "scale_format": "e8m0"}
MXFP8_2D = {
    "dtype": "fp8_e4m3",
    "qscheme": "per_block",
    "block_size": [32, 32],
    "scale_type": "float8_e8m0fnu",
    "symmetric": True,
    "is_dynamic": False,
}
MX_ACT = {"dtype": "fp8_e4m3", "qscheme": "per_group", "group_size": 32, "is_dynamic": True}


def test_int4_w4a16_is_built_when_packed():
    spec = {"weight": INT4, "input_tensors": None}
    assert detect_linear(spec, "reorder").scheme == "w4a16_int4"
    assert detect_moe(spec, "order").scheme == "w4a16_int4"
    # export.pack_method absent -> None in vLLM (from_config uses .get): not packed, refused
    assert detect_linear(spec, None).rule == "quark_linear_scheme_unsupported"
    assert detect_moe(spec, None).rule == "quark_moe_scheme_unsupported"
    # activations quantized: not W4A16
    assert detect_linear({"weight": INT4, "input_tensors": MX_ACT}, "reorder").scheme is None


def test_mxfp8_both_spellings_are_ocp_mx():
    for weight in (MXFP8, MXFP8_2D):
        for act in (None, MX_ACT):
            spec = {"weight": weight, "input_tensors": act}
            assert detect_linear(spec).scheme == "ocp_mx", (weight, act)
            assert detect_moe(spec).scheme == "ocp_mx", (weight, act)
    # the 2-D spelling needs column blocks of 32 and e8m0 scales
    bad = {**MXFP8_2D, "block_size": [32, 64]}
    assert detect_linear({"weight": bad, "input_tensors": None}).scheme is None
    bad = {**MXFP8_2D, "scale_type": None}
    assert detect_moe({"weight": bad, "input_tensors": None}).scheme is None
