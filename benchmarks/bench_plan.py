"""Benchmark ``ckpt plan``/``inspect --format json`` on the full-size DeepSeek-R1 layout against
two header-read floors, measured in the same run.

Builds (once) the sparse full-size ``deepseek-v3-fp8`` synth layout (163 shards, ~92k tensors,
~690 GB of tensor data as file holes). Then, as whole commands (fresh interpreters, the way a
user runs them), each ``--repeat`` times:

- the bare floor: a fresh interpreter that imports nothing of ckpt, reads each shard's 8-byte
  length prefix and header bytes and ``json.loads`` them, keeping every dict (``BARE_FLOOR``);
- the ckpt floor: a process that imports ckpt and reads every header (``open_catalog``);
- ``ckpt inspect SRC --tp 8 --format json > /dev/null``;
- ``ckpt plan SRC --tp 8 --format json > /dev/null`` (renames, no padding) and ``--tp 3``
  (every expert tensor padded 2048 -> 2304 through the codecs).

ckpt's bytecode is compiled first, as ``pip install`` leaves it (without that, a machine with
``PYTHONDONTWRITEBYTECODE`` set would compile ~80 modules in every run). Prints the fastest
wall time of each, the least CPU time, the peak RSS, each as a ratio to the bare floor, and
the targets as ratios: inspect <= 2.5x the bare floor's time, plan <= 4x, the peak RSS of
either <= 1.5x the bare floor's. ``--stages`` adds an in-process breakdown (CPU
seconds per planning step). The machine may be shared: the ratios are the steadier figures.

``--baseline DIR`` measures another checkout of ckpt (e.g. a worktree of the main branch) in the
same run: every command alternates between the two, and each figure is printed with its ratio
to the baseline's (a change keeps the speed when the ratios stay near 1).

Then how convert's peak memory grows with the tensor count (target: < 0.5 KiB per tensor):
two tiny-data ``deepseek-v3-bf16`` checkpoints, 4 and 16 layers of 256 experts (~3k and ~12k
tensors, 18 and 72 MB), each converted (``--tp 1 --memory-budget 16MB --max-shard-size 5MB``:
the same buffers, files of ~800 tensors) and read by the floor process; the growth of each
between the two, per extra tensor, is printed side by side.

Usage::

    .venv/bin/python benchmarks/bench_plan.py                     # builds $TMPDIR/ckpt-bench-r1
    .venv/bin/python benchmarks/bench_plan.py --src /models/DeepSeek-R1 --tp 8 --stages
    .venv/bin/python benchmarks/bench_plan.py --baseline ../ckpt-main   # paired, with ratios
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

FLOOR = "from checkpoint_tool.catalog import open_catalog; import sys; open_catalog(sys.argv[1])"
#: the least any header reader does: the shard list (index, else the folder), then each shard's
#: length prefix + header JSON parsed and kept; no import of ckpt
BARE_FLOOR = """
import json, os, struct, sys
root = sys.argv[1]
index = os.path.join(root, "model.safetensors.index.json")
if os.path.exists(index):
    with open(index, "rb") as f:
        names = sorted(set(json.loads(f.read())["weight_map"].values()))
else:
    names = sorted(n for n in os.listdir(root) if n.endswith(".safetensors"))
headers = []
for name in names:
    with open(os.path.join(root, name), "rb") as f:
        (size,) = struct.unpack("<Q", f.read(8))
        headers.append(json.loads(f.read(size)))
"""
#: command -> (most wall time, most peak RSS), as multiples of the bare floor's
TARGETS = {"inspect": (2.5, 1.5), "plan": (4.0, 1.5)}


def build_r1(dst: Path) -> Path:
    from checkpoint_tool.synth import synth_checkpoint

    if (dst / "model.safetensors.index.json").exists():
        return dst
    t = time.perf_counter()
    synth_checkpoint("deepseek-v3-fp8", dst, sparse=True, overwrite=True)
    print(f"built sparse R1 layout in {dst} ({time.perf_counter() - t:.1f} s)")
    return dst


def run(cmd: list[str], root: Path = ROOT) -> tuple[float, int]:
    """Wall seconds and peak RSS (bytes) of ``cmd`` with the ckpt of ``root`` first on the path
    (``timed`` without the CPU seconds)."""
    wall, rss, _ = timed(cmd, root)
    return wall, rss


def timed(cmd: list[str], root: Path = ROOT) -> tuple[float, int, float]:
    """Wall seconds, peak RSS (bytes) and CPU seconds (user + system) of ``cmd`` with the ckpt
    of ``root`` first on the path, stdout to /dev/null, measured by ``/usr/bin/time`` (a small
    parent: a child forked from this process would inherit its resident size as its
    high-water mark). It runs in ``root``: ``python -m``/``-c`` put the working folder
    first on the path, ahead of ``PYTHONPATH``."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    with tempfile.NamedTemporaryFile("r") as stats, open(os.devnull, "wb") as null:
        subprocess.run(
            ["/usr/bin/time", "-o", stats.name, "-f", "%e %M %U %S", *cmd],
            stdout=null,
            env=env,
            cwd=root,
            check=True,
        )
        wall, kib, user, system = stats.read().split()[-4:]
    return float(wall), int(kib) * 1024, float(user) + float(system)


