"""Compiled kernels on a CUDA GPU against the CPU float64 reference (skipped without CUDA).

Shapes exercise every tile regime of ``choose_configs``: decode with split-K (3 tokens),
decode without (40 tokens), prefill tiles (700 tokens, block_m 64). Activations are bf16 as
in a real model, so the bound is bf16-level (the FP8 paths stay well under 1e-2).
"""

from __future__ import annotations

import pytest
import torch

from checkpoint_tool.runtime.moe import prepare_moe, run_moe, run_prepared
from checkpoint_tool.runtime.reference import moe_reference
from checkpoint_tool.runtime.routing import RoutingConfig, route

from .factory import fuse_shared, random_layer

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

ROUTING = RoutingConfig(
    top_k=4,
    scoring_func="sigmoid",
    topk_method="noaux_tc",
    n_group=4,
    topk_group=2,
    norm_topk_prob=True,
    routed_scaling_factor=2.5,
)
FORMATS = ["bf16", "fp8_block", "fp8_w8a8", "fp8_channel", "mxfp4", "nvfp4"]


def rel_err(got: torch.Tensor, ref: torch.Tensor) -> float:
    got = got.float().cpu()
    assert torch.isfinite(got).all()
    return ((got - ref).norm() / ref.norm()).item()


def _case(fmt: str, tokens: int, seed: int, *, fused: bool = True, **kw):
    layer = random_layer(fmt, hidden=512, inter=256, n_routed=16, n_shared=1, seed=seed, **kw)
    layer = fuse_shared(layer) if fused else layer
    x = torch.randn(tokens, 512, generator=torch.Generator().manual_seed(seed + 1))
    x = x.to(torch.bfloat16)
    gpu = layer.to("cuda")
    x_gpu = x.cuda()
    topk = route(x_gpu, gpu.router_weight, ROUTING, gpu.e_score_correction_bias)
    ref = moe_reference(x, layer, ROUTING, topk=(topk[0].cpu(), topk[1].cpu()))
    return gpu, x_gpu, topk, ref


@pytest.mark.parametrize("tokens", [3, 40, 700])
@pytest.mark.parametrize("fmt", FORMATS)
def test_gpu_format_matches_reference(fmt: str, tokens: int) -> None:
    gpu, x, topk, ref = _case(fmt, tokens, seed=100 + tokens)
    got = run_moe(x, gpu, ROUTING, topk=topk)
    assert got.dtype == torch.bfloat16 and got.is_cuda
    err = rel_err(got, ref)
    print(f"{fmt} T={tokens}: rel err {err:.2e}")
    assert err < 8e-3
    torch_err = rel_err(run_moe(x, gpu, ROUTING, backend="torch", topk=topk), ref)
    assert torch_err < 2e-2


def test_gpu_separate_shared_with_gate_and_tp() -> None:
    gpu, x, topk, ref = _case("mxfp4", 50, seed=7, fused=False, shared_gate=True)
    assert rel_err(run_moe(x, gpu, ROUTING, topk=topk), ref) < 8e-3
    assert rel_err(run_moe(x, gpu, ROUTING, topk=topk, tp=4, pad_multiple=128), ref) < 8e-3


def test_gpu_deterministic_and_graph_capturable() -> None:
    gpu, x, _, _ = _case("fp8_w8a8", 37, seed=9)
    prepared = prepare_moe(gpu)
    a = run_prepared(x, prepared, ROUTING)
    b = run_prepared(x, prepared, ROUTING)
    assert torch.equal(a, b)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        c = run_prepared(x, prepared, ROUTING)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(a, c)


