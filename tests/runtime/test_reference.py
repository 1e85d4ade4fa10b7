"""The oracle itself, against a dense float64 formulation, and the data-model checks."""

from __future__ import annotations

import pytest
import torch

from checkpoint_tool.errors import InputError
from checkpoint_tool.runtime.reference import moe_reference
from checkpoint_tool.runtime.routing import RoutingConfig, route
from checkpoint_tool.runtime.weights import ExpertWeights, MoeLayerWeights

from .factory import decode_projection, fuse_shared, random_layer, random_projection

ROUTING = RoutingConfig(
    top_k=2,
    scoring_func="sigmoid",
    topk_method="noaux_tc",
    n_group=2,
    topk_group=1,
    norm_topk_prob=True,
    routed_scaling_factor=2.5,
)


def dense_moe(x: torch.Tensor, layer: MoeLayerWeights, ids, weights) -> torch.Tensor:
    """Every expert on every token, masked by a dense [T, E] routing matrix (float64)."""
    x64 = x.double()
    gates = torch.zeros(x.shape[0], layer.n_routed, dtype=torch.float64)
    gates.scatter_(1, ids, weights.double())
    out = torch.zeros(x.shape[0], layer.hidden, dtype=torch.float64)

    def mlp(ex: ExpertWeights) -> torch.Tensor:
        wg, wu, wd = (decode_projection(p).double() for p in ex.projections())
        return (torch.nn.functional.silu(x64 @ wg.t()) * (x64 @ wu.t())) @ wd.t()

    for e in range(layer.n_routed):
        out += gates[:, e : e + 1] * mlp(layer.experts[e])
    shared_gate = torch.ones(x.shape[0], 1, dtype=torch.float64)
    if layer.shared_gate_weight is not None:
        shared_gate = torch.sigmoid(x64 @ layer.shared_gate_weight.double().t())
    for ex in (*layer.fused_shared, *layer.shared):
        out += shared_gate * mlp(ex)
    return out


@pytest.mark.parametrize("fmt", ["bf16", "mxfp4"])
def test_reference_matches_dense(fmt: str) -> None:
    layer = random_layer(fmt, hidden=64, inter=32, n_routed=6, n_shared=2, seed=11)
    x = torch.randn(9, 64, generator=torch.Generator().manual_seed(5))
    ids, weights = route(x, layer.router_weight, ROUTING, layer.e_score_correction_bias)
    ref = moe_reference(x, layer, ROUTING)
    dense = dense_moe(x, layer, ids, weights).float()
    torch.testing.assert_close(ref, dense, rtol=1e-5, atol=1e-5)
    assert ref.abs().mean() > 0.1  # not a degenerate all-zero layer


def test_reference_fused_slots_equal_separate_shared_with_gate() -> None:
    layer = random_layer(
        "bf16", hidden=32, inter=32, n_routed=4, n_shared=1, seed=3, shared_gate=True
    )
    x = torch.randn(5, 32, generator=torch.Generator().manual_seed(8))
    routing = RoutingConfig(top_k=2, norm_topk_prob=True, routed_scaling_factor=1.5)
    separate = moe_reference(x, layer, routing)
    fused = moe_reference(x, fuse_shared(layer), routing)
    torch.testing.assert_close(separate, fused, rtol=1e-6, atol=1e-6)
    ids, weights = route(x, layer.router_weight, routing)
    torch.testing.assert_close(separate, dense_moe(x, layer, ids, weights).float())


def test_data_model_rejects_bad_shapes() -> None:
    gen = torch.Generator().manual_seed(0)
    gate = random_projection("bf16", 16, 32, gen, name="e0.gate_proj")
    up = random_projection("bf16", 16, 32, gen, name="e0.up_proj")
    bad_down = random_projection("bf16", 32, 8, gen, name="e0.down_proj")
    with pytest.raises(InputError, match=r"e0\.down_proj: down shape \[32, 8\]"):
        ExpertWeights(gate, up, bad_down)
    down = random_projection("bf16", 32, 16, gen, name="e0.down_proj")
    ex = ExpertWeights(gate, up, down)
    with pytest.raises(InputError, match="router weight shape"):
        MoeLayerWeights(experts=[ex, ex], router_weight=torch.zeros(3, 32))
    with pytest.raises(InputError, match="n_fused_shared 2"):
        MoeLayerWeights(experts=[ex, ex], router_weight=torch.zeros(0, 32), n_fused_shared=2)
