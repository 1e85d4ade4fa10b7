"""NVFP4: FP4 E2M1 elements (packed, even element low), one E4M3 scale per 16 elements of the
input dim, and an F32 global multiplier ``weight_scale_2``:
``W[i,j] = e2m1(w[i,j]) * e4m3(s[i, j//16]) * weight_scale_2``.

Quantization (ModelOpt / Quark): ``global = amax / (6 * 448)``; group scale
``group_amax / 6 / global`` rounded to E4M3 (RNE); elements ``w / (scale * global)`` rounded to
E2M1 (RNE, saturating). compressed-tensors stores ``weight_global_scale = 1 / global`` as
``[1]`` per matrix (``global_divides``). Roles: ``weight`` U8 ``[..., out, in/2]``, ``scale`` F8_E4M3
``[..., out, ceil(in/16)]``, ``global_scale`` F32 (0-d for one matrix, ``[E]`` for ``[E, out, in]``).

Example::

    parts = NvFp4Codec().quantize(torch.randn(4, 32))
    # {'weight': U8 [4, 16], 'scale': f8_e4m3 [4, 2], 'global_scale': f32 []}
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from checkpoint_tool.formats.nvfp4 import NvFp4Storage
from checkpoint_tool.quant.codecs.base import BaseCodec, Parts, as_float32, expand_last, group_last
from checkpoint_tool.quant.codecs.fp4 import FP4_E2M1_MAX, decode_fp4, encode_fp4, pack_fp4
from checkpoint_tool.quant.codecs.fp8 import FP8_E4M3_MAX, decode_fp8_e4m3, encode_fp8_e4m3
from checkpoint_tool.quant.codecs.scales import decode_scale


class NvFp4Codec(NvFp4Storage, BaseCodec):
    def quantize(self, w: torch.Tensor) -> Parts:
        x = as_float32(w, label=self.label)
        self.storage_shapes(tuple(x.shape))
        amax = x.abs().amax(dim=(-2, -1))
        g = amax / (FP4_E2M1_MAX * FP8_E4M3_MAX)
        g = torch.where(g > 0, g, torch.ones_like(g))
        groups = group_last(x, self.group_size)  # [..., out, G, 16]
        s = groups.abs().amax(dim=-1) / FP4_E2M1_MAX / g[..., None, None]
        scale = encode_fp8_e4m3(s)
        eff = decode_fp8_e4m3(scale) * g[..., None, None]
        safe = torch.where(eff > 0, eff, torch.ones_like(eff))
        scaled = torch.where(
            (eff > 0)[..., None], groups / safe[..., None], torch.zeros_like(groups)
        )
        codes = encode_fp4(scaled).reshape(*x.shape[:-1], -1)[..., : x.shape[-1]]
        if self.scale_dtype == "U8":
            scale = scale.view(torch.uint8)
        if self.global_divides:  # compressed-tensors: weight_global_scale = 1 / g, [..., 1]
            return {"weight": pack_fp4(codes), "scale": scale, "global_scale": (1 / g)[..., None]}
        return {"weight": pack_fp4(codes), "scale": scale, "global_scale": g}

    def dequantize(
        self, parts: Mapping[str, torch.Tensor], *, name: str | None = None
    ) -> torch.Tensor:
        shape = self.check_parts(parts, name=name)
        s = decode_scale(parts["scale"], byte_kind="e4m3", label=self.label)
        g = decode_scale(parts["global_scale"], byte_kind=None, label=self.label)
        if g.ndim == len(shape) - 1:  # [..., 1] (compressed-tensors) -> [...]
            g = g.squeeze(-1)
        if self.global_divides:
            g = 1 / g
        return (
            decode_fp4(parts["weight"])
            * expand_last(s, self.group_size, shape[-1])
            * g[..., None, None]
        )
