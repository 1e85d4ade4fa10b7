"""The spelling of every storage format: the ``WeightFormat`` member a ``Scheme`` carries and
plans, reports and configs write (``"mxfp4"``). Each member has one ``Format`` module.

Example::

    WeightFormat("fp8_block") is WeightFormat.FP8_BLOCK   # True
    format_of(WeightFormat.MXFP4).name                    # 'mxfp4'
"""

from __future__ import annotations

from enum import Enum


class WeightFormat(str, Enum):
    """The storage format of a weight."""

    UNQUANTIZED = "unquantized"  # BF16 / F16 / F32 as stored
    FP8_PER_TENSOR = "fp8_per_tensor"
    FP8_PER_CHANNEL = "fp8_per_channel"
    FP8_BLOCK = "fp8_block"
    MXFP4 = "mxfp4"
    NVFP4 = "nvfp4"
    MXFP8 = "mxfp8"
    INT4 = "int4"  # compressed-tensors pack-quantized: 8 int4 values per I32 along the input
    UNSUPPORTED = "unsupported"  # recognised config, no codec (fp6, int8, ...)
