"""Shared machinery of the OCP MX formats (MXFP4, MXFP8): E8M0 scale per ``group`` elements
along the input (last) dim, ``W[i,j] = elem(w[i,j]) * 2**(s[i, j//group] - 127)``.

Scales are ``[..., out, ceil(in/group)]`` stored as ``U8`` (Quark, gpt-oss) or ``F8_E8M0``.
The scale rule is chosen by ``scale_mode`` (see ``scales.mx_scale_exponent``): ``"even"``
(default, what AMD Quark writes with ``scale_calculation_mode: "even"``) or ``"floor"``
(OCP MX v1.0 reference).
"""

from __future__ import annotations

import torch

from checkpoint_tool.formats.grouped import MX_SCALE_MODES, MxStorage
from checkpoint_tool.quant.codecs.base import BaseCodec, as_float32, expand_last, group_last
from checkpoint_tool.quant.codecs.e8m0 import decode_e8m0
from checkpoint_tool.quant.codecs.scales import mx_scale_exponent, store_e8m0_scale

__all__ = ["MX_SCALE_MODES", "MxCodec"]


class MxCodec(MxStorage, BaseCodec):
    """MX numerics shared by MXFP4 and MXFP8 (storage: ``formats.grouped.MxStorage``)."""

    #: element mantissa bits and largest binade (FP4 E2M1: 1, 2; FP8 E4M3: 3, 8)
    elem_mbits: int
    elem_emax: int

    def _scale_groups(self, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Weight -> (scaled groups ``[..., out, G, group]`` ready to encode, stored scales)."""
        x = as_float32(w, label=self.label)
        self.check_ndim(tuple(x.shape))
        groups = group_last(x, self.group_size)
        amax = groups.abs().amax(dim=-1)
        k = mx_scale_exponent(
            amax, elem_mbits=self.elem_mbits, elem_emax=self.elem_emax, mode=self.scale_mode
        )
        scale = store_e8m0_scale(k, self.scale_dtype)
        inv = decode_e8m0((127 - k).to(torch.uint8))  # 2**-k exactly, k in [-127, 127]
        return groups * inv[..., None], scale

    def _expand_scale(self, scale: torch.Tensor, cols: int) -> torch.Tensor:
        return expand_last(decode_e8m0(scale), self.group_size, cols)
