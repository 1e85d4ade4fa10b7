"""OCP MXFP8: FP8 E4M3 elements and one E8M0 scale per 32 elements of the input dim.

Storage: ``weight`` F8_E4M3 ``[..., out, in]``, ``scale`` U8 ``[..., out, ceil(in/32)]``.
Scale rule: ``"even"`` by default (Quark), ``"floor"`` = OCP ``floor(log2(amax)) - 8``;
elements above 448 after scaling saturate.

Example::

    MxFp8Codec().storage_shapes((4, 64))   # {'weight': (4, 64), 'scale': (4, 2)}
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from checkpoint_tool.formats.mxfp8 import MxFp8Storage
from checkpoint_tool.quant.codecs.base import Parts
from checkpoint_tool.quant.codecs.fp8 import decode_fp8_e4m3, encode_fp8_e4m3
from checkpoint_tool.quant.codecs.mx import MxCodec


class MxFp8Codec(MxFp8Storage, MxCodec):
    elem_mbits = 3
    elem_emax = 8

    def quantize(self, w: torch.Tensor) -> Parts:
        scaled, scale = self._scale_groups(w)
        q = encode_fp8_e4m3(scaled.reshape(*scaled.shape[:-2], -1)[..., : w.shape[-1]])
        return {"weight": q, "scale": scale}

    def dequantize(
        self, parts: Mapping[str, torch.Tensor], *, name: str | None = None
    ) -> torch.Tensor:
        shape = self.check_parts(parts, name=name)
        return decode_fp8_e4m3(parts["weight"]) * self._expand_scale(parts["scale"], shape[-1])
