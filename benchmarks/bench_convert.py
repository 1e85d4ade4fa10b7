"""Benchmark ``ckpt convert``: throughput vs ``cp -r``, peak RSS vs size, a full-size R1 slice.

Sections (all by default; pick with ``--only``):

- ``throughput``: ``ckpt convert SRC DST --tp 1 --workers K`` against ``cp -r SRC DST`` of the
  same source on the same disk, run alternately for ``--rounds`` rounds after one warm-up of
  each (so both read a warm page cache), ``sync`` before every timed run (so neither pays for
  the other's write-back). ``ckpt`` fsyncs every file before renaming it, so ``cp -r; sync`` is
  reported too (the durable baseline), and ``ckpt convert --no-fsync`` (cp-like semantics) is
  timed with one worker. Ratios use the best round of each. Two floors are printed: sha256 of
  the source bytes alone on one thread (the manifest needs the sha256 of every output byte, and
  one file's hash is one sequential stream), and ``cp -r; sync`` for a durable run.
  ``--max-shard-size`` is passed to convert (default 5GB: a 2 GB source becomes one file, so K
  only matters with smaller shards).
- ``cold``: warm **and** cold page cache in the same run, ``ckpt convert --tp 1`` against
  ``cp -r SRC DST && sync``. Cold: ``sync; echo 3 > /proc/sys/vm/drop_caches`` (root) before
  every timed run of either; warm: one untimed read of the source first. ``ckpt`` is also timed
  cold with the source read-ahead off (``CKPT_PREFETCH=0``),
  alternated with the others each round. Best of ``--rounds`` and the spread (min-max) are
  printed: other work on a shared machine moves single runs by tens of percent.
- ``io``: the raw copy loops the executor could use, on the largest source shard (wall and CPU):
  pread+write, pread+sha256+write, the same + ``posix_fadvise(DONTNEED)`` after each chunk to
  start write-back early, ``copy_file_range`` alone (what ``cp`` does), and ``copy_file_range``
  + sha256 of a mapping of the written pages + fadvise, inline or on a helper thread (what ckpt
  does for verbatim runs).
- ``memory``: peak RSS of whole ``ckpt convert`` processes (``/usr/bin/time -v``) for each
  ``--mem-src`` against ``ckpt --version`` (interpreter + imports). Checkpoints with the same
  tensor count are compared (target: equal within 10 % and < 1 GiB): ``--make-wide 8`` builds
  an 8 GB one with the 2 GB one's tensors, wider; ``--make 2 8`` grows by layers, and the
  difference is reported per extra tensor (catalog and plan metadata).
- ``scale``: plan + convert only ``--layers 3,4`` of the sparse full-size DeepSeek-R1 layout
  (163 shards, ~92k tensors, data as file holes): time per phase, bytes read, peak RSS.

Usage::

    # builds random-byte checkpoints of 2 and 8 GB (synth layout, ~2 min), then every section
    .venv/bin/python benchmarks/bench_convert.py --workdir ckbench --make 2 8 --make-wide 8
    # or on existing checkpoints (e.g. from make_bench_data.py)
    .venv/bin/python benchmarks/bench_convert.py --src bench-data/dense-quark-hybrid \\
        --only throughput,io --workers 1,2
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
PY = sys.executable
CKPT = [PY, "-m", "checkpoint_tool"]


def sync() -> None:
    subprocess.run(["sync"], check=True)


def tree_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


#: CPU seconds (user + sys) of the last ``timed`` command and its children
LAST_CPU = [0.0]


def children_cpu() -> float:
    import resource

    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def timed(cmd: list[str] | str, *, shell: bool = False) -> tuple[float, str]:
    """Wall seconds and stdout of ``cmd``; its CPU seconds go to ``LAST_CPU[0]``."""
    sync()
    cpu, t = children_cpu(), time.perf_counter()
    proc = subprocess.run(cmd, shell=shell, check=True, capture_output=True, text=True)
    wall = time.perf_counter() - t
    LAST_CPU[0] = children_cpu() - cpu
    return wall, proc.stdout


def load() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.1f} (1 min) / {five:.1f} (5 min) on {os.cpu_count()} cores"


# -- data ---------------------------------------------------------------------------------------
def width_for(preset: str, layers: int, target_bytes: int) -> tuple[int, int]:
    """Smallest expert width (``moe_intermediate``, a multiple of 256) whose checkpoint with
    ``layers`` layers holds at least ``target_bytes``: same tensors, bigger ones."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from make_bench_data import DENSE_DIMS

    from checkpoint_tool.synth import build_layout

    width = DENSE_DIMS["moe_intermediate"]
    while True:
        dims = {**DENSE_DIMS, "moe_intermediate": width}
        total = sum(s.nbytes for s in build_layout(preset, num_layers=layers, **dims).tensors)
        if total >= target_bytes:
            return width, total
        width += 256


