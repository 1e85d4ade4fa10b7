"""Numeric check: converted layers through the runtime vs the source reference, and the
corruptions it must catch with the lossless check switched off (``--no-lossless``).

Most runs use the torch backend (a per-expert loop, fast on CPU); one goes through the Triton
kernels in the interpreter. Layer 1 of quark-mxfp4 (8 routed experts, top-2) with 32 tokens
routes to every expert (asserted), so a corrupted expert is always exercised.
"""

from __future__ import annotations

import pytest

from checkpoint_tool.errors import UsageError
from checkpoint_tool.verify import VerifyOptions, verify_checkpoint

from . import corrupt

NUMERIC = VerifyOptions(lossless=False, backend="torch", device="cpu", tokens=32)
L1 = "model.layers.1.mlp.experts"


def _numeric(dst, src, **kw: object):
    report = verify_checkpoint(dst, str(src), NUMERIC.model_copy(update=kw))
    assert report.lossless.status == "skipped"
    return report


@pytest.mark.parametrize(
    ("preset", "tp"),
    [("quark-mxfp4", 1), ("deepseek-v3-fp8", 2), ("quark-nvfp4", 1), ("quark-nvfp4", 2)],
)
def test_clean_conversions_pass(converted, preset: str, tp: int) -> None:
    src, dst = converted(preset, tp=tp)
    report = _numeric(dst, src)
    assert report.passed and report.numeric.status == "passed"
    assert report.numeric.tp == tp
    for layer in report.numeric.layers:
        assert layer.status == "passed", layer.message
        assert layer.reference_norm > 1.0  # a real signal, not zeros
        assert layer.rel_error < layer.rel_tolerance
        assert layer.routing_mismatches == 0


def test_hybrid_samples_every_policy(converted) -> None:
    """quark-hybrid: layer 1 keeps a BF16 shared expert, layer 2 a block-FP8 one (both not
    fused), layers 3-4 fuse an MXFP4 shared expert; TP 2 pads I 128 -> 256."""
    src, dst = converted("quark-hybrid", tp=2)
    report = _numeric(dst, src)
    layers = {r.layer: r for r in report.numeric.layers}
    assert sorted(layers) == [1, 2, 3]
    assert [layers[i].fused for i in (1, 2, 3)] == [False, False, True]
    assert all(r.padded for r in layers.values())
    assert layers[1].shared_scheme == "unquantized"
    assert layers[2].shared_scheme == "fp8_block[128,128]"
    assert all(r.status == "passed" for r in layers.values()), [r.message for r in layers.values()]


def test_two_shared_experts_as_two_slots(converted) -> None:
    src, dst = converted("quark-mxfp4", tp=2, n_shared=2)
    (layer,) = _numeric(dst, src).numeric.layers
    assert layer.fused and layer.status == "passed"


def test_triton_interpreter_path(converted) -> None:
    src, dst = converted("quark-nvfp4", tp=2)
    report = _numeric(dst, src, backend="triton", tokens=8)
    assert report.numeric.backend == "triton" and report.numeric.device == "cpu"
    (layer,) = report.numeric.layers
    assert layer.status == "passed", layer.message
    assert layer.rel_error < 2e-5


def test_every_expert_is_exercised(converted) -> None:
    src, dst = converted("quark-mxfp4", tp=1)
    (layer,) = _numeric(dst, src, layers=[1]).numeric.layers
    assert layer.experts_used == 8


def _failed_layer(report):
    assert not report.passed and report.numeric.status == "failed"
    (layer,) = report.numeric.layers
    assert layer.status == "failed"
    return layer


def test_flipped_bytes_in_one_expert(converted, dst_copy) -> None:
    src, dst = converted("quark-mxfp4", tp=1)
    bad = dst_copy(dst)
    corrupt.flip_bytes(bad, f"{L1}.3.up_proj.weight", offset=5 * 128, count=64)
    layer = _failed_layer(_numeric(bad, src, layers=[1]))
    assert layer.max_rel_error > 20 * layer.max_rel_tolerance
    assert "above tolerance" in layer.message


def test_swapped_experts(converted, dst_copy) -> None:
    src, dst = converted("quark-mxfp4", tp=1)
    bad = dst_copy(dst)
    for proj in ("gate_proj", "up_proj", "down_proj"):
        for part in ("weight", "weight_scale"):
            corrupt.swap(bad, f"{L1}.1.{proj}.{part}", f"{L1}.2.{proj}.{part}")
    layer = _failed_layer(_numeric(bad, src, layers=[1]))
    assert layer.rel_error > 0.05


def test_zeroed_shared_expert_slot(converted, dst_copy) -> None:
    src, dst = converted("quark-mxfp4", tp=1)
    bad = dst_copy(dst)
    corrupt.zero(bad, f"{L1}.8.down_proj.weight")
    layer = _failed_layer(_numeric(bad, src, layers=[1]))
    assert layer.fused and layer.rel_error > 0.05


