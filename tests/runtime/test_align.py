"""Align-and-sort invariants on random routings, and the FP8 activation quantizer."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import torch

from checkpoint_tool.runtime.activation import (
    dequantize_per_token_group,
    quantize_per_token_group,
)
from checkpoint_tool.runtime.align import align_rows, max_blocks


@pytest.mark.parametrize(
    ("tokens", "top_k", "experts", "block_m", "seed"),
    [(1, 1, 4, 16, 0), (7, 3, 5, 4, 1), (64, 8, 9, 16, 2), (33, 2, 64, 8, 3)],
)
def test_align_invariants(tokens: int, top_k: int, experts: int, block_m: int, seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    ids = torch.stack(
        [torch.randperm(experts, generator=gen)[:top_k] for _ in range(tokens)]
    )  # distinct experts per token, like top-k
    a = align_rows(ids, experts, block_m)
    rows = tokens * top_k
    assert a.num_rows == rows and a.top_k == top_k
    assert a.num_blocks == max_blocks(rows, experts, block_m)
    sorted_rows = a.sorted_rows.view(-1, block_m)
    flat = ids.reshape(-1)
    seen = []
    for b, expert in enumerate(a.block_expert.tolist()):
        block = [r for r in sorted_rows[b].tolist() if r != rows]
        if expert < 0:
            assert block == [], "an unused block holds rows"
            continue
        assert block, "a used block is empty"
        assert all(int(flat[r]) == expert for r in block), "rows of another expert in a block"
        seen += block
    assert sorted(seen) == list(range(rows)), "every row exactly once"
    # stable order: experts ascending, rows ascending inside an expert
    keyed = [(int(flat[r]), r) for r in seen]
    assert keyed == sorted(keyed)
    # used blocks come first, then only unused ones
    used = (a.block_expert >= 0).tolist()
    assert used == sorted(used, reverse=True)


def test_align_is_deterministic() -> None:
    ids = torch.randint(0, 6, (50, 1))
    a, b = align_rows(ids, 6, 16), align_rows(ids, 6, 16)
    assert torch.equal(a.sorted_rows, b.sorted_rows)
    assert torch.equal(a.block_expert, b.block_expert)


def _quantize_f64(x: np.ndarray, group: int) -> tuple[np.ndarray, np.ndarray]:
    """Independent float64 version: scale per group, RNE via ml_dtypes."""
    t, k = x.shape
    n = -(-k // group)
    pad = np.zeros((t, n * group))
    pad[:, :k] = x
    g = pad.reshape(t, n, group)
    s = np.maximum(np.abs(g).max(-1), 1e-10) / 448.0
    s = s.astype(np.float32)  # the scale is stored as float32
    q = np.clip(g / s[..., None].astype(np.float64), -448, 448).astype(np.float32)
    q = q.astype(ml_dtypes.float8_e4m3fn).astype(np.float64)
    return q.reshape(t, n * group)[:, :k], s


@pytest.mark.parametrize("k", [256, 200])
def test_activation_quantization_matches_float64(k: int) -> None:
    gen = torch.Generator().manual_seed(k)
    x = torch.randn(5, k, generator=gen) * torch.rand(5, 1, generator=gen) * 10
    q, s = quantize_per_token_group(x)
    q_ref, s_ref = _quantize_f64(x.double().numpy(), 128)
    assert q.dtype == torch.float8_e4m3fn and q.shape == (5, k)
    assert s.shape == (5, -(-k // 128))
    np.testing.assert_allclose(s.numpy(), s_ref, rtol=1e-6)
    np.testing.assert_array_equal(q.float().numpy(), q_ref.astype(np.float32))
    x_hat = dequantize_per_token_group(q, s)
    rel = ((x_hat - x).norm() / x.norm()).item()
    assert 1e-3 < rel < 0.05  # e4m3 keeps ~3 mantissa bits


@pytest.mark.parametrize(
    ("tokens", "top_k", "experts", "block_m", "seed"),
    [(1, 9, 257, 16, 0), (7, 3, 5, 4, 1), (25, 5, 17, 16, 3), (14, 9, 257, 16, 4)],
)
def test_fused_align_kernel_equals_torch(
    tokens: int, top_k: int, experts: int, block_m: int, seed: int
) -> None:
    """The one-program Triton align (interpreter here) gives the torch result exactly."""
    from checkpoint_tool.runtime.kernels.align import align_rows_fused

    gen = torch.Generator().manual_seed(seed)
    ids = torch.stack([torch.randperm(experts, generator=gen)[:top_k] for _ in range(tokens)])
    want, got = align_rows(ids, experts, block_m), align_rows_fused(ids, experts, block_m)
    assert torch.equal(want.sorted_rows, got.sorted_rows)
    assert torch.equal(want.block_expert, got.block_expert)
