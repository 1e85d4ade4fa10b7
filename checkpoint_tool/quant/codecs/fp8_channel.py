"""FP8 E4M3 with one scale per output row: ``W = fp8(w) * weight_scale[:, None]``.

Scale shape ``[..., out]``; ``[..., out, 1]`` is accepted when reading (its storage regions and
pads are the same, the trailing 1 is never touched). Scale = row amax / 448.

Example::

    Fp8ChannelCodec().storage_shapes((256, 512))   # {'weight': (256, 512), 'scale': (256,)}
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from checkpoint_tool.quant.codecs.base import BaseCodec, Parts, Shape, as_float32
from checkpoint_tool.quant.codecs.fp8 import FP8_E4M3_MAX, decode_fp8_e4m3, encode_fp8_e4m3
from checkpoint_tool.quant.codecs.fp8_tensor import check_float_scale_dtype
from checkpoint_tool.quant.codecs.scales import decode_scale, store_float_scale
from checkpoint_tool.quant.scheme import WeightFormat


class Fp8ChannelCodec(BaseCodec):
    format = WeightFormat.FP8_PER_CHANNEL
    roles = ("weight", "scale")

    def __init__(self, scale_dtype: str = "F32") -> None:
        self.scale_dtype = check_float_scale_dtype(scale_dtype, self.label)

    def storage_dtypes(self) -> dict[str, str]:
        return {"weight": "F8_E4M3", "scale": self.scale_dtype}

    def role_ndim(self, role: str, ndim: int) -> int:
        return ndim - 1 if role == "scale" else ndim

    def _accepts_shape(self, role: str, got: Shape, want: Shape) -> bool:
        return role == "scale" and got == (*want, 1)

    def quantize(self, w: torch.Tensor) -> Parts:
        x = as_float32(w, label=self.label)
        self._check_ndim(tuple(x.shape))
        amax = x.abs().amax(dim=-1)
        scale = store_float_scale(amax / FP8_E4M3_MAX, self.scale_dtype)
        q = encode_fp8_e4m3(x / scale.to(torch.float32)[..., None])
        return {"weight": q, "scale": scale}

    def dequantize(
        self, parts: Mapping[str, torch.Tensor], *, name: str | None = None
    ) -> torch.Tensor:
        shape = self.check_parts(parts, name=name)
        s = decode_scale(parts["scale"], byte_kind=None, label=self.label).reshape(shape[:-1])
        return decode_fp8_e4m3(parts["weight"]) * s[..., None]
