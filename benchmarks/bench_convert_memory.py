"""Where ``ckpt convert``'s memory per tensor goes: resident memory step by step, and the
Python allocations of each step by source line.

The tiny-data ``deepseek-v3-bf16`` checkpoints of ``bench_plan.py`` (4 and 16 layers of 256
experts: 3,149 and 12,533 tensors, built once in ``--work``) are converted as
``bench_plan.py`` does (``--tp 1 --no-progress --memory-budget 16MB --max-shard-size 5MB``),
each step wrapped in place:

- catalog (``open_catalog``), policy (``decide_policy``: resolution and the decision), plan
  (``build_plan``), then the executor's steps: ``check_plan``, ``plan_sha256`` (the plan's
  fingerprint, the plan's code), ``write_files`` (the weight files), ``finish_output`` (side
  files, config, index, manifest);
- default: the real command (``ckpt convert`` through its CLI) in a fresh process per run.
  Per step, the resident memory at its start, its peak (``VmHWM``, reset at every step
  boundary through ``/proc/self/clear_refs``: Linux) and at its end, each for both checkpoints
  and as bytes per extra tensor. The smallest of ``--repeat`` runs counts (noise only adds).
  The largest peak of a run is what ``bench_plan.py`` measures for the whole process;
- ``--trace``: the same steps in one process under ``tracemalloc`` (slow, minutes): the Python
  allocations per extra tensor at the start of each step, at its peak above the start and kept
  at its end, with the source lines that hold them at the peak (a snapshot each time the traced
  total passes a new high by 32 KiB).

Usage::

    .venv/bin/python benchmarks/bench_convert_memory.py              # resident memory, 3 runs
    .venv/bin/python benchmarks/bench_convert_memory.py --trace      # allocations by line
"""

from __future__ import annotations

import argparse
import functools
import json
import re
import shutil
import subprocess
import sys
import tempfile
import tracemalloc
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

OPTIONS = ["--tp", "1", "--no-progress", "--memory-budget", "16MB", "--max-shard-size", "5MB"]
LAYERS = (4, 16)
#: a tracemalloc snapshot each time the traced total passes a new high by this much
TRACE_STEP = 32 << 10


def _status() -> tuple[int, int]:
    """(peak resident bytes since the last reset, resident bytes now)."""
    text = Path("/proc/self/status").read_text()
    hwm, rss = (int(re.search(rf"{k}:\s+(\d+)", text)[1]) * 1024 for k in ("VmHWM", "VmRSS"))  # type: ignore[index]
    return hwm, rss


def _reset_peak() -> None:
    Path("/proc/self/clear_refs").write_text("5")


class Rss:
    """Resident memory of a step: at its start, its peak, at its end (bytes)."""

    rows: list[tuple[str, int, int, int]] = []

    def __init__(self, name: str) -> None:
        self.name = name

    def __enter__(self) -> None:
        _, self.start = _status()
        _reset_peak()

    def __exit__(self, *exc: object) -> None:
        peak, end = _status()
        self.rows.append((self.name, self.start, peak, end))
        _reset_peak()


class Traced:
    """Python allocations of a step: at its start, its peak and end above the start (bytes),
    and the bytes per source line at the peak and at the end, above the start."""

    rows: list[dict[str, Any]] = []
    open: list[Traced] = []

    def __init__(self, name: str) -> None:
        self.name = name

    def __enter__(self) -> None:
        import gc

        gc.collect()
        self.lines0 = _lines(tracemalloc.take_snapshot())
        self.start = self.best = self.level = tracemalloc.get_traced_memory()[0]
        self.peak_lines = self.lines0
        if not Traced.open:
            sys.setprofile(_on_return)
        Traced.open.append(self)

    def __exit__(self, *exc: object) -> None:
        Traced.open.remove(self)
        if not Traced.open:
            sys.setprofile(None)
        self.check()
        end_lines = _lines(tracemalloc.take_snapshot())
        self.rows.append(
            {
                "name": self.name,
                "depth": len(Traced.open),
                "start": self.start,
                "peak": self.best - self.start,
                "end": tracemalloc.get_traced_memory()[0] - self.start,
                "peak_lines": _minus(self.peak_lines, self.lines0),
                "end_lines": _minus(end_lines, self.lines0),
            }
        )

    def check(self) -> None:
        now = tracemalloc.get_traced_memory()[0]
        if now > self.best:
            self.best = now
            if now > self.level + TRACE_STEP:
                self.level = now
                self.peak_lines = _lines(tracemalloc.take_snapshot())


def _on_return(frame: object, event: str, arg: object) -> None:
    if event in ("return", "c_return"):
        for step in Traced.open:
            step.check()


def _lines(snapshot: tracemalloc.Snapshot) -> dict[str, int]:
    out = {}
    for stat in snapshot.statistics("lineno"):
        frame = stat.traceback[0]
        name = frame.filename.replace(str(ROOT) + "/", "").split("site-packages/")[-1]
        out[f"{name}:{frame.lineno}"] = stat.size
    return out


def _minus(a: dict[str, int], b: dict[str, int]) -> dict[str, int]:
    return {k: a.get(k, 0) - b.get(k, 0) for k in a.keys() | b.keys()}


