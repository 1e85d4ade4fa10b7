"""Shared machinery of the OCP MX formats (MXFP4, MXFP8): E8M0 scale per ``group`` elements
along the input (last) dim, ``W[i,j] = elem(w[i,j]) * 2**(s[i, j//group] - 127)``.

Scales are ``[..., out, ceil(in/group)]`` stored as ``U8`` (Quark, gpt-oss) or ``F8_E8M0``.
The scale rule is chosen by ``scale_mode`` (see ``scales.mx_scale_exponent``): ``"even"``
(default, what AMD Quark writes with ``scale_calculation_mode: "even"``) or ``"floor"``
(OCP MX v1.0 reference).
"""

from __future__ import annotations

import torch

from checkpoint_tool.errors import InputError
from checkpoint_tool.quant.codecs.base import Axis, BaseCodec, as_float32, expand_last, group_last
from checkpoint_tool.quant.codecs.e8m0 import decode_e8m0
from checkpoint_tool.quant.codecs.scales import mx_scale_exponent, store_e8m0_scale
from checkpoint_tool.quant.codecs.storage import is_e8m0_dtype

MX_SCALE_MODES = ("even", "floor")


class MxCodec(BaseCodec):
    roles = ("weight", "scale")
    #: element mantissa bits and largest binade (FP4 E2M1: 1, 2; FP8 E4M3: 3, 8)
    elem_mbits: int
    elem_emax: int

    def __init__(
        self, group_size: int = 32, scale_dtype: str = "U8", scale_mode: str = "even"
    ) -> None:
        self.group_size = int(group_size)
        if self.group_size < 1 or (self.weight_pack > 1 and self.group_size % self.weight_pack):
            raise InputError(f"{self.format.value}: invalid group size {group_size}")
        if not is_e8m0_dtype(scale_dtype):
            raise InputError(
                f"{self.label}: scales are E8M0, stored as U8 or F8_E8M0, not {scale_dtype}"
            )
        if scale_mode not in MX_SCALE_MODES:
            raise InputError(f"{self.label}: unknown scale mode {scale_mode!r} (even, floor)")
        self.scale_dtype = scale_dtype
        self.scale_mode = scale_mode

    @property
    def label(self) -> str:
        return f"{self.format.value}/{getattr(self, 'group_size', '?')}"

    def axis(self, role: str, ndim: int, dim: int) -> Axis | None:
        if dim == ndim - 1:
            if role == "scale":
                return Axis(self.group_size)
            return Axis(self.weight_pack, packed=self.weight_pack > 1)
        return Axis()

    def _scale_groups(self, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Weight -> (scaled groups ``[..., out, G, group]`` ready to encode, stored scales)."""
        x = as_float32(w, label=self.label)
        self._check_ndim(tuple(x.shape))
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
