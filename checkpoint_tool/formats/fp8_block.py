"""``fp8_block``: FP8 E4M3 elements, one scale per ``[b0, b1]`` block (DeepSeek-V3 / R1 native,
Quark, DeepSeek-V4 linears with ue8m0 block scales).

Example (block ``[128, 128]``, logical ``[7168, 2048]``)::

    format_of("fp8_block").storage(block=(128, 128)).storage_shapes((7168, 2048))
    # {'weight': (7168, 2048), 'scale': (56, 16)}
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from checkpoint_tool.errors import InputError
from checkpoint_tool.formats.base import Format, Options
from checkpoint_tool.formats.dtypes import is_e8m0_dtype, is_float_dtype
from checkpoint_tool.formats.names import WeightFormat
from checkpoint_tool.formats.storage import Axis, StorageFormat

if TYPE_CHECKING:
    from checkpoint_tool.quant.scheme import Scheme

#: Fp8Config-style sources whose block-FP8 linears register ``weight_scale_inv``
INV_SOURCES = ("deepseek_fp8", "deepseek_v4")


class Fp8BlockStorage(StorageFormat):
    """FP8 E4M3, one scale per ``[b0, b1]`` block: ``[..., ceil(out/b0), ceil(in/b1)]``."""

    format = WeightFormat.FP8_BLOCK
    roles = ("weight", "scale")

    def __init__(
        self, block: tuple[int, int] = (128, 128), scale_dtype: str = "F32", e8m0: bool = False
    ) -> None:
        self.block = (int(block[0]), int(block[1]))
        if min(self.block) < 1:
            raise InputError(f"fp8_block: block size must be positive, got {list(block)}")
        if not (is_float_dtype(scale_dtype) or is_e8m0_dtype(scale_dtype)):
            raise InputError(
                f"{self.label}: scale dtype must be F32/BF16/F16 or U8/F8_E8M0 (e8m0), not {scale_dtype}"
            )
        self.scale_dtype = scale_dtype
        self.e8m0 = e8m0 or is_e8m0_dtype(scale_dtype)

    @property
    def label(self) -> str:
        suffix = " ue8m0" if getattr(self, "e8m0", False) else ""
        return f"fp8_block[{self.block[0]},{self.block[1]}]{suffix}"

    def storage_dtypes(self) -> dict[str, str]:
        return {"weight": "F8_E4M3", "scale": self.scale_dtype}

    def axis(self, role: str, ndim: int, dim: int) -> Axis | None:
        if role == "scale" and dim >= ndim - 2:
            return Axis(self.block[dim - (ndim - 2)])
        return Axis()


class Fp8Block(Format):
    member = WeightFormat.FP8_BLOCK
    storage_class = Fp8BlockStorage
    codec_path = "checkpoint_tool.quant.codecs.fp8_block:Fp8BlockCodec"
    kernel = "FP8"
    w8a8 = True
    requantizable = True

    def build(self, cls: type[Any], options: Options) -> Any:
        b = tuple(options.block) if options.block else (128, 128)
        if len(b) != 2:
            raise InputError(f"fp8_block: block size must be [rows, cols], got {list(b)}")
        return cls((int(b[0]), int(b[1])), options.scale_dtype or "F32", e8m0=options.scale_is_e8m0)

    def scale_block(self, scheme: Scheme) -> tuple[int | None, int | None]:
        if not scheme.block:
            raise InputError("fp8_block scheme without a block size")
        return (int(scheme.block[0]), int(scheme.block[1]))

    def short(self, scheme: Scheme) -> str:
        if scheme.block:
            return f"fp8_block[{scheme.block[0]},{scheme.block[1]}]"
        return self.name

    def scale_param(self, scheme: Scheme) -> str | None:
        """``weight_scale_inv`` under Fp8Config naming (DeepSeek-V3 native ``quant_method:
        fp8``, DeepSeek-V4 block-128 linears), else ``weight_scale``. DeepSeek-V4.1 MXFP8
        linears ([32, 32] blocks) go through ModelOptLinearMethod and register
        ``weight_scale`` (vllm/models/deepseek_v41/amd/model.py, ``_linear_scale_param_name``).
        """
        if scheme.source in INV_SOURCES and tuple(scheme.block or ()) != (32, 32):
            return "weight_scale_inv"
        return "weight_scale"
