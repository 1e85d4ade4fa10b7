"""SRC and DST kept apart, and every source file read from inside SRC.

Both are compared as the file system sees them, not as typed: symlinks and ``.``/``..`` are
resolved (``realpath``) and every existing folder on the way up is compared by device and
inode, so a bind mount or a second name of the same folder is caught too. Refused, with one
line and before DST is touched: DST is SRC, DST lies inside SRC, or SRC lies inside DST (an
``--overwrite`` of DST would delete the source). For a remote source SRC is the local folder
of its small files (config, index, side files), the only place DST could collide with it.

A side file is read through its resolved path, which must lie inside SRC; a symlink that leads
out of SRC is refused and never followed. The one exception is the Hugging Face cache layout,
where ``<repo>/snapshots/<rev>/<file>`` links to ``<repo>/blobs/<sha>``.

Example::

    check_apart(Path("/models/R1"), Path("/models/R1/./out"))
    # OutputError: /models/R1/./out: inside the source folder /models/R1; ...
    inside_source(Path("/models/R1"), "tokenizer.json")   # Path('/models/R1/tokenizer.json')
"""

from __future__ import annotations

import os
from pathlib import Path

from checkpoint_tool.errors import InputError, OutputError


def _ids_above(path: Path) -> list[tuple[int, int]]:
    """(device, inode) of each existing folder above ``path`` (resolved), nearest first."""
    ids = (_stat_id(p) for p in path.parents)
    return [i for i in ids if i is not None]


def _stat_id(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def check_apart(src: Path, dst: Path) -> None:
    """``OutputError`` when DST is SRC, inside SRC, or holds SRC (see the module docstring)."""
    real_src, real_dst = Path(os.path.realpath(src)), Path(os.path.realpath(dst))
    src_id, dst_id = _stat_id(real_src), _stat_id(real_dst)
    fix = "choose a DST outside the source: ckpt never writes into or over its source"
    if real_src == real_dst or (src_id is not None and src_id == dst_id):
        raise OutputError(f"{dst}: is the source folder {src} (same folder); {fix}")
    if real_src in real_dst.parents or (src_id is not None and src_id in _ids_above(real_dst)):
        raise OutputError(f"{dst}: inside the source folder {src}; {fix}")
    if real_dst in real_src.parents or (dst_id is not None and dst_id in _ids_above(real_src)):
        raise OutputError(f"{dst}: holds the source folder {src}; {fix}")


def _allowed_roots(root: Path) -> list[Path]:
    real = Path(os.path.realpath(root))
    roots = [real]
    if real.parent.name == "snapshots":  # a Hugging Face cache: snapshots/<rev> -> ../../blobs
        roots.append(real.parent.parent / "blobs")
    return roots


def inside_source(root: Path, rel: str) -> Path:
    """The resolved path of source file ``rel``; ``InputError`` if it leads out of ``root``."""
    path = root / rel
    real = Path(os.path.realpath(path))
    if not any(real == r or r in real.parents for r in _allowed_roots(root)):
        raise InputError(
            f"{path}: links to {real}, outside the source folder; ckpt never follows links out "
            "of SRC: replace the link with the file itself or remove it"
        )
    return real