def compile_package(root: Path) -> None:
    """Write the bytecode of ``root``'s ckpt package (``__pycache__``, ignored by git)."""
    import compileall

    compileall.compile_dir(root / "checkpoint_tool", quiet=1)


def best(cmd: list[str], repeat: int, roots: list[Path]) -> list[tuple[float, int, float]]:
    """Fastest wall, largest peak RSS and least CPU time of ``cmd`` for each of ``roots``, the
    roots taking turns run by run (a paired measurement: a slow moment of a shared machine hits
    both; CPU time is the steadier figure there)."""
    runs: list[list[tuple[float, int, float]]] = [[] for _ in roots]
    for _ in range(repeat):
        for k, root in enumerate(roots):
            runs[k].append(timed(cmd, root))
    return [
        (min(w for w, _, _ in r), max(m for _, m, _ in r), min(c for _, _, c in r)) for r in runs
    ]


def tiny(work: Path, layers: int) -> Path:
    """A ``deepseek-v3-bf16`` checkpoint of ``layers`` layers x 256 tiny experts."""
    dst = work / f"tiny-{layers}"
    if not (dst / "model.safetensors.index.json").exists():
        cmd = [sys.executable, "-m", "checkpoint_tool", "synth", "deepseek-v3-bf16", str(dst)]
        cmd += ["--layers", str(layers), "--experts", "256", "--hidden", "64"]
        cmd += ["--moe-intermediate", "32", "--data", "codes", "--overwrite"]
        run(cmd)
    return dst


def convert_memory(work: Path, roots: list[Path], repeat: int) -> list[float]:
    """Peak RSS of convert (and of reading the headers) at two tensor counts, per root: the
    growth per extra tensor (bytes) of each. Each figure is the smallest of ``repeat`` runs
    (the roots taking turns): a difference of two peaks is noisy, and noise only adds."""
    import json
    import shutil

    print("convert peak RSS vs tensor count (tiny tensors: the bytes stay small)")
    counts = []
    rows: list[list[tuple[int, int]]] = [[] for _ in roots]
    for layers in (4, 16):
        src = tiny(work, layers)
        counts.append(
            len(json.loads((src / "model.safetensors.index.json").read_text())["weight_map"])
        )
        out = work / "tiny-out"
        cmd = [sys.executable, "-m", "checkpoint_tool", "convert", str(src), str(out)]
        # fixed buffers and files of ~800 tensors (as a real model's 5 GB shards hold): what
        # grows is the per-tensor metadata (catalog, plan), not the executor's buffers
        cmd += ["--tp", "1", "--no-progress", "--memory-budget", "16MB", "--max-shard-size", "5MB"]
        peaks: list[list[tuple[int, int]]] = [[] for _ in roots]
        for _ in range(repeat):
            for k, root in enumerate(roots):
                shutil.rmtree(out, ignore_errors=True)
                _, rss = run(cmd, root)
                _, floor = run([sys.executable, "-c", FLOOR, str(src)], root)
                shutil.rmtree(out, ignore_errors=True)
                peaks[k].append((rss, floor))
        for k in range(len(roots)):
            rss, floor = min(r for r, _ in peaks[k]), min(f for _, f in peaks[k])
            rows[k].append((rss, floor))
            print(
                f"  {_label(k)} {counts[-1]:6d} tensors: convert {rss / 2**20:6.1f} MiB, "
                f"headers {floor / 2**20:6.1f} MiB"
            )
    n0, n1 = counts
    growth = []
    for k, ((c0, f0), (c1, f1)) in enumerate(rows):
        per = (c1 - c0) / (n1 - n0)
        growth.append(per)
        print(
            f"  {_label(k)} per extra tensor: convert {per / 1024:.2f} KiB, headers alone "
            f"{(f1 - f0) / (n1 - n0) / 1024:.2f} KiB "
            f"(target < 0.5 KiB: {'met' if per < 512 else 'NOT met'})"
        )
    return growth


def _vs_bare(
    fig: tuple[float, int, float],
    bare: tuple[float, int, float],
    target: tuple[float, float] | None = None,
) -> str:
    """``fig`` (wall, peak RSS, CPU) and its ratios to the bare floor's, with the targets met or
    not: time is judged on wall seconds, what a user waits for (ckpt reads headers on two
    cores, so its CPU seconds add both cores' and are printed, not judged):
    ``1.20 s wall  180 MB peak  1.10 s cpu = 2.1x wall, 2.0x cpu, 1.3x RSS of the bare floor``."""
    wall, rss, cpu = fig
    tw, tc, tr = wall / bare[0], cpu / bare[2], rss / bare[1]
    out = (
        f"{wall:6.2f} s wall  {rss / 1e6:6.0f} MB peak  {cpu:5.2f} s cpu  "
        f"= {tw:.2f}x wall, {tc:.2f}x cpu, {tr:.2f}x RSS of the bare floor"
    )
    if target is not None:
        mw, mr = target
        out += (
            f"  (targets: wall <= {mw}x {_met(tw <= mw)}; RSS <= {mr}x {_met(tr <= mr)})"
        )
    return out


