"""The golden cases: every synth preset through ``ckpt plan`` and ``ckpt inspect``.

Shared by ``test_golden.py`` (compares) and ``regen.py`` (rewrites ``data/``). Each case is
one CLI run on a tiny synthetic checkpoint; its stdout is kept byte for byte, gzipped, with
the checkpoint's folder replaced by ``<SRC>`` (only ``inspect`` prints it). Plans also record
``plan_sha256`` of the plan the JSON holds, in ``data/plan_sha256.json``.

Example::

    outs = run_cases(Path("scratch"))
    outs["quark-hybrid.plan-tp2-pad.json"][:40]   # b'{\n  "ckpt_version": "0.1.0",\n  "config"'
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import sys
from pathlib import Path
from typing import NamedTuple

DATA = Path(__file__).with_name("data")
SHA_FILE = DATA / "plan_sha256.json"
#: the stand-in for the checkpoint folder in outputs that print it
SRC_MARK = "<SRC>"


class Case(NamedTuple):
    """One CLI run: ``build`` names the synth options, ``argv`` follows ``ckpt CMD SRC``."""

    suffix: str
    command: str
    build: str
    argv: tuple[str, ...]


#: synth options per build: the preset defaults, and an expert width (160) that TP 2 splits
#: into 80 per rank, which the schemes pad
BUILDS: dict[str, dict[str, object]] = {"default": {}, "pad": {"moe_intermediate": 160}}

CASES = (
    Case("plan-tp1", "plan", "default", ()),
    Case("plan-tp2-pad", "plan", "pad", ("--tp", "2")),
    Case("inspect", "inspect", "default", ()),
)


def presets() -> list[str]:
    from checkpoint_tool.synth import PRESETS

    return sorted(PRESETS)


def golden_name(preset: str, case: Case) -> str:
    return f"{preset}.{case.suffix}.json"


def run_cli(*argv: str) -> tuple[int, str, str]:
    """Exit code, stdout and stderr of ``ckpt *argv`` run in this process."""
    from checkpoint_tool.cli.app import main

    saved = sys.argv
    sys.argv = ["ckpt", *argv]
    out, err = io.StringIO(), io.StringIO()
    code: object = 0
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            main()
    except SystemExit as exc:
        code = exc.code or 0
    finally:
        sys.argv = saved
    return int(code), out.getvalue(), err.getvalue()  # type: ignore[call-overload]


def build_sources(root: Path) -> dict[tuple[str, str], Path]:
    """Every preset under every build, written below ``root``: ``(preset, build) -> folder``."""
    from checkpoint_tool.synth import synth_checkpoint

    return {
        (p, b): synth_checkpoint(p, root / b / p, **opts)
        for p in presets()
        for b, opts in BUILDS.items()
    }


def run_case(src: Path, case: Case) -> bytes:
    """The case's stdout on ``src``, the folder's path replaced by ``SRC_MARK``."""
    code, out, err = run_cli(case.command, str(src), *case.argv, "--format", "json")
    if code != 0:
        raise AssertionError(f"ckpt {case.command} {src} {case.argv}: exit {code}: {err}")
    return out.replace(str(src), SRC_MARK).encode("utf-8")


def plan_sha(out: bytes) -> str:
    from checkpoint_tool.plan.serialize import plan_load, plan_sha256

    return plan_sha256(plan_load(json.loads(out)))


def run_cases(root: Path) -> dict[str, bytes]:
    """Every case's output, by golden file name (without ``.gz``)."""
    sources = build_sources(root)
    return {golden_name(p, c): run_case(sources[(p, c.build)], c) for p in presets() for c in CASES}


def read_golden(name: str) -> bytes:
    return gzip.decompress((DATA / f"{name}.gz").read_bytes())


def write_golden(name: str, data: bytes) -> None:
    (DATA / f"{name}.gz").write_bytes(gzip.compress(data, compresslevel=9, mtime=0))
