"""Tell a remote source from a local one, and resolve a local one to a folder: a checkpoint
folder or one ``.safetensors`` file.

Remote sources (``hf://org/name@rev``, ``org/name``, ``s3://bucket/prefix``; ``parse_remote``)
go to ``catalog.remote.open``, which reads them header-only with ranged requests
(docs/remote.md). What is left is a path, or an error that says what ckpt accepts.

Example::

    parse_remote("hf://amd/tiny@main")           # -> ('hf', 'amd/tiny', 'main')
    resolve_source("./ckpt/model.safetensors")   # -> (Path('./ckpt'), 'model.safetensors', None)
    resolve_source("./ckpt")                     # -> (Path('./ckpt'), None, None)
"""

from __future__ import annotations

import re
from pathlib import Path

from checkpoint_tool.errors import InputError

HF_RE = re.compile(r"^(?:hf://)?([A-Za-z0-9][\w.-]*/[\w.-]+)(?:@([\w./-]+))?$")
S3_RE = re.compile(r"^s3://([a-z0-9][a-z0-9.-]{1,61}[a-z0-9])(?:/(.*))?$")
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


def parse_remote(source: str) -> tuple[str, str, str | None] | None:
    """``("hf", repo, rev)`` / ``("s3", bucket, prefix)``, or None for a local path."""
    if source.startswith("s3://"):
        m = S3_RE.match(source)
        if not m:
            raise InputError(f"{source}: not an S3 location like s3://bucket/prefix")
        return "s3", m.group(1), (m.group(2) or "").strip("/")
    if Path(source).expanduser().exists() or source.startswith((".", "/", "~")):
        return None
    m = HF_RE.match(source)
    return ("hf", m.group(1), m.group(2)) if m else None
