"""Header-only checkpoint catalog, sources (local / hub) and byte-range reads."""

from checkpoint_tool.catalog.byte_range import read_range
from checkpoint_tool.catalog.catalog import INDEX_NAME, Catalog, TensorEntry
from checkpoint_tool.catalog.local import open_local
from checkpoint_tool.catalog.open import open_catalog

#: the tensor readers hand out torch tensors; imported on first use so that header-only
#: commands (inspect, plan) do not pay torch's import time
_READER_NAMES = ("read_rows", "read_tensor")


def __getattr__(name: str) -> object:
    if name in _READER_NAMES:
        from checkpoint_tool.catalog import reader

        return getattr(reader, name)
    raise AttributeError(f"module 'checkpoint_tool.catalog' has no attribute {name!r}")


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
