"""``mxfp8``: OCP MXFP8, E4M3 elements and an E8M0 scale per 32 inputs (DeepSeek-V4.1 engram
tables, Quark MXFP8 linears).

Example (logical ``[4, 64]``)::

    format_of("mxfp8").storage().storage_shapes((4, 64))  # {'weight': (4, 64), 'scale': (4, 2)}
"""

from __future__ import annotations

from checkpoint_tool.formats.grouped import Mx, MxStorage
from checkpoint_tool.formats.names import WeightFormat


class MxFp8Storage(MxStorage):
    """MXFP8: E4M3 elements (``F8_E4M3`` ``[..., out, in]``)."""

    format = WeightFormat.MXFP8
    weight_pack = 1

    def storage_dtypes(self) -> dict[str, str]:
        return {"weight": "F8_E4M3", "scale": self.scale_dtype}


class MxFp8(Mx):
    member = WeightFormat.MXFP8
    storage_class = MxFp8Storage
    codec_path = "checkpoint_tool.quant.codecs.mxfp8:MxFp8Codec"
    requantizable = True
