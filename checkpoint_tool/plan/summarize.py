"""The summary step: a plan in numbers (``PlanSummary``, beside the plan record in
``plan.model``), from the planner's inputs, its planned tensors and the files it laid out.

Counts are per output tensor unless named otherwise. ``kept`` + ``renamed`` + ``redirected``
+ ``unfused`` is the number of output tensors; ``padded`` counts outputs with a pad, whatever
their name.

Example::

    plan_summary(inputs, planned, files)
    # PlanSummary(source_tensors=306, output_tensors=306, kept=306, renamed=0, redirected=24,
    #             padded=240, dropped=0, moe_intermediate_size=160, padded_intermediate_size=192,
    #             files=[FileSummary(name="model-00001-of-00001.safetensors", tensors=306,
    #                                nbytes=1234567)], ...)
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from checkpoint_tool.catalog.safetensors_format import element_bytes, storage_shape
from checkpoint_tool.plan.model import (
    FileSummary,
    OutputFile,
    OutputTensor,
    PlanSummary,
    output_nbytes,
)
from checkpoint_tool.plan.sharding import file_layers

if TYPE_CHECKING:
    from checkpoint_tool.catalog.catalog import Catalog
    from checkpoint_tool.plan.inputs import PlanInputs
    from checkpoint_tool.plan.outputs import Planned


def piece_source_bytes(catalog: Catalog, tensor: OutputTensor) -> int:
    """Bytes of source data ``tensor`` reads (each piece's region of its source)."""
    total = 0
    table = catalog.table
    for piece in tensor.pieces:
        if not piece.slices:
            total += table.nbytes(piece.source)
            continue
        entry = catalog.tensors[piece.source]
        shape = list(storage_shape(entry.dtype, entry.shape))
        for region in piece.slices:
            shape[region.dim] = region.stop - region.start
        total += math.prod(shape) * element_bytes(entry.dtype)
    return total


def plan_summary(inputs: PlanInputs, planned: Planned, files: list[OutputFile]) -> PlanSummary:
    """The summary of a plan: counts, sizes before/after padding, bytes per file and per
    rank, and the peak-memory estimate."""
    catalog = inputs.catalog
    tp = inputs.options.tp
    by_rule: dict[str, int] = {}
    for d in planned.dropped:
        by_rule[d.rule] = by_rule.get(d.rule, 0) + 1
    counts = {"kept": 0, "renamed": 0, "redirected": 0, "unfused": 0}
    peak, peak_name = 0, None
    expert_bytes = other_bytes = padded = n_out = 0
    nbytes, experts = planned.nbytes, planned.experts
    for f in files:
        for t in f.tensors:
            n_out += 1
            counts[planned.kind(t.name)] += 1
            padded += t.name in planned.padded
            n = nbytes[t.name] if t.name in nbytes else output_nbytes(t)
            need = n + piece_source_bytes(catalog, t)
            if need > peak:
                peak, peak_name = need, t.name
            if t.name in experts:
                expert_bytes += n
            else:
                other_bytes += n
    if any(f.rank is not None for f in files):  # per-rank layouts: exact per-rank figures
        per_rank = [sum(f.nbytes for f in files if f.rank == r) for r in range(tp)]
    else:
        per_rank = [other_bytes + -(-expert_bytes // max(1, tp))] * max(1, tp)
    geo = inputs.geometry
    return PlanSummary(
        source_tensors=len(catalog.tensors),
        output_tensors=n_out,
        padded=padded,
        dropped=len(planned.dropped),
        dropped_by_rule=dict(sorted(by_rule.items())),
        fse_enabled_layers=sorted(k for k, v in inputs.fse_layers.items() if v),
        fse_disabled_layers=sorted(k for k, v in inputs.fse_layers.items() if not v),
        moe_intermediate_size=geo.size,
        padded_intermediate_size=geo.padded,
        pad_to=geo.pad_to,
        shared_intermediate_size=geo.shared_size,
        padded_shared_intermediate_size=geo.shared_padded,
        source_bytes=catalog.table.total_bytes(),
        output_bytes=expert_bytes + other_bytes,
        files=[
            FileSummary(name=f.name, tensors=len(f.tensors), nbytes=f.nbytes, layers=file_layers(f))
            for f in files
        ],
        bytes_per_rank=per_rank,
        peak_memory_bytes=peak,
        peak_memory_tensor=peak_name,
        **counts,
    )
