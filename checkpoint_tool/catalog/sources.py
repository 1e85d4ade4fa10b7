"""Resolve a local source string to a folder: a checkpoint folder or one ``.safetensors`` file.

Remote sources (``hf://org/name@rev``, ``org/name``, ``s3://bucket/prefix``) never come here:
``catalog.remote.open`` reads them header-only with ranged requests (docs/remote.md). What is
left is a path, or an error that says what ckpt accepts.

Example::

    resolve_source("./ckpt/model.safetensors")   # -> (Path('./ckpt'), 'model.safetensors', None)
    resolve_source("./ckpt")                     # -> (Path('./ckpt'), None, None)
"""

from __future__ import annotations

from pathlib import Path

from checkpoint_tool.errors import InputError

#: what an ``HF_HUB_OFFLINE`` run takes from the hub cache (never pickles or images)
HUB_PATTERNS = ["*.json", "*.safetensors", "*.txt", "*.model", "*.jinja", "*.py", "*.tiktoken"]


def resolve_source(
    source: str, *, headers_only: bool = True
) -> tuple[Path, str | None, str | None]:
    """Return ``(root folder, single file name or None, revision or None)``."""
    path = Path(source).expanduser()
    if path.exists():
        if path.is_file():
            if path.suffix != ".safetensors":
                raise InputError(
                    f"{path}: not a .safetensors file; ckpt reads safetensors only (never pickles)"
                )
            return path.parent, path.name, None
        return path, None, None
    raise InputError(
        f"{source}: no such file or folder, and not a remote source like org/name[@rev], "
        "hf://org/name[@rev] or s3://bucket/prefix"
    )
