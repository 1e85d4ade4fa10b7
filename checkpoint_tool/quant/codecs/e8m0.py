"""E8M0 scales: one byte ``u`` is ``2**(u-127)``; ``u = 255`` is NaN; no zero, no sign.

Stored as ``U8`` (Quark, gpt-oss) or ``F8_E8M0`` (DeepSeek-V4). The byte is always
reinterpreted, never cast numerically (``torch`` and ``ml_dtypes`` disagree on how 0.0
converts).

Example::

    decode_e8m0(torch.tensor([127, 130, 255], dtype=torch.uint8))  # tensor([1., 8., nan])
    encode_e8m0(torch.tensor([-2, 0, 3]))                          # tensor([125, 127, 130])
"""

from __future__ import annotations

import torch

from checkpoint_tool.errors import InputError

E8M0_BIAS = 127
E8M0_NAN = 255
E8M0_MAX_BYTE = 254

#: float32 value of every byte (2**-127 is a float32 subnormal, exact)
_E8M0_LUT = torch.cat(
    (
        torch.exp2(torch.arange(0, 255, dtype=torch.float64) - E8M0_BIAS).to(torch.float32),
        torch.tensor([float("nan")], dtype=torch.float32),
    )
)

_BYTE_DTYPES = (torch.uint8, torch.int8, torch.float8_e8m0fnu)


def e8m0_bytes(t: torch.Tensor) -> torch.Tensor:
    """Reinterpret E8M0 storage (uint8, int8 or float8_e8m0fnu) as uint8 bytes."""
    if t.dtype == torch.uint8:
        return t
    if t.dtype in _BYTE_DTYPES:
        return t.view(torch.uint8)
    raise InputError(
        f"E8M0 scales must be stored as U8 or F8_E8M0 bytes, got torch dtype {t.dtype}; "
        "check the quantization config for this tensor"
    )


def decode_e8m0(t: torch.Tensor) -> torch.Tensor:
    """E8M0 bytes -> float32 ``2**(u-127)``, NaN for 255."""
    return _E8M0_LUT.to(t.device)[e8m0_bytes(t).long()]


def encode_e8m0(exponent: torch.Tensor) -> torch.Tensor:
    """Unbiased integer exponents -> E8M0 bytes, saturated to [2**-127, 2**127] (never NaN)."""
    return (exponent.to(torch.int64) + E8M0_BIAS).clamp(0, E8M0_MAX_BYTE).to(torch.uint8)
