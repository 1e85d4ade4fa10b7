"""What a plan does, in numbers: the report ``ckpt plan`` / ``ckpt convert --dry-run`` print.

Counts are per output tensor unless named otherwise. ``kept`` + ``renamed`` + ``redirected``
+ ``unfused`` is the number of output tensors; ``padded`` counts outputs with a pad, whatever their name.

Example::

    PlanSummary(source_tensors=306, output_tensors=306, kept=306, renamed=0, redirected=24,
                padded=240, dropped=0, moe_intermediate_size=160, padded_intermediate_size=192,
                files=[FileSummary(name="model-00001-of-00001.safetensors", tensors=306,
                                   nbytes=1234567)], ...)
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from pydantic import BaseModel, Field

from checkpoint_tool.catalog.safetensors_format import element_bytes, storage_shape, tensor_nbytes

if TYPE_CHECKING:
    from checkpoint_tool.catalog.catalog import Catalog
    from checkpoint_tool.plan.inputs import PlanInputs
    from checkpoint_tool.plan.model import OutputFile, OutputTensor
    from checkpoint_tool.plan.outputs import Planned


class FileSummary(BaseModel):
    """One output file: name, tensor count, tensor data bytes (headers excluded)."""

    name: str
    tensors: int
    nbytes: int
    layers: list[int] = Field(default_factory=list)


class PlanSummary(BaseModel):
    """The plan in numbers (``ckpt plan`` human output; ``summary`` in the plan JSON)."""

    source_tensors: int = 0
    output_tensors: int = 0
    #: outputs written under their source name
    kept: int = 0
    #: outputs whose name a rename rule changed (FSE slots not included)
    renamed: int = 0
    #: outputs that are a shared expert (chunk) moved into a routed slot
    redirected: int = 0
    #: outputs that are one expert cut out of a 3-D fused expert tensor
    unfused: int = 0
    #: outputs with zero/neutral padding on the expert intermediate dim
    padded: int = 0
    #: source tensors deliberately not written (``Plan.dropped``), by rule
    dropped: int = 0
    dropped_by_rule: dict[str, int] = Field(default_factory=dict)
    fse_enabled_layers: list[int] = Field(default_factory=list)
    fse_disabled_layers: list[int] = Field(default_factory=list)
    moe_intermediate_size: int | None = None
    padded_intermediate_size: int | None = None
    #: per-rank alignment the padded size satisfies (``--pad-to``)
    pad_to: int | None = None
    shared_intermediate_size: int | None = None
    padded_shared_intermediate_size: int | None = None
    source_bytes: int = 0
    output_bytes: int = 0
    files: list[FileSummary] = Field(default_factory=list)
    #: estimated bytes each TP rank loads: expert tensors split over the ranks, every other
    #: tensor counted whole (an upper bound: vLLM also splits attention and dense MLPs)
    bytes_per_rank: list[int] = Field(default_factory=list)
    #: the most memory one worker needs for one output tensor (its bytes + the source bytes
    #: it reads); the executor streams, so this bounds the buffers, not the model size
    peak_memory_bytes: int = 0
    peak_memory_tensor: str | None = None


def piece_source_bytes(catalog: Catalog, tensor: OutputTensor) -> int:
    """Bytes of source data ``tensor`` reads (each piece's region of its source)."""
    total = 0
    for piece in tensor.pieces:
        entry = catalog.tensors[piece.source]
        if not piece.slices:
            total += entry.nbytes
            continue
        shape = list(storage_shape(entry.dtype, entry.shape))
        for region in piece.slices:
            shape[region.dim] = region.stop - region.start
        total += math.prod(shape) * element_bytes(entry.dtype)
    return total


def output_nbytes(tensor: OutputTensor) -> int:
    return tensor_nbytes(tensor.dtype, tuple(tensor.shape))


def plan_summary(inputs: PlanInputs, planned: Planned, files: list[OutputFile]) -> PlanSummary:
    """The summary of a plan: counts, sizes before/after padding, bytes per file and per
    rank, and the peak-memory estimate."""
    from checkpoint_tool.plan.sharding import file_layers

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
        source_bytes=sum(e.nbytes for e in catalog.tensors.values()),
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
