"""Benchmark remote sources against the loopback hub server (``tests/remote/hub_server.py``).

1. **Header-only remote inspect** of the full-size DeepSeek-R1 layout (``ckpt synth
   deepseek-v3-fp8 DST --sparse``: 163 shards, 92k tensors, ~690 GB logical) served as
   ``hf://bench/r1``: bytes transferred (the command's own count and the server's) against the
   bytes that must be read (config + index + every shard's length prefix and header), and the
   command's wall time against ``ckpt inspect`` of the local folder, same run.
2. **Streaming remote convert** of a dense (real-data) checkpoint served as
   ``hf://bench/dense``: ``ckpt convert hf://bench/dense DST --tp 1 --no-fsync`` against
   downloading the same files with ``hf_hub_download`` one by one (and with
   ``snapshot_download(max_workers=8)``), each in a fresh process and a fresh cache; peak RSS
   of the convert; outputs compared to a local conversion (must be byte-identical).

The server runs in this process (threads); every client is a subprocess. Loopback numbers
measure ckpt's own overheads (request count, parsing, copies), not a WAN.

Usage::

    .venv/bin/python benchmarks/bench_remote.py                          # builds the data in the temp folder
    .venv/bin/python benchmarks/bench_remote.py --r1 bench-data/deepseek-r1-sparse --dense bench-data/dense-quark-hybrid
    .venv/bin/python benchmarks/bench_remote.py --skip-convert
"""

from __future__ import annotations

import argparse
import filecmp
import json
import os
import resource
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.remote.hub_server import HubRepo, HubServer  # noqa: E402

PY = sys.executable
CKPT = [PY, "-c", "from checkpoint_tool.cli.app import run; run()"]


def header_bytes(folder: Path) -> int:
    total = 0
    for p in folder.glob("*.safetensors"):
        with open(p, "rb") as fh:
            total += 8 + struct.unpack("<Q", fh.read(8))[0]
    return total


def run(cmd: list[str], env: dict[str, str]) -> tuple[float, str]:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return wall, proc.stdout


def env_for(endpoint: str, cache: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "CKPT_"))}
    env.update(
        HF_ENDPOINT=endpoint,
        HF_HUB_CACHE=str(cache),
        HF_HUB_DISABLE_TELEMETRY="1",
        HF_HUB_DISABLE_PROGRESS_BARS="1",
        PYTHONPATH=str(ROOT),
    )
    return env


def bench_inspect(r1: Path, tmp: Path, repeat: int) -> None:
    if not (r1 / "config.json").exists():
        from checkpoint_tool.synth import synth_checkpoint

        print(f"building the sparse R1 layout in {r1} ...", flush=True)
        synth_checkpoint("deepseek-v3-fp8", r1, sparse=True)
    need_json = sum(
        (r1 / n).stat().st_size for n in ("config.json", "model.safetensors.index.json")
    )
    need = header_bytes(r1) + need_json
    logical = sum(p.stat().st_size for p in r1.glob("*.safetensors"))
    with HubServer({"bench/r1": HubRepo(r1, hash_lfs=False)}) as hub:
        walls, sent = [], []
        for i in range(repeat):
            env = env_for(hub.endpoint, tmp / f"cache-inspect-{i}")
            before = hub.bytes_sent
            wall, out = run([*CKPT, "inspect", "hf://bench/r1@main", "--format", "json"], env)
            walls.append(wall)
            sent.append(hub.bytes_sent - before)
            reported = json.loads(out)["model"]["bytes_transferred"]
        local = [
            run(
                [*CKPT, "inspect", str(r1), "--format", "json"],
                os.environ | {"PYTHONPATH": str(ROOT)},
            )[0]
            for _ in range(repeat)
        ]
    r, loc = min(walls), min(local)
    print(
        f"R1 layout: {len(list(r1.glob('*.safetensors')))} shards, {logical / 1e9:.0f} GB logical"
    )
    print(
        f"  must read: headers {header_bytes(r1) / 2**20:.2f} MiB + config/index {need_json / 2**20:.2f} MiB = {need / 2**20:.2f} MiB"
    )
    print(
        f"  remote inspect transferred {sent[-1] / 2**20:.2f} MiB (server), {reported / 2**20:.2f} MiB (ckpt's count): {sent[-1] / need:.3f}x the bytes that must be read, {logical / sent[-1]:.0f}x less than the shards"
    )
    print(
        f"  ckpt inspect hf://bench/r1: {r:.2f} s (best of {repeat}); local folder {loc:.2f} s; ratio {r / loc:.2f}x"
    )


