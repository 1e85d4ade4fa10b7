"""Benchmark ``ckpt plan`` on the full-size DeepSeek-R1 layout (headers only, nothing written).

Builds (once) the sparse full-size ``deepseek-v3-fp8`` synth layout (163 shards, ~92k tensors,
~690 GB of tensor data as file holes), then times each planning step: open the catalog
(reads every header: the baseline, measured in the same run), resolve schemes, build the
policy, and ``build_plan`` for ``--tp 8`` (aligned: renames + FSE redirect, no padding) and for
``--tp 3`` (every expert tensor padded 2048 -> 2304 through the codecs), plus the JSON dump of
the whole plan. Prints wall and CPU seconds and the ratio of planning to header reading.
The machine may be shared: CPU seconds are the steadier figure.

Usage::

    .venv/bin/python benchmarks/bench_plan.py                     # builds /tmp/ckpt-bench-r1
    .venv/bin/python benchmarks/bench_plan.py --src /models/DeepSeek-R1 --tp 8 --tp 3
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def build_r1(dst: Path) -> Path:
    from checkpoint_tool.synth import synth_checkpoint

    if (dst / "model.safetensors.index.json").exists():
        return dst
    t = time.perf_counter()
    synth_checkpoint("deepseek-v3-fp8", dst, sparse=True, overwrite=True)
    print(f"built sparse R1 layout in {dst} ({time.perf_counter() - t:.1f} s)")
    return dst


def timed(label: str, fn: Callable[[], Any]) -> tuple[Any, float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    print(f"  {label:<34} {wall:7.2f} s wall  {cpu:7.2f} s cpu")
    return out, wall, cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--src", type=Path, default=None, help="checkpoint (default: build R1 layout)")
    ap.add_argument("--work", type=Path, default=Path("/tmp/ckpt-bench-r1"))
    ap.add_argument("--tp", type=int, action="append", help="TP sizes to plan (default 8 and 3)")
    args = ap.parse_args()

    from checkpoint_tool.catalog.bulk import gc_paused

    src = args.src or build_r1(args.work)
    # as the CLI: ``ckpt plan`` pauses cyclic garbage collection over its header-only work
    with gc_paused():
        _plan_all(src, args.tp or [8, 3])


def _plan_all(src: Path, tps: list[int]) -> None:
    from checkpoint_tool.catalog.catalog import open_catalog
    from checkpoint_tool.plan.build import build_plan
    from checkpoint_tool.plan.model import PlanOptions
    from checkpoint_tool.policy import build_policy
    from checkpoint_tool.quant.resolve import resolve_catalog
    from checkpoint_tool.recipes import auto_recipe

    print(f"source: {src}")
    cat, base_wall, base_cpu = timed("open catalog (all headers)", lambda: open_catalog(src))
    data = sum(e.nbytes for e in cat.tensors.values())
    print(f"  {len(cat.tensors)} tensors in {len(cat.files)} shards, {data / 1e9:.1f} GB of data")
    rc, *_ = timed("resolve schemes", lambda: resolve_catalog(cat))
    recipe = auto_recipe(cat)
    for tp in tps:
        print(f"--tp {tp} (recipe {recipe.name})")
        policy, *_ = timed("policy", lambda tp=tp: build_policy(cat, tp=tp, resolved=rc))
        plan, wall, cpu = timed(
            "build_plan",
            lambda tp=tp, policy=policy: build_plan(
                cat, policy, recipe, PlanOptions(tp=tp), resolved=rc
            ),
        )
        text, *_ = timed("plan JSON (model_dump_json)", plan.model_dump_json)
        s = plan.summary
        print(
            f"  {s.output_tensors} outputs, {s.redirected} FSE-redirected, {s.padded} padded "
            f"(I {s.moe_intermediate_size} -> {s.padded_intermediate_size}), {len(plan.files)} "
            f"files, plan JSON {len(text) / 1e6:.0f} MB"
        )
        print(
            f"  build_plan / header reading: {wall / base_wall:.1f}x wall, "
            f"{cpu / max(base_cpu, 1e-9):.1f}x cpu"
        )


if __name__ == "__main__":
    main()
