"""Header-only checkpoint catalog, sources (local / hub) and byte-range reads.

The names below are imported on first use: a command that opens a folder starts its forked
header reader before numpy and the table are imported (``catalog.local``), and the tensor
readers hand out torch tensors, which header-only commands (inspect, plan) never import.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from checkpoint_tool.catalog.byte_range import read_range
    from checkpoint_tool.catalog.catalog import Catalog
    from checkpoint_tool.catalog.index import INDEX_NAME
    from checkpoint_tool.catalog.local import open_local
    from checkpoint_tool.catalog.open import open_catalog
    from checkpoint_tool.catalog.reader import read_rows, read_tensor
    from checkpoint_tool.catalog.safetensors_format import TensorEntry

#: exported name -> the module of this package that defines it
_HOME = {
    "INDEX_NAME": "index",
    "Catalog": "catalog",
    "TensorEntry": "safetensors_format",
    "open_catalog": "open",
    "open_local": "local",
    "read_range": "byte_range",
    "read_rows": "reader",
    "read_tensor": "reader",
}


def __getattr__(name: str) -> object:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module 'checkpoint_tool.catalog' has no attribute {name!r}")
    return getattr(import_module(f"checkpoint_tool.catalog.{home}"), name)


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