def make_random(
    dst: Path, size_gb: float, preset: str = "quark-hybrid", *, layers: int | None = None
) -> Path:
    """A big checkpoint with the synth layout of ``make_bench_data.py`` (same dims, names,
    config) but random bytes instead of valid codes: the executor only moves bytes, and this
    writes at disk speed instead of tens of MB/s on a busy machine.

    The size grows by adding layers (more tensors); with ``layers`` given, by widening the
    experts instead (the same tensors, bigger)."""
    import numpy as np

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from make_bench_data import DENSE_DIMS, SHARD_SIZE, layers_for

    from checkpoint_tool.synth import data as synth_data
    from checkpoint_tool.synth import synth_checkpoint
    from checkpoint_tool.synth.shards import spec_nbytes

    if (dst / "model.safetensors.index.json").exists():
        print(f"reusing {dst} ({tree_size(dst) / 1e9:.2f} GB)")
        return dst
    rng = np.random.default_rng(0)
    synth_data.DataGenerator.tensor_bytes = lambda self, spec: rng.bytes(spec_nbytes(spec))  # type: ignore[method-assign]
    dims = dict(DENSE_DIMS)
    if layers is None:
        layers, total = layers_for(preset, int(size_gb * 1e9))
    else:
        dims["moe_intermediate"], total = width_for(preset, layers, int(size_gb * 1e9))
    t = time.perf_counter()
    synth_checkpoint(preset, dst, num_layers=layers, shard_size=SHARD_SIZE, overwrite=True,
                     data="codes", **dims)  # fmt: skip
    print(f"built {dst}: {preset}, {layers} layers, experts {dims['moe_intermediate']} wide, "
          f"{total / 1e9:.2f} GB of random tensor bytes in {time.perf_counter() - t:.1f} s")  # fmt: skip
    return dst


# -- throughput ---------------------------------------------------------------------------------
def sha256_floor(src: Path, window: int = 64 << 20) -> float:
    """Seconds to sha256 every byte of the source's files on one thread (warm page cache)."""
    import mmap

    t = time.perf_counter()
    for path in sorted(p for p in src.rglob("*") if p.is_file() and p.stat().st_size):
        with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, prot=mmap.PROT_READ) as m:
            h, view = hashlib.sha256(), memoryview(m)
            for pos in range(0, len(view), window):
                h.update(view[pos : pos + window])
            view.release()
    return time.perf_counter() - t


