"""Group output tensors into balanced files no larger than ``--max-shard-size``.

Tensors are grouped by decoder layer (non-layer tensors before the first layer when they are
embeddings, after the last one otherwise; MTP modules after the layers) and ordered
naturally inside a group (``experts.2`` before ``experts.10``). The number of files is
``ceil(total / max)``; a group goes to the current file when its midpoint falls before the
balanced target size and the file stays under the limit, so files come out even and a layer
is only split when it is larger than a file by itself. Deterministic: same tensors, same
files.

Example::

    shard(tensors, 5 * 1000**3)
    # [OutputFile(name="model-00001-of-00163.safetensors", tensors=[...], nbytes=4_398_046_511), ...]
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from itertools import pairwise
from typing import TYPE_CHECKING

import numpy as np

from checkpoint_tool.plan.model import OutputFile, OutputTensor, output_nbytes
from checkpoint_tool.plan.name_parts import MARK, NameParts, mark_index
from checkpoint_tool.plan.output_table import OutputRows

if TYPE_CHECKING:
    from checkpoint_tool.plan.output_table import OutputTable

_LAYER = re.compile(r"(?:^|\.)layers\.(\d+)\.")
_MTP = re.compile(r"^(?:model\.)?mtp\.(\d+)\.")
_DIGITS = re.compile(r"(\d+)")
_LAYER_OF_PATTERN = re.compile(_LAYER.pattern.replace(r"(\d+)", f"({MARK})"))
_MTP_OF_PATTERN = re.compile(_MTP.pattern.replace(r"(\d+)", f"({MARK})"))


def natural_key(name: str) -> tuple:
    """Sort key that orders embedded numbers numerically (``experts.2`` < ``experts.10``)."""
    parts: list = _DIGITS.split(name)  # text, digits, text, ...: digits at the odd places
    parts[1::2] = map(int, parts[1::2])
    return tuple(parts)


def group_key(name: str) -> tuple[int, int]:
    """(section, index): embeddings, then layers in order, then MTP modules, then the rest."""
    m = _LAYER.search(name)
    if m:
        return (1, int(m.group(1)))
    m = _MTP.search(name)
    if m:
        return (2, int(m.group(1)))
    return (0, 0) if "embed" in name else (3, 0)


def group_rule(pattern: str) -> tuple[int, int | None]:
    """``group_key`` of a name pattern (``plan.name_parts``): its section, and which of its
    numbers is the index (None: index 0). The same regexes, a digit run replaced by its mark."""
    m = _LAYER_OF_PATTERN.search(pattern)
    if m:
        return 1, mark_index(pattern, m.start(1))
    m = _MTP_OF_PATTERN.search(pattern)
    if m:
        return 2, mark_index(pattern, m.start(1))
    return (0, None) if "embed" in pattern else (3, None)


def _groups(tensors: Iterable[OutputTensor]) -> list[list[OutputTensor]]:
    by_key: dict[tuple[int, int], list[OutputTensor]] = {}
    for t in tensors:
        by_key.setdefault(group_key(t.name), []).append(t)
    return [sorted(by_key[k], key=lambda t: natural_key(t.name)) for k in sorted(by_key)]


def file_layers(f: OutputFile) -> list[int]:
    """Decoder layers a file of ``shard`` holds (its layer groups are contiguous)."""
    tensors = f.tensors
    if isinstance(tensors, OutputRows):  # the names alone, not the records
        name = tensors.table.name
        rows = tensors.rows.tolist()
        names: Iterable[str] = map(name, rows)
        backwards: Iterable[str] = map(name, reversed(rows))
    else:
        names = (t.name for t in tensors)
        backwards = (t.name for t in reversed(tensors))
    first = next((k for k in map(group_key, names) if k[0] == 1), None)
    last = next((k for k in map(group_key, backwards) if k[0] == 1), None)
    if first is None or last is None:
        return []
    return list(range(first[1], last[1] + 1))


def file_name(index: int, count: int) -> str:
    return f"model-{index:05d}-of-{count:05d}.safetensors"


def shard(tensors: list[OutputTensor], max_bytes: int) -> list[OutputFile]:
    """Balanced files of ``tensors``, each at most ``max_bytes`` of tensor data (a tensor
    larger than that gets a file of its own)."""
    groups = _groups(tensors)
    flat = [t for g in groups for t in g]
    sizes = [[output_nbytes(t) for t in g] for g in groups]
    return [
        OutputFile(name=name, tensors=[flat[k] for k in ks.tolist()], nbytes=n)
        for name, ks, n in _files(sizes, max_bytes)
    ]


def shard_rows(outputs: OutputTable, max_bytes: int) -> list[OutputFile]:
    """``shard`` of every row of ``outputs``, grouped and ordered from its columns (the
    same files, the same order)."""
    if not len(outputs):
        return []
    parts = NameParts.of(outputs.name_blocks)
    if parts is None:  # names the columns cannot hold: parsed one by one
        names = outputs.output_names()
        keys = sorted(range(len(names)), key=lambda k: natural_key(names[k]))
        natural = [np.argsort(np.array(keys, np.int64), kind="stable")]
        groups = np.fromiter(
            (a * (1 << 32) + b for a, b in map(group_key, names)), np.int64, len(names)
        )
    else:
        natural = parts.natural_columns()
        groups = parts.codes({p: group_rule(p) for p in parts.patterns})
    order = np.lexsort((np.arange(len(groups)), *reversed(natural), groups))
    sizes_sorted = outputs.columns()[5][order].tolist()
    bounds = np.flatnonzero(np.diff(groups[order])) + 1
    cuts = [0, *bounds.tolist(), len(order)]
    sizes = [sizes_sorted[a:b] for a, b in pairwise(cuts)]
    return [
        OutputFile(name=name, tensors=outputs.rows(order[ks]), nbytes=n)
        for name, ks, n in _files(sizes, max_bytes)
    ]


def _files(sizes: list[list[int]], max_bytes: int) -> list[tuple[str, np.ndarray, int]]:
    """The balanced files of groups of tensor sizes (``sizes[g]``: group ``g``'s, in order):
    ``(file name, positions in the concatenated groups, bytes)`` per file."""
    total = sum(sum(s) for s in sizes)
    target = total / max(1, math.ceil(total / max_bytes)) if total else 0
    files: list[list[int]] = [[]]
    used = [0]

    def close() -> None:
        if files[-1]:
            files.append([])
            used.append(0)

    pos = 0
    for group_sizes in sizes:
        g = sum(group_sizes)
        if g <= max_bytes:
            if used[-1] and (used[-1] + g > max_bytes or used[-1] + g / 2 > target):
                close()
            files[-1].extend(range(pos, pos + len(group_sizes)))
            used[-1] += g
            pos += len(group_sizes)
            continue
        for n in group_sizes:  # a layer larger than a file
            if used[-1] and (used[-1] + n > max_bytes or used[-1] + n / 2 > target):
                close()
            files[-1].append(pos)
            used[-1] += n
            pos += 1
    if not files[-1] and len(files) > 1:
        files.pop()
        used.pop()
    count = len(files)
    return [
        (file_name(i + 1, count), np.asarray(ks, np.int64), n)
        for i, (ks, n) in enumerate(zip(files, used, strict=True))
    ]
