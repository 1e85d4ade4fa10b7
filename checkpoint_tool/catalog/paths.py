"""Names a checkpoint gives us: lexical path safety, and looking a listed name up.

Checked on the text, not by resolving symlinks: Hugging Face caches link every shard to a blob
outside the snapshot folder (``../../blobs/<sha>``), which is fine; an index entry that
*names* a path outside the folder (``../x.safetensors``, ``/etc/x``) is not.

Example::

    safe_relative("model-00001-of-00002.safetensors")  # 'model-00001-of-00002.safetensors'
    safe_relative("sub/./a.safetensors")               # 'sub/a.safetensors'
    safe_relative("../outside.safetensors")            # None
    listed(cat.tensors, "x.weight", lambda: "no tensor named 'x.weight'")  # InputError
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Callable, Mapping
from typing import TypeVar

from checkpoint_tool.errors import InputError

K = TypeVar("K")
V = TypeVar("V")


class Where(str):
    """A remote name that joins like a ``Path`` for messages: ``Where("hf://o/m") / "x"``."""

    def __truediv__(self, other: object) -> Where:
        return Where(f"{self}/{other}")


def listed(names: Mapping[K, V], name: K, missing: Callable[[], str]) -> V:
    """``names[name]``, or an ``InputError`` whose message ``missing()`` says what is absent
    and what to do (built only then)."""
    try:
        return names[name]
    except KeyError:
        raise InputError(missing()) from None


def safe_relative(rel: object) -> str | None:
    """``rel`` normalized if it is a relative path that stays inside the folder, else None."""
    if not isinstance(rel, str) or not rel or "\\" in rel or "\x00" in rel:
        return None
    if os.path.isabs(rel) or rel.startswith("/") or (len(rel) > 1 and rel[1] == ":"):
        return None
    norm = posixpath.normpath(rel)
    if norm == ".." or norm.startswith("../") or norm == ".":
        return None
    return norm
