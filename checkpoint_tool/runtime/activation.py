"""Dynamic FP8 activation quantization per token and 128-column group (block-FP8 w8a8).

Done in torch, never inside a kernel (the Triton interpreter's fp32->fp8 casts are
unreliable). Same rule as vLLM's ``per_token_group_quant_fp8``: ``s = max(amax, 1e-10) / 448``
per (token, group); ``q = fp8_e4m3(clamp(x / s, -448, 448))`` with round-to-nearest-even.

Example::

    q, s = quantize_per_token_group(x)        # x [T, 7168] -> q fp8 [T, 7168], s f32 [T, 56]
    x_hat = dequantize_per_token_group(q, s)  # float32 [T, 7168], |x_hat - x| <= ~s * 16
"""

from __future__ import annotations

import torch

FP8_E4M3_MAX = 448.0
ACT_GROUP = 128
_EPS = 1e-10


def quantize_per_token_group(
    x: torch.Tensor, group: int = ACT_GROUP
) -> tuple[torch.Tensor, torch.Tensor]:
    """``x [T, K]`` -> (``q`` float8_e4m3fn ``[T, K]``, ``s`` float32 ``[T, ceil(K/group)]``)."""
    num_tokens, k = x.shape
    n_groups = -(-k // group)
    xf = x.float()
    if k % group:
        xf = torch.nn.functional.pad(xf, (0, n_groups * group - k))
    xg = xf.view(num_tokens, n_groups, group)
    scale = xg.abs().amax(dim=-1).clamp_min(_EPS) / FP8_E4M3_MAX
    q = (xg / scale.unsqueeze(-1)).clamp(-FP8_E4M3_MAX, FP8_E4M3_MAX).to(torch.float8_e4m3fn)
    return q.view(num_tokens, n_groups * group)[:, :k].contiguous(), scale.contiguous()


def dequantize_per_token_group(
    q: torch.Tensor, scale: torch.Tensor, group: int = ACT_GROUP
) -> torch.Tensor:
    """Inverse of ``quantize_per_token_group``: float32 ``[T, K]``."""
    k = q.shape[-1]
    return q.float() * scale.repeat_interleave(group, dim=-1)[:, :k]
