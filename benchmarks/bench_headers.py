"""Benchmark the ways of reading a full-size checkpoint's shard headers on two cores, as the
commands use them: ``ckpt inspect`` and ``ckpt plan`` on the sparse DeepSeek-R1 layout (163
shards, ~92k tensors), whole commands in fresh interpreters, each way in turn, against the bare
floor (``bench_plan.BARE_FLOOR``) measured in the same run.

The ways (``--way``, default all):

- ``meeting``: a forked child reads the index and the shards from the front while this process
  imports what comes next, then reads from the back; they meet where their claims cross (a
  shared page), the child checking its names against the index (``catalog.header_pool``);
- ``fixed``: a forked child reads a fixed 70% of the shards while this process reads the index,
  imports, reads the other 30% and checks the index against the catalog (the fixed split
  ``header_pool`` held beside the meeting until one had to go);
- ``serial``: no child (``CKPT_NO_FORK=1``).

A way that is gone from this checkout is skipped. Prints the fastest wall, the least CPU and
the largest peak RSS of each, and the wall as a ratio to the bare floor (targets: inspect
<= 2.5x, plan <= 4x).

Usage::

    .venv/bin/python benchmarks/bench_headers.py --repeat 5
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_plan import BARE_FLOOR, build_r1, compile_package, timed  # noqa: E402

#: the command, run in this interpreter after ``SETUP[way]``
RUN = """
import sys
from checkpoint_tool.cli.app import main
sys.argv = ["ckpt", *sys.argv[2:]]
main()
"""
SETUP = {
    "meeting": "",
    "fixed": "import checkpoint_tool.catalog.local as local\nlocal.can_fork = lambda: False\n",
    "serial": "",
}
TARGETS = {"inspect": 2.5, "plan": 4.0}


def available(way: str) -> bool:
    """Whether this checkout still has ``way``."""
    import checkpoint_tool.catalog.header_pool as pool

    if way == "fixed":
        return hasattr(pool, "HeaderReader") and hasattr(pool, "read_verified")
    if way == "meeting":
        return hasattr(pool, "read_verified") or not hasattr(pool, "HeaderReader")
    return True


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "ckpt-bench-r1")
    ap.add_argument("--repeat", type=int, default=5, help="runs per command (fastest counts)")
    ap.add_argument("--way", action="append", choices=sorted(SETUP), help="default: all")
    args = ap.parse_args()
    compile_package(ROOT)
    src = args.work / "deepseek-v3-fp8"
    if not (src / "config.json").exists():
        src = build_r1(args.work)
    ways = [w for w in args.way or list(SETUP) if available(w)]
    py = sys.executable
    commands = {
        "inspect": ["inspect", str(src), "--tp", "8", "--format", "json"],
        "plan": ["plan", str(src), "--tp", "8", "--format", "json"],
    }
    runs: dict[tuple[str, str], list[tuple[float, int, float]]] = {}
    for _ in range(args.repeat):  # every way in turn, run by run (a shared machine's slow
        runs.setdefault(("bare", ""), []).append(timed([py, "-c", BARE_FLOOR, str(src)]))
        for label, argv in commands.items():  # moment hits them all)
            for way in ways:
                env = {"CKPT_NO_FORK": "1"} if way == "serial" else {}
                cmd = [py, "-c", SETUP[way] + RUN, "-", *argv]
                runs.setdefault((label, way), []).append(_timed_env(cmd, env))
    bare = min(w for w, _, _ in runs[("bare", "")])
    print(f"source: {src}; load {os.getloadavg()[0]:.1f}; bare floor {bare:.2f} s wall")
    for (label, way), r in runs.items():
        if label == "bare":
            continue
        wall, rss, cpu = min(x[0] for x in r), max(x[1] for x in r), min(x[2] for x in r)
        met = "met" if wall <= TARGETS[label] * bare else "NOT met"
        print(
            f"  {label:8} {way:8} {wall:5.2f} s wall {cpu:5.2f} s cpu {rss / 1e6:5.0f} MB peak"
            f"  = {wall / bare:4.2f}x the bare floor (target <= {TARGETS[label]}x: {met})"
        )


def _timed_env(cmd: list[str], env: dict[str, str]) -> tuple[float, int, float]:
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        return timed(cmd)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


if __name__ == "__main__":
    main()
