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
    parse_size("5GB"), parse_size("4.5GiB"), parse_size("1000000")
    # (5000000000, 4831838208, 1000000)
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable

from checkpoint_tool.errors import UsageError
from checkpoint_tool.plan.model import OutputFile, OutputTensor, output_nbytes

_UNITS = {
    "": 1,
    "B": 1,
    "KB": 1000,
    "MB": 1000**2,
    "GB": 1000**3,
    "TB": 1000**4,
    "KIB": 1024,
    "MIB": 1024**2,
    "GIB": 1024**3,
    "TIB": 1024**4,
}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*$")
_LAYER = re.compile(r"(?:^|\.)layers\.(\d+)\.")
_MTP = re.compile(r"^(?:model\.)?mtp\.(\d+)\.")
_DIGITS = re.compile(r"(\d+)")


def parse_size(text: str | int) -> int:
    """``"5GB"`` -> 5_000_000_000 (decimal units; ``GiB`` etc. binary; bare numbers: bytes)."""
    if isinstance(text, int):
        size = text
    else:
        m = _SIZE.match(text)
        unit = m.group(2).upper() if m else None
        if m is None or unit not in _UNITS:
            raise UsageError(
                f"cannot read size {text!r}; write e.g. 5GB, 500MB, 4.5GiB or a number of bytes"
            )
        size = int(float(m.group(1)) * _UNITS[unit])
    if size < 1:
        raise UsageError(f"size {text!r} must be at least 1 byte")
    return size


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


def _groups(tensors: Iterable[OutputTensor]) -> list[list[OutputTensor]]:
    by_key: dict[tuple[int, int], list[OutputTensor]] = {}
    for t in tensors:
        by_key.setdefault(group_key(t.name), []).append(t)
    return [sorted(by_key[k], key=lambda t: natural_key(t.name)) for k in sorted(by_key)]


def file_layers(f: OutputFile) -> list[int]:
    """Decoder layers a file of ``shard`` holds (its layer groups are contiguous)."""
    first = next((k for k in (group_key(t.name) for t in f.tensors) if k[0] == 1), None)
    last = next((k for k in (group_key(t.name) for t in reversed(f.tensors)) if k[0] == 1), None)
    if first is None or last is None:
        return []
    return list(range(first[1], last[1] + 1))


def file_name(index: int, count: int) -> str:
    return f"model-{index:05d}-of-{count:05d}.safetensors"


def shard(
    tensors: list[OutputTensor], max_bytes: int, nbytes: dict[str, int] | None = None
) -> list[OutputFile]:
    """Balanced files of ``tensors``, each at most ``max_bytes`` of tensor data (a tensor
    larger than that gets a file of its own). ``nbytes``: sizes by name, when known."""
    groups = _groups(tensors)
    size_of = (lambda t: nbytes[t.name]) if nbytes is not None else output_nbytes
    sizes = [[size_of(t) for t in g] for g in groups]
    total = sum(sum(s) for s in sizes)
    target = total / max(1, math.ceil(total / max_bytes)) if total else 0
    files: list[list[OutputTensor]] = [[]]
    used = [0]

    def close() -> None:
        if files[-1]:
            files.append([])
            used.append(0)

    for group, group_sizes in zip(groups, sizes, strict=True):
        g = sum(group_sizes)
        if g <= max_bytes:
            if used[-1] and (used[-1] + g > max_bytes or used[-1] + g / 2 > target):
                close()
            files[-1].extend(group)
            used[-1] += g
            continue
        for t, n in zip(group, group_sizes, strict=True):  # a layer larger than a file
            if used[-1] and (used[-1] + n > max_bytes or used[-1] + n / 2 > target):
                close()
            files[-1].append(t)
            used[-1] += n
    if not files[-1] and len(files) > 1:
        files.pop()
        used.pop()
    count = len(files)
    return [
        OutputFile(name=file_name(i + 1, count), tensors=ts, nbytes=n)
        for i, (ts, n) in enumerate(zip(files, used, strict=True))
    ]
