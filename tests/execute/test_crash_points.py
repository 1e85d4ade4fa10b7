"""SIGKILL at every crash point of convert (fresh, resume, overwrite, parts, finalize): the same
command, or its ``--resume``, then ends byte-identical to an uninterrupted run, or says in one
line what to run.

The crash points are the executor's fault points (``execute.faults``): after every create,
write, fsync, rename and unlink it does to DST. With one worker they are deterministic, so
``CKPT_FAULT_KILL_AT=k`` for k = 1..N visits each once. The tiny plan keeps the sweep to a few
seconds; ``benchmarks/crash_sweep.py`` runs the same sweep on a synthesized checkpoint through
the CLI.
"""

from __future__ import annotations

import copy
import dataclasses
import os
import shutil
import signal
from collections.abc import Callable
from pathlib import Path

import pytest

from checkpoint_tool.catalog import open_local
from checkpoint_tool.errors import CkptError
from checkpoint_tool.execute import execute_plan, faults
from checkpoint_tool.execute.distributed.parts import execute_part, finalize
from checkpoint_tool.execute.manifest import JOURNAL_NAME, MANIFEST_NAME

from .helpers import tiny_moe_tensors, tiny_plan, tree_bytes, write_source

KILL_ENV = "CKPT_FAULT_KILL_AT"


def count_points(fn: Callable[[], object]) -> int:
    """The fault points ``fn`` passes (run here, never killed)."""
    os.environ[KILL_ENV] = str(10**9)
    faults.reset()
    try:
        fn()
        return faults._count
    finally:
        del os.environ[KILL_ENV]


def killed_at(fn: Callable[[], object], k: int) -> None:
    """Run ``fn`` in a forked child that SIGKILLs itself at fault point ``k``."""
    pid = os.fork()
    if pid == 0:  # child
        code = 0
        try:
            os.environ[KILL_ENV] = str(k)
            faults.reset()
            fn()
        except BaseException:
            code = 3
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, (k, status)


def assert_nothing_half_written(dst: Path, ref: dict[str, bytes]) -> None:
    """Under a final name only complete files of the reference (old outputs aside)."""
    for name, data in tree_bytes(dst).items():
        if name.endswith(".partial") or name.startswith(".ckpt-"):
            continue
        if name in ref and name != MANIFEST_NAME:
            assert data == ref[name], f"{name} is under its final name but differs"


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = write_source(tmp_path_factory.mktemp("src") / "src", tiny_moe_tensors(seed=21))
    plan = tiny_plan(root)
    ref_dst = tmp_path_factory.mktemp("ref") / "dst"
    execute_plan(plan, open_local(root), ref_dst, progress=False)
    return root, plan, tree_bytes(ref_dst)


def _convert(root, plan, dst, **kw):  # type: ignore[no-untyped-def]
    return lambda: execute_plan(plan, open_local(root), dst, progress=False, **kw)


def _again_or_resume(root, plan, dst, ref, **kw) -> None:  # type: ignore[no-untyped-def]
    """The same command; if it refuses, one line naming --resume, then --resume."""
    try:
        _convert(root, plan, dst, **kw)()
    except CkptError as exc:
        assert "\n" not in exc.message and "--resume" in exc.message, exc.message
        _convert(root, plan, dst, resume=True)()
    assert tree_bytes(dst) == ref


def test_every_crash_point_of_a_fresh_run(world, tmp_path):
    root, plan, ref = world
    n = count_points(_convert(root, plan, tmp_path / "count"))
    assert n > 60  # creates, chunks, tensors, fsyncs, renames, journal, side files, manifest
    for k in range(1, n + 1):
        dst = tmp_path / f"k{k}"
        killed_at(_convert(root, plan, dst), k)
        assert_nothing_half_written(dst, ref)
        _again_or_resume(root, plan, dst, ref)


