"""The small JSON files of a checkpoint folder: config.json and the shard index.

``files_from_index`` takes the shards an index names (each inside the folder and present);
``IndexListing.take`` then moves the ``weight_map`` out of the parsed index into two compact
columns (one string of all names, one file number per name), and ``check_index_matches``
holds that listing against the headers once they are read. All serve local folders and remote
stores (``root`` is then a ``Where`` label, ``exists`` the listing).

A full-size R1 index maps 92k names: as a parsed dict it holds ~25 MB of small objects, which
would live beside the headers' own copies of the same names until the check. As a listing it
is one ~5 MB string while the headers are parsed, split again only for the check.

Example::

    index = read_json_if_present(root / INDEX_NAME)
    # {"metadata": {...}, "weight_map": {"lm_head.weight": "model-00002-of-00002.safetensors", ...}}
    files_from_index(root, index)   # ['model-00001-of-00002.safetensors', 'model-00002-...']
    listing = IndexListing.take(index)   # index is now {"metadata": {...}}
    check_index_matches(root, listing, cat)
"""

from __future__ import annotations

from array import array
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from checkpoint_tool.catalog.json_input import (
    MAX_CONFIG_BYTES,
    MAX_INDEX_BYTES,
    read_json_file,
    short_repr,
)
from checkpoint_tool.catalog.paths import Where, safe_relative
from checkpoint_tool.errors import InputError

if TYPE_CHECKING:
    from checkpoint_tool.catalog.catalog import Catalog

INDEX_NAME = "model.safetensors.index.json"


def read_json_if_present(path: Path) -> dict | None:
    """The JSON object in ``path``; None when there is no such file. Read with the limits of
    ``json_input`` (the index's size limit for the index, the config's for the others)."""
    if not path.exists():
        return None
    limit = MAX_INDEX_BYTES if path.name == INDEX_NAME else MAX_CONFIG_BYTES
    doc = read_json_file(path, limit)
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
                f"{root / INDEX_NAME}: tensor {short_repr(name)}: file entry {short_repr(rel)} is "
                "not a file name; fix the index"
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


#: joins the names of a listing; a name holding it keeps the listing as a list
_SEP = "\n"


@dataclass(frozen=True)
class IndexListing:
    """An index's ``weight_map`` as columns: ``names`` joined by ``_SEP`` (or a list, when a
    name holds that character), in the index's order, and ``file_ids`` into ``files``.

    ``{"a.weight": "s1", "b.weight": "s2"}`` -> ``names="a.weight\\nb.weight"``,
    ``file_ids=array('i', [0, 1])``, ``files=["s1", "s2"]``.
    """

    names: str | list[str]
    file_ids: array
    files: list[str]

    @classmethod
    def take(cls, index: dict) -> IndexListing:
        """The listing of ``index["weight_map"]`` (checked by ``files_from_index``), which is
        removed from ``index``: the names and files go on in the listing alone."""
        weight_map: dict[str, str] = index.pop("weight_map")
        numbers: dict[str, int] = {}
        file_ids = array("i", (numbers.setdefault(f, len(numbers)) for f in weight_map.values()))
        joined = _SEP.join(weight_map)
        names: str | list[str] = joined
        if joined.count(_SEP) != len(weight_map) - 1:
            names = list(weight_map)
        return cls(names, file_ids, list(numbers))

    def name_list(self) -> list[str]:
        """The names, in the index's order (made now from the joined string)."""
        return self.names.split(_SEP) if isinstance(self.names, str) else self.names

    def __len__(self) -> int:
        return len(self.file_ids)


def check_index_matches(root: Path | Where, listing: IndexListing, cat: Catalog) -> None:
    """The index and the shard headers name the same tensors in the same files."""
    names = listing.name_list()
    files = listing.files
    bad = cat.table.match_index(names, listing.file_ids, files)
    if bad is not None:
        k, stored = bad
        name, rel = names[k], files[listing.file_ids[k]]
        if stored is None:
            raise InputError(
                f"{root / rel}: tensor {name!r} is listed in {INDEX_NAME} but not in the shard; "
                "the index and shards disagree, re-download them"
            )
        raise InputError(
            f"{root / INDEX_NAME}: tensor {name!r} is indexed in {rel} but stored in "
            f"{stored}; the index is stale"
        )
    if len(cat.tensors) == len(names):  # every indexed name is in the catalog: the same set
        return
    indexed = set(names)
    extra = sorted(n for n in cat.tensors if n not in indexed)
    if extra:
        e = cat.tensors[extra[0]]
        raise InputError(
            f"{root / e.file}: tensor {extra[0]!r} (and {len(extra) - 1} more) is not in "
            f"{INDEX_NAME}; the index is stale, regenerate it"
        )