@pytest.mark.parametrize("fmt", ["mxfp4", "nvfp4"])
def test_gpu_fp4_float32_decode_path(fmt: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The exact-everywhere float32 decode (CKPT_FP4_DECODE=f32) agrees as well."""
    monkeypatch.setenv("CKPT_FP4_DECODE", "f32")
    gpu, x, topk, ref = _case(fmt, 24, seed=13)
    assert rel_err(run_moe(x, gpu, ROUTING, topk=topk), ref) < 8e-3


def test_gpu_fp8_group_quant_matches_torch() -> None:
    from checkpoint_tool.runtime.activation import quantize_per_token_group
    from checkpoint_tool.runtime.kernels import quantize_fp8_groups

    x = torch.randn(37, 700, device="cuda") * torch.rand(37, 1, device="cuda") * 30
    q, s = quantize_fp8_groups(x)
    q_ref, s_ref = quantize_per_token_group(x)
    torch.testing.assert_close(s, s_ref, rtol=1e-6, atol=0)  # division rounding may differ
    mismatch = (q.float() != q_ref.float()).float().mean().item()
    assert mismatch < 1e-3, f"{mismatch:.2e} of the FP8 codes differ"


def test_gpu_fused_align_equals_torch() -> None:
    from checkpoint_tool.runtime.align import align_rows
    from checkpoint_tool.runtime.kernels.align import align_rows_fused

    for tokens, top_k, experts in [(1, 9, 257), (7, 9, 257), (14, 9, 257), (5, 2, 7)]:
        ids = torch.stack([torch.randperm(experts)[:top_k] for _ in range(tokens)]).cuda()
        want, got = align_rows(ids, experts, 16), align_rows_fused(ids, experts, 16)
        assert torch.equal(want.sorted_rows, got.sorted_rows), (tokens, top_k, experts)
        assert torch.equal(want.block_expert, got.block_expert), (tokens, top_k, experts)
    with pytest.raises(ValueError, match="up to 128 rows"):
        align_rows_fused(torch.zeros(16, 9, dtype=torch.int64, device="cuda"), 257, 16)


V4_ROUTING = RoutingConfig(
    top_k=4,
    scoring_func="sqrtsoftplus",
    topk_method="noaux_tc",
    norm_topk_prob=True,
    routed_scaling_factor=1.5,
)


@pytest.mark.parametrize("tokens", [3, 40, 700])
@pytest.mark.parametrize("hashed", [False, True], ids=["biased", "hash"])
def test_gpu_deepseek_v4_layer(tokens: int, hashed: bool) -> None:
    """V4-Flash kinds: MXFP4 routed experts, w8a8 block-FP8 shared MLP (separate), the
    swiglu clamp tight enough to bind (split-K reduce at 3 tokens, fused epilogue otherwise),
    sqrtsoftplus + bias or hash routing; TP 1 and TP 2."""
    import dataclasses

    layer = random_layer(
        "mxfp4", hidden=512, inter=256, n_routed=16, n_shared=1, seed=tokens, shared_fmt="fp8_w8a8"
    )
    gen = torch.Generator().manual_seed(tokens + 1)
    table = torch.stack([torch.randperm(16, generator=gen)[:4] for _ in range(1000)])
    layer = dataclasses.replace(layer, swiglu_limit=0.5, hash_table=table if hashed else None)
    x = torch.randn(tokens, 512, generator=gen).to(torch.bfloat16)
    ids = torch.randint(0, 1000, (tokens,), generator=gen)
    ref = moe_reference(x, layer, V4_ROUTING, input_ids=ids)
    unclamped = moe_reference(
        x, dataclasses.replace(layer, swiglu_limit=None), V4_ROUTING, input_ids=ids
    )
    assert rel_err(unclamped, ref) > 0.05  # the clamp binds on this data
    gpu = layer.to("cuda")
    for tp in (1, 2):
        got = run_moe(x.cuda(), gpu, V4_ROUTING, tp=tp, input_ids=ids)
        err = rel_err(got, ref)
        print(f"deepseek-v4 {'hash' if hashed else 'biased'} T={tokens} TP{tp}: rel err {err:.2e}")
        assert err < 8e-3
