"""How ckpt's header-only commands grow with the tensor count: DeepSeek-R1 (~92k tensors) against
the ``moe-1024x80-mxfp4`` scale preset (~487k tensors), measured in the same run.

Builds (once, in ``--work``) both sparse full-size layouts (``ckpt synth PRESET DST --sparse``;
data regions are file holes) and prints how long each took and its disk use (apparent vs
real). Then, on each layout, as whole commands in fresh interpreters under ``/usr/bin/time``,
each ``--repeat`` times (the fastest / smallest run counts: the machine may be shared), ckpt's
bytecode compiled first as an install has it:

- the bare floor: no ckpt import, each shard's header ``json.loads``-ed and kept
  (``bench_plan.BARE_FLOOR``);
- ``ckpt inspect SRC --format json``;
- ``ckpt plan SRC --tp 8 --format json``;
- ``ckpt validate SRC --only ...`` with every check that reads headers and config only (no
  scale or weight values, checksums, drift or runtime: ``HEADER_CHECKS``; validate has no
  single headers-only switch);
- ``ckpt convert SRC OUT --tp 8 --dry-run`` (prints the plan, writes nothing).

For each: wall, CPU and peak RSS, the ratios to the bare floor, the cost per tensor (µs wall,
µs CPU, bytes of RSS), whether the peak stays within 2 GB on the scale preset, and the
linearity ratio: the per-tensor time and RSS on the scale preset over those on R1 (1.0: linear
in the tensor count; above: worse than linear; the fixed start-up cost pulls it below 1), and
the growth per extra tensor between the two (CPU µs, RSS bytes).

``--baseline DIR`` measures another checkout of ckpt in the same run: its runs alternate with
this checkout's and every figure gets its ratio to the baseline's.

Usage::

    .venv/bin/python benchmarks/bench_scale.py                     # builds $TMPDIR/ckpt-bench-scale
    .venv/bin/python benchmarks/bench_scale.py --repeat 2 --only plan --only inspect
    .venv/bin/python benchmarks/bench_scale.py --baseline ../ckpt-main
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_plan import BARE_FLOOR, compile_package  # noqa: E402

#: layout label -> synth preset (built with --sparse)
LAYOUTS = {"R1": "deepseek-v3-fp8", "500k": "moe-1024x80-mxfp4"}
#: ``ckpt validate`` checks that read only the index, headers and config.json
HEADER_CHECKS = [
    "index_valid",
    "index_paths",
    "shard_missing",
    "shard_unreferenced",
    "shard_truncated",
    "header_valid",
    "offsets_in_range",
    "tensor_duplicate",
    "index_tensors",
    "total_size",
    "config_json",
    "quant_config",
    "layers_present",
    "experts_present",
    "scales_present",
    "tensors_explained",
    "weight_dtype",
    "scale_dtype",
    "scale_shape",
    "expert_shapes",
    "engine_loads",
]
RSS_LIMIT = 2 * 10**9


class Figures(NamedTuple):
    """The best of several runs of one command: least wall and CPU seconds, least peak RSS."""

    wall: float
    cpu: float
    rss: int
    rc: int


def commands(src: Path, out: Path) -> dict[str, list[str]]:
    """Label -> command line of every measured command on checkpoint ``src``."""
    py = sys.executable
    ckpt = [py, "-m", "checkpoint_tool"]
    only = [a for c in HEADER_CHECKS for a in ("--only", c)]
    return {
        "bare floor": [py, "-c", BARE_FLOOR, str(src)],
        "inspect --format json": [*ckpt, "inspect", str(src), "--format", "json"],
        "plan --tp 8 --format json": [*ckpt, "plan", str(src), "--tp", "8", "--format", "json"],
        "validate (headers only)": [*ckpt, "validate", str(src), *only],
        "convert --tp 8 --dry-run": [
            *ckpt,
            "convert",
            str(src),
            str(out),
            "--tp",
            "8",
            "--dry-run",
        ],
    }


def timed(cmd: list[str], root: Path) -> Figures:
    """One run of ``cmd`` with the ckpt of ``root`` first on the path, stdout to /dev/null,
    measured by ``/usr/bin/time`` (a small parent, so the peak RSS is the command's own).
    The exit status is kept, not raised: validate exits 1 on findings."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    with tempfile.NamedTemporaryFile("r") as stats, open(os.devnull, "wb") as null:
        proc = subprocess.run(
            ["/usr/bin/time", "-o", stats.name, "-f", "%e %M %U %S", *cmd],
            stdout=null,
            stderr=subprocess.PIPE,
            env=env,
            check=False,
        )
        if proc.returncode not in (0, 1):
            tail = proc.stderr.decode(errors="replace").strip().splitlines()[-3:]
            raise SystemExit(f"{' '.join(cmd[:4])}... exited {proc.returncode}: {tail}")
        wall, kib, user, system = stats.read().split()[-4:]
    return Figures(float(wall), float(user) + float(system), int(kib) * 1024, proc.returncode)


def best(cmd: list[str], repeat: int, roots: list[Path]) -> list[Figures]:
    """The minimum of each figure over ``repeat`` runs per root, the roots taking turns."""
    runs: list[list[Figures]] = [[] for _ in roots]
    for _ in range(repeat):
        for k, root in enumerate(roots):
            runs[k].append(timed(cmd, root))
    return [
        Figures(
            min(f.wall for f in r),
            min(f.cpu for f in r),
            min(f.rss for f in r),
            max(f.rc for f in r),
        )
        for r in runs
    ]


def build(work: Path, label: str, preset: str) -> Path:
    """The sparse layout of ``preset`` in ``work/label`` (built once: the build time is printed
    then), with its disk use printed."""
    dst = work / label
    took = ""
    if not (dst / "model.safetensors.index.json").exists():
        t = time.perf_counter()
        cmd = [sys.executable, "-m", "checkpoint_tool", "synth", preset, str(dst), "--sparse"]
        subprocess.run(cmd, env={**os.environ, "PYTHONPATH": str(ROOT)}, check=True)
        took = f" built in {time.perf_counter() - t:.1f} s;"
    files = [p for p in dst.iterdir() if p.is_file()]
    apparent = sum(p.stat().st_size for p in files)
    real = sum(p.stat().st_blocks * 512 for p in files)
    print(
        f"{label}: {preset} --sparse in {dst};{took} {apparent / 1e9:.1f} GB apparent, "
        f"{real / 1e6:.1f} MB on disk"
    )
    return dst


def tensor_count(src: Path) -> int:
    return len(json.loads((src / "model.safetensors.index.json").read_text())["weight_map"])


def _label(k: int) -> str:
    return "this    " if k == 0 else "baseline"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "ckpt-bench-scale")
    ap.add_argument("--repeat", type=int, default=3, help="runs per command (the minimum counts)")
    ap.add_argument(
        "--only", action="append", help="measure only commands whose label starts with this"
    )
    ap.add_argument(
        "--baseline", type=Path, default=None, help="another ckpt checkout, measured in turn"
    )
    args = ap.parse_args()

    roots = [ROOT] if args.baseline is None else [ROOT, args.baseline.resolve()]
    for root in roots:  # as an install has it (see bench_plan)
        compile_package(root)
    args.work.mkdir(parents=True, exist_ok=True)
    srcs = {label: build(args.work, label, preset) for label, preset in LAYOUTS.items()}
    counts = {label: tensor_count(src) for label, src in srcs.items()}
    print(
        f"load {os.getloadavg()[0]:.1f}; tensors: "
        + ", ".join(f"{k} {v}" for k, v in counts.items())
    )
    if args.baseline is not None:
        print(f"baseline: {args.baseline} (runs alternate with this checkout's)")
    out = args.work / "convert-out"
    # layout -> command -> figures per root
    figs: dict[str, dict[str, list[Figures]]] = {}
    for label, src in srcs.items():
        figs[label] = {}
        n = counts[label]
        print(f"{label} ({n} tensors, {LAYOUTS[label]} --sparse)")
        for name, cmd in commands(src, out).items():
            if (
                name != "bare floor"
                and args.only
                and not any(name.startswith(o) for o in args.only)
            ):
                continue
            shutil.rmtree(out, ignore_errors=True)
            figs[label][name] = got = best(cmd, args.repeat, roots)
            for k, f in enumerate(got):
                bare = figs[label]["bare floor"][k]
                line = (
                    f"  {_label(k)} {name:26s} {f.wall:7.2f} s wall {f.cpu:7.2f} s cpu "
                    f"{f.rss / 1e6:6.0f} MB peak | per tensor {f.wall / n * 1e6:5.1f} us wall "
                    f"{f.cpu / n * 1e6:5.1f} us cpu {f.rss / n:6.0f} B"
                )
                if name != "bare floor":
                    line += (
                        f" | {f.wall / bare.wall:4.1f}x wall {f.cpu / bare.cpu:4.1f}x cpu "
                        f"{f.rss / bare.rss:4.1f}x RSS of bare"
                    )
                if f.rc:
                    line += f" (exit {f.rc})"
                if label == "500k":
                    line += f" | RSS <= 2 GB: {'yes' if f.rss <= RSS_LIMIT else 'NO'}"
                print(line)
            if len(got) == 2:
                a, b = got
                print(
                    f"  ratio to baseline, {name}: wall {a.wall / b.wall:.2f}x, "
                    f"cpu {a.cpu / b.cpu:.2f}x, peak RSS {a.rss / b.rss:.2f}x"
                )
    shutil.rmtree(out, ignore_errors=True)
    small, big = "R1", "500k"
    print(f"linearity: per-tensor cost on {big} / on {small} (1.00 = linear in the tensor count)")
    for name in figs[big]:
        for k in range(len(roots)):
            s, b = figs[small][name][k], figs[big][name][k]
            ns, nb = counts[small], counts[big]
            print(
                f"  {_label(k)} {name:26s} wall {(b.wall / nb) / (s.wall / ns):.2f}x  "
                f"cpu {(b.cpu / nb) / (s.cpu / ns):.2f}x  RSS {(b.rss / nb) / (s.rss / ns):.2f}x"
                f" | per extra tensor: {(b.cpu - s.cpu) / (nb - ns) * 1e6:5.1f} us cpu, "
                f"{(b.rss - s.rss) / (nb - ns):6.0f} B RSS"
            )


if __name__ == "__main__":
    main()