def _met(ok: bool) -> str:
    return "met" if ok else "NOT met"


def _label(k: int) -> str:
    return "this    " if k == 0 else "baseline"


def stages(src: Path, tp: int) -> None:
    """CPU seconds of each planning step in this process."""
    from checkpoint_tool.catalog import open_catalog
    from checkpoint_tool.plan.inputs import plan_inputs
    from checkpoint_tool.plan.layouts import get_layout
    from checkpoint_tool.plan.model import PlanOptions
    from checkpoint_tool.plan.outputs import plan_outputs
    from checkpoint_tool.plan.summarize import plan_summary
    from checkpoint_tool.policy import decide_policy
    from checkpoint_tool.recipes import auto_recipe

    clock = time.process_time
    out: dict[str, float] = {}
    t = clock()

    def step(label: str) -> None:
        nonlocal t
        now = clock()
        out[label] = now - t
        t = now

    cat = open_catalog(src)
    step("headers")
    options = PlanOptions(tp=tp)
    decision = decide_policy(cat, tp=tp)
    step("resolve + decide")
    inputs = plan_inputs(cat, decision, auto_recipe(cat), options)
    step("inputs")
    planned = plan_outputs(inputs)
    step("outputs")
    files = get_layout(options.layout).build_files(inputs, planned)
    step("files")
    plan_summary(inputs, planned, files)
    step("summary")
    print("  stages (cpu s): " + ", ".join(f"{k} {v:.2f}" for k, v in out.items()))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--src", type=Path, default=None, help="checkpoint (default: build R1 layout)")
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "ckpt-bench-r1")
    ap.add_argument("--tp", type=int, action="append", help="TP sizes to plan (default 8 and 3)")
    ap.add_argument("--repeat", type=int, default=3, help="runs per command (fastest counts)")
    ap.add_argument("--stages", action="store_true", help="also time each planning step")
    ap.add_argument("--no-convert", action="store_true", help="skip the convert memory part")
    ap.add_argument(
        "--baseline", type=Path, default=None, help="another ckpt checkout, measured in turn"
    )
    args = ap.parse_args()

    src = args.src or build_r1(args.work)
    roots = [ROOT] if args.baseline is None else [ROOT, args.baseline.resolve()]
    py = sys.executable
    for root in roots:  # as an install has it (pip compiles at install time): no run pays
        compile_package(root)  # for compiling ckpt's modules, even with PYTHONDONTWRITEBYTECODE
    print(f"source: {src}; load {os.getloadavg()[0]:.1f}")
    if args.baseline is not None:
        print(f"baseline: {args.baseline} (runs alternate with this checkout's)")
    bare = best([py, "-c", BARE_FLOOR, str(src)], args.repeat, roots)
    floors = best([py, "-c", FLOOR, str(src)], args.repeat, roots)
    for k, (wall, rss, cpu) in enumerate(bare):
        print(
            f"  {_label(k)} bare floor: json.loads every header {wall:6.2f} s wall  "
            f"{rss / 1e6:6.0f} MB peak  {cpu:5.2f} s cpu"
        )
    for k, figures in enumerate(floors):
        print(f"  {_label(k)} ckpt floor: open_catalog          {_vs_bare(figures, bare[k])}")
    commands = [("inspect", 8), *(("plan", tp) for tp in args.tp or [8, 3])]
    for command, tp in commands:
        cmd = [py, "-m", "checkpoint_tool", command, str(src), "--tp", str(tp), "--format", "json"]
        figures = best(cmd, args.repeat, roots)
        label = f"ckpt {command} --tp {tp} --format json"
        for k, fig in enumerate(figures):
            print(f"  {_label(k)} {label:33s} {_vs_bare(fig, bare[k], TARGETS[command])}")
        if len(figures) == 2:
            (w0, r0, c0), (w1, r1, c1) = figures
            print(
                f"  ratio to baseline, {command} --tp {tp}: wall {w0 / w1:.2f}x, cpu {c0 / c1:.2f}x, "
                f"peak RSS {r0 / r1:.2f}x"
            )
        if args.stages and command == "plan":
            stages(src, tp)
    if not args.no_convert:
        growth = convert_memory(args.work.parent / "ckpt-bench-tiny", roots, args.repeat)
        if len(growth) == 2:
            print(f"  ratio to baseline, convert memory per tensor: {growth[0] / growth[1]:.2f}x")


if __name__ == "__main__":
    main()
