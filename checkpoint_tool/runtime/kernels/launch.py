"""Launch the grouped GEMM for the two halves of an expert MLP.

``gate_up_silu``: ``h[r] = silu(A[r // k] @ gate[e]^T) * (A[r // k] @ up[e]^T)``, ``[R, I]``.
``down_weighted``: ``y[r] = w[r] * (h[r] @ down[e]^T)``, ``[R, H]``.

CPU tensors run in the Triton interpreter (float32 I/O), CUDA tensors on the compiled kernel.
Split-K partials are reduced in a fixed order (``elementwise.reduce_split_k``).

Example::

    h = gate_up_silu(x, None, gate, up, aligned, cfg.gate_up, out_dtype=torch.bfloat16)
    y = down_weighted(h, None, down, aligned, weights.reshape(-1), cfg.down,
                      out_dtype=torch.bfloat16)
"""

from __future__ import annotations

import math
import os
from dataclasses import replace

import torch
import triton.language as tl

from checkpoint_tool.errors import UsageError
from checkpoint_tool.runtime.activation import ACT_GROUP
from checkpoint_tool.runtime.align import AlignedRows
from checkpoint_tool.runtime.kernels.config import GemmConfig
from checkpoint_tool.runtime.kernels.elementwise import reduce_split_k
from checkpoint_tool.runtime.kernels.grouped_gemm import INTERPRETED, moe_gemm_kernel
from checkpoint_tool.runtime.stack import KernelFormat, StackedWeights


def gate_up_silu(
    a: torch.Tensor,
    a_scale: torch.Tensor | None,
    gate: StackedWeights,
    up: StackedWeights,
    aligned: AlignedRows,
    cfg: GemmConfig,
    *,
    out_dtype: torch.dtype,
    swiglu_limit: float | None = None,
) -> torch.Tensor:
    """``silu(gate) * up`` for every aligned row; ``a`` is per token (``[T, H]``).

    ``swiglu_limit`` (DeepSeek-V4) clamps gate to ``<= limit`` and up to ``[-limit, limit]``
    first (vLLM ``model_executor/layers/activation.py`` ``SiluAndMulWithClamp``).
    """
    rows, inter = aligned.num_rows, gate.n
    if cfg.split_k > 1:
        part = torch.empty(cfg.split_k, rows, 2 * inter, dtype=torch.float32, device=a.device)
        _launch(a, a_scale, gate, up, part, None, aligned, aligned.top_k, cfg)
        return reduce_split_k(part, gated=True, out_dtype=out_dtype, swiglu_limit=swiglu_limit)
    out = torch.empty(rows, inter, dtype=out_dtype, device=a.device)
    _launch(a, a_scale, gate, up, out, None, aligned, aligned.top_k, cfg, swiglu_limit)
    return out


def down_weighted(
    h: torch.Tensor,
    h_scale: torch.Tensor | None,
    down: StackedWeights,
    aligned: AlignedRows,
    row_weights: torch.Tensor,
    cfg: GemmConfig,
    *,
    out_dtype: torch.dtype,
) -> torch.Tensor:
    """``row_weights[r] * (h[r] @ down[e]^T)``; ``h`` is per row (``[R, I]``)."""
    rows, hidden = aligned.num_rows, down.n
    weights = row_weights.float().contiguous()
    if cfg.split_k > 1:
        part = torch.empty(cfg.split_k, rows, hidden, dtype=torch.float32, device=h.device)
        _launch(h, h_scale, down, None, part, weights, aligned, 1, cfg)
        return reduce_split_k(part, gated=False, out_dtype=out_dtype)
    out = torch.empty(rows, hidden, dtype=out_dtype, device=h.device)
    _launch(h, h_scale, down, None, out, weights, aligned, 1, cfg)
    return out


def fit_block_k(cfg: GemmConfig, w: StackedWeights) -> GemmConfig:
    """Shrink ``block_k`` so one K-step never straddles an FP8 scale block or activation group."""
    if w.fmt in (KernelFormat.MXFP4, KernelFormat.NVFP4):
        if cfg.block_k % (2 * w.group_size):
            raise ValueError(f"block_k {cfg.block_k}: need a multiple of 2 x group {w.group_size}")
        return cfg
    if w.fmt is KernelFormat.INT4:  # whole scale groups per K-step
        block_k = math.lcm(cfg.block_k, w.group_size)
        return cfg if block_k == cfg.block_k else replace(cfg, block_k=block_k)
    if w.fmt not in (KernelFormat.FP8, KernelFormat.FP8_W8A8):
        return cfg
    limit = w.scale_block[1] if w.fmt is KernelFormat.FP8 else math.gcd(w.scale_block[1], ACT_GROUP)
    block_k = math.gcd(cfg.block_k, limit)
    if block_k < 16:
        raise ValueError(f"FP8 scale block of {w.scale_block[1]} columns is too narrow (min 16)")
    return cfg if block_k == cfg.block_k else replace(cfg, block_k=block_k)


