"""A requantizing conversion killed at random points, then resumed: byte-identical output.

The killed runs are ``ckpt convert`` child processes (SIGKILL at a fault point,
``$CKPT_FAULT_KILL_AT``); the resumed run is ``ckpt convert --resume``.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
from pathlib import Path

from checkpoint_tool.execute import execute_plan, faults
from checkpoint_tool.plan.model import PlanOptions
from tests.execute.helpers import tree_bytes
from tests.requant.conftest import FSE_TARGET

KILL_ENV = "CKPT_FAULT_KILL_AT"
SHARD = 1_000_000  # several output files


def _convert(src: Path, dst: Path, *extra: str, kill_at: int | None = None) -> int:
    env = dict(os.environ)
    env.pop(KILL_ENV, None)
    if kill_at is not None:
        env[KILL_ENV] = str(kill_at)
    argv = [sys.executable, "-m", "checkpoint_tool", "convert", str(src), str(dst), "--target",
            FSE_TARGET, "--max-shard-size", str(SHARD), "--requantize-shared", "mxfp4",
            "--requantize-layers", "1-2", "--no-progress", *extra]  # fmt: skip
    return subprocess.run(argv, env=env, capture_output=True).returncode


def test_kill_then_resume_is_byte_identical(hybrid: Path, tmp_path: Path) -> None:
    from checkpoint_tool.cli.session import open_plan
    from checkpoint_tool.requant.select import RequantRequest

    catalog, plan = open_plan(
        str(hybrid),
        PlanOptions(target=FSE_TARGET, max_shard_size=SHARD),
        recipe=None,
        headers_only=False,
        requant=RequantRequest.parse("mxfp4", "1-2", None),
    )
    assert len(plan.files) > 2
    os.environ[KILL_ENV] = str(10**9)  # count the fault points, never kill
    faults.reset()
    try:
        execute_plan(plan, catalog, tmp_path / "ref", progress=False)
        points = faults._count
    finally:
        del os.environ[KILL_ENV]
    ref = tree_bytes(tmp_path / "ref")
    rng = random.Random(24)
    for k in sorted({2, points // 2, rng.randrange(3, points - 1)}):
        dst = tmp_path / f"k{k}"
        assert _convert(hybrid, dst, kill_at=k) == -signal.SIGKILL, k
        assert _convert(hybrid, dst, "--resume") == 0, k
        assert tree_bytes(dst) == ref, f"kill point {k}"