def throughput(
    src: Path, work: Path, rounds: int, workers: list[int], shard_size: str = "5GB"
) -> None:
    size = tree_size(src)
    out = work / "out"

    def cp() -> float:
        shutil.rmtree(out, ignore_errors=True)
        return timed(["cp", "-r", str(src), str(out)])[0]

    def cp_sync() -> float:
        shutil.rmtree(out, ignore_errors=True)
        return timed(f"cp -r '{src}' '{out}' && sync", shell=True)[0]

    def convert(k: int, *extra: str) -> tuple[float, float]:
        shutil.rmtree(out, ignore_errors=True)
        wall, stdout = timed([*CKPT, "convert", str(src), str(out), "--tp", "1", "--workers",
                              str(k), "--no-progress", "--format", "json",
                              "--max-shard-size", shard_size, *extra])  # fmt: skip
        return wall, json.loads(stdout)["seconds"]

    startup = min(timed([*CKPT, "--version"])[0] for _ in range(2))
    startup_cpu = LAST_CPU[0]
    cp(), convert(1)  # warm-up: source in the page cache for both
    runs: dict[str, list[float]] = {"cp -r": [], "cp -r; sync": []}
    cpu: dict[str, list[float]] = {"cp -r": [], "cp -r; sync": []}
    variants = [(f"K={k}", k, ()) for k in workers] + [("K=1 --no-fsync", 1, ("--no-fsync",))]
    for name, _, _ in variants:
        runs[f"ckpt {name} (process)"] = []
        runs[f"ckpt {name} (execute)"] = []
        cpu[f"ckpt {name} (process)"] = []
    for _ in range(rounds):
        runs["cp -r"].append(cp())
        cpu["cp -r"].append(LAST_CPU[0])
        for name, k, extra in variants:
            wall, execute = convert(k, *extra)
            runs[f"ckpt {name} (process)"].append(wall)
            runs[f"ckpt {name} (execute)"].append(execute)
            cpu[f"ckpt {name} (process)"].append(LAST_CPU[0])
        runs["cp -r; sync"].append(cp_sync())
        cpu["cp -r; sync"].append(LAST_CPU[0])
    shutil.rmtree(out, ignore_errors=True)
    floor = sha256_floor(src)
    print(f"\n== throughput: {src} ({size / 1e9:.2f} GB), {rounds} rounds, "
          f"--max-shard-size {shard_size}, {load()}")  # fmt: skip
    print(f"python + imports (`ckpt --version`): {startup:.2f} s wall, {startup_cpu:.2f} s CPU, "
          "paid once per process")  # fmt: skip
    best = {name: min(v) for name, v in runs.items()}
    for name, values in runs.items():
        cpu_text = f"  CPU {min(cpu[name]):6.2f} s" if name in cpu else ""
        print(f"  {name:<31} best {best[name]:6.2f} s  median {statistics.median(values):6.2f} s"
              f"  {size / best[name] / 1e9:5.2f} GB/s{cpu_text}   rounds "
              f"{[round(v, 2) for v in values]}")  # fmt: skip
    for name, _, _ in variants:
        p, e = best[f"ckpt {name} (process)"], best[f"ckpt {name} (execute)"]
        print(f"  ratio {name}: process/cp {p / best['cp -r']:.2f}, execute/cp "
              f"{e / best['cp -r']:.2f}; process/(cp; sync) {p / best['cp -r; sync']:.2f}, "
              f"execute/(cp; sync) {e / best['cp -r; sync']:.2f}")  # fmt: skip
    print(f"  floors: sha256 of the source bytes on one thread {floor:.2f} s "
          f"(= {floor / best['cp -r']:.2f} x cp -r; one output file's hash is one sequential "
          f"stream), cp -r; sync {best['cp -r; sync']:.2f} s "
          f"(= {best['cp -r; sync'] / best['cp -r']:.2f} x cp -r) for a durable copy")  # fmt: skip
    c1 = min(cpu["ckpt K=1 (process)"]) if "ckpt K=1 (process)" in cpu else float("nan")
    print(f"  CPU seconds (user+sys, best round): ckpt K=1 {c1:.2f} (of which imports "
          f"{startup_cpu:.2f}) vs cp -r {min(cpu['cp -r']):.2f}; on a busy machine wall time "
          "follows CPU time")  # fmt: skip
    k_best = min(workers, key=lambda k: best[f"ckpt K={k} (process)"])
    print(f"  best K: {k_best}  (target: process/cp <= 1.25 with K=1)")


# -- warm and cold page cache -----------------------------------------------------------------
def drop_caches() -> bool:
    """Drop the page cache (root only); False where the system does not allow it."""
    sync()
    try:
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
    except OSError:
        return False
    return True


