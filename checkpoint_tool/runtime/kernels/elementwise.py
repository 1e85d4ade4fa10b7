"""Small fused GPU kernels around the grouped GEMM (decode latency: one launch, not five).

- ``quantize_fp8_groups``: per token and 128-column group FP8 quantization, the same rule as
  ``runtime.activation.quantize_per_token_group`` (IEEE division, RNE saturating cast);
- ``reduce_split_k``: sum the split-K partials in a fixed order (deterministic), then
  ``silu(gate) * up`` for the gate/up GEMM, or just the sum for the down GEMM.

Under the Triton interpreter (CPU) the torch versions run instead: the interpreter's
fp32 -> fp8 casts are unreliable, and CPU speed does not matter there.

Example::

    q, s = quantize_fp8_groups(h)                  # h [R, I] -> fp8 [R, I], f32 [R, I/128]
    h = reduce_split_k(part, gated=True, out_dtype=torch.bfloat16)   # part [S, R, 2I] f32
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from checkpoint_tool.runtime.activation import ACT_GROUP, FP8_E4M3_MAX, quantize_per_token_group
from checkpoint_tool.runtime.kernels.grouped_gemm import INTERPRETED


@triton.jit
def _quant_fp8_kernel(x_ptr, q_ptr, s_ptr, K, stride_xm, stride_qm, stride_sm, GROUP: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    g = tl.program_id(1)
    offs = g * GROUP + tl.arange(0, GROUP)
    mask = offs < K
    x = tl.load(x_ptr + row * stride_xm + offs, mask=mask, other=0.0).to(tl.float32)
    amax = tl.maximum(tl.max(tl.abs(x), axis=0), 1e-10)
    scale = tl.math.div_rn(amax, 448.0)
    q = tl.math.div_rn(x, scale)
    q = tl.minimum(tl.maximum(q, -448.0), 448.0)
    tl.store(q_ptr + row * stride_qm + offs, q.to(tl.float8e4nv), mask=mask)
    tl.store(s_ptr + row * stride_sm + g, scale)


@triton.jit
def _reduce_split_k_kernel(
    part_ptr,
    out_ptr,
    S,
    N,
    stride_ps,
    stride_pr,
    stride_or,
    swiglu_limit,
    GATED: tl.constexpr,
    CLAMP: tl.constexpr,
    BLOCK: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < N
    base = part_ptr + row * stride_pr + offs
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    acc_u = tl.zeros((BLOCK,), dtype=tl.float32)
    for s in range(S):
        acc += tl.load(base + s * stride_ps, mask=mask, other=0.0)
        if GATED:
            acc_u += tl.load(base + s * stride_ps + N, mask=mask, other=0.0)
    if GATED:
        if CLAMP:
            acc = tl.minimum(acc, swiglu_limit)
            acc_u = tl.minimum(tl.maximum(acc_u, -swiglu_limit), swiglu_limit)
        acc = acc / (1.0 + tl.exp(-acc)) * acc_u
    tl.store(out_ptr + row * stride_or + offs, acc.to(out_ptr.dtype.element_ty), mask=mask)


def quantize_fp8_groups(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``x [R, K]`` -> (fp8 ``[R, K]``, float32 scales ``[R, ceil(K/128)]``)."""
    if INTERPRETED or x.device.type != "cuda":
        return quantize_per_token_group(x)
    rows, k = x.shape
    groups = -(-k // ACT_GROUP)
    q = torch.empty(rows, k, dtype=torch.float8_e4m3fn, device=x.device)
    s = torch.empty(rows, groups, dtype=torch.float32, device=x.device)
    if rows:
        _quant_fp8_kernel[(rows, groups)](
            x, q, s, k, x.stride(0), q.stride(0), s.stride(0), GROUP=ACT_GROUP, num_warps=1
        )
    return q, s


def reduce_split_k(
    part: torch.Tensor,
    *,
    gated: bool,
    out_dtype: torch.dtype,
    swiglu_limit: float | None = None,
) -> torch.Tensor:
    """``part [S, R, N (x2 if gated)]`` float32 -> ``[R, N]``: fixed-order sum (+ SiLU-and-mul,
    clamped by ``swiglu_limit`` when given)."""
    splits, rows, width = part.shape
    n = width // 2 if gated else width
    if INTERPRETED or part.device.type != "cuda":
        acc = part.sum(dim=0)
        if gated:
            gate, up = acc[:, :n], acc[:, n:]
            if swiglu_limit is not None:
                gate = gate.clamp(max=swiglu_limit)
                up = up.clamp(min=-swiglu_limit, max=swiglu_limit)
            acc = torch.nn.functional.silu(gate) * up
        return acc.to(out_dtype)
    out = torch.empty(rows, n, dtype=out_dtype, device=part.device)
    block = 512
    if rows:
        _reduce_split_k_kernel[(rows, -(-n // block))](
            part,
            out,
            splits,
            n,
            part.stride(0),
            part.stride(1),
            out.stride(0),
            float(swiglu_limit or 0.0),
            GATED=gated,
            CLAMP=swiglu_limit is not None,
            BLOCK=block,
            num_warps=4,
        )
    return out


assert FP8_E4M3_MAX == 448.0  # the kernel's constant
