"""INT4 packed in I32 (compressed-tensors ``pack-quantized``): the numbers.

``W[i, j] = (q[i, j] - z[i, j // g]) * s[i, j // g]`` with ``q`` a nibble of ``weight`` minus 8
(``z`` = 0 when symmetric; an asymmetric zero point is a nibble of ``zero_point`` minus 8).

Quantization as compressed-tensors does it (``quantization/utils/helpers.py``
``calculate_qparams``; ``lifecycle/forward.py`` ``_quantize``): symmetric scale
``amax / 7.5`` per group, in the scale dtype, ``q = clamp(round(w / s), -8, 7)``; asymmetric
scale ``(max - min) / 15`` with ``min <= 0 <= max`` and zero point ``clamp(round(-min / s) - 8,
-8, 7)``.

Example::

    parts = Int4Codec(32, "BF16").quantize(torch.randn(4, 64))
    # {'weight': int32 [4, 8], 'scale': bfloat16 [4, 2]}
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from checkpoint_tool.formats.int4 import PACK, Int4Storage
from checkpoint_tool.quant.codecs.base import BaseCodec, Parts, as_float32, expand_last, group_last
from checkpoint_tool.quant.codecs.torch_dtypes import TORCH_DTYPE

_SHIFTS = tuple(4 * j for j in range(PACK))


def pack_int4(nibbles: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Unsigned nibbles (0..15, any int dtype) -> I32, eight per word along ``dim``, value
    ``j`` of a word in bits ``4j..4j+3`` (``pack_to_int32``)."""
    x = nibbles.to(torch.int64).movedim(dim, -1)
    x = x.reshape(*x.shape[:-1], -1, PACK)
    word = torch.zeros(x.shape[:-1], dtype=torch.int64)
    for j, shift in enumerate(_SHIFTS):
        word |= x[..., j] << shift
    word = torch.where(word >= 2**31, word - 2**32, word)  # two's complement int32
    return word.to(torch.int32).movedim(-1, dim)


def unpack_int4(words: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """I32 words -> unsigned nibbles (int32 0..15), eight per word along ``dim``."""
    w = words.to(torch.int32).movedim(dim, -1)
    nib = torch.stack([(w >> s) & 0xF for s in _SHIFTS], dim=-1)
    return nib.reshape(*w.shape[:-1], -1).movedim(-1, dim)


class Int4Codec(Int4Storage, BaseCodec):
    """compressed-tensors INT4 groups (see the module docstring)."""

    def quantize(self, w: torch.Tensor) -> Parts:
        x = as_float32(w, label=self.label)
        self.storage_shapes(tuple(x.shape))
        groups = group_last(x, self.group_size)  # [..., out, G, g]
        sdt = TORCH_DTYPE[self.scale_dtype]
        if self.symmetric:
            s = (groups.abs().amax(dim=-1) / 7.5).to(sdt)
            zp = torch.zeros_like(s, dtype=torch.float32)
        else:
            lo = groups.amin(dim=-1).clamp(max=0)
            hi = groups.amax(dim=-1).clamp(min=0)
            s = ((hi - lo) / 15).to(sdt)
            sf = s.to(torch.float32)
            safe = torch.where(sf > 0, sf, torch.ones_like(sf))
            zp = torch.clamp(torch.round(-lo / safe) - 8, -8, 7)
        sf = s.to(torch.float32)
        safe = torch.where(sf > 0, sf, torch.ones_like(sf))
        q = torch.clamp(torch.round(groups / safe[..., None]) + zp[..., None], -8, 7)
        q = q.reshape(*x.shape[:-1], -1)[..., : x.shape[-1]]
        out = {"weight": pack_int4((q + 8).to(torch.int64)), "scale": s}
        if not self.symmetric:
            out["zero_point"] = pack_int4((zp + 8).to(torch.int64), dim=-2)
        return out

    def dequantize(
        self, parts: Mapping[str, torch.Tensor], *, name: str | None = None
    ) -> torch.Tensor:
        shape = self.check_parts(parts, name=name)
        n = shape[-1]
        q = unpack_int4(parts["weight"]).to(torch.float32)
        if self.symmetric:
            z = torch.full_like(q, 8.0)
        else:
            zp = unpack_int4(parts["zero_point"], dim=-2).to(torch.float32)
            z = expand_last(zp, self.group_size, n)
        s = expand_last(parts["scale"].to(torch.float32), self.group_size, n)
        return (q - z) * s