def cold(src: Path, work: Path, rounds: int, extra: list[str]) -> None:
    size = tree_size(src)
    out = work / "out"
    if not drop_caches():
        print("\n== cold: cannot drop the page cache here (needs root); a source larger than "
              "RAM would be needed instead")  # fmt: skip
        return

    def warm_up() -> None:
        for p in sorted(src.rglob("*")):
            if p.is_file():
                with open(p, "rb") as fh:
                    while fh.read(64 << 20):
                        pass

    def run(cmd: list[str] | str, *, cache: str, env: dict[str, str] | None = None) -> float:
        shutil.rmtree(out, ignore_errors=True)
        if cache == "cold":
            drop_caches()
        else:
            warm_up()
        sync()
        c, t = children_cpu(), time.perf_counter()
        subprocess.run(cmd, shell=isinstance(cmd, str), check=True, capture_output=True,
                       env={**os.environ, **(env or {})})  # fmt: skip
        LAST_CPU[0] = children_cpu() - c
        return time.perf_counter() - t

    cp = f"cp -r '{src}' '{out}' && sync"
    ckpt = [*CKPT, "convert", str(src), str(out), "--tp", "1", "--no-progress", *extra]
    variants: list[tuple[str, list[str] | str, str, dict[str, str] | None]] = [
        ("cp -r && sync, warm", cp, "warm", None),
        ("ckpt convert, warm", ckpt, "warm", None),
        ("cp -r && sync, cold", cp, "cold", None),
        ("ckpt convert, cold", ckpt, "cold", None),
        ("ckpt convert, cold, CKPT_PREFETCH=0", ckpt, "cold", {"CKPT_PREFETCH": "0"}),
    ]
    runs: dict[str, list[float]] = {name: [] for name, *_ in variants}
    cpu: dict[str, list[float]] = {name: [] for name, *_ in variants}
    for _ in range(rounds):
        for name, cmd, cache, env in variants:
            runs[name].append(run(cmd, cache=cache, env=env))
            cpu[name].append(LAST_CPU[0])
    shutil.rmtree(out, ignore_errors=True)
    print(f"\n== cold vs warm: {src} ({size / 1e9:.2f} GB), {rounds} rounds, whole processes, "
          f"{load()}")  # fmt: skip
    best = {name: min(v) for name, v in runs.items()}
    for name, values in runs.items():
        print(f"  {name:<38} best {best[name]:6.2f} s  spread {min(values):.2f}-{max(values):.2f}"
              f" s  {size / best[name] / 1e9:5.2f} GB/s  CPU {min(cpu[name]):5.2f} s")  # fmt: skip
    print("  (CPU = user + sys of the command and its children; on 2 busy cores ckpt's wall "
          "time follows its CPU time, cp's does not)")
    for cache in ("warm", "cold"):
        r = best[f"ckpt convert, {cache}"] / best[f"cp -r && sync, {cache}"]
        print(f"  ratio {cache}: ckpt / (cp -r && sync) = {r:.2f}  (target <= 1.10)")
    r0 = best["ckpt convert, cold, CKPT_PREFETCH=0"] / best["cp -r && sync, cold"]
    print(f"  ratio cold without read-ahead: {r0:.2f}")


# -- raw I/O loops ------------------------------------------------------------------------------
def io_loops(src: Path, work: Path, rounds: int, chunk: int = 64 << 20) -> None:
    import mmap
    import resource
    from concurrent.futures import ThreadPoolExecutor

    kicker = ThreadPoolExecutor(1)
    shard = max(src.glob("*.safetensors"), key=lambda p: p.stat().st_size)
    size = shard.stat().st_size
    dst = work / "io.bin"

    def self_cpu() -> float:
        r = resource.getrusage(resource.RUSAGE_SELF)
        return r.ru_utime + r.ru_stime

    def loop(kind: str) -> tuple[float, float]:
        dst.unlink(missing_ok=True)
        sync()
        t, c = time.perf_counter(), self_cpu()
        fi = os.open(shard, os.O_RDONLY)
        fo = os.open(dst, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        buf = memoryview(bytearray(chunk))
        h, pos = hashlib.sha256(), 0
        kicks: list = []
        while pos < size:
            n = min(chunk, size - pos)
            if kind.startswith("copy_file_range"):
                done = 0
                while done < n:
                    done += os.copy_file_range(fi, fo, n - done, pos + done, pos + done)
                if "sha256" in kind:  # hash the written pages through a mapping (no copy)
                    with mmap.mmap(fo, n, prot=mmap.PROT_READ, offset=pos,
                                   flags=mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)) as m:  # fmt: skip
                        h.update(m)
            else:
                os.preadv(fi, [buf[:n]], pos)
                if "sha256" in kind:
                    h.update(buf[:n])
                os.pwrite(fo, buf[:n], pos)
            if "fadvise(thread)" in kind:  # start write-back now, without waiting for it
                kicks.append(kicker.submit(os.posix_fadvise, fo, pos, n, os.POSIX_FADV_DONTNEED))
            elif "fadvise" in kind:  # start write-back now
                os.posix_fadvise(fo, pos, n, os.POSIX_FADV_DONTNEED)
            pos += n
        for kick in kicks:
            kick.result()
        os.fsync(fo)
        os.close(fi), os.close(fo)
        return time.perf_counter() - t, self_cpu() - c

    kinds = ["pread+write", "pread+sha256+write", "pread+sha256+write+fadvise",
             "copy_file_range", "copy_file_range+sha256(mmap)+fadvise",
             "copy_file_range+sha256(mmap)+fadvise(thread)"]  # fmt: skip
    loop(kinds[0])
    res = {k: [loop(k) for _ in range(rounds)] for k in kinds}
    dst.unlink(missing_ok=True)
    print(f"\n== raw I/O loops on {shard.name} ({size / 1e9:.2f} GB, 64 MiB chunks, fsync), "
          f"best of {rounds}, {load()}")  # fmt: skip
    for k, v in res.items():
        wall, cpu = min(w for w, _ in v), min(c for _, c in v)
        print(f"  {k:<46} wall {wall:6.2f} s ({size / wall / 1e9:5.2f} GB/s)  CPU {cpu:5.2f} s")
    print(
        "  ckpt: copy_file_range + sha256(mmap) + fadvise(thread) for verbatim runs >= 1 MiB, "
        "pread + sha256 + pwrite + fadvise(thread) for the rest (no fadvise with --no-fsync)"
    )


