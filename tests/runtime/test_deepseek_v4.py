"""DeepSeek-V4 layers: the swiglu_limit clamp and hash routing, in the reference (against a
dense float64 brute force written here) and in both backends (against the reference).

The clamp limit is small enough that a large share of the gate / up values are clamped (the
test checks the share), so a backend that ignores the clamp fails by far.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from checkpoint_tool.errors import InputError
from checkpoint_tool.runtime.kernels import GemmConfig, MoeConfigs
from checkpoint_tool.runtime.moe import prepare_moe, run_moe, run_prepared
from checkpoint_tool.runtime.reference import moe_reference, route_layer
from checkpoint_tool.runtime.routing import RoutingConfig
from checkpoint_tool.runtime.shard import shard_layer
from checkpoint_tool.runtime.weights import ExpertWeights, MoeLayerWeights

from .factory import decode_projection, fuse_shared, random_layer

V4 = RoutingConfig(
    top_k=2,
    scoring_func="sqrtsoftplus",
    topk_method="noaux_tc",
    norm_topk_prob=True,
    routed_scaling_factor=1.5,
)
LIMIT = 0.4
VOCAB = 50


def v4_layer(fmt: str, *, shared_fmt: str | None = None, hashed: bool = False, seed: int = 0):
    layer = random_layer(
        fmt, hidden=64, inter=64, n_routed=6, n_shared=1, block=64, seed=seed, shared_fmt=shared_fmt
    )
    gen = torch.Generator().manual_seed(seed + 100)
    table = torch.stack([torch.randperm(6, generator=gen)[:2] for _ in range(VOCAB)])
    return dataclasses.replace(
        layer,
        swiglu_limit=LIMIT,
        hash_table=table if hashed else None,
        e_score_correction_bias=(None if hashed else layer.e_score_correction_bias),
    )


def tokens_and_x(layer: MoeLayerWeights, n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, VOCAB, (n,), generator=gen), torch.randn(n, layer.hidden, generator=gen)


def clamped_share(layer: MoeLayerWeights, x: torch.Tensor) -> float:
    """Share of gate/up pre-activations of expert 0 that the clamp changes."""
    ex = layer.experts[0]
    g = x.double() @ decode_projection(ex.gate).double().t()
    u = x.double() @ decode_projection(ex.up).double().t()
    return float(((g > LIMIT) | (u.abs() > LIMIT)).double().mean())


def dense_v4(x, layer: MoeLayerWeights, ids, weights) -> torch.Tensor:
    """Every expert on every token in float64, with the clamp written out elementwise."""
    x64 = x.double()
    limit = layer.swiglu_limit

    def mlp(ex: ExpertWeights) -> torch.Tensor:
        wg, wu, wd = (decode_projection(p).double() for p in ex.projections())
        g, u = x64 @ wg.t(), x64 @ wu.t()
        g = torch.where(g > limit, torch.full_like(g, limit), g)
        u = torch.where(u > limit, torch.full_like(u, limit), u)
        u = torch.where(u < -limit, torch.full_like(u, -limit), u)
        return (g / (1 + torch.exp(-g)) * u) @ wd.t()

    gates = torch.zeros(x.shape[0], layer.n_routed, dtype=torch.float64)
    gates.scatter_(1, ids, weights.double())
    out = sum(gates[:, e : e + 1] * mlp(layer.experts[e]) for e in range(layer.n_routed))
    for ex in (*layer.fused_shared, *layer.shared):
        out = out + mlp(ex)
    return out


def rel(got: torch.Tensor, ref: torch.Tensor) -> float:
    assert torch.isfinite(got).all()
    return float((got.double() - ref.double()).norm() / ref.double().norm())


@pytest.mark.parametrize("hashed", [False, True], ids=["biased", "hash"])
def test_reference_clamp_and_hash_match_dense(hashed: bool) -> None:
    layer = v4_layer("mxfp4", hashed=hashed, seed=3)
    tok, x = tokens_and_x(layer, 12, seed=4)
    assert clamped_share(layer, x) > 0.2  # the clamp really acts on this data
    ids, weights = route_layer(x, layer, V4, tok)
    ref = moe_reference(x, layer, V4, input_ids=tok)
    assert rel(ref, dense_v4(x, layer, ids, weights)) < 1e-6
    unclamped = moe_reference(x, dataclasses.replace(layer, swiglu_limit=None), V4, input_ids=tok)
    assert rel(unclamped, ref) > 0.05
    if hashed:
        assert torch.equal(ids, layer.hash_table[tok])


@pytest.mark.parametrize(
    ("routed", "shared", "tp", "hashed"),
    [
        ("mxfp4", "fp8_w8a8", 1, True),  # V4-Flash: FP4 experts, w8a8 block-FP8 shared MLP
        ("mxfp4", "fp8_w8a8", 2, False),
        ("nvfp4", None, 2, True),
        ("bf16", None, 1, False),
    ],
)
@pytest.mark.parametrize("backend", ["triton", "torch"])
def test_backends_match_reference(
    routed: str, shared: str | None, tp: int, hashed: bool, backend: str
) -> None:
    layer = v4_layer(routed, shared_fmt=shared, hashed=hashed, seed=7)
    tok, x = tokens_and_x(layer, 6, seed=8)
    ref = moe_reference(x, layer, V4, input_ids=tok)
    got = run_moe(x, layer, V4, backend=backend, tp=tp, input_ids=tok)
    assert rel(got, ref) < (1e-3 if shared == "fp8_w8a8" else 2e-5)


def test_fused_slot_and_split_k_clamp() -> None:
    layer = v4_layer("mxfp4", seed=9)
    _, x = tokens_and_x(layer, 5, seed=10)
    ref = moe_reference(x, layer, V4)
    fused = fuse_shared(layer)
    fused = dataclasses.replace(fused, swiglu_limit=LIMIT)
    assert rel(run_moe(x, fused, V4, backend="triton"), ref) < 2e-5
    cfg = GemmConfig(block_m=16, block_n=64, block_k=64, num_warps=1, num_stages=1, split_k=2)
    got = run_prepared(x, prepare_moe(layer), V4, configs=MoeConfigs(cfg, cfg))
    assert rel(got, ref) < 2e-5


def test_clamp_and_table_survive_sharding_and_moves() -> None:
    layer = v4_layer("mxfp4", hashed=True, seed=1)
    for derived in (shard_layer(layer, 2, 1), layer.to("cpu")):
        assert derived.swiglu_limit == LIMIT
        assert torch.equal(derived.hash_table, layer.hash_table)
    with pytest.raises(InputError, match="swiglu_limit -1"):
        dataclasses.replace(layer, swiglu_limit=-1.0)
    with pytest.raises(InputError, match="needs the tokens' input ids"):
        moe_reference(torch.randn(2, layer.hidden), layer, V4)
