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
from collections.abc import Iterable
from typing import TYPE_CHECKING

import numpy as np

from checkpoint_tool.catalog.safetensors_format import element_bytes, storage_shape
from checkpoint_tool.plan.model import FileSummary, OutputFile, OutputTensor, PlanSummary
from checkpoint_tool.plan.output_table import KINDS, OutputRows, OutputTable
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
    tally = _Tally()
    for f in files:
        if isinstance(f.tensors, OutputRows):
            tally.rows(catalog, f.tensors)
        else:
            tally.records(catalog, planned, f.tensors)
    if any(f.rank is not None for f in files):  # per-rank layouts: exact per-rank figures
        per_rank = [sum(f.nbytes for f in files if f.rank == r) for r in range(tp)]
    else:
        per_rank = [tally.other_bytes + -(-tally.expert_bytes // max(1, tp))] * max(1, tp)
    geo = inputs.geometry
    return PlanSummary(
        source_tensors=len(catalog.tensors),
        output_tensors=tally.outputs,
        padded=tally.padded,
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
        output_bytes=tally.expert_bytes + tally.other_bytes,
        files=[
            FileSummary(name=f.name, tensors=len(f.tensors), nbytes=f.nbytes, layers=file_layers(f))
            for f in files
        ],
        bytes_per_rank=per_rank,
        peak_memory_bytes=tally.peak,
        peak_memory_tensor=tally.peak_name,
        **tally.counts,
    )


class _Tally:
    """The summary's sums over the output tensors, file by file in plan order (the peak is
    the first tensor that needs the most)."""

    def __init__(self) -> None:
        self.counts = dict.fromkeys(KINDS, 0)
        self.outputs = self.padded = self.expert_bytes = self.other_bytes = 0
        self.peak = 0
        self.peak_name: str | None = None
        self.form_reads: dict[int, int] = {}

    def rows(self, catalog: Catalog, rows: OutputRows) -> None:
        """An ``OutputTable`` file: from the columns."""
        table = rows.table
        at = rows.rows
        source, form, _, kind, expert, nbytes = (c[at] for c in table.columns())
        self.outputs += len(at)
        for code, n in enumerate(np.bincount(kind, minlength=len(KINDS)).tolist()):
            self.counts[KINDS[code]] += n
        forms = table.forms
        padded = np.array([f.padded for f in forms], bool)
        self.padded += int(padded[form].sum())
        self.expert_bytes += int(nbytes[expert].sum())
        self.other_bytes += int(nbytes[~expert].sum())
        if not len(at):
            return
        # bytes each output reads: per form, a constant for its sliced pieces plus its
        # whole pieces times its source's bytes
        whole = np.array([sum(not slices for slices, _ in f.pieces) for f in forms], np.int64)
        src = table.sources.nbytes_column()[source]
        const = np.zeros(len(forms), np.int64)
        for k in np.unique(form).tolist():
            const[k] = self._sliced(catalog, table, k, at, form)
        need = nbytes + const[form] + whole[form] * src
        k = int(np.argmax(need))
        if int(need[k]) > self.peak:
            self.peak, self.peak_name = int(need[k]), table.name(int(at[k]))

    def _sliced(
        self, catalog: Catalog, table: OutputTable, form: int, at: np.ndarray, forms: np.ndarray
    ) -> int:
        """Bytes the sliced pieces of form ``form`` read (one of ``at``, the rows whose forms
        are ``forms``, has it)."""
        hit = self.form_reads.get(form)
        if hit is None:
            tensor = table.record(int(at[np.flatnonzero(forms == form)[0]]))
            whole = [p for p in tensor.pieces if not p.slices]
            hit = piece_source_bytes(catalog, tensor)
            hit -= sum(catalog.table.nbytes(p.source) for p in whole)
            self.form_reads[form] = hit
        return hit

    def records(self, catalog: Catalog, planned: Planned, tensors: Iterable[OutputTensor]) -> None:
        """A file of records a layout built (``planned.built`` has their facts)."""
        for t in tensors:
            facts = planned.built[t.name]
            self.outputs += 1
            self.counts[facts.kind] += 1
            self.padded += facts.padded
            need = facts.nbytes + piece_source_bytes(catalog, t)
            if need > self.peak:
                self.peak, self.peak_name = need, t.name
            if facts.expert:
                self.expert_bytes += facts.nbytes
            else:
                self.other_bytes += facts.nbytes
