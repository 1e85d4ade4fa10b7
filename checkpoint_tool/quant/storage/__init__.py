"""What each weight format stores (no torch): expected shapes, slice alignment,
storage regions and pads. ``quant.codecs`` builds the numeric codecs on top of it.

Example::

    from checkpoint_tool.quant.storage import get_storage_format
    get_storage_format(scheme).storage_shapes((7168, 2048))  # fp8_block: {'weight': ..., 'scale': (56, 16)}
"""

from checkpoint_tool.quant.storage.base import (
    Axis,
    Shape,
    StorageFormat,
    normalize_dim,
    round_up,
)
from checkpoint_tool.quant.storage.formats import (
    STORAGE_FORMATS,
    get_storage_format,
    scheme_alignment,
    scheme_arguments,
    storage_for_format,
)

__all__ = [
    "STORAGE_FORMATS",
    "Axis",
    "Shape",
    "StorageFormat",
    "get_storage_format",
    "normalize_dim",
    "round_up",
    "scheme_alignment",
    "scheme_arguments",
    "storage_for_format",
]
