"""``unquantized``: BF16 / F16 / F32 weights of any rank, stored as they are.

Example::

    format_of("unquantized").storage(weight_dtype="BF16").storage_shapes((4, 64))
    # {'weight': (4, 64)}
"""

from __future__ import annotations

from typing import Any

from checkpoint_tool.errors import InputError
from checkpoint_tool.formats.base import Format, Options
from checkpoint_tool.formats.dtypes import is_float_dtype
from checkpoint_tool.formats.names import WeightFormat
from checkpoint_tool.formats.storage import StorageFormat


class UnquantizedStorage(StorageFormat):
    """BF16 / F16 / F32 weights of any rank."""

    format = WeightFormat.UNQUANTIZED
    roles = ("weight",)
    min_ndim = 0

    def __init__(self, dtype: str = "BF16") -> None:
        if not is_float_dtype(dtype):
            raise InputError(f"unquantized weights must be BF16, F16 or F32, not {dtype}")
        self.dtype = dtype

    @property
    def label(self) -> str:
        return f"unquantized {self.dtype}"

    def storage_dtypes(self) -> dict[str, str]:
        return {"weight": self.dtype}


class Unquantized(Format):
    member = WeightFormat.UNQUANTIZED
    storage_class = UnquantizedStorage
    codec_path = "checkpoint_tool.quant.codecs.unquantized:UnquantizedCodec"
    kernel = "BF16"
    requantizable = True

    def build(self, cls: type[Any], options: Options) -> Any:
        return cls(options.weight_dtype or "BF16")
