"""Kill ``ckpt convert`` at every crash point, through the CLI, on a synthesized checkpoint.

The longer sibling of ``tests/execute/test_crash_points.py``: real processes (``python -m
checkpoint_tool``), a real checkpoint (``ckpt synth``), fsync on. For each mode, kill point
k = 1, 2, ... (``CKPT_FAULT_KILL_AT``, ``execute.faults``) until the command finishes without
reaching k; after each kill, rerun the same command, and if it refuses (exit 2, one line),
the command it names (``--resume``, ``--overwrite``, ``--part I/N --resume``); the result must
be byte-identical to an uninterrupted run. Modes: ``fresh``, ``workers`` (``-j 2``: the kill
lands on a thread-dependent step), ``overwrite`` (over an output of other options), ``part``
(part 0 of 2, then part 1 and ``--finalize``), ``finalize``.

Example (about 2 s a kill point on 2 cores)::

    python benchmarks/crash_sweep.py --work /tmp/sweep --modes fresh overwrite --stride 1
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

OPTS = ["--tp", "2", "--max-shard-size", "1MB", "--no-progress"]


def ckpt(*argv: str, kill: int | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.pop("CKPT_FAULT_KILL_AT", None)
    if kill is not None:
        env["CKPT_FAULT_KILL_AT"] = str(kill)
    cmd = [sys.executable, "-m", "checkpoint_tool", *argv]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)


def tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def recover(cmd: list[str], dst: str) -> None:
    """The same command; on a one-line refusal, what it names."""
    r = ckpt(*cmd)
    if r.returncode == 0:
        return
    err = r.stderr.strip()
    assert r.returncode == 2 and "\n" not in err, err
    if "--part" in cmd and "--resume" in err:
        follow = [*cmd, "--resume"]
    elif "--resume" in err and "--overwrite" not in cmd:
        follow = [*cmd, "--resume"]
    elif "--overwrite" in err:
        follow = [c for c in cmd if c != "--resume"] + ["--overwrite"]
    else:
        raise AssertionError(f"no command named: {err}")
    r = ckpt(*follow)
    assert r.returncode == 0, r.stderr


def sweep(name: str, setup, cmd, after, ref: dict[str, bytes], stride: int) -> int:  # type: ignore[no-untyped-def]
    """Kill ``cmd(dst)`` at k = 1, 1 + stride, ... until it finishes; the points swept."""
    k, swept = 1, 0
    while True:
        dst = setup(k)
        r = ckpt(*cmd(dst), kill=k)
        if r.returncode == 0:
            return swept
        assert r.returncode == -9, (name, k, r.returncode, r.stderr)
        recover(cmd(dst), dst)
        after(dst)
        assert tree(Path(dst)) == ref, (name, k)
        swept += 1
        k += stride


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", type=Path, default=Path("crash-sweep"))
    ap.add_argument("--preset", default="quark-hybrid")
    ap.add_argument("--modes", nargs="+",
                    default=["fresh", "workers", "overwrite", "part", "finalize"])  # fmt: skip
    ap.add_argument("--stride", type=int, default=1)
    args = ap.parse_args()
    work = args.work
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    src = str(work / "src")
    r = ckpt("synth", args.preset, src)
    assert r.returncode == 0, r.stderr
    ref_dst = str(work / "ref")
    assert ckpt("convert", src, ref_dst, *OPTS).returncode == 0
    ref = tree(Path(ref_dst))
    old = str(work / "old")  # an output of other options, for --overwrite
    assert ckpt("convert", src, old, "--tp", "1", "--no-progress").returncode == 0
    parts_base = str(work / "parts-base")
    assert ckpt("convert", src, parts_base, *OPTS, "--part", "0/2").returncode == 0
    assert ckpt("convert", src, parts_base, *OPTS, "--part", "1/2").returncode == 0

    def fresh_dst(k: int) -> str:
        return str(work / "runs" / f"k{k}")

    def copy_of(base: str):  # type: ignore[no-untyped-def]
        def setup(k: int) -> str:
            dst = fresh_dst(k)
            shutil.rmtree(dst, ignore_errors=True)
            shutil.copytree(base, dst)
            return dst

        return setup

    def then_part1_and_finalize(dst: str) -> None:
        assert ckpt("convert", src, dst, *OPTS, "--part", "1/2").returncode == 0
        assert ckpt("convert", src, dst, *OPTS, "--finalize").returncode == 0

    modes = {
        "fresh": (fresh_dst, lambda d: ["convert", src, d, *OPTS], lambda d: None),
        "workers": (fresh_dst, lambda d: ["convert", src, d, *OPTS, "-j", "2"], lambda d: None),
        "overwrite": (copy_of(old), lambda d: ["convert", src, d, *OPTS, "--overwrite"],
                      lambda d: None),
        "part": (fresh_dst, lambda d: ["convert", src, d, *OPTS, "--part", "0/2"],
                 then_part1_and_finalize),
        "finalize": (copy_of(parts_base), lambda d: ["convert", src, d, *OPTS, "--finalize"],
                     lambda d: None),
    }  # fmt: skip
    total = 0
    for name in args.modes:
        setup, cmd, after = modes[name]
        t = time.monotonic()
        n = sweep(name, setup, cmd, after, ref, args.stride)
        total += n
        print(f"{name:>10}: {n} crash points recovered byte-identical "
              f"({time.monotonic() - t:.0f} s)", flush=True)  # fmt: skip
        shutil.rmtree(work / "runs", ignore_errors=True)
    print(f"{'all':>10}: {total} crash points")


if __name__ == "__main__":
    main()
