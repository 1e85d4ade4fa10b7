"""Header-only checkpoint catalog, sources (local / hub) and byte-range reads."""

from checkpoint_tool.catalog.catalog import (
    INDEX_NAME,
    Catalog,
    TensorEntry,
    open_catalog,
    open_local,
)
from checkpoint_tool.catalog.reader import read_range, read_rows, read_tensor

__all__ = [
    "INDEX_NAME",
    "Catalog",
    "TensorEntry",
    "open_catalog",
    "open_local",
    "read_range",
    "read_rows",
    "read_tensor",
]
