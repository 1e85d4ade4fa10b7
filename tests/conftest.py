"""Shared test fixtures.

``synth_ckpt(preset, **opts) -> Path`` builds a synthetic checkpoint with
``checkpoint_tool.synth.synth_checkpoint`` once per session and per (preset, options), in a
session tmp dir. The folders are shared between tests: treat them as read-only (copy one
with ``shutil.copytree`` before modifying it).

Example::

    def test_inspect_hybrid(synth_ckpt):
        src = synth_ckpt("quark-hybrid")                         # tiny, seed 0
        r1 = synth_ckpt("deepseek-v3-fp8", sparse=True)           # full-size R1 layout, holes
        small = synth_ckpt("quark-mxfp4", n_routed=4, shard_size=200_000)
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def synth_ckpt(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Path]:
    from checkpoint_tool.synth import synth_checkpoint

    cache: dict[str, Path] = {}

    def make(preset: str, **opts: object) -> Path:
        key = json.dumps([preset, opts], sort_keys=True, default=str)
        if key not in cache:
            dst = tmp_path_factory.mktemp(f"synth-{preset}") / "ckpt"
            cache[key] = synth_checkpoint(preset, dst, **opts)
        return cache[key]

    return make


@pytest.fixture
def fresh_cli() -> Callable[..., tuple[object, bool, str]]:
    """Run ``ckpt *argv`` through ``cli.app.main`` in a new interpreter.

    Returns ``(exit code, whether torch was imported, stderr)``: the commands that only read
    headers or move bytes must not pay ~2 s for importing torch.
    """
    import subprocess
    import sys

    def run(*argv: str) -> tuple[object, bool, str]:
        probe = (
            "import sys\n"
            "from checkpoint_tool.cli.app import main\n"
            f"sys.argv = ['ckpt', *{list(argv)!r}]\n"
            "code = 0\n"
            "try:\n"
            "    main()\n"
            "except SystemExit as exc:\n"
            "    code = exc.code\n"
            "print('PROBE', 'torch' in sys.modules, code, file=sys.stderr)\n"
        )
        proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
        last = proc.stderr.strip().splitlines()[-1].split() if proc.stderr.strip() else []
        if len(last) != 3 or last[0] != "PROBE":
            raise AssertionError(f"the probe did not finish: {proc.stderr[-2000:]}")
        code = None if last[2] == "None" else int(last[2])
        return code, last[1] == "True", proc.stderr

    return run