def _weight_arg(w: StackedWeights) -> torch.Tensor:
    """The weight as the kernel reads it (packed FP4 as int32 words of 8 codes)."""
    if w.fmt in (KernelFormat.MXFP4, KernelFormat.NVFP4):
        return w.weight.view(torch.int32)
    return w.weight


def _scale_arg(w: StackedWeights) -> torch.Tensor:
    """The scale tensor as the kernel reads it (NVFP4 E4M3 as raw bytes; a dummy if none)."""
    if w.scale is None:
        return w.weight
    return w.scale.view(torch.uint8) if w.fmt is KernelFormat.NVFP4 else w.scale


def _launch(
    a: torch.Tensor,
    a_scale: torch.Tensor | None,
    w: StackedWeights,
    u: StackedWeights | None,
    out: torch.Tensor,
    row_weights: torch.Tensor | None,
    aligned: AlignedRows,
    row_div: int,
    cfg: GemmConfig,
    swiglu_limit: float | None = None,
) -> None:
    interpret = INTERPRETED
    if interpret != (a.device.type == "cpu"):
        raise UsageError(
            f"the triton backend got {a.device.type} tensors but triton runs "
            f"{'interpreted (CPU)' if interpret else 'compiled (GPU)'} in this process; "
            "move the tensors, or use backend='torch'"
        )
    fmt = w.fmt
    if u is not None and (u.fmt != fmt or u.scale_block != w.scale_block):
        raise ValueError(f"gate ({fmt.name}) and up ({u.fmt.name}) need one format")
    if fmt is KernelFormat.FP8_W8A8 and a_scale is None:
        raise ValueError("w8a8 needs activation scales")
    if interpret and a.dtype not in (torch.float32, torch.float8_e4m3fn):
        a = a.float()  # the interpreter computes bf16 wrongly: upcast before the kernel
    gated = u is not None
    u = u if u is not None else w
    scale = _scale_arg(w)
    u_scale = _scale_arg(u)
    glob = w.global_scale if w.global_scale is not None else row_weights
    u_glob = u.global_scale if u.global_scale is not None else glob
    a_scale_t = a_scale if a_scale is not None else a
    topk = row_weights if row_weights is not None else a
    split = out.stride(0) if cfg.split_k > 1 else 0
    out_2d = out[0] if cfg.split_k > 1 else out
    cfg = fit_block_k(cfg, w)
    w_words, u_words = _weight_arg(w), _weight_arg(u)
    fp4_bf16 = not interpret and os.environ.get("CKPT_FP4_DECODE", "bf16") == "bf16"
    grid = (aligned.num_blocks, -(-w.n // cfg.block_n), cfg.split_k)
    moe_gemm_kernel[grid](
        a,
        a_scale_t,
        w_words,
        scale,
        glob if glob is not None else scale,
        u_words,
        u_scale,
        u_glob if u_glob is not None else u_scale,
        out,
        topk,
        aligned.sorted_rows,
        aligned.block_expert,
        aligned.num_rows,
        w.n,
        w.k,
        a.stride(0),
        a.stride(1),
        a_scale_t.stride(0),
        a_scale_t.stride(1) if a_scale_t.dim() > 1 else 1,
        w_words.stride(0),
        w_words.stride(1),
        w_words.stride(2),
        scale.stride(0),
        scale.stride(1) if scale.dim() > 1 else 0,
        scale.stride(2) if scale.dim() > 2 else 0,
        split,
        out_2d.stride(0),
        out_2d.stride(1),
        float(swiglu_limit or 0.0),
        ROW_DIV=row_div,
        FMT=int(fmt),
        GATED=gated,
        CLAMP=swiglu_limit is not None,
        APPLY_TOPK=row_weights is not None,
        HAS_GLOBAL=w.global_scale is not None,
        SBN=w.scale_block[0],
        SBK=w.scale_block[1],
        AGROUP=ACT_GROUP,
        split_k=cfg.split_k,
        PARTIAL=cfg.split_k > 1,
        EVEN_K=w.k % cfg.block_k == 0,
        BLOCK_M=cfg.block_m,
        BLOCK_N=cfg.block_n,
        BLOCK_K=cfg.block_k,
        GROUP=w.group_size or 1,
        FP4_BF16=fp4_bf16,
        DOT_DTYPE=tl.float32 if interpret else tl.bfloat16,
        num_warps=cfg.num_warps,
        num_stages=cfg.num_stages,
    )
