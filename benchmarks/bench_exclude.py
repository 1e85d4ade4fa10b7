"""Benchmark ``ckpt inspect`` and ``ckpt validate`` on a Quark layout with an exact-name exclude
list of real size, against the FP8 DeepSeek-R1 layout, measured in the same run.

The layout is amd/DeepSeek-R1-0528-MXFP4's: DeepSeek-R1-0528 at full size (61 layers + the MTP
layer 61, 256 routed experts), MXFP4 routed and shared experts and dense MLPs, and every module
Quark left in BF16 listed by exact name in ``exclude``. Its model card
(huggingface.co/amd/DeepSeek-R1-0528-MXFP4, "Quantization scripts") quantizes with
``exclude_layers="*self_attn* *mlp.gate.* *lm_head model.layers.61.*"``; Quark writes the
modules those patterns matched, one name each, into ``quantization_config.exclude``: the
attention projections of the 62 layers (310), the whole MTP layer 61 (768 routed expert
projections, 3 shared, ``eh_proj``, ``shared_head.head``) and ``lm_head``: 1,084 names.
(The routers, ``mlp.gate``, are not ``nn.Linear`` and not listed, as in the ``quark-mxfp4``
preset.) The published config.json itself is not in this repository; the list is built from
the R1 tensor names by those patterns.

Both layouts are sparse files (``ckpt synth ... --sparse``: headers real, data as holes),
built once under ``--dir``. Each command runs ``--repeat`` times as a fresh interpreter,
alternating between the two layouts; the fastest wall time of each is printed, and the ratio
MXFP4 / FP8 (target: <= 1.5x for inspect and validate).

Usage::

    .venv/bin/python benchmarks/bench_exclude.py                  # builds $TMPDIR/ckpt-bench-excl
    .venv/bin/python benchmarks/bench_exclude.py --repeat 5 --dir /scratch/excl
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

#: command -> most wall time, as a multiple of the FP8 R1 layout's
TARGET = 1.5
MTP_LAYER = 61


def amd_r1_mxfp4_layout():  # type: ignore[no-untyped-def]
    """The SynthLayout of amd/DeepSeek-R1-0528-MXFP4 at full size (see the module docstring)."""
    from checkpoint_tool.synth.builder import get_preset, resolve_dims
    from checkpoint_tool.synth.expand import expand
    from checkpoint_tool.synth.families.deepseek_v3 import deepseek_v3_config, deepseek_v3_items
    from checkpoint_tool.synth.layout import Linear, SynthLayout
    from checkpoint_tool.synth.quark import quark_config

    dims = resolve_dims(get_preset("quark-mxfp4"), sparse=True)
    items = list(deepseek_v3_items(dims, router_bias_dtype="BF16", fused_routed=False, mtp=True))

    def assign(lin: Linear) -> str:
        if lin.role in ("router", "router_aux", "lm_head", "mtp_proj", "mtp_head", "attn"):
            return "bf16"
        return "bf16" if lin.layer == MTP_LAYER else "quark_mxfp4"

    exclude = [
        it.module
        for it in items
        if isinstance(it, Linear) and assign(it) == "bf16" and it.role != "router"
    ]
    qcfg = quark_config(global_spec="mxfp4", exclude=exclude)
    layout = SynthLayout(
        config=deepseek_v3_config(dims, qcfg),
        tensors=expand(items, assign),
        shard_digits_total=6,
        default_shards=dims.shards,
    )
    layout.family = "deepseek_v3"
    return layout


def build(base: Path) -> tuple[Path, Path]:
    from checkpoint_tool.synth import synth_checkpoint
    from checkpoint_tool.synth.builder import write_layout

    fp8, mx = base / "r1-fp8", base / "r1-mxfp4"
    if not (fp8 / "model.safetensors.index.json").exists():
        synth_checkpoint("deepseek-v3-fp8", fp8, sparse=True, overwrite=True)
    if not (mx / "model.safetensors.index.json").exists():
        write_layout(amd_r1_mxfp4_layout(), mx, sparse=True, overwrite=True)
    excl = json.loads((mx / "config.json").read_text())["quantization_config"]["exclude"]
    print(f"layouts in {base}: FP8 R1, and MXFP4 with {len(excl)} exact-name excludes")
    return fp8, mx


def run(args: list[str]) -> float:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    t = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "checkpoint_tool", *args],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    wall = time.perf_counter() - t
    if proc.returncode not in (0, 1):
        raise SystemExit(f"ckpt {' '.join(args)} exited {proc.returncode}: {proc.stderr[-2000:]}")
    return wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "ckpt-bench-excl")
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    fp8, mx = build(a.dir)
    commands = {
        "inspect": ["inspect", "{}", "--tp", "8", "--format", "json"],
        "validate": ["validate", "{}", "--format", "json"],
    }
    worst = 0.0
    for name, argv in commands.items():
        best = {"fp8": float("inf"), "mxfp4": float("inf")}
        for _ in range(a.repeat):
            for label, src in (("fp8", fp8), ("mxfp4", mx)):
                wall = run([str(src) if x == "{}" else x for x in argv])
                best[label] = min(best[label], wall)
        ratio = best["mxfp4"] / best["fp8"]
        worst = max(worst, ratio)
        print(
            f"{name:9s} FP8 R1 {best['fp8']:6.2f} s   MXFP4 + {1084} excludes "
            f"{best['mxfp4']:6.2f} s   ratio {ratio:4.2f}x (target <= {TARGET}x)"
        )
    print("PASS" if worst <= TARGET else "OVER TARGET")


if __name__ == "__main__":
    main()