# -- memory -------------------------------------------------------------------------------------
def max_rss(cmd: list[str]) -> tuple[int, float]:
    """Peak RSS (bytes) and wall time of ``cmd`` under ``/usr/bin/time -v``."""
    sync()
    t = time.perf_counter()
    proc = subprocess.run(["/usr/bin/time", "-v", *cmd], capture_output=True, text=True, check=True)
    wall = time.perf_counter() - t
    m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", proc.stderr)
    assert m, proc.stderr[-500:]
    return int(m.group(1)) * 1024, wall


def memory(sources: list[Path], work: Path, budget: str | None) -> None:
    base, _ = max_rss([*CKPT, "--version"])
    print(f"\n== peak RSS (/usr/bin/time -v), {load()}")
    print(f"  ckpt --version (interpreter + imports): {base / 2**20:7.1f} MiB")
    peaks = []
    counts = []
    for src in sources:
        out = work / "mem-out"
        shutil.rmtree(out, ignore_errors=True)
        extra = ["--memory-budget", budget] if budget else []
        rss, wall = max_rss([*CKPT, "convert", str(src), str(out), "--tp", "1", "--no-progress",
                             *extra])  # fmt: skip
        size = tree_size(src)
        shutil.rmtree(out, ignore_errors=True)
        index = json.loads((src / "model.safetensors.index.json").read_text())
        peaks.append(rss)
        counts.append(len(index["weight_map"]))
        print(f"  convert {src.name} ({size / 1e9:5.2f} GB, {counts[-1]} tensors): peak RSS "
              f"{rss / 2**20:7.1f} MiB ({(rss - base) / 2**20:+.1f} MiB over the interpreter), "
              f"{wall:.1f} s")  # fmt: skip
    # compare checkpoints with the same tensor count (memory vs bytes), then say what each
    # extra tensor costs (plan and catalog metadata grow with the tensor count, not the bytes)
    for count in sorted(set(counts)):
        group = [p for p, c in zip(peaks, counts, strict=True) if c == count]
        if len(group) > 1:
            spread = max(group) / min(group) - 1
            ok = spread <= 0.10 and max(group) < 2**30
            print(f"  {count} tensors each: spread {spread * 100:.1f} % (target <= 10 %), max "
                  f"{max(group) / 2**20:.1f} MiB (target < 1024 MiB): "
                  f"{'met' if ok else 'NOT met'}")  # fmt: skip
    if len(set(counts)) > 1:
        lo, hi = counts.index(min(counts)), counts.index(max(counts))
        per = (peaks[hi] - peaks[lo]) / (counts[hi] - counts[lo])
        spread = peaks[hi] / peaks[lo] - 1
        print(f"  {counts[lo]} -> {counts[hi]} tensors: +{spread * 100:.1f} % peak RSS, "
              f"{per / 1024:.1f} KiB per extra tensor (catalog + plan metadata)")  # fmt: skip


# -- scale --------------------------------------------------------------------------------------
def rchar() -> int:
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    return 0


