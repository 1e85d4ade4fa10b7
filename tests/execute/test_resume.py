"""SIGKILL at many points, then --resume: byte-identical to an uninterrupted run."""

from __future__ import annotations

import dataclasses
import os
import random
import signal

import pytest

from checkpoint_tool.catalog import open_local
from checkpoint_tool.errors import OutputError
from checkpoint_tool.execute import execute_plan, faults
from checkpoint_tool.execute.manifest import JOURNAL_NAME, MANIFEST_NAME

from .helpers import tiny_moe_tensors, tiny_plan, tree_bytes, write_source

KILL_ENV = "CKPT_FAULT_KILL_AT"


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """Source, plan, the uninterrupted output's bytes, and the number of fault points."""
    root = write_source(tmp_path_factory.mktemp("src") / "src", tiny_moe_tensors(seed=5))
    plan = tiny_plan(root)
    dst = tmp_path_factory.mktemp("ref") / "dst"
    os.environ[KILL_ENV] = str(10**9)  # count, never kill
    faults.reset()
    try:
        execute_plan(plan, open_local(root), dst, progress=False)
        points = faults._count
    finally:
        del os.environ[KILL_ENV]
    return root, plan, tree_bytes(dst), points


def run_killed(root, plan, dst, kill_at: int, *, resume: bool = False, workers: int = 1) -> int:
    """Run the conversion in a forked child that SIGKILLs itself at fault point ``kill_at``."""
    pid = os.fork()
    if pid == 0:  # child
        code = 0
        try:
            os.environ[KILL_ENV] = str(kill_at)
            faults.reset()
            execute_plan(
                plan, open_local(root), dst, progress=False, resume=resume, workers=workers
            )
        except BaseException:
            code = 3
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    return status


def assert_no_partial_output(dst, ref: dict[str, bytes]) -> None:
    """Whatever a killed run left under a final name is complete and correct."""
    for name, data in tree_bytes(dst).items():
        if name.endswith(".partial") or name == JOURNAL_NAME:
            continue
        assert data == ref[name], f"{name} is under its final name but differs"
    if (dst / MANIFEST_NAME).exists():
        assert tree_bytes(dst).keys() - {JOURNAL_NAME} == ref.keys()


def test_fault_points_cover_the_run(reference):
    *_, points = reference
    assert points > 30  # chunks, tensors, commits, journal updates, side files, manifest


def test_kill_at_random_points_then_resume_is_byte_identical(reference, tmp_path):
    root, plan, ref, points = reference
    rng = random.Random(1234)
    kill_points = sorted({1, 2, points - 1, points, *rng.sample(range(3, points - 1), 10)})
    assert len(kill_points) >= 12
    for k in kill_points:
        dst = tmp_path / f"k{k}"
        status = run_killed(root, plan, dst, k)
        assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, k
        assert_no_partial_output(dst, ref)
        # else killed in the first journal write: --resume starts afresh
        journaled = (dst / JOURNAL_NAME).exists() or (dst / MANIFEST_NAME).exists()
        report = execute_plan(plan, open_local(root), dst, progress=False, resume=True)
        assert report.resumed == journaled
        assert tree_bytes(dst) == ref, f"kill point {k}"


def test_killed_twice_with_workers_then_resume(reference, tmp_path):
    root, plan, ref, points = reference
    dst = tmp_path / "dst"
    assert os.WIFSIGNALED(run_killed(root, plan, dst, points // 3, workers=2))
    status = run_killed(root, plan, dst, points // 4, resume=True, workers=2)
    assert os.WIFSIGNALED(status)
    assert_no_partial_output(dst, ref)
    execute_plan(plan, open_local(root), dst, progress=False, resume=True, workers=3)
    assert tree_bytes(dst) == ref


def test_resume_rewrites_a_corrupted_finished_file(reference, tmp_path):
    root, plan, ref, points = reference
    dst = tmp_path / "dst"
    run_killed(root, plan, dst, points - 5)
    finished = [f.name for f in plan.files if (dst / f.name).exists()]
    assert finished
    victim = dst / finished[0]
    data = bytearray(victim.read_bytes())
    data[-1] ^= 0xFF
    victim.write_bytes(bytes(data))
    report = execute_plan(plan, open_local(root), dst, progress=False, resume=True)
    assert report.files_written >= 1
    assert tree_bytes(dst) == ref


def test_resume_of_a_finished_output_verifies_and_keeps_everything(reference, tmp_path):
    root, plan, ref, _ = reference
    dst = tmp_path / "dst"
    execute_plan(plan, open_local(root), dst, progress=False)
    report = execute_plan(plan, open_local(root), dst, progress=False, resume=True)
    assert (report.files_written, report.files_kept) == (0, len(plan.files))
    assert tree_bytes(dst) == ref


def test_resume_refuses_a_different_plan(reference, tmp_path):
    root, plan, _, points = reference
    dst = tmp_path / "dst"
    run_killed(root, plan, dst, points // 2)
    other = dataclasses.replace(plan, recipe="another")
    with pytest.raises(OutputError, match="different plan"):
        execute_plan(other, open_local(root), dst, progress=False, resume=True)


def test_resume_refuses_a_folder_without_a_ckpt_run(reference, tmp_path):
    root, plan, _, _ = reference
    dst = tmp_path / "dst"
    dst.mkdir()
    (dst / "notes.txt").write_text("mine")
    with pytest.raises(OutputError, match="no ckpt run to resume"):
        execute_plan(plan, open_local(root), dst, progress=False, resume=True)
    assert (dst / "notes.txt").read_text() == "mine"
