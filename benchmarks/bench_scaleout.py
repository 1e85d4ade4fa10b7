"""Benchmark a conversion spread over workers of one machine: throughput against worker count.

Every variant converts the same source (``--tp 1``, ``--max-shard-size`` small enough for several
output files) with a cold page cache (``sync; echo 3 > /proc/sys/vm/drop_caches`` before each
run; warm if that is not allowed), durable (fsync), and is reported as a ratio to one worker
measured in the same run, best of ``--rounds`` with the spread:

- ``threads K``: ``execute_plan(..., workers=K)`` in this process (execution time);
- ``ray T``: ``--executor ray`` with T tasks in flight on a local Ray started once here
  (``ray.init(num_cpus=C)``; execution time, Ray start-up excluded and printed apart);
- ``parts N``: N ``ckpt convert --part I/N`` processes at once, then ``--finalize`` (whole
  processes: interpreter, catalog and plan included, as an array job pays them), against one
  whole ``ckpt convert`` process.

The per-node rate it prints is what docs/convert.md uses to plan a 690 GB conversion on N nodes.

Usage::

    .venv/bin/python benchmarks/bench_scaleout.py --src ck16/random-4gb --workdir ck16/s
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
CKPT = [sys.executable, "-m", "checkpoint_tool"]


def drop_caches() -> bool:
    subprocess.run(["sync"], check=True)
    try:
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
    except OSError:
        return False
    return True


def tree_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--src", type=Path, required=True)
    ap.add_argument(
        "--workdir", type=Path, default=Path(tempfile.gettempdir()) / "ckpt-bench-scaleout"
    )
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--max-shard-size", default="500MB")
    ap.add_argument("--workers", default="1,2")
    ap.add_argument("--ray", default="1,2", help="Ray task counts ('' to skip Ray)")
    ap.add_argument("--parts", default="2", help="part counts run at once ('' to skip)")
    args = ap.parse_args()

    from checkpoint_tool.catalog import open_catalog
    from checkpoint_tool.execute import execute_plan
    from checkpoint_tool.plan.build import plan_for_catalog
    from checkpoint_tool.plan.model import PlanOptions
    from checkpoint_tool.sizes import parse_size

    src, out = args.src, args.workdir / "out"
    args.workdir.mkdir(parents=True, exist_ok=True)
    cold = drop_caches()
    catalog = open_catalog(str(src), headers_only=False)
    opts = PlanOptions(tp=1, max_shard_size=parse_size(args.max_shard_size))
    plan = plan_for_catalog(catalog, opts)
    size = sum(e.nbytes for e in catalog.tensors.values())  # tensor bytes read and written
    workers = [int(k) for k in args.workers.split(",") if k]
    ray_tasks = [int(k) for k in args.ray.split(",") if k]
    parts = [int(k) for k in args.parts.split(",") if k]

    ray_pool = None
    ray_start = 0.0
    if ray_tasks:
        import ray

        from checkpoint_tool.execute.distributed.ray_pool import RayPool

        t = time.perf_counter()
        ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)
        ray_start = time.perf_counter() - t
        ray_pool = RayPool

    def fresh() -> None:
        shutil.rmtree(out, ignore_errors=True)
        if cold:
            drop_caches()
        else:
            subprocess.run(["sync"], check=True)

    def in_process(**kw: object) -> float:
        fresh()
        return execute_plan(plan, catalog, out, progress=False, **kw).seconds  # type: ignore[arg-type]

    cli = [str(src), str(out), "--tp", "1", "--max-shard-size", args.max_shard_size,
           "--no-progress"]  # fmt: skip

    def one_process() -> float:
        fresh()
        t = time.perf_counter()
        subprocess.run([*CKPT, "convert", *cli], check=True, capture_output=True)
        return time.perf_counter() - t

    def parts_run(n: int) -> float:
        fresh()
        t = time.perf_counter()
        procs = [subprocess.Popen([*CKPT, "convert", *cli, "--part", f"{i}/{n}"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
                 for i in range(n)]  # fmt: skip
        for p in procs:
            _, err = p.communicate()
            if p.returncode:
                raise SystemExit(f"part failed: {err.decode().strip()}")
        subprocess.run([*CKPT, "convert", *cli, "--finalize"], check=True, capture_output=True)
        return time.perf_counter() - t

    variants: list[tuple[str, object]] = [(f"threads {k}", lambda k=k: in_process(workers=k))
                                          for k in workers]  # fmt: skip
    variants += [(f"ray {t}", lambda t=t: in_process(pool=ray_pool(tasks=t)))  # type: ignore[misc]
                 for t in ray_tasks]  # fmt: skip
    if parts:
        variants.append(("process: one ckpt convert", one_process))
        variants += [(f"process: {n} parts at once + finalize", lambda n=n: parts_run(n))
                     for n in parts]  # fmt: skip
    runs: dict[str, list[float]] = {name: [] for name, _ in variants}
    for _ in range(args.rounds):
        for name, fn in variants:
            runs[name].append(fn())  # type: ignore[operator]
    shutil.rmtree(out, ignore_errors=True)
    if ray_tasks:
        import ray

        ray.shutdown()
    one, *_ = os.getloadavg()
    print(f"\n== scale-out: {src} ({size / 1e9:.2f} GB of tensors, {len(plan.files)} output "
          f"files of <= {args.max_shard_size}), {args.rounds} rounds, "
          f"{'cold' if cold else 'WARM (cannot drop caches)'} page cache, durable, "
          f"{os.cpu_count()} cores, load {one:.1f}")  # fmt: skip
    if ray_tasks:
        print(f"  local Ray start-up (ray.init, once): {ray_start:.1f} s")
    best = {name: min(v) for name, v in runs.items()}
    base = best[f"threads {workers[0]}"] if workers else None
    for name, values in runs.items():
        ref = best["process: one ckpt convert"] if name.startswith("process") else base
        ratio = f"  speed x{ref / best[name]:.2f} vs one worker" if ref else ""
        print(f"  {name:<38} best {best[name]:6.2f} s  spread {min(values):.2f}-{max(values):.2f}"
              f" s  median {statistics.median(values):.2f} s  {size / best[name] / 1e9:5.2f} GB/s"
              f"{ratio}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
