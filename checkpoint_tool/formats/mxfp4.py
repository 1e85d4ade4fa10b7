"""``mxfp4``: OCP MXFP4, E2M1 values packed two per byte (even element in the low nibble), an
E8M0 scale per 32 inputs (Quark, DeepSeek-V4 FP4 experts; vLLM's Mxfp4MoEMethod).

Example (logical ``[4, 64]``)::

    format_of("mxfp4").storage().storage_shapes((4, 64))  # {'weight': (4, 32), 'scale': (4, 2)}
    format_of("mxfp4").logical_shape("U8", (4, 32))       # (4, 64)
"""

from __future__ import annotations

from checkpoint_tool.formats.grouped import Mx, MxStorage
from checkpoint_tool.formats.names import WeightFormat


class MxFp4Storage(MxStorage):
    """MXFP4: E2M1 packed two per byte (``U8`` ``[..., out, in/2]``)."""

    format = WeightFormat.MXFP4
    weight_pack = 2

    def storage_dtypes(self) -> dict[str, str]:
        return {"weight": "U8", "scale": self.scale_dtype}


class MxFp4(Mx):
    member = WeightFormat.MXFP4
    storage_class = MxFp4Storage
    codec_path = "checkpoint_tool.quant.codecs.mxfp4:MxFp4Codec"
    packed_dtypes = ("U8", "I8")
    kernel = "MXFP4"

    def sharded_note(self, per_rank_rows: int) -> str | None:
        """vLLM's MXFP4 MoE backends round each rank's intermediate size up (per backend)."""
        return (
            "MXFP4 routed experts: vLLM's MXFP4 MoE backends round each rank's intermediate size "
            f"up (per backend); the per-rank files hold {per_rank_rows} "
            "rows per expert: pass --pad-to <the backend's round-up> if your backend rounds "
            "further, or the sharded_state loader misplaces w13's up rows"
        )
