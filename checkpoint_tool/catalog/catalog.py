"""A header-only view of a checkpoint: tensor name -> (file, dtype, shape, byte range).

Opening a catalog reads ``config.json`` (and ``hf_quant_config.json`` when present), the index
and every shard's header; it never reads tensor data. Layouts understood:

- a folder with ``model.safetensors.index.json`` (the index decides which shards count);
- a folder of ``*.safetensors`` shards without an index;
- a single ``.safetensors`` file (its folder's config.json is used when present).

Example::

    cat = open_catalog("/models/DeepSeek-R1")
    e = cat.tensors["model.layers.3.mlp.experts.0.down_proj.weight"]
    # TensorEntry(name=..., file='model-00002-of-00163.safetensors', dtype='F8_E4M3',
    #             shape=(7168, 2048), begin=123456, end=14803520)
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from checkpoint_tool.catalog.header_pool import HeaderReader
from checkpoint_tool.catalog.paths import listed, safe_relative
from checkpoint_tool.catalog.safetensors_format import PICKLE_SUFFIXES, FileHeader, TensorEntry
from checkpoint_tool.errors import InputError

INDEX_NAME = "model.safetensors.index.json"


@dataclass
class Catalog:
    """Everything ckpt knows about a checkpoint before reading any tensor data."""

    root: Path
    tensors: dict[str, TensorEntry]
    files: list[str]
    config: dict | None = None
    hf_quant_config: dict | None = None
    index: dict | None = None
    source: str = ""
    revision: str | None = None
    headers: dict[str, FileHeader] = field(default_factory=dict, repr=False)
    header_bytes_read: int = 0
    #: a ``catalog.remote.store.Store`` when the shards live on a server (hub, S3); then
    #: ``root`` is a local folder holding only the small files (config, index, side files)
    store: Any = field(default=None, repr=False)

    @property
    def bytes_transferred(self) -> int | None:
        """Bytes received from the server so far (None for a local checkpoint)."""
        return None if self.store is None else self.store.bytes_transferred

    def read_bytes(self, file: str, begin: int, end: int) -> bytes:
        """Bytes ``[begin, end)`` of shard ``file``, from disk or from the server."""
        if self.store is not None:
            return self.store.read(file, begin, end - begin)
        from checkpoint_tool.catalog.reader import read_range

        return read_range(self.path_of(file), begin, end)

    def path_of(self, entry: TensorEntry | str) -> Path:
        file = entry.file if isinstance(entry, TensorEntry) else entry
        return self.root / file

    def get(self, name: str) -> TensorEntry:
        return listed(
            self.tensors,
            name,
            lambda: (
                f"{self.source or self.root}: no tensor named {name!r}; "
                "`ckpt inspect` lists the tensors the checkpoint has"
            ),
        )

    @property
    def side_files(self) -> list[str]:
        """Non-weight files next to the shards (tokenizer, generation config, ...), sorted."""
        skip = set(self.files) | {INDEX_NAME}
        if self.store is not None:
            return self.store.side_files(skip)
        out = []
        for p in sorted(self.root.rglob("*")):
            rel = p.relative_to(self.root).as_posix()
            if p.is_file() and rel not in skip and not rel.startswith(".") and "/." not in rel:
                if not rel.endswith(".safetensors"):
                    out.append(rel)
        return out


def open_catalog(
    source: str | os.PathLike[str],
    *,
    headers_only: bool = True,
    meanwhile: Callable[[], object] | None = None,
) -> Catalog:
    """Open a local path or a Hugging Face repo id (``org/name``, ``hf://org/name@rev``).

    ``meanwhile`` (e.g. importing what comes next) is called once while the headers are
    read, when a forked child parses part of them (``header_pool``).
    """
    from checkpoint_tool.catalog.remote.open import open_remote
    from checkpoint_tool.catalog.sources import resolve_source

    remote = open_remote(str(source), headers_only=headers_only)
    if remote is not None:
        return remote
    root, single_file, revision = resolve_source(str(source), headers_only=headers_only)
    cat = open_local(root, single_file=single_file, meanwhile=meanwhile)
    cat.source = str(source)
    cat.revision = revision
    return cat


def open_local(
    root: Path,
    *,
    single_file: str | None = None,
    meanwhile: Callable[[], object] | None = None,
) -> Catalog:
    """Open a local folder (or one file inside it) as a catalog (``meanwhile``: see
    ``open_catalog``)."""
    root = Path(root)
    if not root.exists():
        raise InputError(f"{root}: no such file or folder; give a checkpoint folder or a repo id")
    config = _read_json_if_present(root / "config.json")
    hf_quant = _read_json_if_present(root / "hf_quant_config.json")
    index = None
    reader = None
    if single_file is not None:
        files = [single_file]
    elif (root / INDEX_NAME).exists():
        # a forked child starts parsing the shards next to the index while it is read here
        reader = HeaderReader(sorted(root.glob("*.safetensors")))
        try:
            index = _read_json_if_present(root / INDEX_NAME)
            files = _files_from_index(root, index or {})
        except BaseException:
            reader.close()
            raise
    else:
        files = sorted(p.name for p in root.glob("*.safetensors"))
        if not files:
            pickles = sorted(p.name for p in root.iterdir() if p.suffix in PICKLE_SUFFIXES)
            if pickles:
                raise InputError(
                    f"{root}: only pickle-based weights ({', '.join(pickles[:3])}); ckpt never "
                    "unpickles: convert them to safetensors first"
                )
            raise InputError(f"{root}: no *.safetensors files and no {INDEX_NAME}")
    cat = Catalog(
        root=root, tensors={}, files=files, config=config, hf_quant_config=hf_quant, index=index
    )
    paths = [root / rel for rel in files]
    headers = (reader or HeaderReader(paths)).read(paths, meanwhile)
    add_headers(cat, files, headers)
    if index is not None:
        _check_index_matches(root, index, cat)
    return cat


def add_headers(cat: Catalog, files: list[str], headers: list) -> None:
    """Fill ``cat.tensors`` from one header per file (an ``InputError`` in the list is raised)."""
    new = tuple.__new__
    where = cat.store.label if cat.store is not None else cat.root
    for rel, header in zip(files, headers, strict=False):
        if isinstance(header, InputError):
            raise header
        cat.headers[rel] = header
        cat.header_bytes_read += 8 + header.header_len
        # tuple.__new__: a TensorEntry without the named tuple's Python-level __new__
        # (~0.4 us less per tensor, ~92k tensors for R1)
        found = {
            name: new(TensorEntry, (name, rel, dtype, shape, begin, end))
            for name, dtype, shape, begin, end in header.entries
        }
        if not cat.tensors.keys().isdisjoint(found):  # iterates over found
            name = next(name for name in found if name in cat.tensors)
            raise InputError(
                f"{where}/{rel}: tensor {name!r} also appears in {cat.tensors[name].file}; "
                "duplicate tensors across shards: remove the stale shard"
            )
        cat.tensors.update(found)


def _read_json_if_present(path: Path) -> dict | None:
    if not path.exists():
        return None
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"{path}: not valid JSON ({exc}); fix or restore the file") from exc
    if not isinstance(doc, dict):
        raise InputError(f"{path}: expected a JSON object")
    return doc


def _files_from_index(
    root: Path, index: dict, exists: Callable[[str], bool] | None = None
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
        if not (exists(rel) if exists is not None else (root / rel).is_file()):
            raise InputError(
                f"{root / INDEX_NAME}: tensor {name!r} is mapped to {rel!r}, which is missing; "
                "download the missing shard or fix the index"
            )
        files.add(rel)
    return sorted(files)


def _check_index_matches(root: Path, index: dict, cat: Catalog) -> None:
    weight_map: dict[str, str] = index["weight_map"]
    for name, rel in weight_map.items():
        entry = cat.tensors.get(name)
        if entry is None:
            raise InputError(
                f"{root / rel}: tensor {name!r} is listed in {INDEX_NAME} but not in the shard; "
                "the index and shards disagree, re-download them"
            )
        if entry.file != rel:
            raise InputError(
                f"{root / INDEX_NAME}: tensor {name!r} is indexed in {rel} but stored in "
                f"{entry.file}; the index is stale"
            )
    if len(cat.tensors) == len(weight_map):
        return  # every indexed name is in the catalog (checked above): the same set
    extra = sorted(set(cat.tensors) - set(weight_map))
    if extra:
        e = cat.tensors[extra[0]]
        raise InputError(
            f"{root / e.file}: tensor {extra[0]!r} (and {len(extra) - 1} more) is not in "
            f"{INDEX_NAME}; the index is stale, regenerate it"
        )
