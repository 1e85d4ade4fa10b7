"""A deterministic, size-balanced split of a plan's output files into N parts.

Largest file first (ties: plan order) to the part holding the fewest bytes so far (ties: the
lowest part index); each part lists its files in plan order. The split depends only on the
file sizes and N, so every array-job task computes the same one without talking to the others.

Example::

    split_files([5, 5, 3, 2, 1], 2)   # [[0, 2], [1, 3, 4]]  (8 and 8 bytes)
"""

from __future__ import annotations

import re

from checkpoint_tool.errors import UsageError

_PART = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")


def parse_part(text: str) -> tuple[int, int]:
    """``"2/8"`` -> ``(2, 8)``; parts are numbered from 0 (Slurm array ids, k8s indexes)."""
    m = _PART.match(text)
    if not m or not (0 <= int(m.group(1)) < int(m.group(2))):
        raise UsageError(
            f"--part {text!r}: give I/N with 0 <= I < N, e.g. --part 0/4 ... --part 3/4 "
            "(--part $SLURM_ARRAY_TASK_ID/N in an array job)"
        )
    return int(m.group(1)), int(m.group(2))


def split_files(sizes: list[int], parts: int) -> list[list[int]]:
    """Indexes of the files of each part (see the module docstring)."""
    loads = [0] * parts
    members: list[list[int]] = [[] for _ in range(parts)]
    for i in sorted(range(len(sizes)), key=lambda i: (-sizes[i], i)):
        p = min(range(parts), key=lambda p: (loads[p], p))
        loads[p] += sizes[i]
        members[p].append(i)
    return [sorted(m) for m in members]
