"""FP8 E4M3 with one scale per output row: ``W = fp8(w) * weight_scale[:, None]``.

Scale shape ``[..., out]``; ``[..., out, 1]`` is accepted when reading (its storage regions and
pads are the same, the trailing 1 is never touched). Scale = row amax / 448.

Example::

    Fp8ChannelCodec().storage_shapes((256, 512))   # {'weight': (256, 512), 'scale': (256,)}
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from checkpoint_tool.quant.codecs.base import BaseCodec, Parts, as_float32
from checkpoint_tool.quant.codecs.fp8 import FP8_E4M3_MAX, decode_fp8_e4m3, encode_fp8_e4m3
from checkpoint_tool.quant.codecs.scales import decode_scale, store_float_scale
from checkpoint_tool.quant.storage.formats import Fp8ChannelStorage


class Fp8ChannelCodec(Fp8ChannelStorage, BaseCodec):
    def quantize(self, w: torch.Tensor) -> Parts:
        x = as_float32(w, label=self.label)
        self.check_ndim(tuple(x.shape))
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
