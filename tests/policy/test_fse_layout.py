"""ckpt's layout checks: stored schemes, slot width, chunking with n_shared > 1."""

from __future__ import annotations

from checkpoint_tool.policy.fse_layout import layout_check
from checkpoint_tool.quant.configs.base import fp8_block_scheme, mxfp4_scheme, unquantized
from checkpoint_tool.quant.scheme import Scheme, WeightFormat

from .helpers import dsv3_layer

MX = mxfp4_scheme(source="t", rule="t")
BLK = fp8_block_scheme((128, 128), scale_suffix="weight_scale", scale_dtypes=("F32",),
                       e8m0=False, source="t", rule="t")  # fmt: skip
PT = Scheme(format=WeightFormat.FP8_PER_TENSOR, scale_suffix="weight_scale")


def _all(s):
    return {"gate": s, "up": s, "down": s}


def test_same_scheme_one_shared_expert_fuses():
    assert layout_check(dsv3_layer(1), _all(MX), _all(MX)).compatible


def test_bf16_fused_routed_vs_mxfp4_shared_is_refused():
    r = layout_check(dsv3_layer(1), _all(unquantized("quark", "fused 3-D")), _all(MX))
    assert not r.compatible and r.code == "stored_schemes_differ"
    assert r.text == (
        "routed experts are stored as unquantized but shared experts as mxfp4/32 at "
        "model.layers.1.mlp.shared_experts"
    )


def test_missing_shared_tensors():
    r = layout_check(dsv3_layer(1), _all(MX), {})
    assert r.code == "shared_tensors_missing"


def test_two_shared_experts_chunk_into_two_slots_when_groups_stay_whole():
    layer = dsv3_layer(1, n_shared_experts=2)  # shared width 256 -> 2 chunks of 128
    assert layout_check(layer, _all(MX), _all(MX)).compatible
    assert layout_check(layer, _all(BLK), _all(BLK)).compatible


def test_chunk_not_a_whole_number_of_fp8_blocks():
    layer = dsv3_layer(1, n_shared_experts=2, moe_intermediate_size=192)  # chunks of 192
    r = layout_check(layer, _all(BLK), _all(BLK))
    assert r.code == "chunk_misaligned"
    assert "192 wide, not a multiple of 128" in r.text
    # MXFP4 groups of 32 divide 192: fine
    assert layout_check(layer, _all(MX), _all(MX)).compatible


def test_per_tensor_scales_cannot_be_chunked_but_one_expert_is_fine():
    assert layout_check(dsv3_layer(1), _all(PT), _all(PT)).compatible
    r = layout_check(dsv3_layer(1, n_shared_experts=2), _all(PT), _all(PT))
    assert r.code == "scale_not_splittable"
    assert r.text.startswith("fp8_per_tensor scales of the shared experts at model.layers.1")


def test_shared_width_must_match_routed_width():
    qwen = {
        "model_type": "qwen2_moe",
        "hidden_size": 64,
        "num_hidden_layers": 1,
        "num_experts": 4,
        "moe_intermediate_size": 64,
        "shared_expert_intermediate_size": 256,
    }
    from checkpoint_tool.model import model_facts

    layer = model_facts(qwen).layer(0)
    r = layout_check(layer, _all(MX), _all(MX))
    assert r.code == "width_mismatch"
    assert r.text == (
        "shared expert width 256 (256 / 1) differs from the routed expert width 64 at "
        "model.layers.0.mlp.shared_expert"
    )
