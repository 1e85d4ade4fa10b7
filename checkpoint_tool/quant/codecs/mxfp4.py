"""OCP MXFP4: FP4 E2M1 elements packed two per byte (even element in the low nibble) and one
E8M0 scale per 32 elements of the input dim.

Storage: ``weight`` U8 ``[..., out, in/2]``, ``scale`` U8 ``[..., out, ceil(in/32)]``.
Scale rule: ``"even"`` by default (Quark), see ``mx.py``.

Example::

    codec = MxFp4Codec()
    parts = codec.quantize(torch.randn(4, 64))   # weight U8 [4, 32], scale U8 [4, 2]
    codec.dequantize(parts).shape                # torch.Size([4, 64])
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from checkpoint_tool.formats.mxfp4 import MxFp4Storage
from checkpoint_tool.quant.codecs.base import Parts
from checkpoint_tool.quant.codecs.fp4 import decode_fp4, encode_fp4, pack_fp4
from checkpoint_tool.quant.codecs.mx import MxCodec


class MxFp4Codec(MxFp4Storage, MxCodec):
    elem_mbits = 1
    elem_emax = 2

    def quantize(self, w: torch.Tensor) -> Parts:
        self.storage_shapes(tuple(w.shape))  # in must be even
        scaled, scale = self._scale_groups(w)
        codes = encode_fp4(scaled).reshape(*scaled.shape[:-2], -1)[..., : w.shape[-1]]
        return {"weight": pack_fp4(codes), "scale": scale}

    def dequantize(
        self, parts: Mapping[str, torch.Tensor], *, name: str | None = None
    ) -> torch.Tensor:
        shape = self.check_parts(parts, name=name)
        return decode_fp4(parts["weight"]) * self._expand_scale(parts["scale"], shape[-1])