def scale(work: Path) -> None:
    import resource

    from checkpoint_tool.catalog import open_catalog
    from checkpoint_tool.execute import execute_plan
    from checkpoint_tool.plan.build import plan_for_catalog
    from checkpoint_tool.plan.model import PlanOptions
    from checkpoint_tool.synth import synth_checkpoint

    r1 = work / "deepseek-r1-sparse"
    if not (r1 / "model.safetensors.index.json").exists():
        t = time.perf_counter()
        synth_checkpoint("deepseek-v3-fp8", r1, sparse=True, overwrite=True)
        print(f"built the sparse R1 layout in {time.perf_counter() - t:.1f} s")
    logical = sum(p.stat().st_size for p in r1.glob("*.safetensors"))
    out = work / "r1-layers-3-4"
    shutil.rmtree(out, ignore_errors=True)
    read0, t0 = rchar(), time.perf_counter()
    cat = open_catalog(r1)
    t1 = time.perf_counter()
    plan = plan_for_catalog(cat, PlanOptions(tp=8, layers=[3, 4]))
    t2 = time.perf_counter()
    report = execute_plan(plan, cat, out, progress=False)
    t3 = time.perf_counter()
    read = rchar() - read0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(f"\n== scale: --layers 3,4 --tp 8 of the full-size DeepSeek-R1 layout, {load()}")
    print(f"  source: {len(cat.files)} shards, {len(cat.tensors)} tensors, {logical / 1e9:.0f} GB")
    print(f"  catalog {t1 - t0:.2f} s, plan {t2 - t1:.2f} s ({plan.tensor_count()} tensors in "
          f"{len(plan.files)} file(s)), execute {t3 - t2:.2f} s; total {t3 - t0:.2f} s")  # fmt: skip
    print(f"  written {report.total_size / 1e9:.2f} GB of tensors; read {read / 1e9:.2f} GB "
          f"({read / logical * 100:.2f} % of the source); peak RSS {peak / 2**20:.0f} MiB")  # fmt: skip
    shutil.rmtree(out, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--src", type=Path, help="checkpoint for throughput/io (>= 2 GB)")
    ap.add_argument("--mem-src", type=Path, nargs="*", default=[], help="checkpoints for memory")
    ap.add_argument("--memory-budget", default=None, help="pass --memory-budget to convert")
    ap.add_argument(
        "--workdir", type=Path, default=Path(tempfile.gettempdir()) / "ckpt-bench-convert"
    )
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workers", default="1,2,4")
    ap.add_argument("--only", default="throughput,cold,io,memory,scale")
    ap.add_argument("--max-shard-size", default="5GB", help="passed to convert (throughput)")
    ap.add_argument(
        "--make",
        type=float,
        nargs="*",
        metavar="GB",
        help="build random-byte checkpoints of these sizes into WORKDIR/random-<GB>gb "
        "and use them (first: --src; all: --mem-src)",
    )
    ap.add_argument(
        "--make-wide",
        type=float,
        nargs="*",
        metavar="GB",
        help="for memory: build checkpoints of these sizes with the same tensors as the "
        "smallest (wider experts instead of more layers) into WORKDIR/wide-<GB>gb",
    )
    args = ap.parse_args()
    if args.make:
        made = [make_random(args.workdir / f"random-{gb:g}gb", gb) for gb in args.make]
        args.src = args.src or made[0]
        args.mem_src = args.mem_src or made
    if args.make_wide:
        sys.path.insert(0, str(ROOT / "benchmarks"))
        from make_bench_data import layers_for

        smallest = min([*(args.make or []), *args.make_wide])  # the tensors of the smallest
        layers, _ = layers_for("quark-hybrid", int(smallest * 1e9))
        wide = [
            make_random(args.workdir / f"wide-{gb:g}gb", gb, layers=layers) for gb in args.make_wide
        ]
        args.mem_src = [*args.mem_src, *wide]
    args.workdir.mkdir(parents=True, exist_ok=True)
    only = set(args.only.split(","))
    workers = [int(k) for k in args.workers.split(",")]
    free = shutil.disk_usage(args.workdir).free
    need = 2 * max([tree_size(p) for p in [args.src, *args.mem_src] if p] or [0])
    if free < need:
        print(f"not enough free disk in {args.workdir}: {free / 1e9:.1f} GB < {need / 1e9:.1f} GB")
        return 1
    if "throughput" in only and args.src:
        throughput(args.src, args.workdir, args.rounds, workers, args.max_shard_size)
    if "cold" in only and args.src:
        cold(args.src, args.workdir, args.rounds, ["--max-shard-size", args.max_shard_size])
    if "io" in only and args.src:
        io_loops(args.src, args.workdir, args.rounds)
    if "memory" in only and args.mem_src:
        memory(args.mem_src, args.workdir, args.memory_budget)
    if "scale" in only:
        scale(args.workdir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
