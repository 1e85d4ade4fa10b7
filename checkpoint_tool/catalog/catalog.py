"""A header-only view of a checkpoint: tensor name -> (file, dtype, shape, byte range).

Opening a catalog reads ``config.json`` (and ``hf_quant_config.json`` when present), the index
and every shard's header; it never reads tensor data. Layouts understood:

- a folder with ``model.safetensors.index.json`` (the index decides which shards count);
- a folder of ``*.safetensors`` shards without an index;
- a single ``.safetensors`` file (its folder's config.json is used when present).

The openers (``catalog.open.open_catalog``: local folders in ``catalog.local``, hub and S3 in
``catalog.remote.open``) build it; this module imports none of them.

Example::

    cat = open_catalog("/models/DeepSeek-R1")
    e = cat.tensors["model.layers.3.mlp.experts.0.down_proj.weight"]
    # TensorEntry(name=..., file='model-00002-of-00163.safetensors', dtype='F8_E4M3',
    #             shape=(7168, 2048), begin=123456, end=14803520)
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from checkpoint_tool.catalog.byte_range import read_range
from checkpoint_tool.catalog.index import INDEX_NAME
from checkpoint_tool.catalog.paths import listed
from checkpoint_tool.catalog.safetensors_format import (
    NO_COLUMNS,
    FileHeader,
    HeaderColumns,
    TensorEntry,
)
from checkpoint_tool.catalog.table import TableTensors, TensorTable
from checkpoint_tool.errors import InputError

if TYPE_CHECKING:
    from checkpoint_tool.catalog.remote.store import Store

__all__ = ["INDEX_NAME", "Catalog", "TensorEntry", "add_headers"]

#: the bookkeeping files that mark a folder as a ckpt output (finished, running, or parts)
_CKPT_RECORD = re.compile(
    r"^(ckpt-manifest\.json|\.ckpt-journal\.json|\.ckpt-part-\d+-of-\d+\.json)$"
)


@dataclass
class Catalog:
    """Everything ckpt knows about a checkpoint before reading any tensor data."""

    root: Path
    #: name -> record, in file then header order: a read-only ``TableTensors`` view over
    #: the columns of ``table`` for an opened checkpoint; any mapping for a made-up one
    tensors: Mapping[str, TensorEntry]
    files: list[str]
    config: dict | None = None
    hf_quant_config: dict | None = None
    #: the index's top-level object without its ``weight_map`` (which the table holds:
    #: the same names in the same files, checked when the catalog was opened)
    index: dict | None = None
    source: str = ""
    revision: str | None = None
    #: each shard's header without its columns (the table holds the tensors)
    headers: dict[str, FileHeader] = field(default_factory=dict, repr=False)
    header_bytes_read: int = 0
    #: a ``catalog.remote.store.Store`` when the shards live on a server (hub, S3); then
    #: ``root`` is a local folder holding only the small files (config, index, side files)
    store: Store | None = field(default=None, repr=False)

    @property
    def table(self) -> TensorTable:
        """The tensors as columns, with the bulk methods (``rows_of_file``,
        ``names_matching``, ...); built once from a plain mapping."""
        tensors = self.tensors
        if isinstance(tensors, TableTensors):
            return tensors.table
        cached = self.__dict__.get("_table_of")
        if cached is None or cached[0] is not tensors:
            cached = (tensors, TensorTable.from_entries(tensors.values()))
            self.__dict__["_table_of"] = cached
        return cached[1]

    def add_tensors(self, entries: Iterable[TensorEntry]) -> None:
        """Add records made elsewhere (new names only; their files must be in ``files``)."""
        merged = dict(self.tensors)
        merged.update((e.name, e) for e in entries)
        self.tensors = TableTensors(TensorTable.from_entries(merged.values()))

    @property
    def bytes_transferred(self) -> int | None:
        """Bytes received from the server so far (None for a local checkpoint)."""
        return None if self.store is None else self.store.bytes_transferred

    def read_bytes(self, file: str, begin: int, end: int) -> bytes:
        """Bytes ``[begin, end)`` of shard ``file``, from disk or from the server."""
        if self.store is not None:
            return self.store.read(file, begin, end - begin)
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
        found = sorted(self.root.rglob("*"))
        # an earlier ckpt output in a subfolder (its manifest, journal or part records) is no
        # side file of this checkpoint: none of its files is
        outputs = {
            p.parent.relative_to(self.root).as_posix() + "/"
            for p in found
            if p.parent != self.root and _CKPT_RECORD.match(p.name)
        }
        out = []
        for p in found:
            rel = p.relative_to(self.root).as_posix()
            if p.is_file() and rel not in skip and not rel.startswith(".") and "/." not in rel:
                if not rel.endswith(".safetensors") and not any(map(rel.startswith, outputs)):
                    out.append(rel)
        return out


def add_headers(cat: Catalog, files: list[str], headers: Sequence[FileHeader | InputError]) -> None:
    """Fill ``cat.tensors`` from one header per file (an ``InputError`` in the list is raised).

    The table takes the columns; ``cat.headers`` keeps each shard's header without them
    (length, file size, metadata and the columns' digest)."""
    where = cat.store.label if cat.store is not None else cat.root
    parts: list[tuple[str, HeaderColumns]] = []
    for rel, header in zip(files, headers, strict=False):
        if isinstance(header, InputError):
            # errors in file order: a duplicate among the shards before this one comes first
            TensorTable.from_headers(parts, where=where)
            raise header
        cat.headers[rel] = replace(header, columns=NO_COLUMNS, digest=header.columns_digest())
        cat.header_bytes_read += 8 + header.header_len
        parts.append((rel, header.columns))
    cat.tensors = TableTensors(TensorTable.from_headers(parts, where=where))
