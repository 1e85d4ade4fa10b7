"""Padding arithmetic at TP 1/2/4/8 for MXFP4 / NVFP4 / block FP8, checked on the bytes.

Expected sizes are derived by hand: each rank's share of the intermediate size must be a
multiple of the scheme's group/block (MXFP4 32, NVFP4 16, block FP8 128 -- the policy also
asks it of the whole size at TP 1), so the padded size is the smallest multiple of
``tp * alignment`` that is >= I.
"""

from __future__ import annotations

import pytest
import torch
from plan_helpers import materialize, outputs, plan_of, read

from checkpoint_tool.errors import UsageError
from checkpoint_tool.quant.codecs import get_codec
from checkpoint_tool.quant.resolve import resolve_catalog

CASES = [
    # preset, I, {tp: padded I}
    ("quark-mxfp4", 160, {1: 160, 2: 192, 4: 256, 8: 256}),
    ("quark-mxfp4", 128, {1: 128, 2: 128, 4: 128, 8: 256}),
    ("quark-nvfp4", 160, {1: 160, 2: 160, 4: 192, 8: 256}),
    ("quark-nvfp4", 96, {1: 96, 2: 96, 4: 128, 8: 128}),
    ("deepseek-v3-fp8", 160, {1: 256, 2: 256, 4: 512, 8: 1024}),
    ("deepseek-v3-fp8", 256, {1: 256, 2: 256, 4: 512, 8: 1024}),
]


@pytest.mark.parametrize(("preset", "size", "expected"), CASES, ids=lambda c: str(c))
def test_padded_intermediate_size(synth_ckpt, preset, size, expected):
    path = synth_ckpt(preset, moe_intermediate=size)
    for tp, padded in expected.items():
        _, plan = plan_of(path, tp=tp)
        s = plan.summary
        assert (s.moe_intermediate_size, s.padded_intermediate_size) == (size, padded), tp
        assert plan.config["moe_intermediate_size"] == padded
        assert plan.config["ckpt"]["moe_intermediate_size"] == {"source": size, "written": padded}
        per_rank = padded // tp
        assert padded % tp == 0 and per_rank % s.pad_to == 0


def test_pad_to_option(synth_ckpt):
    path = synth_ckpt("quark-mxfp4", moe_intermediate=160)
    _, plan = plan_of(path, tp=2, pad_to=128)
    assert plan.summary.padded_intermediate_size == 256
    with pytest.raises(UsageError, match="not a multiple of the alignment 32"):
        plan_of(path, tp=2, pad_to=48)


def _module(cat, outs, module, scheme, *, source: bool):
    parts = {"weight": f"{module}.weight"}
    if scheme.scale_suffix:
        parts["scale"] = f"{module}.{scheme.scale_suffix}"
    if scheme.global_scale_suffix:
        parts["global_scale"] = f"{module}.{scheme.global_scale_suffix}"
    if source:
        return {r: read(cat, n) for r, n in parts.items()}
    return {r: materialize(cat, outs[n]) for r, n in parts.items()}


@pytest.mark.parametrize(
    ("preset", "size", "tp"),
    [("quark-mxfp4", 160, 2), ("quark-nvfp4", 160, 4), ("deepseek-v3-fp8", 160, 2)],
)
def test_padding_is_zero_weights_and_exact_values(synth_ckpt, preset, size, tp):
    cat, plan = plan_of(synth_ckpt(preset, moe_intermediate=size), tp=tp)
    padded = plan.summary.padded_intermediate_size
    assert padded > size
    rc = resolve_catalog(cat)
    outs = outputs(plan)
    layer = min(k for k in plan.fse_layers)
    for proj, dim in (("gate_proj", 0), ("up_proj", 0), ("down_proj", 1)):
        module = f"model.layers.{layer}.mlp.experts.3.{proj}"
        scheme = rc.tensors[f"{module}.weight"].scheme
        codec = get_codec(scheme)
        src = codec.dequantize(_module(cat, outs, module, scheme, source=True)).double()
        got = codec.dequantize(_module(cat, outs, module, scheme, source=False)).double()
        pad_shape = list(src.shape)
        pad_shape[dim] = padded - size
        want = torch.cat([src, torch.zeros(pad_shape, dtype=torch.float64)], dim=dim)
        assert src.abs().sum() > 0  # fresh random data, not zeros
        assert torch.equal(got, want), (module, proj)


def test_scale_padding_uses_neutral_values_in_the_tensors_own_dtype(synth_ckpt):
    _, plan = plan_of(synth_ckpt("quark-nvfp4", moe_intermediate=160), tp=4)
    outs = outputs(plan)
    layer = min(plan.fse_layers)
    down = outs[f"model.layers.{layer}.mlp.experts.0.down_proj.weight_scale"]
    assert down.dtype == "F8_E4M3"
    (pad,) = down.pieces[0].pads
    assert pad.fill == "38" and pad.dim == 1 and pad.amount == (192 - 160) // 16  # E4M3 1.0
    # the 0-d global scale is copied untouched
    g = outs[f"model.layers.{layer}.mlp.experts.0.down_proj.weight_scale_2"]
    assert not g.pieces[0].pads and not g.pieces[0].slices and g.shape == []
    _, plan = plan_of(synth_ckpt("quark-mxfp4", moe_intermediate=160), tp=2)
    mx = outputs(plan)[f"model.layers.{layer}.mlp.experts.0.gate_proj.weight_scale"]
    (pad,) = mx.pieces[0].pads
    assert (pad.dim, pad.amount, pad.fill) == (0, 192 - 160, "7f")  # rows of E8M0 1.0
    mx = outputs(plan)[f"model.layers.{layer}.mlp.experts.0.down_proj.weight"]
    (pad,) = mx.pieces[0].pads
    assert (pad.dim, pad.amount, pad.fill) == (1, (192 - 160) // 2, "00")  # packed FP4 bytes
    _, plan = plan_of(synth_ckpt("deepseek-v3-fp8", moe_intermediate=160), tp=4)
    gate = outputs(plan)[f"model.layers.{layer}.mlp.experts.0.gate_proj.weight_scale_inv"]
    (pad,) = gate.pieces[0].pads
    # 160 rows = 2 blocks of 128; 512 rows = 4 blocks: two neutral F32 blocks appended
    assert (pad.dim, pad.amount, pad.fill) == (0, 2, "0000803f")


def test_unfused_shared_expert_is_padded_to_n_shared_times_the_padded_size(synth_ckpt):
    # quark-hybrid: layer 1 shared expert excluded (BF16), layer 2 block-FP8: both stay shared
    cat, plan = plan_of(synth_ckpt("quark-hybrid", moe_intermediate=160), tp=2)
    outs = outputs(plan)
    padded = plan.summary.padded_intermediate_size
    # the block-FP8 shared expert needs 128-row shares: 2 x 128
    assert padded == 256
    for layer in (1, 2):
        gate = outs[f"model.layers.{layer}.mlp.shared_experts.gate_proj.weight"]
        down = outs[f"model.layers.{layer}.mlp.shared_experts.down_proj.weight"]
        assert gate.shape[0] == padded and down.shape[1] == padded
        materialize(cat, gate)
