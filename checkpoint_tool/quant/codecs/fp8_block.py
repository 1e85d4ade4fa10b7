"""FP8 E4M3 with one scale per ``[b0, b1]`` block: ``W[i,j] = fp8(w[i,j]) * s[i//b0, j//b1]``.

Scales are ceil-shaped ``[..., ceil(out/b0), ceil(in/b1)]`` (a partial last block has its own
scale). DeepSeek-V3 names them ``weight_scale_inv`` (a multiplier despite the name), Quark
``weight_scale``. Scale = block amax / 448, stored as:

- F32 (default) / BF16 / F16 values;
- ``e8m0=True`` with a float dtype: DeepSeek ``scale_fmt: "ue8m0"``, power-of-two values
  ``2**ceil(log2(amax/448))`` (never saturates) stored as float;
- ``U8`` / ``F8_E8M0``: the same power-of-two scales as E8M0 bytes (DeepSeek-V4).

Example::

    Fp8BlockCodec().storage_shapes((200, 300))   # {'weight': (200, 300), 'scale': (2, 3)}
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from checkpoint_tool.formats.dtypes import is_e8m0_dtype
from checkpoint_tool.formats.fp8_block import Fp8BlockStorage
from checkpoint_tool.quant.codecs.base import BaseCodec, Parts, as_float32
from checkpoint_tool.quant.codecs.fp8 import FP8_E4M3_MAX, decode_fp8_e4m3, encode_fp8_e4m3
from checkpoint_tool.quant.codecs.scales import decode_scale, store_e8m0_scale, store_float_scale


def ceil_pow2_exponent(s: torch.Tensor) -> torch.Tensor:
    """Smallest integer ``k`` with ``2**k >= s`` (s > 0), clamped to E8M0's [-127, 127]."""
    mant, exp = torch.frexp(s.to(torch.float32))  # s = mant * 2**exp, mant in [0.5, 1)
    k = exp.to(torch.int64) - (mant == 0.5).to(torch.int64)
    return k.clamp(-127, 127)


def expand_blocks(s: torch.Tensor, block: tuple[int, int], rows: int, cols: int) -> torch.Tensor:
    """Per-block ``[..., R, C]`` -> per-element ``[..., rows, cols]``."""
    b0, b1 = block
    return s.repeat_interleave(b0, dim=-2)[..., :rows, :].repeat_interleave(b1, dim=-1)[..., :cols]


class Fp8BlockCodec(Fp8BlockStorage, BaseCodec):
    def quantize(self, w: torch.Tensor) -> Parts:
        x = as_float32(w, label=self.label)
        self.check_ndim(tuple(x.shape))
        rows, cols = x.shape[-2:]
        b0, b1 = self.block
        nr, nc = -(-rows // b0), -(-cols // b1)
        padded = torch.nn.functional.pad(x, (0, nc * b1 - cols, 0, nr * b0 - rows))
        blocks = padded.reshape(*x.shape[:-2], nr, b0, nc, b1)
        amax = blocks.abs().amax(dim=(-3, -1))  # [..., nr, nc]
        if self.e8m0:
            # DeepSeek's kernels multiply by the float32 reciprocal: amax * (1/448)
            k = ceil_pow2_exponent(amax * torch.tensor(1.0 / FP8_E4M3_MAX, dtype=torch.float32))
            k = torch.where(amax > 0, k, torch.zeros_like(k))
            if is_e8m0_dtype(self.scale_dtype):
                scale = store_e8m0_scale(k, self.scale_dtype)
            else:
                scale = store_float_scale(torch.exp2(k.to(torch.float32)), self.scale_dtype)
        else:
            scale = store_float_scale(amax / FP8_E4M3_MAX, self.scale_dtype)
        s = decode_scale(scale, byte_kind="e8m0", label=self.label)
        q = encode_fp8_e4m3(x / expand_blocks(s, self.block, rows, cols))
        return {"weight": q, "scale": scale}

    def dequantize(
        self, parts: Mapping[str, torch.Tensor], *, name: str | None = None
    ) -> torch.Tensor:
        shape = self.check_parts(parts, name=name)
        s = decode_scale(parts["scale"], byte_kind="e8m0", label=self.label)
        return decode_fp8_e4m3(parts["weight"]) * expand_blocks(s, self.block, *shape[-2:])
