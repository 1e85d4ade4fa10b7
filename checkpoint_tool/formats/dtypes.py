"""Storage dtypes of quantized tensors: element sizes and the pad fill bytes (no torch).

Pad fills are the little-endian hex bytes of ONE storage element (``regions.Pad.fill``):
zero weights and neutral (1.0) scales in the scale's own encoding.

Example::

    one_fill("F32")      # '0000803f'
    one_fill("BF16")     # '803f'
    one_fill("F8_E4M3")  # '38'
    one_fill("U8")       # '7f'  (a U8 *scale* is E8M0: 2**(127-127) = 1.0)
    zero_fill("BF16")    # '0000'
"""

from __future__ import annotations

import struct

#: bytes per storage element (F4: one byte holds two values)
ELEMENT_SIZE: dict[str, int] = {
    "U8": 1,
    "I8": 1,
    "F4": 1,
    "F8_E4M3": 1,
    "F8_E8M0": 1,
    "BF16": 2,
    "F16": 2,
    "F32": 4,
    "I32": 4,  # compressed-tensors packed int4 words and zero points
    "I64": 8,  # compressed-tensors weight_shape
}

_FLOAT_DTYPES = {"BF16", "F16", "F32"}
_E8M0_DTYPES = {"U8", "F8_E8M0"}


def zero_fill(dtype: str) -> str:
    """Hex bytes of one zero element (FP4/FP8/float zero are all-zero bytes)."""
    return "00" * ELEMENT_SIZE[dtype]


def one_fill(dtype: str) -> str:
    """Hex bytes of one scale element equal to 1.0 in ``dtype``'s scale encoding."""
    if dtype == "F32":
        return struct.pack("<f", 1.0).hex()
    if dtype == "F16":
        return struct.pack("<e", 1.0).hex()
    if dtype == "BF16":
        return struct.pack("<f", 1.0)[2:].hex()
    if dtype == "F8_E4M3":
        return "38"
    if dtype in _E8M0_DTYPES:
        return "7f"
    raise ValueError(f"no neutral scale value for dtype {dtype}")


def is_float_dtype(dtype: str) -> bool:
    return dtype in _FLOAT_DTYPES


def is_e8m0_dtype(dtype: str) -> bool:
    return dtype in _E8M0_DTYPES
