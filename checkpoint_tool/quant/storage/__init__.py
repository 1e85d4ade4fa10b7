"""What each weight format stores (no torch): expected shapes, slice alignment,
storage regions and pads. The formats themselves live in ``checkpoint_tool.formats``; this
package keeps the older import spelling.

Example::

    from checkpoint_tool.quant.storage import get_storage_format
    get_storage_format(scheme).storage_shapes((7168, 2048))  # fp8_block: {'weight': ..., 'scale': (56, 16)}
"""

from checkpoint_tool.formats.storage import (
    Axis,
    Shape,
    StorageFormat,
    normalize_dim,
    round_up,
)
from checkpoint_tool.quant.storage.formats import (
    get_storage_format,
    scheme_alignment,
    storage_for_format,
)

__all__ = [
    "Axis",
    "Shape",
    "StorageFormat",
    "get_storage_format",
    "normalize_dim",
    "round_up",
    "scheme_alignment",
    "storage_for_format",
]
