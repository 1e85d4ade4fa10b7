"""Unquantized weights (BF16 / F16 / F32): identity codec, any rank.

Example::

    codec = UnquantizedCodec("BF16")
    parts = codec.quantize(torch.randn(4, 8))       # {'weight': bf16 tensor [4, 8]}
    codec.storage_pads((4, 8), 0, 2)["weight"]      # Pad(dim=0, amount=2, fill='0000')
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from checkpoint_tool.errors import InputError
from checkpoint_tool.formats.unquantized import UnquantizedStorage
from checkpoint_tool.quant.codecs.base import BaseCodec, Parts
from checkpoint_tool.quant.codecs.torch_dtypes import SAFETENSORS_NAME, TORCH_DTYPE


class UnquantizedCodec(UnquantizedStorage, BaseCodec):
    def quantize(self, w: torch.Tensor) -> Parts:
        """Cast to the storage dtype (RNE, torch's float casts)."""
        return {"weight": w.to(TORCH_DTYPE[self.dtype])}

    def dequantize(
        self, parts: Mapping[str, torch.Tensor], *, name: str | None = None
    ) -> torch.Tensor:
        self.check_parts(parts, name=name)
        w = parts["weight"]
        if w.dtype not in SAFETENSORS_NAME and w.dtype != torch.float64:
            raise InputError(
                f"{f'tensor {name!r}: ' if name else ''}unquantized weight has dtype {w.dtype}; "
                "expected BF16, F16 or F32 (is a quantization config missing?)"
            )
        return w.to(torch.float32)
