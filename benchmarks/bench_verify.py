"""Benchmark ``ckpt verify``: lossless GB/s against ``cat`` of the same files, numeric seconds
per layer with a breakdown, on a Quark MXFP4 checkpoint built here.

Sizes (``--size auto`` picks by memory, GPU and free disk):

- ``issue``: DeepSeek-R1 expert dims, hidden 7168, moe_intermediate 2048, 256 routed experts
  + 1 shared, 2 MoE layers (``synth quark-mxfp4 --layers 3``), 12.1 GB, converted with
  ``--tp 8`` (needs ~26 GB of disk, 64 GiB of memory and a GPU to be worth it);
- ``small``: hidden 4096, moe_intermediate 1024, 128 experts, 2 MoE layers, 1.8 GB, ``--tp 2``
  (a CI runner, a laptop).

Lossless: ``cat`` of both trees' shards and the lossless check (``check_lossless`` on the
rebuilt plan, plan time apart) are timed alternately ``--repeat`` times, medians compared;
warm (page cache) and, with ``--cold``, each after evicting both trees' pages from the page
cache (``posix_fadvise(DONTNEED)`` per file: only these files, no root needed). Also the
whole ``ckpt verify --no-numeric`` command once (start-up, plan and all).

Numeric: one MoE layer at each ``--tokens`` (first run apart: Triton compiles then), its
seconds split into read, decode, reference and runtime (``LayerResult``), and ``--layers all``
at the first token count against the time ``cat`` takes to read both trees once.

Usage::

    python benchmarks/bench_verify.py                        # auto size, warm + cold
    python benchmarks/bench_verify.py --size issue --tokens 16,256 --json verify.json
    python benchmarks/bench_verify.py --size small --no-numeric --workers 2
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PY = sys.executable
CKPT = [PY, "-m", "checkpoint_tool"]

SIZES = {
    "issue": {"hidden": 7168, "moe_intermediate": 2048, "experts": 256, "tp": 8},
    "small": {"hidden": 4096, "moe_intermediate": 1024, "experts": 128, "tp": 2},
}


def memory_bytes() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def gpu_memory() -> int:
    try:
        import torch

        if torch.cuda.is_available():
            return int(torch.cuda.get_device_properties(0).total_memory)
    except Exception:  # no torch, no driver: no GPU
        pass
    return 0


def auto_size(work: Path) -> str:
    """``issue`` with 64 GiB of memory, a 40 GiB GPU and 30 GB of disk; else ``small``."""
    free = os.statvfs(work).f_bavail * os.statvfs(work).f_frsize
    big = memory_bytes() >= 60 << 30 and gpu_memory() >= 40 << 30 and free >= 30e9
    return "issue" if big else "small"


def shards(*trees: Path) -> list[Path]:
    return sorted(p for t in trees for p in t.glob("*.safetensors"))


def run(cmd: list[str]) -> float:
    t = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    return time.perf_counter() - t


def build(work: Path, size: str, workers: int) -> tuple[Path, Path, dict]:
    """The source (synth) and its conversion, reused when already there."""
    d = SIZES[size]
    src, dst = work / f"src-{size}", work / f"dst-{size}"
    info: dict = {"size": size, **d}
    if not (src / "config.json").is_file():
        info["synth_seconds"] = run([*CKPT, "synth", "quark-mxfp4", str(src), "--layers", "3",
                                     "--experts", str(d["experts"]), "--hidden", str(d["hidden"]),
                                     "--moe-intermediate", str(d["moe_intermediate"]),
                                     "--data", "codes", "--overwrite"])  # fmt: skip
    if not (dst / "ckpt-manifest.json").is_file():
        info["convert_seconds"] = run([*CKPT, "convert", str(src), str(dst), "--tp", str(d["tp"]),
                                       "--workers", str(workers), "--no-progress",
                                       "--overwrite"])  # fmt: skip
    info["bytes_src"] = sum(p.stat().st_size for p in shards(src))
    info["bytes_dst"] = sum(p.stat().st_size for p in shards(dst))
    return src, dst, info


def evict(files: list[Path]) -> None:
    """Drop these files' pages from the page cache (clean pages only: sync first)."""
    os.sync()
    for p in files:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def time_cat(files: list[Path]) -> float:
    t = time.perf_counter()
    with open(os.devnull, "wb") as null:
        subprocess.run(["cat", *map(str, files)], check=True, stdout=null)
    return time.perf_counter() - t