def bench_convert(dense: Path, tmp: Path) -> None:
    if not (dense / "config.json").exists():
        print(f"building a dense 1 GB checkpoint in {dense} ...", flush=True)
        subprocess.run(
            [
                PY,
                str(ROOT / "benchmarks/make_bench_data.py"),
                str(dense.parent),
                "--size-gb",
                "1",
                "--skip-sparse",
            ],
            check=True,
        )
        built = dense.parent / "dense-quark-hybrid"
        if built != dense:
            built.rename(dense)
    repo = HubRepo(dense)
    files = repo.names()
    for rel in files:
        repo.content_id(rel)  # the server hashes before the clock starts
    size = sum((dense / f).stat().st_size for f in files)
    shard_bytes = sum((dense / f).stat().st_size for f in files if f.endswith(".safetensors"))
    with HubServer({"bench/dense": repo}) as hub:
        dl = (
            "import sys\nfrom huggingface_hub import hf_hub_download\n"
            f"for f in {files!r}:\n    hf_hub_download('bench/dense', f)\n"
        )
        t_dl, _ = run([PY, "-c", dl], env_for(hub.endpoint, tmp / "cache-dl"))
        snap = "from huggingface_hub import snapshot_download\nsnapshot_download('bench/dense', max_workers=8)\n"
        t_snap, _ = run([PY, "-c", snap], env_for(hub.endpoint, tmp / "cache-snap"))
        out = tmp / "out-remote"
        before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        sent0 = hub.bytes_sent
        t_cv, _ = run(
            [
                *CKPT,
                "convert",
                "hf://bench/dense@main",
                str(out),
                "--tp",
                "1",
                "--no-fsync",
                "--format",
                "json",
            ],
            env_for(hub.endpoint, tmp / "cache-convert"),
        )
        rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        sent = hub.bytes_sent - sent0
    ref = tmp / "out-local"
    t_local, _ = run(
        [*CKPT, "convert", str(dense), str(ref), "--tp", "1", "--no-fsync", "--format", "json"],
        os.environ | {"PYTHONPATH": str(ROOT)},
    )
    same = all(
        filecmp.cmp(ref / p.name, out / p.name, shallow=False) for p in ref.glob("*.safetensors")
    )
    cache_used = sum(p.stat().st_size for p in (tmp / "cache-convert").rglob("*") if p.is_file())
    print(
        f"dense checkpoint: {len(files)} files, {size / 1e9:.2f} GB ({shard_bytes / 1e9:.2f} GB of shards)"
    )
    print(f"  hf_hub_download, file by file: {t_dl:.2f} s ({size / t_dl / 1e6:.0f} MB/s)")
    print(f"  snapshot_download(max_workers=8): {t_snap:.2f} s ({size / t_snap / 1e6:.0f} MB/s)")
    print(
        f"  ckpt convert hf://... --tp 1 --no-fsync: {t_cv:.2f} s ({size / t_cv / 1e6:.0f} MB/s); ratio vs hf_hub_download {t_dl / t_cv:.2f}x, vs snapshot_download {t_snap / t_cv:.2f}x"
    )
    print(f"  local convert of the same folder: {t_local:.2f} s; outputs byte-identical: {same}")
    both = t_dl + t_local
    print(
        f"  download then convert locally (hf_hub_download + local convert): {both:.2f} s; remote convert / that: {t_cv / both:.2f}x the time, with no local copy of the shards"
    )
    print(
        f"  server sent {sent / 1e9:.3f} GB for the convert run ({sent / size:.3f}x the files); local disk besides DST: {cache_used / 2**20:.2f} MiB; peak RSS of the convert <= {max(rss, before) / 1024:.0f} MiB"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--r1", type=Path, default=Path(tempfile.gettempdir()) / "ckpt-bench-r1")
    ap.add_argument(
        "--dense", type=Path, default=Path(tempfile.gettempdir()) / "ckpt-bench-remote" / "dense"
    )
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--skip-inspect", action="store_true")
    ap.add_argument("--skip-convert", action="store_true")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="ckpt-bench-remote-"))
    try:
        if not args.skip_inspect:
            bench_inspect(args.r1, tmp, args.repeat)
        if not args.skip_convert:
            bench_convert(args.dense, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
