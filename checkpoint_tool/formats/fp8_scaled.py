"""``fp8_per_tensor`` and ``fp8_per_channel``: FP8 E4M3 elements with float scales over whole
trailing dims (one per matrix, or one per output row).

Example (``[E, out, in]`` = ``[8, 256, 128]``)::

    format_of("fp8_per_tensor").storage().storage_shapes((8, 256, 128))
    # {'weight': (8, 256, 128), 'scale': (8,)}       ([8, 1] accepted when reading)
    format_of("fp8_per_channel").storage(scale_dtype="BF16").storage_shapes((256, 128))
    # {'weight': (256, 128), 'scale': (256,)}        ([256, 1] accepted)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from checkpoint_tool.errors import InputError
from checkpoint_tool.formats.base import Format, Options
from checkpoint_tool.formats.dtypes import is_float_dtype
from checkpoint_tool.formats.names import WeightFormat
from checkpoint_tool.formats.storage import Shape, StorageFormat

if TYPE_CHECKING:
    from checkpoint_tool.quant.scheme import Scheme


def check_float_scale_dtype(dtype: str, label: str) -> str:
    if not is_float_dtype(dtype):
        raise InputError(f"{label}: scale dtype must be F32, BF16 or F16, not {dtype}")
    return dtype


class Fp8ScaledStorage(StorageFormat):
    """FP8 E4M3 elements with float scales over whole trailing dims (``scale_drop`` of them)."""

    roles = ("weight", "scale")
    #: trailing logical dims the scale does not have (per tensor: out and in; per channel: in)
    scale_drop: int

    def __init__(self, scale_dtype: str = "F32") -> None:
        self.scale_dtype = check_float_scale_dtype(scale_dtype, self.label)

    def storage_dtypes(self) -> dict[str, str]:
        return {"weight": "F8_E4M3", "scale": self.scale_dtype}

    def role_ndim(self, role: str, ndim: int) -> int:
        return ndim - self.scale_drop if role == "scale" else ndim

    def accepted_shapes(self, role: str, want: Shape) -> list[Shape]:
        return [want, (*want, 1)] if role == "scale" else [want]


class Fp8TensorStorage(Fp8ScaledStorage):
    """One scale per matrix: 0-d for ``[out, in]`` (``[1]`` accepted), ``[E]`` for
    ``[E, out, in]`` (``[E, 1]`` accepted)."""

    format = WeightFormat.FP8_PER_TENSOR
    scale_drop = 2


class Fp8ChannelStorage(Fp8ScaledStorage):
    """One scale per output row: ``[..., out]`` (``[..., out, 1]`` accepted)."""

    format = WeightFormat.FP8_PER_CHANNEL
    scale_drop = 1


class Fp8Scaled(Format):
    """What the two share: the FP8 kernel, float scales, no chunkable scales."""

    kernel = "FP8"
    requantizable = True
    #: a 0-d scale does not cut; a per-channel down scale is per output (hidden) row
    splits_scales = False

    def build(self, cls: type[Any], options: Options) -> Any:
        return cls(options.scale_dtype or "F32")


class Fp8PerTensor(Fp8Scaled):
    member = WeightFormat.FP8_PER_TENSOR
    storage_class = Fp8TensorStorage
    codec_path = "checkpoint_tool.quant.codecs.fp8_scaled:Fp8TensorCodec"


class Fp8PerChannel(Fp8Scaled):
    member = WeightFormat.FP8_PER_CHANNEL
    storage_class = Fp8ChannelStorage
    codec_path = "checkpoint_tool.quant.codecs.fp8_scaled:Fp8ChannelCodec"

    def scale_block(self, scheme: Scheme) -> tuple[int | None, int | None]:
        return (1, None)
