"""The cost of recording and checking a source's identity (``execute.source_identity``).

Every run (fresh, ``--resume``, ``--part``, ``--finalize``) computes each local shard's
identity when it opens the source: size and mtime (one ``fstat``), the sha256 of the header
(already read to check the catalog) and a content id: the whole shard's sha256 up to
``FULL_HASH_MAX`` (32 MiB), else 16 blocks of 64 KiB. This prints, for shards of the given
sizes (random bytes, written once into ``--dir``): the content id's time, the bytes it reads,
and the time of a full sha256 of the shard (what ``--hash-source`` pays, and what a content id
of every byte would cost on every run), page cache warm. With ``--cold`` (root) the page cache
is dropped before each measurement.

Example::

    python benchmarks/bench_source_identity.py --sizes-mib 8 32 256 1024 --dir /tmp/sid
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import time
from pathlib import Path

from checkpoint_tool.execute.source_identity import (
    FULL_HASH_MAX,
    SAMPLE_BYTES,
    SAMPLES,
    content_id,
)


def _make(path: Path, size: int) -> None:
    if path.exists() and path.stat().st_size == size:
        return
    with open(path, "wb") as fh:
        left = size
        while left:
            n = min(left, 64 << 20)
            fh.write(os.urandom(n))
            left -= n


def _full_sha256(path: Path) -> str:
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def _drop_caches() -> None:
    subprocess.run(["sync"], check=True)
    Path("/proc/sys/vm/drop_caches").write_text("3\n")


def _timed(fn, cold: bool) -> float:  # type: ignore[no-untyped-def]
    best = float("inf")
    for _ in range(3):
        if cold:
            _drop_caches()
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes-mib", type=int, nargs="+", default=[8, 32, 256, 1024])
    ap.add_argument("--dir", type=Path, default=Path("bench-source-identity"))
    ap.add_argument("--cold", action="store_true", help="drop the page cache first (root)")
    args = ap.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    print(f"content id: full sha256 up to {FULL_HASH_MAX >> 20} MiB, else {SAMPLES} x "
          f"{SAMPLE_BYTES >> 10} KiB; best of 3, {'cold' if args.cold else 'warm'} cache")  # fmt: skip
    print(f"{'shard':>10} {'content id':>12} {'id reads':>10} {'full sha256':>12}")
    for mib in args.sizes_mib:
        path, size = args.dir / f"shard-{mib}MiB.bin", mib << 20
        _make(path, size)
        fd = os.open(path, os.O_RDONLY)
        try:
            t_id = _timed(lambda: content_id(fd, size), args.cold)  # noqa: B023
            t_full = _timed(lambda: _full_sha256(path), args.cold)  # noqa: B023
        finally:
            os.close(fd)
        reads = size if size <= FULL_HASH_MAX else SAMPLES * SAMPLE_BYTES
        print(f"{mib:>7}MiB {t_id * 1e3:>10.2f}ms {reads >> 10:>8}KiB {t_full * 1e3:>10.1f}ms")


if __name__ == "__main__":
    main()