def test_every_crash_point_of_a_resumed_run(world, tmp_path):
    root, plan, ref = world
    interrupted = tmp_path / "interrupted"
    killed_at(_convert(root, plan, interrupted), 40)
    assert (interrupted / JOURNAL_NAME).exists()
    probe = tmp_path / "probe"
    shutil.copytree(interrupted, probe)
    n = count_points(_convert(root, plan, probe, resume=True))
    assert n > 20
    for k in range(1, n + 1, 2):
        dst = tmp_path / f"k{k}"
        shutil.copytree(interrupted, dst)
        killed_at(_convert(root, plan, dst, resume=True), k)
        assert_nothing_half_written(dst, ref)
        _convert(root, plan, dst, resume=True)()
        assert tree_bytes(dst) == ref, k


def _older_output(root, plan, dst) -> None:  # type: ignore[no-untyped-def]
    """A finished output of another plan (one more weight file) in ``dst``."""
    bigger = copy.deepcopy(plan)
    extra = dataclasses.replace(bigger.files[0], name="model-extra.safetensors",
                                tensors=bigger.files[0].tensors[:1])  # fmt: skip
    bigger.files.append(extra)
    bigger.files[0].tensors = bigger.files[0].tensors[1:]
    execute_plan(bigger, open_local(root), dst, progress=False)


def test_every_crash_point_of_an_overwrite(world, tmp_path):
    """Killed anywhere while --overwrite clears an older output or writes the new one: the
    folder is accepted by --overwrite (even k) or --resume (odd k; before the new journal is in
    place DST is still the older output, and --resume says to use --overwrite)."""
    root, plan, ref = world
    old = tmp_path / "old"
    _older_output(root, plan, old)
    probe = tmp_path / "probe"
    shutil.copytree(old, probe)
    n = count_points(_convert(root, plan, probe, overwrite=True))
    assert tree_bytes(probe) == ref
    for k in range(1, n + 1):
        dst = tmp_path / f"k{k}"
        shutil.copytree(old, dst)
        killed_at(_convert(root, plan, dst, overwrite=True), k)
        assert (dst / JOURNAL_NAME).exists() or (dst / MANIFEST_NAME).exists(), k
        if k % 2:  # killed before the new journal: still the old output, which --resume names
            try:
                _convert(root, plan, dst, resume=True)()
            except CkptError as exc:
                assert "\n" not in exc.message and "--overwrite" in exc.message, exc.message
                _convert(root, plan, dst, overwrite=True)()
        else:
            _convert(root, plan, dst, overwrite=True)()
        assert tree_bytes(dst) == ref, k


def _part(root, plan, dst, i, **kw):  # type: ignore[no-untyped-def]
    return lambda: execute_part(plan, open_local(root), dst, i, 2, progress=False, **kw)


def _finalize(root, plan, dst):  # type: ignore[no-untyped-def]
    return lambda: finalize(plan, open_local(root), dst, progress=False)


def test_every_crash_point_of_a_part_and_of_finalize(world, tmp_path):
    root, plan, ref = world
    probe = tmp_path / "probe"
    n_part = count_points(_part(root, plan, probe, 0))
    _part(root, plan, probe, 1)()
    before_finalize = tmp_path / "before-finalize"
    shutil.copytree(probe, before_finalize)
    n_fin = count_points(_finalize(root, plan, probe))
    assert tree_bytes(probe) == ref
    for k in range(1, n_part + 1):
        dst = tmp_path / f"p{k}"
        killed_at(_part(root, plan, dst, 0), k)
        try:
            _part(root, plan, dst, 0)()
        except CkptError as exc:
            assert "--part 0/2 --resume" in exc.message, exc.message
            _part(root, plan, dst, 0, resume=True)()
        _part(root, plan, dst, 1)()
        _finalize(root, plan, dst)()
        assert tree_bytes(dst) == ref, k
    for k in range(1, n_fin + 1):
        dst = tmp_path / f"f{k}"
        shutil.copytree(before_finalize, dst)
        killed_at(_finalize(root, plan, dst), k)
        _finalize(root, plan, dst)()
        assert tree_bytes(dst) == ref, k
