"""Tensor parallelism: rank slices (with zero padding of the intermediate dim) sum to the layer."""

from __future__ import annotations

import pytest
import torch

from checkpoint_tool.errors import InputError, UsageError
from checkpoint_tool.runtime.moe import prepare_moe, run_moe, run_prepared
from checkpoint_tool.runtime.reference import dequantize_projection, moe_reference
from checkpoint_tool.runtime.shard import rank_intermediate, shard_expert, shard_layer
from checkpoint_tool.runtime.weights import ExpertWeights, Projection

from .factory import decode_projection, fuse_shared, random_layer
from .test_kernels import ROUTING, rel_err


@pytest.mark.parametrize(
    ("fmt", "tp", "pad_multiple", "per_rank"),
    [
        ("mxfp4", 2, 1, 64),  # I = 96 -> 48 per rank -> 64 (MX group 32 on down's columns)
        ("mxfp4", 4, 1, 32),  # 24 -> 32
        ("fp8_block", 2, 1, 64),  # block 64 rows (gate/up) and columns (down)
        ("bf16", 4, 1, 24),  # no alignment: exact split
        ("bf16", 2, 32, 64),  # backend rounding of the per-rank size
    ],
)
def test_shard_expert_pads_and_slices(fmt: str, tp: int, pad_multiple: int, per_rank: int) -> None:
    layer = random_layer(fmt, hidden=64, inter=96, n_routed=2, n_shared=0, block=64, seed=7)
    ex = layer.experts[1]
    assert rank_intermediate(ex, tp, pad_multiple=pad_multiple) == per_rank
    full = [decode_projection(p) for p in ex.projections()]
    shards = [shard_expert(ex, tp, r, pad_multiple=pad_multiple) for r in range(tp)]
    for sh in shards:
        assert sh.intermediate == per_rank and sh.hidden == 64
    gate = torch.cat([decode_projection(sh.gate) for sh in shards], dim=0)
    down = torch.cat([decode_projection(sh.down) for sh in shards], dim=1)
    torch.testing.assert_close(gate[:96], full[0], rtol=0, atol=0)
    torch.testing.assert_close(down[:, :96], full[2], rtol=0, atol=0)
    assert not gate[96:].any() and not down[:, 96:].any(), "padding must be zero weights"


@pytest.mark.parametrize("fmt", ["mxfp4", "nvfp4", "fp8_block"])
def test_shard_layer_slices_every_expert_like_the_codec(fmt: str) -> None:
    """Slicing plans are worked out once per form; each expert still gets its own bytes,
    the same tensors as the codec's own ``pad`` then ``slice`` of that expert."""
    from checkpoint_tool.quant.codecs import get_codec

    layer = random_layer(fmt, hidden=64, inter=96, n_routed=5, n_shared=0, block=64, seed=11)
    tp = 2
    per_rank = rank_intermediate(layer.experts[0], tp)
    for rank in range(tp):
        sharded = shard_layer(layer, tp, rank)
        for ex, got in zip(layer.experts, sharded.experts, strict=True):
            for proj, sliced, dim in ((ex.gate, got.gate, -2), (ex.down, got.down, -1)):
                codec = get_codec(proj.scheme)
                parts = codec.pad(proj.parts, dim, tp * per_rank - 96)
                want = codec.slice(parts, dim, rank * per_rank, (rank + 1) * per_rank)
                assert want.keys() == sliced.parts.keys()
                for role, t in want.items():
                    assert _same_bytes(sliced.parts[role], t), (proj.label, role, rank)


def _same_bytes(a: torch.Tensor, b: torch.Tensor) -> bool:
    return (
        a.dtype == b.dtype
        and a.shape == b.shape
        and torch.equal(
            a.reshape(-1).contiguous().view(torch.uint8),
            b.reshape(-1).contiguous().view(torch.uint8),
        )
    )


def test_shard_errors_name_the_projection() -> None:
    layer = random_layer("mxfp4", hidden=64, inter=96, n_routed=2, n_shared=0, seed=3)
    ex = layer.experts[1]
    bad = Projection(
        {**ex.up.parts, "scale": ex.up.parts["scale"][:, :1]}, ex.up.scheme, "experts.1.up_proj"
    )
    with pytest.raises(InputError, match=r"experts\.1\.up_proj"):
        shard_expert(ExpertWeights(ex.gate, bad, ex.down), 2, 0)


@pytest.mark.parametrize(("fmt", "tp"), [("mxfp4", 1), ("mxfp4", 2), ("nvfp4", 4)])
def test_tp_partial_sums_triton(fmt: str, tp: int) -> None:
    layer = fuse_shared(random_layer(fmt, hidden=64, inter=96, n_routed=4, n_shared=1, seed=17))
    x = torch.randn(5, 64, generator=torch.Generator().manual_seed(18))
    ref = moe_reference(x, layer, ROUTING)
    got = run_moe(x, layer, ROUTING, backend="triton", tp=tp)
    assert rel_err(got, ref) < 2e-5


@pytest.mark.parametrize("tp", [2, 4])
def test_tp_partial_sums_torch_with_separate_shared(tp: int) -> None:
    layer = random_layer(
        "fp8_w8a8", hidden=64, inter=128, n_routed=4, n_shared=1, block=32, seed=27
    )
    x = torch.randn(6, 64, generator=torch.Generator().manual_seed(28))
    ref = moe_reference(x, layer, ROUTING)
    # w8a8: the down input is quantized per rank slice (128-column groups of the slice),
    # which is what a TP engine does; the error stays at FP8 activation level
    got = run_moe(x, layer, ROUTING, backend="torch", tp=tp, pad_multiple=64)
    assert rel_err(got, ref) < 3e-2
    weight_only = moe_reference(x, layer, ROUTING, w8a8=False)
    got = run_moe(x, layer, ROUTING, backend="torch", tp=tp, pad_multiple=64, w8a8=False)
    assert rel_err(got, weight_only) < 2e-5


def test_pre_sharded_rank_layers() -> None:
    """A TP-sharded checkpoint: rank layers given directly (here sliced by shard_layer)."""
    layer = random_layer("bf16", hidden=64, inter=64, n_routed=4, n_shared=1, seed=37)
    x = torch.randn(4, 64, generator=torch.Generator().manual_seed(38))
    ranks = [shard_layer(layer, 2, r) for r in range(2)]
    got = run_prepared(x, prepare_moe(ranks, backend="torch"), ROUTING, backend="torch")
    assert rel_err(got, moe_reference(x, layer, ROUTING)) < 2e-5
    assert dequantize_projection(ranks[1].experts[0].gate).shape == (32, 64)
    with pytest.raises(UsageError, match="prepared for the torch backend"):
        run_prepared(x, prepare_moe(ranks, backend="torch"), ROUTING, backend="triton")
    with pytest.raises(UsageError, match="TP rank 2"):
        shard_layer(layer, 2, 2)