def _wrap_steps(step: type[Rss] | type[Traced]) -> None:
    """Wrap each measured step of ``ckpt convert`` in ``step``, in place."""
    import checkpoint_tool.catalog as catalog
    from checkpoint_tool.execute import file_run, runner
    from checkpoint_tool.plan import build

    def wrap(owner: Any, attr: str, name: str) -> None:
        fn = getattr(owner, attr)

        @functools.wraps(fn)
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            with step(name):
                return fn(*args, **kwargs)

        setattr(owner, attr, wrapped)

    wrap(catalog, "open_catalog", "catalog")
    wrap(build, "decide_policy", "policy")
    wrap(build, "build_plan", "plan")
    for attr in ("check_plan", "plan_sha256", "finish_output"):
        wrap(runner, attr, attr)
    wrap(file_run.FileRun, "write_files", "write_files")


def child(mode: str, src: str, out: str) -> None:
    """One measured conversion of ``src`` in this process; the rows go to ``out`` (JSON)."""
    from checkpoint_tool.cli import app

    dst = Path(tempfile.mkdtemp(prefix="ckpt-mem-")) / "out"
    step = Rss if mode == "rss" else Traced
    _wrap_steps(step)
    sys.argv = ["ckpt", "convert", src, str(dst), *OPTIONS]
    try:
        if mode == "trace":
            tracemalloc.start(1)
        try:
            app.main()  # the command as ``ckpt`` runs it (``app.run`` would end the process)
        except SystemExit as exc:
            if exc.code:
                raise
        tensors = len(json.loads((dst / "model.safetensors.index.json").read_text())["weight_map"])
    finally:
        shutil.rmtree(dst.parent, ignore_errors=True)
    Path(out).write_text(json.dumps({"tensors": tensors, "rows": step.rows}))


def measure(mode: str, src: Path) -> dict[str, Any]:
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        cmd = [sys.executable, __file__, "--child", mode, str(src), out.name]
        subprocess.run(cmd, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
        return json.loads(Path(out.name).read_text())


def report_rss(work: Path, repeat: int) -> None:
    import bench_plan

    runs = {n: [measure("rss", bench_plan.tiny(work, n)) for _ in range(repeat)] for n in LAYERS}
    (small, large) = (runs[n] for n in LAYERS)
    n0, n1 = small[0]["tensors"], large[0]["tensors"]
    print(f"resident memory by step, MiB ({n0} | {n1} tensors), smallest of {repeat} runs; ")
    print("B/t: bytes per extra tensor; the peak of a step is the largest since it started")
    print(f"{'step':15s}{'at start':>24s}{'peak':>24s}{'at end':>24s}")
    mib = 1 << 20
    for k, row in enumerate(small[0]["rows"]):
        cells = []
        for j in (1, 2, 3):
            a, b = (min(r["rows"][k][j] for r in rs) for rs in (small, large))
            cells.append(f"{a / mib:6.1f} |{b / mib:6.1f} {(b - a) / (n1 - n0):5.0f} B/t")
        print(f"{row[0]:15s}" + "".join(f"{c:>24s}" for c in cells))
    # the process's peak: the largest step peak of each run, the smallest over the runs
    a, b = (min(max(row[2] for row in r["rows"]) for r in rs) for rs in (small, large))
    print(f"process peak: {a / mib:.1f} | {b / mib:.1f} MiB, {(b - a) / (n1 - n0):.0f} B/t")


def report_trace(work: Path, top: int) -> None:
    import bench_plan

    small, large = (measure("trace", bench_plan.tiny(work, n)) for n in LAYERS)
    per = large["tensors"] - small["tensors"]
    print(f"Python allocations (tracemalloc) per extra tensor, {small['tensors']} -> "
          f"{large['tensors']} tensors: at the step's start, its peak above the start, "
          "kept at its end; the lines holding them at the peak")  # fmt: skip
    for a, b in zip(small["rows"], large["rows"], strict=True):
        pad = "  " * b["depth"]
        print(
            f"{pad}{b['name']:16s} start {(b['start'] - a['start']) / per:5.0f}  peak "
            f"{(b['peak'] - a['peak']) / per:5.0f}  kept {(b['end'] - a['end']) / per:5.0f}"
        )
        lines = _minus(b["peak_lines"], a["peak_lines"])
        best = sorted(lines.items(), key=lambda kv: -abs(kv[1]))[:top]
        shown = [f"{k} {v / per:.0f}" for k, v in best if abs(v) >= 4 * per]
        if shown:
            print(f"{pad}    at peak: " + "; ".join(shown))


def main() -> None:
    if len(sys.argv) == 5 and sys.argv[1] == "--child":
        child(*sys.argv[2:])
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "ckpt-bench-tiny")
    ap.add_argument("--repeat", type=int, default=3, help="runs per checkpoint (smallest counts)")
    ap.add_argument("--trace", action="store_true", help="Python allocations by line (slow)")
    ap.add_argument("--top", type=int, default=6, help="lines shown per step (--trace)")
    args = ap.parse_args()
    if args.trace:
        report_trace(args.work, args.top)
    else:
        report_rss(args.work, args.repeat)


if __name__ == "__main__":
    main()
