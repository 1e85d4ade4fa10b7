"""FP8 E4M3FN elements: bias 7, max ±448, 0x7F/0xFF NaN, no infinity.

``encode_fp8_e4m3`` clamps to ±448 before torch's cast (RNE), so it never produces NaN,
whatever the torch version's overflow behaviour.

Example::

    encode_fp8_e4m3(torch.tensor([1.0, 500.0])).view(torch.uint8)  # tensor([0x38, 0x7E])
    decode_fp8_e4m3(torch.tensor([0x38, 0x7F], dtype=torch.uint8))  # tensor([1., nan])
"""

from __future__ import annotations

import torch

from checkpoint_tool.errors import InputError

FP8_E4M3_MAX = 448.0


def fp8_e4m3_view(t: torch.Tensor) -> torch.Tensor:
    """Reinterpret FP8 storage (float8_e4m3fn, uint8, int8) as float8_e4m3fn."""
    if t.dtype == torch.float8_e4m3fn:
        return t
    if t.dtype in (torch.uint8, torch.int8):
        return t.view(torch.float8_e4m3fn)
    raise InputError(
        f"FP8 E4M3 data must be stored as F8_E4M3 (or U8 bytes), got torch dtype {t.dtype}; "
        "check the quantization config for this tensor"
    )


def decode_fp8_e4m3(t: torch.Tensor) -> torch.Tensor:
    """FP8 E4M3FN storage -> float32 (exact)."""
    return fp8_e4m3_view(t).to(torch.float32)


def encode_fp8_e4m3(x: torch.Tensor) -> torch.Tensor:
    """float -> float8_e4m3fn, round-to-nearest-even, saturating at ±448; NaN encodes as 0."""
    x32 = torch.nan_to_num(x.to(torch.float32), nan=0.0)
    return x32.clamp(-FP8_E4M3_MAX, FP8_E4M3_MAX).to(torch.float8_e4m3fn)
