"""Storage of a scheme or a bare format, by name: thin entry points over ``checkpoint_tool.formats``.

Each format's storage class lives in its own module there (``formats/mxfp4.py`` ...); these
functions keep the older call spelling.

Example::

    storage_for_format("mxfp4").storage_shapes((4, 64))   # {'weight': (4, 32), 'scale': (4, 2)}
    get_storage_format(scheme)        # scheme: fp8_block [128, 128], scale F32 -> Fp8BlockStorage
"""

from __future__ import annotations

from typing import Any

from checkpoint_tool.formats import format_of
from checkpoint_tool.formats.fp8_block import Fp8BlockStorage
from checkpoint_tool.formats.fp8_scaled import (
    Fp8ChannelStorage,
    Fp8ScaledStorage,
    Fp8TensorStorage,
    check_float_scale_dtype,
)
from checkpoint_tool.formats.grouped import MX_SCALE_MODES, GroupedStorage, MxStorage
from checkpoint_tool.formats.mxfp4 import MxFp4Storage
from checkpoint_tool.formats.mxfp8 import MxFp8Storage
from checkpoint_tool.formats.nvfp4 import NvFp4Storage
from checkpoint_tool.formats.storage import StorageFormat
from checkpoint_tool.formats.unquantized import UnquantizedStorage
from checkpoint_tool.quant.scheme import Scheme, WeightFormat

__all__ = [
    "MX_SCALE_MODES",
    "Fp8BlockStorage",
    "Fp8ChannelStorage",
    "Fp8ScaledStorage",
    "Fp8TensorStorage",
    "GroupedStorage",
    "MxFp4Storage",
    "MxFp8Storage",
    "MxStorage",
    "NvFp4Storage",
    "UnquantizedStorage",
    "check_float_scale_dtype",
    "get_storage_format",
    "scheme_alignment",
    "storage_for_format",
]


def storage_for_format(fmt: WeightFormat | str, **options: Any) -> StorageFormat:
    """The storage of format ``fmt`` with defaults for anything not given (``formats.Options``:
    ``block``, ``group_size``, ``scale_dtype``, ``scale_is_e8m0``, ``weight_dtype``,
    ``scale_mode``)."""
    return format_of(fmt).storage(**options)


def get_storage_format(scheme: Scheme) -> StorageFormat:
    """What weights stored per ``scheme`` look like: dtypes, shapes, regions, pads."""
    return format_of(scheme).storage_for(scheme)


def scheme_alignment(scheme: Scheme, dim: int) -> int:
    """Logical granularity of slices of ``dim`` (-2: rows, -1: columns) of a weight stored per
    ``scheme`` (``Format.alignment``). Example: MXFP4/32 -> -1: 32, -2: 1."""
    return format_of(scheme).alignment(scheme, dim)
