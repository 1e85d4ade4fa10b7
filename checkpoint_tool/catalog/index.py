"""The small JSON files of a checkpoint folder: config.json and the shard index.

``files_from_index`` takes the shards an index names (each inside the folder and present);
``check_index_matches`` holds the index against the headers once they are read. Both serve
local folders and remote stores (``root`` is then a ``Where`` label, ``exists`` the listing).

Example::

    index = read_json_if_present(root / INDEX_NAME)
    # {"metadata": {...}, "weight_map": {"lm_head.weight": "model-00002-of-00002.safetensors", ...}}
    files_from_index(root, index)   # ['model-00001-of-00002.safetensors', 'model-00002-...']
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from checkpoint_tool.catalog.paths import Where, safe_relative
from checkpoint_tool.errors import InputError

if TYPE_CHECKING:
    from checkpoint_tool.catalog.catalog import Catalog

INDEX_NAME = "model.safetensors.index.json"


def read_json_if_present(path: Path) -> dict | None:
    """The JSON object in ``path``; None when there is no such file."""
    if not path.exists():
        return None
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"{path}: not valid JSON ({exc}); fix or restore the file") from exc
    if not isinstance(doc, dict):
        raise InputError(f"{path}: expected a JSON object")
    return doc


def files_from_index(
    root: Path | Where, index: dict, exists: Callable[[str], bool] | None = None
) -> list[str]:
    """The shards the index names, each checked to be inside the folder and present
    (``exists(rel)``; default: a file under ``root``)."""
    weight_map = index.get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map:
        raise InputError(f"{root / INDEX_NAME}: no 'weight_map' object; the index is corrupt")
    files: set[str] = set()
    for name, rel in weight_map.items():
        if not isinstance(rel, str) or not rel:
            raise InputError(
                f"{root / INDEX_NAME}: tensor {name!r}: file entry {rel!r} is not a name"
            )
        if rel in files:  # path checks once per shard, not per tensor (~90k for R1)
            continue
        if safe_relative(rel) is None:
            raise InputError(
                f"{root / INDEX_NAME}: tensor {name!r} points at {rel!r}, outside the checkpoint "
                "folder; refusing a path that escapes it"
            )
        if not (exists(rel) if exists is not None else (Path(root) / rel).is_file()):
            raise InputError(
                f"{root / INDEX_NAME}: tensor {name!r} is mapped to {rel!r}, which is missing; "
                "download the missing shard or fix the index"
            )
        files.add(rel)
    return sorted(files)


def check_index_matches(root: Path | Where, index: dict, cat: Catalog) -> None:
    """The index and the shard headers name the same tensors in the same files; then the
    index's ``weight_map`` shares its strings with the catalog's table."""
    weight_map: dict[str, str] = index["weight_map"]
    bad, shared = cat.table.match_index(weight_map)
    if bad is not None:
        name, stored = bad
        rel = weight_map[name]
        if stored is None:
            raise InputError(
                f"{root / rel}: tensor {name!r} is listed in {INDEX_NAME} but not in the shard; "
                "the index and shards disagree, re-download them"
            )
        raise InputError(
            f"{root / INDEX_NAME}: tensor {name!r} is indexed in {rel} but stored in "
            f"{stored}; the index is stale"
        )
    if len(cat.tensors) == len(weight_map):  # every indexed name is in the catalog: the same set
        index["weight_map"] = shared
        return
    extra = sorted(set(cat.tensors) - set(weight_map))
    if extra:
        e = cat.tensors[extra[0]]
        raise InputError(
            f"{root / e.file}: tensor {extra[0]!r} (and {len(extra) - 1} more) is not in "
            f"{INDEX_NAME}; the index is stale, regenerate it"
        )
