"""Deterministic token/expert align-and-sort into block-padded segments (torch, no host sync).

The grouped GEMM works on blocks of ``block_m`` rows that all belong to one expert. Each
(token, slot) pair is a *row* ``r = t * k + j`` of the flattened routing ``ids [T, k]``. Rows
are stably sorted by expert, and each expert's segment is padded up to a multiple of
``block_m`` with the sentinel ``num_rows`` (= T * k), so the kernel masks it out.

All shapes depend on ``(T, k, num_experts, block_m)`` only, never on the routing values, so the
whole forward can be captured in a CUDA graph: the block count is the upper bound
``ceil(R / block_m) + min(E, R)``, and blocks past the used ones carry expert ``-1``.

Example (T=2, k=2, E=3, block_m=2)::

    ids = [[2, 0], [2, 1]]          # rows 0..3 -> experts 2, 0, 2, 1
    sorted_rows  = [1, 4, 3, 4, 0, 2, 4, 4, ...]   # expert 0: row 1; 1: row 3; 2: rows 0, 2
    block_expert = [0, 1, 2, -1, -1]
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class AlignedRows:
    """Rows grouped by expert in ``block_m`` blocks (see module docstring)."""

    #: int32 [num_blocks * block_m]: row index ``t * k + j`` or ``num_rows`` for padding
    sorted_rows: torch.Tensor
    #: int32 [num_blocks]: expert of each block, -1 for blocks past the last used one
    block_expert: torch.Tensor
    num_rows: int
    top_k: int
    block_m: int

    @property
    def num_blocks(self) -> int:
        return int(self.block_expert.shape[0])


def max_blocks(num_rows: int, num_experts: int, block_m: int) -> int:
    """Upper bound on the number of padded blocks for any routing of ``num_rows`` rows."""
    return -(-num_rows // block_m) + min(num_experts, num_rows)


def align_rows(ids: torch.Tensor, num_experts: int, block_m: int) -> AlignedRows:
    """Sort the rows of ``ids [T, k]`` (expert ids in ``[0, num_experts)``) into padded blocks."""
    top_k = ids.shape[1]
    flat = ids.reshape(-1).to(torch.int64)
    num_rows = flat.numel()
    device = flat.device
    n_blocks = max_blocks(num_rows, num_experts, block_m)

    order = torch.sort(flat, stable=True).indices  # rows by expert, then by row index
    counts = torch.zeros(num_experts, dtype=torch.int64, device=device)
    counts.scatter_add_(0, flat, torch.ones_like(flat))
    padded = (counts + block_m - 1) // block_m * block_m
    padded_end = torch.cumsum(padded, 0)
    padded_start = padded_end - padded
    count_start = torch.cumsum(counts, 0) - counts

    sorted_expert = flat[order]
    rank = torch.arange(num_rows, device=device) - count_start[sorted_expert]
    dest = padded_start[sorted_expert] + rank
    sorted_rows = torch.full((n_blocks * block_m,), num_rows, dtype=torch.int64, device=device)
    sorted_rows[dest] = order

    block_start = torch.arange(n_blocks, device=device, dtype=torch.int64) * block_m
    block_expert = torch.searchsorted(padded_end, block_start, right=True)
    block_expert = torch.where(block_expert >= num_experts, -1, block_expert)
    return AlignedRows(
        sorted_rows=sorted_rows.to(torch.int32),
        block_expert=block_expert.to(torch.int32),
        num_rows=num_rows,
        top_k=top_k,
        block_m=block_m,
    )