def sweep_lossless(plan, cat, dst: Path, files: list[Path], nbytes: int, repeat: int) -> list[dict]:  # type: ignore[no-untyped-def]
    """Warm ratio against ``cat`` per (chunk size, compare, workers): the defaults' evidence."""
    from checkpoint_tool.verify import chunks
    from checkpoint_tool.verify.lossless import check_lossless

    default = (chunks.CHUNK, chunks.COMPARE)
    cores = len(os.sched_getaffinity(0))
    rows = []
    for chunk, compare, workers in [(256 << 10, "memcmp", cores), (1 << 20, "memcmp", cores),
                                    (256 << 10, "numpy", cores), (1 << 20, "numpy", cores),
                                    (4 << 20, "numpy", cores), (1 << 20, "numpy", max(1, cores // 2)),
                                    (1 << 20, "numpy", max(1, cores // 4))]:  # fmt: skip
        chunks.CHUNK, chunks.COMPARE = chunk, compare
        cats, checks = [], []
        for _ in range(repeat):  # alternate, as the headline figures do
            cats.append(time_cat(files))
            t = time.perf_counter()
            check_lossless(plan, cat, dst, workers=workers)
            checks.append(time.perf_counter() - t)
        c, v = statistics.median(cats), statistics.median(checks)
        rows.append({"chunk": chunk, "compare": compare, "workers": workers,
                     "cat_seconds": [round(x, 3) for x in cats],
                     "verify_seconds": [round(x, 3) for x in checks],
                     "ratio": round(c / v, 3)})  # fmt: skip
        print(f"  sweep chunk {chunk >> 10:5d} KiB {compare:6s} {workers:2d} workers: "
              f"cat {nbytes / c / 1e9:5.2f} GB/s, verify {nbytes / v / 1e9:5.2f} GB/s, "
              f"ratio {c / v:.2f} (medians of {repeat})", flush=True)  # fmt: skip
    chunks.CHUNK, chunks.COMPARE = default
    return rows


def lossless(src: Path, dst: Path, *, workers: int | None, repeat: int, cold: bool,
             sweep: bool = False) -> dict:  # fmt: skip
    from checkpoint_tool.catalog import open_catalog
    from checkpoint_tool.verify.lossless import check_lossless, default_workers
    from checkpoint_tool.verify.replan import rebuild_plan, require_manifest

    files = shards(src, dst)
    nbytes = sum(p.stat().st_size for p in files)
    t = time.perf_counter()
    cat = open_catalog(str(src), headers_only=False)
    plan, _ = rebuild_plan(require_manifest(dst), cat)
    plan_s = time.perf_counter() - t
    out: dict = {"bytes_read": nbytes, "plan_seconds": round(plan_s, 3),
                 "workers": workers or default_workers()}  # fmt: skip
    modes = ["warm", "cold"] if cold else ["warm"]
    for mode in modes:
        cats, checks = [], []
        if mode == "warm":
            time_cat(files)  # fill the page cache
        for _ in range(repeat):
            if mode == "cold":
                evict(files)
            cats.append(time_cat(files))
            if mode == "cold":
                evict(files)
            t = time.perf_counter()
            report = check_lossless(plan, cat, dst, workers=workers)
            checks.append(time.perf_counter() - t)
            assert report.status == "passed", report.mismatches[:3]
        c, v = statistics.median(cats), statistics.median(checks)
        out[mode] = {
            "cat_seconds": [round(x, 3) for x in cats],
            "verify_seconds": [round(x, 3) for x in checks],
            "cat_gb_s": round(nbytes / c / 1e9, 3),
            "verify_gb_s_read": round(nbytes / v / 1e9, 3),
            "ratio": round(c / v, 3),
        }
    if sweep:
        out["sweep"] = sweep_lossless(plan, cat, dst, files, nbytes, repeat)
    cli = [*CKPT, "verify", str(dst), "-s", str(src), "--no-numeric", "--no-progress"]
    if workers:
        cli += ["--workers", str(workers)]
    out["cli_seconds"] = round(run(cli), 3)
    return out


def numeric(src: Path, dst: Path, tokens: list[int], device: str, backend: str,
            profile: Path | None, warm_up: list[int] | None = None) -> dict:  # fmt: skip
    from checkpoint_tool.verify import VerifyOptions, verify_checkpoint

    def one(**kw: object) -> dict:
        options = VerifyOptions(lossless=False, device=device, backend=backend, **kw)
        t = time.perf_counter()
        report = verify_checkpoint(dst, str(src), options)
        wall = time.perf_counter() - t
        assert report.numeric.status == "passed", [r.message for r in report.numeric.layers]
        keys = ("layer", "experts_used", "seconds", "read_seconds", "decode_seconds",
                "reference_seconds", "runtime_seconds", "rel_error")  # fmt: skip
        return {
            "wall_seconds": round(wall, 3),
            "device": report.numeric.device,
            "layers": [{k: getattr(r, k) for k in keys} for r in report.numeric.layers],
        }

    first = one(layers=[1], tokens=tokens[0])  # Triton compiles, CUDA starts
    out: dict = {"device": first["device"], "backend": backend, "first_run": first}
    for n in warm_up or []:  # each token count's kernels compiled before it is timed
        out[f"warm_up_{n}_tokens"] = one(layers=[1], tokens=n)
    for n in tokens:
        if profile is not None and n == tokens[-1]:
            import cProfile
            import pstats

            prof = cProfile.Profile()
            prof.enable()
            out[f"one_layer_{n}_tokens"] = one(layers=[1], tokens=n)
            prof.disable()
            with open(profile, "w") as fh:
                pstats.Stats(prof, stream=fh).sort_stats("cumulative").print_stats(45)
        else:
            out[f"one_layer_{n}_tokens"] = one(layers=[1], tokens=n)
    out["all_layers"] = one(layers="all", tokens=tokens[0])
    return out


def machine() -> dict:
    one, five, _ = os.getloadavg()
    info = {"cpus": len(os.sched_getaffinity(0)), "memory_gib": round(memory_bytes() / 2**30),
            "python": platform.python_version(), "load_1min": one, "load_5min": five}  # fmt: skip
    try:
        import torch

        info["torch"] = torch.__version__
        if torch.cuda.is_available():
            info["gpu"] = torch.cuda.get_device_name(0)
    except ImportError:
        pass
    return info


def print_table(result: dict) -> None:
    b = result["build"]
    print(f"checkpoint: {b['size']} (hidden {b['hidden']}, I {b['moe_intermediate']}, "
          f"{b['experts']} experts, 2 MoE layers, TP {b['tp']}), "
          f"{b['bytes_src'] / 1e9:.2f} GB + {b['bytes_dst'] / 1e9:.2f} GB")  # fmt: skip
    ll = result.get("lossless")
    if ll:
        print(f"lossless ({ll['workers']} workers, plan {ll['plan_seconds']:.2f} s, "
              f"whole command {ll['cli_seconds']:.2f} s)")  # fmt: skip
        print("  cache  cat GB/s  verify GB/s read  ratio")
        for mode in ("warm", "cold"):
            if mode in ll:
                m = ll[mode]
                print(f"  {mode:5s}  {m['cat_gb_s']:8.2f}  {m['verify_gb_s_read']:16.2f}  "
                      f"{m['ratio']:5.2f}x")  # fmt: skip
    nu = result.get("numeric")
    if nu:
        print(f"numeric ({nu['backend']} on {nu['device']})")
        print("  run                  wall s  layer s  read  decode  reference  runtime  experts")
        for key, run_ in nu.items():
            if not isinstance(run_, dict) or "layers" not in run_:
                continue
            for r in run_["layers"]:
                print(f"  {key:20s} {run_['wall_seconds']:6.2f}  {r['seconds']:7.2f}  "
                      f"{r['read_seconds']:4.2f}  {r['decode_seconds']:6.2f}  "
                      f"{r['reference_seconds']:9.2f}  {r['runtime_seconds']:7.2f}  "
                      f"{r['experts_used']:7d}  (layer {r['layer']})")  # fmt: skip
        if ll:
            cat_once = ll["warm"]["cat_seconds"][0]
            print(f"  --layers all: {nu['all_layers']['wall_seconds']:.2f} s; cat of both trees "
                  f"{cat_once:.2f} s")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", choices=["auto", *SIZES], default="auto")
    ap.add_argument("--work", type=Path, default=Path("/tmp/ckpt-bench-verify"))
    ap.add_argument("--workers", type=int, default=None, help="lossless threads (default: auto)")
    ap.add_argument("--convert-workers", type=int, default=min(8, os.cpu_count() or 1))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--cold", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--lossless", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--numeric", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--tokens", default="16,256")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--backend", default="auto", help="auto: triton on a GPU, torch on CPU")
    ap.add_argument("--profile", type=Path, default=None,
                    help="cProfile of the last one-layer run, as text")  # fmt: skip
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument(
        "--sweep",
        action="store_true",
        help="also time the lossless check per chunk size / compare / workers",
    )
    ap.add_argument(
        "--warm-up",
        default="",
        help="token counts run once first (Triton compiles per shape), e.g. 16,256",
    )
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    size = auto_size(args.work) if args.size == "auto" else args.size
    src, dst, info = build(args.work, size, args.convert_workers)
    result: dict = {"machine": machine(), "build": info}
    if args.lossless:
        result["lossless"] = lossless(src, dst, workers=args.workers, repeat=args.repeat,
                                      cold=args.cold, sweep=args.sweep)  # fmt: skip
    if args.numeric:
        import torch

        device = args.device
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        backend = args.backend if args.backend != "auto" else (
            "triton" if device == "cuda" else "torch")  # fmt: skip
        tokens = [int(t) for t in args.tokens.split(",")]
        warm = [int(t) for t in args.warm_up.split(",") if t]
        result["numeric"] = numeric(src, dst, tokens, device, backend, args.profile, warm)
    print_table(result)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
