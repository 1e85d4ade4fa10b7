"""FP8 E4M3 with one float scale over whole trailing dims: per matrix or per output row.

``W = fp8(w) * scale`` broadcast over the dims the scale drops (``scale_drop``, see
``formats.fp8_scaled.Fp8ScaledStorage``); scale = amax over those dims / 448.

- per tensor (``Fp8TensorCodec``): the scale is 0-d for ``[out, in]`` and ``[E]`` for stacked
  ``[E, out, in]`` (one per matrix). Quark writes it in the model dtype (BF16); default F32.
- per channel (``Fp8ChannelCodec``): one scale per output row, ``[..., out]`` (``[..., out, 1]``
  accepted when reading: same regions and pads, the trailing 1 is never touched).

Example::

    Fp8TensorCodec().quantize(w)                     # {'weight': f8_e4m3 [out, in], 'scale': f32 []}
    Fp8ChannelCodec().storage_shapes((256, 512))     # {'weight': (256, 512), 'scale': (256,)}
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from checkpoint_tool.formats.fp8_scaled import (
    Fp8ChannelStorage,
    Fp8ScaledStorage,
    Fp8TensorStorage,
)
from checkpoint_tool.quant.codecs.base import BaseCodec, Parts, as_float32
from checkpoint_tool.quant.codecs.fp8 import FP8_E4M3_MAX, decode_fp8_e4m3, encode_fp8_e4m3
from checkpoint_tool.quant.codecs.scales import decode_scale, store_float_scale


class Fp8ScaledCodec(Fp8ScaledStorage, BaseCodec):
    """The numbers of both: amax and broadcast over the ``scale_drop`` trailing dims."""

    def _broadcast(self, s: torch.Tensor) -> torch.Tensor:
        """Scale ``[...]`` -> ``[..., 1 (x scale_drop)]``, to multiply the weight."""
        return s.reshape(*s.shape, *([1] * self.scale_drop))

    def quantize(self, w: torch.Tensor) -> Parts:
        x = as_float32(w, label=self.label)
        self.check_ndim(tuple(x.shape))
        amax = x.abs().amax(dim=tuple(range(-self.scale_drop, 0)))
        scale = store_float_scale(amax / FP8_E4M3_MAX, self.scale_dtype)
        q = encode_fp8_e4m3(x / self._broadcast(scale.to(torch.float32)))
        return {"weight": q, "scale": scale}

    def dequantize(
        self, parts: Mapping[str, torch.Tensor], *, name: str | None = None
    ) -> torch.Tensor:
        shape = self.check_parts(parts, name=name)
        s = decode_scale(parts["scale"], byte_kind=None, label=self.label)
        return decode_fp8_e4m3(parts["weight"]) * self._broadcast(
            s.reshape(shape[: -self.scale_drop])
        )


class Fp8TensorCodec(Fp8TensorStorage, Fp8ScaledCodec):
    """One scale per matrix."""


class Fp8ChannelCodec(Fp8ChannelStorage, Fp8ScaledCodec):
    """One scale per output row."""
