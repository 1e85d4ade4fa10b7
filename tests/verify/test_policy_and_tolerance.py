"""Layer sampling (one layer per conversion policy) and per-format tolerances."""

from __future__ import annotations

from checkpoint_tool.layers.loader import CheckpointView
from checkpoint_tool.quant.scheme import Scheme, WeightFormat
from checkpoint_tool.verify.sampling import sample_layers
from checkpoint_tool.verify.tolerance import tolerance_for

MXFP4 = Scheme(format=WeightFormat.MXFP4, group_size=32)
FP8_W8A8 = Scheme(format=WeightFormat.FP8_BLOCK, block=(128, 128), activation="dynamic")
FP8_WO = Scheme(format=WeightFormat.FP8_BLOCK, block=(128, 128))


def test_tolerance_by_format_and_activations() -> None:
    wo = tolerance_for([MXFP4, MXFP4], bf16_activations=False)
    w8 = tolerance_for([MXFP4, FP8_W8A8], bf16_activations=False)
    gpu = tolerance_for([MXFP4], bf16_activations=True)
    assert wo.rel == 2e-5 and wo.max_rel == 1e-4 and "weight-only" in wo.basis
    assert tolerance_for([FP8_WO], bf16_activations=False).rel == wo.rel
    assert w8.rel == 1e-3 and "w8a8" in w8.basis
    assert gpu.rel == 1e-2 and "bf16" in gpu.basis
    assert wo.rel < w8.rel < gpu.rel


def test_one_layer_per_policy(converted) -> None:
    src, dst = converted("quark-hybrid", tp=2)
    s, d = CheckpointView.open(src, semantics="producer"), CheckpointView.open(dst)
    chosen = sample_layers(s, d)
    assert [p.layer for p in chosen] == [1, 2, 3]
    assert len({p.key for p in chosen}) == 3
    assert chosen[2].label == "fused shared, padded, mxfp4/32 routed, mxfp4/32 shared"
    assert [p.layer for p in sample_layers(s, d, [4, 3])] == [3, 4]


def test_uniform_checkpoint_costs_one_layer(converted) -> None:
    src, dst = converted("quark-nvfp4", tp=1)
    s, d = CheckpointView.open(src, semantics="producer"), CheckpointView.open(dst)
    (policy,) = sample_layers(s, d)
    assert not policy.padded and policy.fused
