"""FP8 E4M3 with one scale per matrix: ``W = fp8(w) * weight_scale``.

The scale is 0-d for ``[out, in]`` and ``[E]`` for stacked ``[E, out, in]`` (one per matrix).
Quark writes it in the model dtype (BF16); the default here is F32. Scale = amax / 448.

Example::

    parts = Fp8TensorCodec().quantize(w)   # {'weight': f8_e4m3 [out, in], 'scale': f32 []}
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from checkpoint_tool.quant.codecs.base import BaseCodec, Parts, as_float32
from checkpoint_tool.quant.codecs.fp8 import FP8_E4M3_MAX, decode_fp8_e4m3, encode_fp8_e4m3
from checkpoint_tool.quant.codecs.scales import decode_scale, store_float_scale
from checkpoint_tool.quant.storage.formats import Fp8TensorStorage


class Fp8TensorCodec(Fp8TensorStorage, BaseCodec):
    def quantize(self, w: torch.Tensor) -> Parts:
        x = as_float32(w, label=self.label)
        self.check_ndim(tuple(x.shape))
        amax = x.abs().amax(dim=(-2, -1))
        scale = store_float_scale(amax / FP8_E4M3_MAX, self.scale_dtype)
        q = encode_fp8_e4m3(x / scale.to(torch.float32)[..., None, None])
        return {"weight": q, "scale": scale}

    def dequantize(
        self, parts: Mapping[str, torch.Tensor], *, name: str | None = None
    ) -> torch.Tensor:
        shape = self.check_parts(parts, name=name)
        s = decode_scale(parts["scale"], byte_kind=None, label=self.label).reshape(shape[:-2])
        return decode_fp8_e4m3(parts["weight"]) * s[..., None, None]
