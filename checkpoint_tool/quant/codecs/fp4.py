"""FP4 E2M1 elements: encode (RNE, saturating), pack two per byte, unpack, decode.

Layout (OCP MX, Quark, ModelOpt, vLLM, PyTorch): element ``2k`` in the **low** nibble and
element ``2k+1`` in the **high** nibble of byte ``k``, packed along the last dim.

Example::

    codes = encode_fp4(torch.tensor([0.5, -3.0]))   # tensor([1, 13], dtype=torch.uint8)
    pack_fp4(codes)                                 # tensor([0xD1]) = 13 << 4 | 1
    decode_fp4(torch.tensor([0xD1], dtype=torch.uint8))  # tensor([0.5, -3.0])
"""

from __future__ import annotations

import torch

from checkpoint_tool.errors import InputError

#: value of each 4-bit code (sign bit 3, exponent bits 2..1, mantissa bit 0)
FP4_E2M1_VALUES = torch.tensor(
    [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0],
    dtype=torch.float32,
)
FP4_E2M1_MAX = 6.0

#: midpoints between consecutive non-negative E2M1 magnitudes (codes 0..7)
_MIDPOINTS = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0], dtype=torch.float64)

_PACKED_DTYPES = (torch.uint8, torch.int8)


def encode_fp4(x: torch.Tensor) -> torch.Tensor:
    """Round each value to the nearest E2M1 code (ties to even code), saturating at ±6.

    The sign bit is kept (``-0.1`` -> code 8, negative zero). NaN encodes as code 0: weight
    codecs refuse NaN before they get here.
    """
    # float32 holds every float32/bf16/f16 input and every midpoint exactly
    work = torch.float64 if x.dtype == torch.float64 else torch.float32
    mag = x.abs().to(work)
    mids = _MIDPOINTS.to(device=mag.device, dtype=work)
    # bucketize(right=False): mids[i-1] < mag <= mids[i] -> i; a tie lands on the lower code
    code = torch.bucketize(mag, mids, right=False)
    tie = mag == mids[code.clamp(max=len(mids) - 1)]
    code = code + (tie & (code % 2 == 1)).to(code.dtype)  # tie on an odd code: go up to even
    code = torch.where(torch.isnan(mag), torch.zeros_like(code), code)
    sign = torch.signbit(x) & ~torch.isnan(x)
    return (code | (sign.to(code.dtype) << 3)).to(torch.uint8)


def pack_fp4(codes: torch.Tensor) -> torch.Tensor:
    """Pack 4-bit codes ``[..., n]`` (n even) into bytes ``[..., n/2]``, even element low."""
    if codes.shape[-1] % 2:
        raise ValueError(f"pack_fp4 needs an even last dim, got shape {tuple(codes.shape)}")
    c = codes.to(torch.uint8) & 0x0F
    return c[..., 0::2] | (c[..., 1::2] << 4)


def fp4_bytes(packed: torch.Tensor) -> torch.Tensor:
    """Reinterpret packed FP4 storage (uint8, int8, float4_e2m1fn_x2) as uint8 bytes."""
    if packed.dtype == torch.uint8:
        return packed
    if packed.dtype in _PACKED_DTYPES or packed.dtype == getattr(torch, "float4_e2m1fn_x2", None):
        return packed.view(torch.uint8)
    raise InputError(
        f"packed FP4 must be stored as U8/I8/F4 bytes, got torch dtype {packed.dtype}; "
        "check the quantization config for this tensor"
    )


def unpack_fp4(packed: torch.Tensor) -> torch.Tensor:
    """Unpack bytes ``[..., m]`` into 4-bit codes ``[..., 2m]`` (low nibble first)."""
    b = fp4_bytes(packed)
    return torch.stack((b & 0x0F, b >> 4), dim=-1).reshape(*b.shape[:-1], 2 * b.shape[-1])


def decode_fp4(packed: torch.Tensor) -> torch.Tensor:
    """Packed FP4 bytes ``[..., m]`` -> float32 values ``[..., 2m]``."""
    lut = FP4_E2M1_VALUES.to(packed.device)
    return lut[unpack_fp4(packed).long()]
