"""FP8 E4M3 with one scale per matrix: ``W = fp8(w) * weight_scale``.

The scale is 0-d for ``[out, in]`` and ``[E]`` for stacked ``[E, out, in]`` (one per matrix).
Quark writes it in the model dtype (BF16); the default here is F32. Scale = amax / 448.

Example::

    parts = Fp8TensorCodec().quantize(w)   # {'weight': f8_e4m3 [out, in], 'scale': f32 []}
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from checkpoint_tool.errors import InputError
from checkpoint_tool.quant.codecs.base import BaseCodec, Parts, as_float32
from checkpoint_tool.quant.codecs.fp8 import FP8_E4M3_MAX, decode_fp8_e4m3, encode_fp8_e4m3
from checkpoint_tool.quant.codecs.scales import decode_scale, store_float_scale
from checkpoint_tool.quant.codecs.storage import is_float_dtype
from checkpoint_tool.quant.scheme import WeightFormat


def check_float_scale_dtype(dtype: str, label: str) -> str:
    if not is_float_dtype(dtype):
        raise InputError(f"{label}: scale dtype must be F32, BF16 or F16, not {dtype}")
    return dtype


class Fp8TensorCodec(BaseCodec):
    format = WeightFormat.FP8_PER_TENSOR
    roles = ("weight", "scale")

    def __init__(self, scale_dtype: str = "F32") -> None:
        self.scale_dtype = check_float_scale_dtype(scale_dtype, self.label)

    def storage_dtypes(self) -> dict[str, str]:
        return {"weight": "F8_E4M3", "scale": self.scale_dtype}

    def role_ndim(self, role: str, ndim: int) -> int:
        return ndim - 2 if role == "scale" else ndim

    def quantize(self, w: torch.Tensor) -> Parts:
        x = as_float32(w, label=self.label)
        self._check_ndim(tuple(x.shape))
        amax = x.abs().amax(dim=(-2, -1))
        scale = store_float_scale(amax / FP8_E4M3_MAX, self.scale_dtype)
        q = encode_fp8_e4m3(x / scale.to(torch.float32)[..., None, None])
        return {"weight": q, "scale": scale}

    def dequantize(
        self, parts: Mapping[str, torch.Tensor], *, name: str | None = None
    ) -> torch.Tensor:
        self.check_parts(parts, name=name)
        s = decode_scale(parts["scale"], byte_kind=None, label=self.label)
        return decode_fp8_e4m3(parts["weight"]) * s[..., None, None]