def test_removed_shared_expert_slot(converted, dst_copy) -> None:
    """All of slot 8 gone: config.json still records the slot, so the layer fails loudly
    instead of running without its shared expert."""
    src, dst = converted("quark-mxfp4", tp=1)
    bad = dst_copy(dst)
    corrupt.remove(
        bad, [f"{L1}.8.{p}.{s}" for p in ("gate_proj", "up_proj", "down_proj") for s in ("weight", "weight_scale")]
    )  # fmt: skip
    layer = _failed_layer(_numeric(bad, src, layers=[1]))
    assert "missing" in layer.message and f"{L1}.8." in layer.message


def test_wrong_scale_byte(converted, dst_copy) -> None:
    src, dst = converted("quark-mxfp4", tp=1)
    bad = dst_copy(dst)
    corrupt.add_to_byte(bad, f"{L1}.2.down_proj.weight_scale", offset=9, delta=2)  # x4
    layer = _failed_layer(_numeric(bad, src, layers=[1]))
    assert layer.max_rel_error > layer.max_rel_tolerance


def test_wrong_block_scale_fp8(converted, dst_copy) -> None:
    """deepseek-v3-fp8 (w8a8, looser tolerance): one F32 block scale doubled."""
    src, dst = converted("deepseek-v3-fp8", tp=2)
    bad = dst_copy(dst)
    name = f"{L1}.4.gate_proj.weight_scale_inv"  # [2, 2] F32; block (0, 0) is real data
    old = corrupt.read(bad, name)[:4]
    corrupt.write(bad, name, (int.from_bytes(old, "little") + (1 << 23)).to_bytes(4, "little"))
    layer = _failed_layer(_numeric(bad, src, layers=[1]))
    assert layer.rel_error > layer.rel_tolerance


def test_dirty_padding_is_numerically_invisible(converted, dst_copy) -> None:
    """Non-zero bytes in padded gate rows multiply zero up rows: the numbers cannot see it
    (only the lossless check does, see test_lossless)."""
    src, dst = converted("deepseek-v3-fp8", tp=2)
    bad = dst_copy(dst)
    corrupt.write(bad, f"{L1}.0.gate_proj.weight", b"\x38" * 16, offset=200 * 256)
    (layer,) = _numeric(bad, src, layers=[1]).numeric.layers
    assert layer.status == "passed"


def test_corrupted_router_changes_routing(converted, dst_copy) -> None:
    src, dst = converted("quark-mxfp4", tp=1)
    bad = dst_copy(dst)
    corrupt.flip_bytes(bad, "model.layers.1.mlp.gate.weight", offset=0, count=2 * 256 * 3)
    layer = _failed_layer(_numeric(bad, src, layers=[1]))
    assert layer.routing_mismatches > 0 and "route to other experts" in layer.message


def test_tp_that_does_not_split_evenly_fails(converted) -> None:
    """Converted for TP 2 (I padded to 256, two 128-row blocks); run as TP 4: each rank would
    hold half a 128-block, which vLLM cannot slice."""
    src, dst = converted("deepseek-v3-fp8", tp=2)
    layer = _failed_layer(_numeric(dst, src, layers=[1], tp=4))
    assert "does not split into 4 aligned share(s)" in layer.message


def test_layers_option(converted) -> None:
    src, dst = converted("quark-hybrid", tp=2)
    report = _numeric(dst, src, layers=[4])
    (layer,) = report.numeric.layers
    assert layer.layer == 4 and layer.is_mtp and layer.status == "passed"
    with pytest.raises(UsageError, match="not MoE layers"):
        _numeric(dst, src, layers=[0])


def test_seed_changes_inputs_not_verdict(converted) -> None:
    src, dst = converted("quark-mxfp4", tp=1)
    a = _numeric(dst, src, seed=1).numeric.layers[0]
    b = _numeric(dst, src, seed=2).numeric.layers[0]
    assert a.status == b.status == "passed"
    assert a.reference_norm != b.reference_norm


def test_one_of_two_shared_chunks_dropped(converted, dst_copy) -> None:
    """n_shared 2: the shared MLP became slots 8 and 9; zeroing chunk 9's down projection
    loses half the shared expert: both checks see it."""
    src, dst = converted("quark-mxfp4", tp=2, n_shared=2)
    bad = dst_copy(dst)
    corrupt.zero(bad, f"{L1}.9.down_proj.weight")
    report = verify_checkpoint(bad, str(src), NUMERIC.model_copy(update={"lossless": True}))
    assert [m.tensor for m in report.lossless.mismatches] == [f"{L1}.9.down_proj.weight"]
    assert "shared_experts.down_proj.weight" in report.lossless.mismatches[0].origin
    layer = _failed_layer(report)
    assert layer.rel_error > 0.01
