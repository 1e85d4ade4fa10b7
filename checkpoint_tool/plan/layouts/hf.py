"""The ``hf`` layout: an HF-style checkpoint (per-expert tensors, index, config.json).

The planned tensors are written whole (vLLM TP-slices them at load time; their intermediate
dims are already padded so every rank's share is aligned), grouped into balanced files of at
most ``--max-shard-size`` with each decoder layer kept in one file where it fits.

Example::

    files = build_files(ctx, planned)
    [f.name for f in files]   # ['model-00001-of-00002.safetensors', 'model-00002-of-00002...']
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from checkpoint_tool.plan.model import OutputFile
from checkpoint_tool.plan.sharding import shard_rows

if TYPE_CHECKING:
    from checkpoint_tool.plan.inputs import PlanInputs
    from checkpoint_tool.plan.outputs import Planned


def build_files(ctx: PlanInputs, planned: Planned) -> list[OutputFile]:
    """Balanced shards of every planned tensor (each file's tensors: rows of the table)."""
    return shard_rows(planned.outputs, ctx.options.max_shard_size)
