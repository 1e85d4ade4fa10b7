"""TP geometry per scheme, with per-rank sizes computed by hand from the preset's
moe_intermediate_size (128 in every tiny preset)."""

from __future__ import annotations

from .helpers import by_rule, engine, moe_layers

INTER = 128


def test_not_divisible(variant):
    path = variant("quark-mxfp4")
    [f] = by_rule(engine(path, tp=3))["tp_intermediate_not_divisible"]
    assert f.upstream == f"{INTER} is not divisible by 3" and f.layers == moe_layers(path)


def test_block_fp8_experts_refine_or_need_block_multiples(variant):
    # Fp8Config MoE refines the scale grid to gcd(128, 128, I/tp, hidden) when that is >= 32
    # (fused_moe/oracle/fp8.py refine_fp8_moe_block_shape): 64 per rank at TP 2 loads
    path = variant("deepseek-v3-fp8")
    found = by_rule(engine(path, tp=2))
    assert "tp_fp8_block_gate_up" not in found and "tp_fp8_block_down" not in found
    # 128 / 8 = 16 per rank: gcd 16 < 32, no refinement, validate_fp8_block_shape_moe raises
    found = by_rule(engine(path, tp=8))
    assert found["tp_fp8_block_gate_up"][0].upstream == (
        f"The output_size of gate's and up's weight = {INTER // 8} is not divisible by weight "
        "quantization block_n = 128."
    )
    assert found["tp_fp8_block_down"][0].upstream == (
        f"The input_size of down's weight = {INTER // 8} is not divisible by weight quantization "
        "block_k = 128."
    )
    ok = by_rule(engine(path, tp=1))
    assert "tp_fp8_block_gate_up" not in ok and "tp_fp8_block_down" not in ok
    # experts are not TP-split under expert parallelism
    assert "tp_fp8_block_gate_up" not in by_rule(engine(path, tp=8, ep=True))


def test_fp4_group_split(variant):
    found = by_rule(engine(variant("quark-mxfp4"), tp=8))  # 16 per rank, group 32
    [f] = found["tp_fp4_group_split"]
    assert f.details == {"pad_to": 256, "padded_per_rank": 32}
    # NVFP4 groups are 16: 16 per rank is whole
    assert "tp_fp4_group_split" not in by_rule(engine(variant("quark-nvfp4"), tp=8))


def test_mxfp4_backend_round_up(variant):
    path = variant("quark-mxfp4")
    [f] = by_rule(engine(path, tp=1, moe_backend="flashinfer_trtllm"))["tp_mxfp4_backend_round_up"]
    # TRTLLM rounds the intermediate to 128 (256 is its hidden round-up): oracle/mxfp4.py
    assert f.severity == "info" and f.details["padded_per_rank"] == 128
    [g] = by_rule(engine(path, tp=1, moe_backend="marlin"))["tp_mxfp4_backend_round_up"]
    assert g.details["padded_per_rank"] == 128 and "keeps it" in g.message
    [e] = by_rule(engine(path, tp=4, moe_backend="emulation"))["tp_mxfp4_backend_round_up"]
    assert e.details["padded_per_rank"] == 32  # OCP MX block, 32 per rank kept
    [h] = by_rule(engine(path, tp=2))["tp_mxfp4_backend_round_up"]  # 64 per rank, no backend
    assert h.details["padded_per_rank_by_backend"]["triton"] == 64
    assert h.details["padded_per_rank_by_backend"]["marlin"] == 128
    assert h.details["rocm_default"] == 256


def test_unknown_backend(variant):
    [f] = by_rule(engine(variant("quark-mxfp4"), moe_backend="warp9"))["tp_moe_backend_unknown"]
    assert f.upstream.startswith("moe_backend='warp9' is not supported for MXFP4 MoE.")


def test_unfused_block_fp8_shared_expert(variant):
    # quark-hybrid: layer 2's shared expert is block FP8 and cannot fuse (different specs)
    found = by_rule(engine(variant("quark-hybrid"), tp=2))["tp_fp8_block_shared_linear"]
    # only the RowParallel down_proj raises: MergedColumnParallelLinear (gate_up) allows a
    # partition that is not a multiple of block_n (layers/linear.py)
    assert {f.upstream for f in found} == {
        f"Weight input_size_per_partition = {INTER // 2} is not divisible by weight quantization "
        "block_k = 128.",
    }
    assert all(f.layers == [2] for f in found)
    assert "tp_fp8_block_shared_linear" not in by_rule(engine(variant("quark-hybrid"), tp=1))
