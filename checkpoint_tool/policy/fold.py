"""Fold many names into one pattern, so a finding repeated on thousands of config entries or
modules is reported once, with the pattern and the count.

The pattern keeps every dot-separated part the names share and writes the parts that vary as
a set: consecutive integers as ranges, words as a list (more than ``MAX_WORDS`` as ``*``).
It may name more than the names folded (it is their per-part product); the count says how
many there are, and the caller keeps the full list where a user needs it (JSON ``details``).

Example::

    fold_names([f"model.layers.61.mlp.experts.{e}.{p}" for e in range(256)
                for p in ("gate_proj", "up_proj", "down_proj")])
    # 'model.layers.61.mlp.experts.{0..255}.{down_proj,gate_proj,up_proj}'
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

#: distinct words at one position written out; more are written as ``*``
MAX_WORDS = 6
#: fewer repeats than this stay one finding each (easier to read than a folded pattern)
FOLD_MIN = 4


def batches(items: list[str]) -> list[list[str]]:
    """``items`` as one batch to fold (``FOLD_MIN`` or more), else one batch per item."""
    return [items] if len(items) >= FOLD_MIN else [[x] for x in items]


def fold_names(names: Iterable[str]) -> str:
    """One pattern per count of dot-separated parts, joined by ``"; "`` (see the module)."""
    by_len: dict[int, list[list[str]]] = defaultdict(list)
    for name in dict.fromkeys(names):
        parts = name.split(".")
        by_len[len(parts)].append(parts)
    return "; ".join(_fold(group) for _, group in sorted(by_len.items()))


def _fold(group: list[list[str]]) -> str:
    out = []
    for values in zip(*group, strict=True):
        distinct = sorted(set(values))
        if len(distinct) == 1:
            out.append(distinct[0])
        elif all(v.isdecimal() for v in distinct):
            out.append("{" + int_ranges(int(v) for v in distinct) + "}")
        elif len(distinct) <= MAX_WORDS:
            out.append("{" + ",".join(distinct) + "}")
        else:
            out.append("*")
    return ".".join(out)


def int_ranges(values: Iterable[int]) -> str:
    """``[0, 1, 2, 3, 9]`` -> ``"0..3,9"``."""
    vals = sorted(set(values))
    out: list[str] = []
    i = 0
    while i < len(vals):
        j = i
        while j + 1 < len(vals) and vals[j + 1] == vals[j] + 1:
            j += 1
        out.append(f"{vals[i]}..{vals[j]}" if j > i else str(vals[i]))
        i = j + 1
    return ",".join(out)
