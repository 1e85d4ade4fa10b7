"""TP geometry of an expert intermediate dimension: alignment per projection, padding.

vLLM splits gate (w1) and up (w3) along dim 0 (intermediate rows) and down (w2) along dim 1
(intermediate columns), with floor division ``I // tp``. Each rank's share must keep scale
groups/blocks whole: the rows of block-FP8 gate/up in blocks of ``block[0]``, the columns of
down in groups of 32 (MXFP4/MXFP8), 16 (NVFP4) or blocks of ``block[1]`` (FP8), and FP4's
two-per-byte packing. Zero padding of the intermediate dim is exact (silu(0) * 0 = 0, zero
down columns add nothing), so a misaligned split is fixed by padding ``I`` to ``pad_to``.

Example::

    tp_geometry(160, 2, 32)
    # TpGeometry(size=160, tp=2, alignment=32, per_rank=80, divisible=True, aligned=False,
    #            padded_per_rank=96, pad_to=192)
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from checkpoint_tool.policy.decision import TpGeometry
from checkpoint_tool.quant.scheme import Scheme
from checkpoint_tool.quant.storage import round_up, scheme_alignment


def split_alignment(scheme: Scheme, proj: str) -> tuple[int, str]:
    """Granularity of the intermediate dim in ``proj`` under ``scheme``, and why: the storage
    codec's alignment of the dim vLLM splits (``quant.storage.scheme_alignment``).

    gate/up: rows (128 for block FP8, else 1); down: columns (group or block size; 2 for
    packed FP4 at least). ``split_alignment(mxfp4, "down")`` -> ``(32, 'down mxfp4/32
    (input groups)')``.
    """
    if proj == "down":
        a = scheme_alignment(scheme, -1)
        what = "input groups" if scheme.group_size else "input blocks" if scheme.block else ""
        return a, f"down {scheme.short()}" + (f" ({what})" if what and a > 1 else "")
    a = scheme_alignment(scheme, -2)
    return a, f"{proj} {scheme.short()}" + (" (row blocks)" if a > 1 else "")


def intermediate_alignment(schemes: Iterable[tuple[str, Scheme]]) -> tuple[int, str]:
    """LCM of the split alignments of ``(proj, scheme)`` pairs, and the strictest source."""
    total, why, best = 1, "", 1
    for proj, scheme in schemes:
        a, reason = split_alignment(scheme, proj)
        total = math.lcm(total, a)
        if a > best:
            best, why = a, reason
    return total, why


def tp_geometry(size: int, tp: int, alignment: int, alignment_from: str = "") -> TpGeometry:
    """Per-rank share of ``size`` over ``tp`` ranks, and the padding that aligns it."""
    tp = max(1, tp)
    alignment = max(1, alignment)
    per_rank = size // tp
    divisible = size % tp == 0
    aligned = divisible and per_rank % alignment == 0
    unit = tp * alignment
    pad_to = size if aligned else max(unit, round_up(size, unit))
    return TpGeometry(
        size=size,
        tp=tp,
        alignment=alignment,
        alignment_from=alignment_from,
        per_rank=per_rank,
        divisible=divisible,
        aligned=aligned,
        padded_per_rank=pad_to // tp,
        pad_to=pad_to,
    )
