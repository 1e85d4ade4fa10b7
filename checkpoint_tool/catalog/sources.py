"""Resolve a source string to a local folder: a path, ``org/name`` or ``hf://org/name@rev``.

Hub repos go through huggingface_hub's cache (``HF_HUB_OFFLINE=1`` is respected: then only
what is cached is used). With ``headers_only`` we still need the shard files for their
headers, so only JSON side files and safetensors are fetched (``allow_patterns``); pickles,
images and the rest are never downloaded.

Example::

    resolve_source("hf://deepseek-ai/DeepSeek-R1@main")  # -> (Path('~/.cache/...'), None, 'main')
    resolve_source("./ckpt/model.safetensors")          # -> (Path('./ckpt'), 'model.safetensors', None)
"""

from __future__ import annotations

import re
from pathlib import Path

from checkpoint_tool.errors import InputError

_REPO_RE = re.compile(r"^(?:hf://)?([A-Za-z0-9][\w.-]*/[\w.-]+)(?:@([\w./-]+))?$")

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
    m = _REPO_RE.match(source)
    if not m or (not source.startswith("hf://") and source.startswith((".", "/"))):
        raise InputError(f"{source}: no such file or folder, and not a repo id like org/name[@rev]")
    repo_id, revision = m.group(1), m.group(2)
    return _download(repo_id, revision, headers_only=headers_only), None, revision


def _download(repo_id: str, revision: str | None, *, headers_only: bool) -> Path:
    try:
        from huggingface_hub import snapshot_download
    except ImportError as exc:  # pragma: no cover - dependency is declared
        raise InputError("huggingface_hub is not installed; pip install huggingface_hub") from exc
    try:
        folder = snapshot_download(repo_id=repo_id, revision=revision, allow_patterns=HUB_PATTERNS)
    except Exception as exc:  # huggingface_hub raises many types; one line for the user
        raise InputError(
            f"hf://{repo_id}@{revision or 'main'}: cannot resolve ({type(exc).__name__}: "
            f"{str(exc).splitlines()[0] if str(exc) else ''}); check the repo id, your token, or "
            "unset HF_HUB_OFFLINE"
        ) from exc
    return Path(folder)
