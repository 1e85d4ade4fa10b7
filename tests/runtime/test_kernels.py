"""The Triton grouped GEMM (interpreter on CPU) and the torch backend against the reference.

float32 activations make the kernel path float32 end to end on CPU, so the tolerances are
tight: any indexing, decoding or scaling mistake shows up far above them. Shapes stay tiny:
the interpreter's cost is per program and per K-step.
"""

from __future__ import annotations

import pytest
import torch

from checkpoint_tool.errors import InputError, UsageError
from checkpoint_tool.runtime.kernels import GemmConfig, MoeConfigs
from checkpoint_tool.runtime.moe import prepare_moe, run_moe, run_prepared
from checkpoint_tool.runtime.reference import moe_reference
from checkpoint_tool.runtime.routing import RoutingConfig, route
from checkpoint_tool.runtime.stack import stack_projections

from .factory import fuse_shared, random_layer, random_projection

ROUTING = RoutingConfig(
    top_k=2,
    scoring_func="sigmoid",
    topk_method="noaux_tc",
    n_group=2,
    topk_group=1,
    norm_topk_prob=True,
    routed_scaling_factor=2.5,
)

#: relative error bound per format with float32 activations (w8a8: an FP8 rounding of the
#: intermediate may flip where kernel and reference differ in the last float32 bit)
TOLERANCE = {
    "bf16": 2e-5,
    "fp8_block": 2e-5,
    "fp8_channel": 2e-5,
    "fp8_w8a8": 1e-3,
    "mxfp4": 2e-5,
    "nvfp4": 2e-5,
    "int4": 2e-5,
}


def rel_err(got: torch.Tensor, ref: torch.Tensor) -> float:
    assert torch.isfinite(got).all()
    return ((got.float() - ref).norm() / ref.norm()).item()


def inputs(layer, tokens: int, seed: int) -> torch.Tensor:
    return torch.randn(tokens, layer.hidden, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("fmt", sorted(TOLERANCE))
def test_triton_format_matches_reference(fmt: str) -> None:
    layer = random_layer(fmt, hidden=64, inter=64, n_routed=4, n_shared=1, block=64, seed=21)
    x = inputs(layer, 5, seed=22)
    ref = moe_reference(x, layer, ROUTING)
    got = run_moe(x, layer, ROUTING, backend="triton")
    assert got.dtype == x.dtype and got.shape == ref.shape
    assert rel_err(got, ref) < TOLERANCE[fmt]
    assert ref.abs().mean() > 0.1


@pytest.mark.parametrize("fmt", sorted(TOLERANCE))
def test_torch_backend_matches_reference(fmt: str) -> None:
    layer = random_layer(fmt, hidden=64, inter=64, n_routed=4, n_shared=1, block=64, seed=31)
    x = inputs(layer, 6, seed=32)
    ref = moe_reference(x, layer, ROUTING)
    assert rel_err(run_moe(x, layer, ROUTING, backend="torch"), ref) < TOLERANCE[fmt]


def test_w8a8_differs_from_weight_only() -> None:
    """The activation quantization really happens (and the reference models it)."""
    layer = random_layer("fp8_w8a8", hidden=64, inter=64, n_routed=4, n_shared=0, block=64, seed=5)
    x = inputs(layer, 4, seed=6)
    w8a8 = moe_reference(x, layer, ROUTING)
    weight_only = moe_reference(x, layer, ROUTING, w8a8=False)
    assert rel_err(weight_only, w8a8) > 1e-3
    got = run_moe(x, layer, ROUTING, backend="torch", w8a8=False)
    assert rel_err(got, weight_only) < 2e-5


def test_fused_shared_slots_equal_separate_shared_experts() -> None:
    """Slot n_routed + j with weight 1 is the separate shared expert (rsf = 2.5, Qwen gate)."""
    layer = random_layer(
        "mxfp4", hidden=64, inter=64, n_routed=4, n_shared=2, seed=41, shared_gate=True
    )
    x = inputs(layer, 5, seed=42)
    ref = moe_reference(x, layer, ROUTING)  # separate shared experts
    got = run_moe(x, fuse_shared(layer), ROUTING, backend="triton")
    assert rel_err(got, ref) < 2e-5


def test_split_k_partial_blocks_and_bf16_activations() -> None:
    """K not a multiple of BLOCK_K, partial FP8 scale blocks, split-K, bf16 in and out."""
    layer = random_layer(
        "fp8_block", hidden=96, inter=80, n_routed=6, n_shared=1, block=64, seed=51
    )
    x = inputs(layer, 7, seed=52).to(torch.bfloat16)
    ref = moe_reference(x, layer, ROUTING)
    cfg = GemmConfig(block_m=16, block_n=64, block_k=64, num_warps=1, num_stages=1, split_k=2)
    got = run_prepared(x, prepare_moe(layer), ROUTING, configs=MoeConfigs(cfg, cfg))
    assert got.dtype == torch.bfloat16
    assert rel_err(got, ref) < 1e-2  # bf16 output rounding


def test_same_input_same_bytes_and_topk_override() -> None:
    layer = random_layer("nvfp4", hidden=64, inter=64, n_routed=4, n_shared=1, seed=61)
    x = inputs(layer, 5, seed=62)
    prepared = prepare_moe(layer)
    topk = route(x, layer.router_weight, ROUTING, layer.e_score_correction_bias)
    a = run_prepared(x, prepared, ROUTING)
    b = run_prepared(x, prepared, ROUTING, topk=topk)
    assert torch.equal(a, b)
    # a different routing changes the output: the override is used
    ids, weights = topk
    c = run_prepared(x, prepared, ROUTING, topk=((ids + 1) % layer.n_routed, weights))
    assert not torch.allclose(a, c)


def test_errors() -> None:
    layer = random_layer("bf16", hidden=32, inter=32, n_routed=2, n_shared=0, seed=0)
    x = torch.randn(2, 32)
    with pytest.raises(UsageError, match="unknown backend"):
        run_moe(x, layer, RoutingConfig(top_k=1), backend="cuda")  # type: ignore[arg-type]
    gen = torch.Generator().manual_seed(0)
    mixed = [
        random_projection("bf16", 8, 32, gen),
        random_projection("mxfp4", 8, 32, gen, name="x"),
    ]
    with pytest.raises(InputError, match="one grouped GEMM needs one format"):
        stack_projections(mixed)
