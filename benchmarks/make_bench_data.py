"""Build the benchmark checkpoints: a >= 2 GB real (non-sparse) one and a sparse full-size R1.

Usage::

    .venv/bin/python benchmarks/make_bench_data.py bench-data            # both
    .venv/bin/python benchmarks/make_bench_data.py bench-data --size-gb 4 --skip-sparse
    .venv/bin/python benchmarks/make_bench_data.py bench-data --data quantize   # slow, exact

Writes ``OUT/dense-<preset>/`` (default ``quark-hybrid`` at hidden 2048, 64 experts of 1024,
as many layers as the size needs, 500 MB shards) and ``OUT/deepseek-r1-sparse/`` (the real
DeepSeek-R1 layout: 61 layers + MTP, 256 experts, 163 shards, ~92k tensors, data regions as
sparse holes). Prints the time each took. Existing folders are replaced.

``--data codes`` (default) draws valid storage codes directly; ``quantize`` runs N(0, 0.02)
floats through the codecs (exact but ~50x slower for MXFP4).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from checkpoint_tool.synth import build_layout, synth_checkpoint

#: sizes of the dense benchmark model (layers are added until the target size is reached)
DENSE_DIMS = {"hidden": 2048, "n_routed": 64, "moe_intermediate": 1024}
SHARD_SIZE = 500 * 10**6


def layers_for(preset: str, target_bytes: int) -> tuple[int, int]:
    """Smallest layer count whose checkpoint holds at least ``target_bytes`` of tensors."""
    layers = 2
    while True:
        total = sum(s.nbytes for s in build_layout(preset, num_layers=layers, **DENSE_DIMS).tensors)
        if total >= target_bytes:
            return layers, total
        layers += max(1, int((target_bytes - total) / max(total / layers, 1)))


def _progress(label: str):
    last = [0.0]

    def tick(done: int, total: int, name: str) -> None:
        now = time.monotonic()
        if now - last[0] > 2 or done == total:
            last[0] = now
            print(f"  {label}: {done / 1e9:6.2f} / {total / 1e9:.2f} GB  ({name})", flush=True)

    return tick


def build_dense(out: Path, preset: str, size_gb: float, data: str, seed: int) -> None:
    layers, total = layers_for(preset, int(size_gb * 1e9))
    dst = out / f"dense-{preset}"
    print(f"dense {preset}: {layers} layers, {total / 1e9:.2f} GB of tensors -> {dst}")
    start = time.monotonic()
    synth_checkpoint(
        preset,
        dst,
        seed=seed,
        num_layers=layers,
        shard_size=SHARD_SIZE,
        overwrite=True,
        data=data,
        progress=_progress("dense"),
        **DENSE_DIMS,
    )
    elapsed = time.monotonic() - start
    on_disk = sum(p.stat().st_size for p in dst.glob("*.safetensors"))
    print(
        f"dense {preset}: {on_disk / 1e9:.2f} GB in {elapsed:.1f} s "
        f"({on_disk / 1e6 / elapsed:.0f} MB/s, data={data})"
    )


def build_sparse(out: Path) -> None:
    dst = out / "deepseek-r1-sparse"
    start = time.monotonic()
    synth_checkpoint("deepseek-v3-fp8", dst, sparse=True, overwrite=True)
    elapsed = time.monotonic() - start
    files = list(dst.glob("*.safetensors"))
    logical = sum(p.stat().st_size for p in files)
    blocks = sum(p.stat().st_blocks * 512 for p in files)
    print(
        f"sparse DeepSeek-R1: {len(files)} shards, {logical / 1e9:.1f} GB logical, "
        f"{blocks / 1e6:.1f} MB on disk, in {elapsed:.1f} s -> {dst}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", type=Path, help="folder for the benchmark checkpoints")
    parser.add_argument("--size-gb", type=float, default=2.0, help="dense checkpoint size")
    parser.add_argument("--preset", default="quark-hybrid", help="preset of the dense one")
    parser.add_argument("--data", choices=("codes", "quantize"), default="codes")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--skip-dense", action="store_true")
    parser.add_argument("--skip-sparse", action="store_true")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if not args.skip_dense:
        build_dense(args.out, args.preset, args.size_gb, args.data, args.seed)
    if not args.skip_sparse:
        build_sparse(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
