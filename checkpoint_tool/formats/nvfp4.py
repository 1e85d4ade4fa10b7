"""``nvfp4``: E2M1 values packed two per byte, an E4M3 scale per 16 inputs and an F32 global
multiplier per matrix (``weight_scale_2``; Quark and ModelOpt), or its reciprocal
``weight_global_scale`` ``[1]`` (compressed-tensors: ``global_divides``).

Example (logical ``[4, 64]``)::

    format_of("nvfp4").storage().storage_shapes((4, 64))
    # {'weight': (4, 32), 'scale': (4, 4), 'global_scale': ()}
"""

from __future__ import annotations

from typing import Any

from checkpoint_tool.formats.base import Options
from checkpoint_tool.formats.grouped import Grouped, GroupedStorage
from checkpoint_tool.formats.names import WeightFormat
from checkpoint_tool.formats.storage import Shape


class NvFp4Storage(GroupedStorage):
    """NVFP4: E2M1 packed, an E4M3 scale per 16 inputs, an F32 global scale per matrix."""

    format = WeightFormat.NVFP4
    roles = ("weight", "scale", "global_scale")
    weight_pack = 2
    scale_dtype_error = "nvfp4: scales are E4M3 (F8_E4M3), not {dtype}"

    def __init__(
        self, group_size: int = 16, scale_dtype: str = "F8_E4M3", global_divides: bool = False
    ) -> None:
        super().__init__(group_size, scale_dtype)
        #: compressed-tensors' ``weight_global_scale`` divides (ModelOpt's multiplies)
        self.global_divides = bool(global_divides)

    def scale_dtype_ok(self, dtype: str) -> bool:
        return dtype in ("F8_E4M3", "U8")  # E4M3 bytes, or the same bytes as U8

    def storage_dtypes(self) -> dict[str, str]:
        return {"weight": "U8", "scale": self.scale_dtype, "global_scale": "F32"}

    def role_ndim(self, role: str, ndim: int) -> int:
        return ndim - 2 if role == "global_scale" else ndim

    def accepted_shapes(self, role: str, want: Shape) -> list[Shape]:
        """A global scale is 0-d (ModelOpt) or ``[1]`` (compressed-tensors) per matrix."""
        return [want, (*want, 1)] if role == "global_scale" else [want]


class NvFp4(Grouped):
    member = WeightFormat.NVFP4
    storage_class = NvFp4Storage
    codec_path = "checkpoint_tool.quant.codecs.nvfp4:NvFp4Codec"
    packed_dtypes = ("U8", "I8")
    byte_scales = {"scale": "e4m3"}
    kernel = "NVFP4"
    default_group = 16
    #: the 0-d ``weight_scale_2`` does not cut into chunks
    splits_scales = False
    synth_parts = (("global_scale", "weight_scale_2", "F32", "scalar"),)
    shares_global_scale = True

    def build(self, cls: type[Any], options: Options) -> Any:
        return cls(
            options.group_size or 16,
            options.scale_dtype or "F8_E4M3",
            options.global_scale_divides,
        )
