"""Tile shapes of the grouped GEMM, chosen from the problem shape only (never from data).

Two regimes: *decode* (few rows per expert: ``block_m`` 16, streaming weight tiles,
split-K when too few programs would cover the GPU) and *prefill* (many rows per expert:
``block_m`` 64-128, wide tiles for the tensor cores). The Triton interpreter gets small
tiles so CPU tests stay fast.

Example::

    cfgs = choose_configs(KernelFormat.MXFP4, KernelFormat.MXFP4, rows=9, num_experts=257,
                          hidden=7168, intermediate=2048, device="cuda")
    cfgs.block_m, cfgs.gate_up.block_n   # 16, 64
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cache

import torch

from checkpoint_tool.runtime.stack import KernelFormat

_FP4 = (KernelFormat.MXFP4, KernelFormat.NVFP4)
_FP8 = (KernelFormat.FP8, KernelFormat.FP8_W8A8)


@dataclass(frozen=True)
class GemmConfig:
    """One launch's tiles: ``BLOCK_M x BLOCK_N`` outputs, ``BLOCK_K`` per step."""

    block_m: int
    block_n: int
    block_k: int
    num_warps: int = 4
    num_stages: int = 3
    split_k: int = 1


@dataclass(frozen=True)
class MoeConfigs:
    """Configs of the two GEMMs of one grouped MoE call (they share ``block_m``)."""

    gate_up: GemmConfig
    down: GemmConfig

    @property
    def block_m(self) -> int:
        return self.gate_up.block_m


def choose_configs(
    fmt_gate_up: KernelFormat,
    fmt_down: KernelFormat,
    *,
    rows: int,
    num_experts: int,
    hidden: int,
    intermediate: int,
    device: torch.device | str,
) -> MoeConfigs:
    """Heuristic tiles for ``rows`` (= tokens x slots) routed over ``num_experts``."""
    if torch.device(device).type == "cpu":
        return MoeConfigs(_interpreter(fmt_gate_up), _interpreter(fmt_down))
    active = max(1, min(num_experts, rows))
    rows_per_expert = rows / active
    if rows_per_expert <= 24:
        block_m = 16
    elif rows_per_expert <= 48:
        block_m = 32
    elif rows_per_expert <= 96 or fmt_gate_up in _FP8:
        block_m = 64
    else:
        block_m = 128  # wide M amortizes the FP4 decode and feeds the tensor cores (bf16)
    sms = _num_sms(torch.device(device))
    gate_up = _gpu(fmt_gate_up, block_m, intermediate, hidden, active, sms)
    down = _gpu(fmt_down, block_m, hidden, intermediate, active, sms)
    return MoeConfigs(gate_up, down)


def _interpreter(fmt: KernelFormat) -> GemmConfig:
    # the interpreter's cost is per program and per K-step: few, wide tiles
    return GemmConfig(block_m=16, block_n=64, block_k=64, num_warps=1, num_stages=1)


def _gpu(fmt: KernelFormat, block_m: int, n: int, k: int, active: int, sms: int) -> GemmConfig:
    """Tiles from one sweep on an H200 (benchmarks/bench_moe_runtime.py --sweep)."""
    if block_m <= 32:  # decode: stream weights; bf16/FP4 3 stages, FP8 deeper (small tiles)
        block_k = 256 if fmt in _FP4 else 128
        stages = 5 if fmt in _FP8 else 3
        cfg = GemmConfig(block_m, 64, block_k, num_warps=4, num_stages=stages)
    elif fmt is KernelFormat.FP8_W8A8:
        cfg = GemmConfig(block_m, 256, 128, num_warps=8, num_stages=3)
    elif fmt is KernelFormat.FP8:  # weight-only: the bf16 copy of the tile needs shared memory
        cfg = GemmConfig(block_m, 128, 128, num_warps=8, num_stages=3)
    else:
        cfg = GemmConfig(block_m, 128, 128 if fmt in _FP4 else 64, num_warps=8, num_stages=3)
    if block_m > 16:
        return cfg
    programs = active * -(-n // cfg.block_n)
    k_tiles = -(-k // cfg.block_k)
    split = max(1, min(k_tiles // 4, round(4 * sms / programs)))
    return replace(cfg, split_k=split)


@cache
def _num_sms(device: torch.device) -> int:
    return torch.cuda.get_device_properties(device).multi_processor_count
