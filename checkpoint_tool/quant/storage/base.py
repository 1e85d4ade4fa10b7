"""The generic storage machinery, kept importable here: it lives in ``formats.storage``.

Example::

    from checkpoint_tool.quant.storage.base import StorageFormat   # == formats.storage's
"""

from checkpoint_tool.formats.storage import (
    Axis,
    Shape,
    StorageFormat,
    normalize_dim,
    round_up,
    storage_shape_of,
    where,
)

__all__ = [
    "Axis",
    "Shape",
    "StorageFormat",
    "normalize_dim",
    "round_up",
    "storage_shape_of",
    "where",
]
