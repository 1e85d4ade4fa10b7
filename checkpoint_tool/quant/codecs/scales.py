"""Scale tensors: decode any stored encoding to float32, encode float32 to a storage dtype.

Float scales (F32/BF16/F16) are read numerically; byte scales are E8M0 (MX, DeepSeek ue8m0)
or E4M3 (NVFP4) depending on the format, never a numeric cast.

Example::

    decode_scale(torch.tensor([127, 128], dtype=torch.uint8), byte_kind="e8m0", label="mxfp4/32")
    # tensor([1., 2.])
    store_float_scale(torch.tensor(0.0), "BF16")   # tensor(1., dtype=torch.bfloat16): 0 -> 1.0
"""

from __future__ import annotations

from typing import Literal

import torch

from checkpoint_tool.errors import InputError
from checkpoint_tool.formats.dtypes import is_float_dtype
from checkpoint_tool.quant.codecs.e8m0 import decode_e8m0, encode_e8m0
from checkpoint_tool.quant.codecs.fp8 import decode_fp8_e4m3
from checkpoint_tool.quant.codecs.torch_dtypes import TORCH_DTYPE

ByteKind = Literal["e8m0", "e4m3"] | None

_FLOATS = (torch.float32, torch.bfloat16, torch.float16, torch.float64)


def decode_scale(t: torch.Tensor, *, byte_kind: ByteKind, label: str) -> torch.Tensor:
    """Stored scale -> float32 multiplier, by the tensor's dtype and the format's byte kind."""
    if t.dtype in _FLOATS:
        return t.to(torch.float32)
    if t.dtype == torch.float8_e4m3fn:
        return decode_fp8_e4m3(t)
    if t.dtype == torch.float8_e8m0fnu:
        return decode_e8m0(t)
    if t.dtype in (torch.uint8, torch.int8) and byte_kind == "e8m0":
        return decode_e8m0(t)
    if t.dtype in (torch.uint8, torch.int8) and byte_kind == "e4m3":
        return decode_fp8_e4m3(t)
    raise InputError(
        f"{label}: scale stored as torch dtype {t.dtype} cannot be decoded for this format; "
        "check the scale tensor's dtype against the quantization config"
    )


def store_float_scale(s: torch.Tensor, dtype: str) -> torch.Tensor:
    """Round float32 scales to ``dtype`` (F32/BF16/F16); a scale that would be 0 becomes 1.0.

    Elements must then be divided by the *stored* value so that dequantization agrees.
    """
    if not is_float_dtype(dtype):
        raise ValueError(f"{dtype} is not a float scale dtype")
    stored = s.to(TORCH_DTYPE[dtype])
    one = torch.ones((), dtype=stored.dtype)
    return torch.where((stored == 0) | ~torch.isfinite(stored), one, stored)


def store_e8m0_scale(exponent: torch.Tensor, dtype: str) -> torch.Tensor:
    """Unbiased exponents -> E8M0 bytes as ``U8`` (uint8) or ``F8_E8M0`` (float8_e8m0fnu)."""
    b = encode_e8m0(exponent)
    if dtype == "U8":
        return b
    if dtype == "F8_E8M0":
        return b.view(torch.float8_e8m0fnu)
    raise ValueError(f"{dtype} is not an E8M0 scale dtype (U8, F8_E8M0)")


def mx_scale_exponent(
    amax: torch.Tensor, *, elem_mbits: int, elem_emax: int, mode: str
) -> torch.Tensor:
    """Shared power-of-two exponent of an MX group from its float32 absolute maximum.

    ``floor`` (OCP MX v1.0): ``floor(log2(amax)) - elem_emax``.
    ``even`` (AMD Quark ``scale_calculation_mode="even"``, torchao ``EVEN``): first round
    ``amax`` to ``elem_mbits`` mantissa bits (add half an element ULP to the float32 bits,
    keep sign+exponent), then the same floor. For FP4 a group keeps scale ``2**e`` while
    ``amax < 7 * 2**(e-2)`` and elements above 6 saturate to 6.
    Returns int64 exponents clamped to the E8M0 range [-127, 127]; amax 0 gives -127.
    """
    bits = amax.to(torch.float32).contiguous().view(torch.int32).to(torch.int64)
    if mode == "even":
        bits = (bits + (1 << (22 - elem_mbits))) & 0x7F800000
    elif mode != "floor":
        raise ValueError(f"unknown MX scale mode {mode!r} (even, floor)")
    biased = (bits >> 23) & 0xFF
    return (biased - 127 - elem_emax).clamp(-127, 127)
