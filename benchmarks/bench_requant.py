"""Benchmark the MXFP4 requantizer (``quant.requant.mxfp4``) on BF16 shared-expert weights.

Input: DeepSeek-V3 shared-expert shapes, BF16 (gate/up ``[2048, 7168]``, down ``[7168, 2048]``),
seeded normal values. Per thread count it prints, as medians over interleaved rounds:

- ``requant GB/s``: BF16 input bytes per second through ``quantize_mxfp4`` (its BF16 path:
  E8M0 scales, E2M1 codes, packing, a chunk of rows at a time on ``--threads`` threads);
- ``copy GB/s``: a plain copy of the same BF16 bytes (``torch.clone``), measured in the same
  rounds (the baseline: what moving the bytes costs on this machine, right now);
- ``float GB/s``: the same weights through the float path (``quantize_mxfp4(x.float())``: what
  FP8/F16/F32 sources take, the BF16 path's reference bytes), same rounds;
- ``ratio``: requant / copy.

Vectorized: whole-array passes per chunk of rows, no Python loop per group.

Usage::

    python benchmarks/bench_requant.py                  # 1 and 2 threads, 5 rounds
    python benchmarks/bench_requant.py --threads 2 --rounds 9 --json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from checkpoint_tool.quant.requant.mxfp4 import quantize_mxfp4

SHAPES = [(2048, 7168), (2048, 7168), (7168, 2048)]  # gate, up, down


def _time(fn, tensors: list[torch.Tensor]) -> float:  # type: ignore[no-untyped-def]
    t0 = time.perf_counter()
    for t in tensors:
        fn(t)
    return time.perf_counter() - t0


def run(threads: int, rounds: int, seed: int) -> dict[str, float]:
    torch.set_num_threads(threads)
    gen = torch.Generator().manual_seed(seed)
    tensors = [(torch.randn(s, generator=gen) * 0.02).to(torch.bfloat16) for s in SHAPES]
    nbytes = sum(t.numel() * t.element_size() for t in tensors)
    quantize_mxfp4(tensors[0][:64])  # warm-up
    req, cp, flt = [], [], []
    for _ in range(rounds):  # interleaved: all see the same machine load
        cp.append(nbytes / _time(torch.clone, tensors) / 1e9)
        req.append(nbytes / _time(quantize_mxfp4, tensors) / 1e9)
        flt.append(nbytes / _time(lambda t: quantize_mxfp4(t.float()), tensors) / 1e9)
    r, c = statistics.median(req), statistics.median(cp)
    return {
        "threads": threads,
        "input_gb": nbytes / 1e9,
        "requant_gbps": r,
        "copy_gbps": c,
        "float_gbps": statistics.median(flt),
        "ratio": r / c,
        "requant_gbps_best": max(req),
        "copy_gbps_best": max(cp),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rows = [run(int(t), args.rounds, args.seed) for t in args.threads.split(",")]
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    print(
        f"{'threads':>7} {'input GB':>8} {'requant GB/s':>12} {'copy GB/s':>9} "
        f"{'float GB/s':>10} {'ratio':>7}"
    )
    for r in rows:
        print(
            f"{r['threads']:>7} {r['input_gb']:>8.3f} {r['requant_gbps']:>12.3f} "
            f"{r['copy_gbps']:>9.2f} {r['float_gbps']:>10.3f} {r['ratio']:>7.3f}"
        )


if __name__ == "__main__":
    main()
